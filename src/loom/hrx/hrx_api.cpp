// The C API (hrx.h): argument validation shared by every driver, error translation from Status
// to hrx_status plus the thread-local message, and device lookup by spec.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>

#include "loom/codegen/ptx/ptx_emitter.h"
#include "loom/hrx/driver.h"

namespace loom::hrx {
namespace {

thread_local std::string t_last_error;
std::atomic<int64_t> g_live[HRX_HANDLE_KIND_COUNT];

hrx_status to_hrx(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return HRX_OK;
    case StatusCode::kInvalidArgument: return HRX_INVALID_ARGUMENT;
    case StatusCode::kNotFound: return HRX_NOT_FOUND;
    case StatusCode::kOutOfRange: return HRX_OUT_OF_RANGE;
    case StatusCode::kUnimplemented: return HRX_UNIMPLEMENTED;
    case StatusCode::kFailedPrecondition: return HRX_FAILED_PRECONDITION;
    case StatusCode::kResourceExhausted: return HRX_RESOURCE_EXHAUSTED;
    case StatusCode::kUnavailable: return HRX_UNAVAILABLE;
    default: return HRX_INTERNAL;
  }
}

hrx_status fail(const Status& s) {
  if (s.ok()) return HRX_OK;
  t_last_error = s.to_string();
  return to_hrx(s.code());
}

template <typename T, typename U>
hrx_status deliver(Result<T> r, U** out) {
  if (!r.ok()) {
    *out = nullptr;
    return fail(r.status());
  }
  *out = *r;
  return HRX_OK;
}

#define HRX_REQUIRE(cond, ...) \
  do {                         \
    if (!(cond)) return fail(invalid_argument(__VA_ARGS__)); \
  } while (0)

Status check_range(const hrx_buffer* b, uint64_t off, uint64_t bytes, const char* what) {
  if (off > b->size || bytes > b->size - off)
    return out_of_range("{}: bytes [{}, {}+{}) outside a buffer of {} bytes", what, off, off, bytes, b->size);
  return Status();
}

Status same_device(const hrx_stream* s, const hrx_buffer* b, const char* what) {
  if (b->device != s->device)
    return invalid_argument("{}: buffer of device {} used on a stream of device {}", what, b->device->props.spec,
                            s->device->props.spec);
  return Status();
}

}  // namespace

LiveCount::LiveCount(hrx_handle_kind kind) : kind_(kind) { g_live[kind].fetch_add(1, std::memory_order_relaxed); }
LiveCount::~LiveCount() { g_live[kind_].fetch_sub(1, std::memory_order_relaxed); }
int64_t LiveCount::get(hrx_handle_kind kind) { return g_live[kind].load(); }

}  // namespace loom::hrx

loom::Result<hrx_kernel*> hrx_module::kernel(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = kernels_.find(name); it != kernels_.end()) return it->second.get();
  LOOM_ASSIGN_OR_RETURN(auto k, lookup(name));
  k->module = this;
  k->name = name;
  if (auto it = dynamic_shared_.find(name); it != dynamic_shared_.end()) k->dynamic_shared = it->second;
  hrx_kernel* raw = k.get();
  kernels_.emplace(name, std::move(k));
  return raw;
}

void hrx_module::require_dynamic_shared(const std::string& name, uint32_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  dynamic_shared_[name] = bytes;
  if (auto it = kernels_.find(name); it != kernels_.end()) it->second->dynamic_shared = bytes;
}

using namespace loom;
using namespace loom::hrx;

extern "C" {

const char* hrx_last_error(void) { return t_last_error.c_str(); }

const char* hrx_status_name(hrx_status s) {
  switch (s) {
    case HRX_OK: return "OK";
    case HRX_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case HRX_NOT_FOUND: return "NOT_FOUND";
    case HRX_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case HRX_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case HRX_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case HRX_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case HRX_UNAVAILABLE: return "UNAVAILABLE";
    case HRX_INTERNAL: return "INTERNAL";
  }
  return "UNKNOWN";
}

hrx_status hrx_device_count(hrx_driver_kind driver, int32_t* count) {
  HRX_REQUIRE(count, "hrx_device_count: null count");
  *count = 0;
  if (driver == HRX_DRIVER_CPU) {
    *count = 1;
    return HRX_OK;
  }
  if (driver == HRX_DRIVER_AMDGPU) return fail(amdgpu_device_count(count));
  HRX_REQUIRE(driver == HRX_DRIVER_CUDA, "hrx_device_count: unknown driver {}", static_cast<int>(driver));
  return fail(cuda_device_count(count));
}

hrx_status hrx_device_get(hrx_driver_kind driver, int32_t ordinal, hrx_device** out) {
  HRX_REQUIRE(out, "hrx_device_get: null out");
  *out = nullptr;
  if (driver == HRX_DRIVER_CPU) {
    if (ordinal != 0) return fail(not_found("no cpu device {} (there is one, cpu)", ordinal));
    *out = cpu_device();
    return HRX_OK;
  }
  if (driver == HRX_DRIVER_AMDGPU) return deliver(amdgpu_device_get(ordinal), out);
  HRX_REQUIRE(driver == HRX_DRIVER_CUDA, "hrx_device_get: unknown driver {}", static_cast<int>(driver));
  return deliver(cuda_device_get(ordinal), out);
}

hrx_status hrx_device_open(const char* spec, hrx_device** out) {
  HRX_REQUIRE(out && spec, "hrx_device_open: null argument");
  *out = nullptr;
  std::string_view s(spec);
  if (s == "cpu") return hrx_device_get(HRX_DRIVER_CPU, 0, out);
  for (auto [name, driver] : {std::pair<std::string_view, hrx_driver_kind>{"cuda", HRX_DRIVER_CUDA},
                              std::pair<std::string_view, hrx_driver_kind>{"amdgpu", HRX_DRIVER_AMDGPU}}) {
    if (s == name) return hrx_device_get(driver, 0, out);
    if (s.size() <= name.size() + 1 || !s.starts_with(name) || s[name.size()] != ':') continue;
    std::string_view num = s.substr(name.size() + 1);
    int ordinal = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), ordinal);
    if (ec == std::errc() && p == num.data() + num.size() && ordinal >= 0) return hrx_device_get(driver, ordinal, out);
  }
  return fail(invalid_argument("unknown device '{}' (expected cpu, cuda, cuda:N, amdgpu or amdgpu:N)", s));
}

hrx_status hrx_device_get_props(hrx_device* device, hrx_device_props* out) {
  HRX_REQUIRE(device && out, "hrx_device_get_props: null argument");
  *out = device->props;
  return HRX_OK;
}

hrx_status hrx_device_synchronize(hrx_device* device) {
  HRX_REQUIRE(device, "hrx_device_synchronize: null device");
  return fail(device->synchronize());
}

hrx_status hrx_buffer_alloc(hrx_device* device, uint64_t bytes, hrx_memory_kind kind, hrx_buffer** out) {
  HRX_REQUIRE(out, "hrx_buffer_alloc: null out");
  *out = nullptr;
  HRX_REQUIRE(device, "hrx_buffer_alloc: null device");
  HRX_REQUIRE(kind == HRX_MEMORY_DEVICE || kind == HRX_MEMORY_HOST_PINNED, "hrx_buffer_alloc: unknown memory kind {}",
              static_cast<int>(kind));
  return deliver(device->alloc(bytes, kind), out);
}

void hrx_buffer_free(hrx_buffer* buffer) { delete buffer; }
uint64_t hrx_buffer_size(const hrx_buffer* b) { return b ? b->size : 0; }
hrx_memory_kind hrx_buffer_memory_kind(const hrx_buffer* b) { return b ? b->kind : HRX_MEMORY_DEVICE; }
uint64_t hrx_buffer_device_address(const hrx_buffer* b) { return b ? b->address : 0; }
void* hrx_buffer_host_pointer(const hrx_buffer* b) { return b ? b->host : nullptr; }

hrx_status hrx_stream_create(hrx_device* device, hrx_stream** out) {
  HRX_REQUIRE(out, "hrx_stream_create: null out");
  *out = nullptr;
  HRX_REQUIRE(device, "hrx_stream_create: null device");
  return deliver(device->create_stream(), out);
}

void hrx_stream_destroy(hrx_stream* stream) { delete stream; }

hrx_status hrx_stream_synchronize(hrx_stream* stream) {
  HRX_REQUIRE(stream, "hrx_stream_synchronize: null stream");
  return fail(stream->synchronize());
}

hrx_status hrx_copy_h2d(hrx_stream* s, hrx_buffer* dst, uint64_t off, const void* src, uint64_t bytes) {
  HRX_REQUIRE(s && dst && (src || bytes == 0), "hrx_copy_h2d: null argument");
  if (auto st = same_device(s, dst, "hrx_copy_h2d"); !st.ok()) return fail(st);
  if (auto st = check_range(dst, off, bytes, "hrx_copy_h2d"); !st.ok()) return fail(st);
  if (bytes == 0) return HRX_OK;
  return fail(s->copy_h2d(dst, off, src, bytes));
}

hrx_status hrx_copy_d2h(hrx_stream* s, void* dst, const hrx_buffer* src, uint64_t off, uint64_t bytes) {
  HRX_REQUIRE(s && src && (dst || bytes == 0), "hrx_copy_d2h: null argument");
  if (auto st = same_device(s, src, "hrx_copy_d2h"); !st.ok()) return fail(st);
  if (auto st = check_range(src, off, bytes, "hrx_copy_d2h"); !st.ok()) return fail(st);
  if (bytes == 0) return HRX_OK;
  return fail(s->copy_d2h(dst, src, off, bytes));
}

hrx_status hrx_copy_d2d(hrx_stream* s, hrx_buffer* dst, uint64_t dst_off, const hrx_buffer* src, uint64_t src_off,
                        uint64_t bytes) {
  HRX_REQUIRE(s && dst && src, "hrx_copy_d2d: null argument");
  if (auto st = same_device(s, dst, "hrx_copy_d2d"); !st.ok()) return fail(st);
  if (auto st = same_device(s, src, "hrx_copy_d2d"); !st.ok()) return fail(st);
  if (auto st = check_range(dst, dst_off, bytes, "hrx_copy_d2d (destination)"); !st.ok()) return fail(st);
  if (auto st = check_range(src, src_off, bytes, "hrx_copy_d2d (source)"); !st.ok()) return fail(st);
  if (bytes == 0) return HRX_OK;
  return fail(s->copy_d2d(dst, dst_off, src, src_off, bytes));
}

hrx_status hrx_memset(hrx_stream* s, hrx_buffer* dst, uint64_t off, uint8_t value, uint64_t bytes) {
  HRX_REQUIRE(s && dst, "hrx_memset: null argument");
  if (auto st = same_device(s, dst, "hrx_memset"); !st.ok()) return fail(st);
  if (auto st = check_range(dst, off, bytes, "hrx_memset"); !st.ok()) return fail(st);
  if (bytes == 0) return HRX_OK;
  return fail(s->memset(dst, off, value, bytes));
}

hrx_status hrx_event_create(hrx_device* device, hrx_event** out) {
  HRX_REQUIRE(out, "hrx_event_create: null out");
  *out = nullptr;
  HRX_REQUIRE(device, "hrx_event_create: null device");
  return deliver(device->create_event(), out);
}

void hrx_event_destroy(hrx_event* event) { delete event; }

hrx_status hrx_event_record(hrx_event* event, hrx_stream* stream) {
  HRX_REQUIRE(event && stream, "hrx_event_record: null argument");
  HRX_REQUIRE(event->device == stream->device, "hrx_event_record: event and stream of different devices");
  return fail(event->record(stream));
}

hrx_status hrx_event_synchronize(hrx_event* event) {
  HRX_REQUIRE(event, "hrx_event_synchronize: null event");
  return fail(event->synchronize());
}

hrx_status hrx_event_elapsed_ms(hrx_event* start, hrx_event* end, float* ms) {
  HRX_REQUIRE(start && end && ms, "hrx_event_elapsed_ms: null argument");
  HRX_REQUIRE(start->device == end->device, "hrx_event_elapsed_ms: events of different devices");
  auto r = end->elapsed_ms_since(start);
  if (!r.ok()) return fail(r.status());
  *ms = *r;
  return HRX_OK;
}

hrx_status hrx_module_load_ptx(hrx_device* device, const char* ptx, hrx_module** out) {
  HRX_REQUIRE(out, "hrx_module_load_ptx: null out");
  *out = nullptr;
  HRX_REQUIRE(device && ptx, "hrx_module_load_ptx: null argument");
  auto m = device->load_ptx(ptx);
  if (m.ok()) {
    // Loom's PTX names the kernels that need dynamic shared memory, one comment line each
    // (kPtxDynamicSharedTag KERNEL BYTES, written by the ptx emitter).
    constexpr std::string_view kTag = loom::codegen::kPtxDynamicSharedTag;
    const std::string_view text(ptx);
    for (size_t at = text.find(kTag); at != std::string_view::npos; at = text.find(kTag, at + 1)) {
      const std::string_view rest = text.substr(at + kTag.size(), text.find('\n', at) - at - kTag.size());
      const size_t sp = rest.find(' ');
      uint32_t bytes = 0;
      if (sp == std::string_view::npos ||
          std::from_chars(rest.data() + sp + 1, rest.data() + rest.size(), bytes).ec != std::errc())
        continue;
      (*m)->require_dynamic_shared(std::string(rest.substr(0, sp)), bytes);
    }
  }
  return deliver(std::move(m), out);
}

hrx_status hrx_module_load_shared_object(hrx_device* device, const char* path, hrx_module** out) {
  HRX_REQUIRE(out, "hrx_module_load_shared_object: null out");
  *out = nullptr;
  HRX_REQUIRE(device && path, "hrx_module_load_shared_object: null argument");
  return deliver(device->load_shared_object(path), out);
}

hrx_status hrx_module_load_code_object(hrx_device* device, const void* data, size_t bytes, hrx_module** out) {
  HRX_REQUIRE(out, "hrx_module_load_code_object: null out");
  *out = nullptr;
  HRX_REQUIRE(device && (data || bytes == 0), "hrx_module_load_code_object: null argument");
  return deliver(device->load_code_object({static_cast<const uint8_t*>(data), bytes}), out);
}

void hrx_module_retain(hrx_module* m) {
  if (m) m->refs.fetch_add(1, std::memory_order_relaxed);
}

void hrx_module_release(hrx_module* m) {
  if (m && m->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete m;
}

hrx_status hrx_kernel_get(hrx_module* module, const char* name, hrx_kernel** out) {
  HRX_REQUIRE(out, "hrx_kernel_get: null out");
  *out = nullptr;
  HRX_REQUIRE(module && name, "hrx_kernel_get: null argument");
  return deliver(module->kernel(name), out);
}

hrx_status hrx_launch(hrx_stream* s, hrx_kernel* k, const hrx_launch_config* c, void* const* args, uint32_t n_args,
                      const uint32_t* arg_sizes) {
  HRX_REQUIRE(s && k && c && (args || n_args == 0), "hrx_launch: null argument");
  const hrx_device_props& p = s->device->props;
  if (k->module->device != s->device) [[unlikely]]
    return fail(invalid_argument("hrx_launch: kernel {} of device {} on a stream of device {}", k->name,
                                 k->module->device->props.spec, p.spec));
  const uint64_t threads = uint64_t{c->block[0]} * c->block[1] * c->block[2];
  if (c->grid[0] == 0 || c->grid[1] == 0 || c->grid[2] == 0 || threads == 0 || threads > p.max_threads_per_block)
      [[unlikely]]
    return fail(invalid_argument("hrx_launch of {}: grid {}x{}x{}, block {}x{}x{} ({} threads; the limit on {} is {})",
                                 k->name, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2],
                                 threads, p.spec, p.max_threads_per_block));
  hrx_launch_config cfg = *c;
  cfg.shared_bytes = std::max(cfg.shared_bytes, k->dynamic_shared);
  if (cfg.shared_bytes > p.max_shared_per_block_optin) [[unlikely]]
    return fail(invalid_argument("hrx_launch of {}: {} bytes of dynamic shared memory; the limit on {} is {}", k->name,
                                 cfg.shared_bytes, p.spec, p.max_shared_per_block_optin));
  Status st = s->launch(LaunchRequest{k, cfg, args, n_args, arg_sizes});
  if (!st.ok()) [[unlikely]]
    return fail(st);
  return HRX_OK;
}

hrx_status hrx_stream_set_dependent_launch(hrx_stream* s, int enable, int* in_effect) {
  if (in_effect) *in_effect = 0;
  HRX_REQUIRE(s, "hrx_stream_set_dependent_launch: null stream");
  const bool on = s->set_dependent_launch(enable != 0);
  if (in_effect) *in_effect = on ? 1 : 0;
  return HRX_OK;
}

int hrx_stream_dependent_launch(const hrx_stream* s) { return s && s->dependent_launch() ? 1 : 0; }

hrx_status hrx_stream_begin_capture(hrx_stream* s) {
  HRX_REQUIRE(s, "hrx_stream_begin_capture: null stream");
  return fail(s->begin_capture());
}

hrx_status hrx_stream_end_capture(hrx_stream* s, hrx_graph** out) {
  HRX_REQUIRE(out, "hrx_stream_end_capture: null out");
  *out = nullptr;
  HRX_REQUIRE(s, "hrx_stream_end_capture: null stream");
  return deliver(s->end_capture(), out);
}

hrx_status hrx_graph_launch(hrx_graph* g, hrx_stream* s) {
  HRX_REQUIRE(g && s, "hrx_graph_launch: null argument");
  HRX_REQUIRE(g->device == s->device, "hrx_graph_launch: graph of device {} on a stream of device {}",
              g->device->props.spec, s->device->props.spec);
  return fail(g->launch(s));
}

void hrx_graph_destroy(hrx_graph* g) { delete g; }

void* hrx_kernel_native_handle(const hrx_kernel* k) { return k ? k->native_handle() : nullptr; }
void* hrx_stream_native_handle(const hrx_stream* s) { return s ? s->native_handle() : nullptr; }
void* hrx_device_native_context(const hrx_device* d) { return d ? d->native_context() : nullptr; }

int64_t hrx_live_handles(hrx_handle_kind kind) {
  if (kind < 0 || kind >= HRX_HANDLE_KIND_COUNT) return -1;
  return LiveCount::get(kind);
}

}  // extern "C"
