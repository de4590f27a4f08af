// The C++ wrappers over the C API, and Module::compile: IR -> cpp shared object or PTX, with a
// per-device cache of loaded modules keyed by a hash of the emitted code.
#include "loom/hrx/runtime.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "loom/base/hash.h"
#include "loom/codegen/amdgpu/amdgpu_emitter.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/codegen/target.h"
#include "loom/hrx/driver.h"
#include "loom/ir/ir.h"

namespace loom::hrx {

Status status_from(hrx_status s) {
  const std::string msg = hrx_last_error();
  switch (s) {
    case HRX_OK: return Status();
    case HRX_INVALID_ARGUMENT: return Status(StatusCode::kInvalidArgument, msg);
    case HRX_NOT_FOUND: return Status(StatusCode::kNotFound, msg);
    case HRX_OUT_OF_RANGE: return Status(StatusCode::kOutOfRange, msg);
    case HRX_UNIMPLEMENTED: return Status(StatusCode::kUnimplemented, msg);
    case HRX_FAILED_PRECONDITION: return Status(StatusCode::kFailedPrecondition, msg);
    case HRX_RESOURCE_EXHAUSTED: return Status(StatusCode::kResourceExhausted, msg);
    case HRX_UNAVAILABLE: return Status(StatusCode::kUnavailable, msg);
    case HRX_INTERNAL: break;
  }
  return Status(StatusCode::kInternal, msg);
}

namespace {

inline Status st(hrx_status s) {
  if (s == HRX_OK) [[likely]]
    return Status();
  return status_from(s);
}

DeviceProps to_props(const hrx_device_props& p) {
  DeviceProps d;
  d.name = p.name;
  d.spec = p.spec;
  d.arch = p.arch;
  d.driver = static_cast<DriverKind>(p.driver);
  d.ordinal = p.ordinal;
  d.compute_units = p.compute_units;
  d.worker_threads = p.worker_threads;
  d.clock_khz = p.clock_khz;
  d.memory_clock_khz = p.memory_clock_khz;
  d.memory_bus_width_bits = p.memory_bus_width_bits;
  d.cc_major = p.compute_capability_major;
  d.cc_minor = p.compute_capability_minor;
  d.driver_version = p.driver_version;
  d.warp_size = p.warp_size;
  d.max_threads_per_block = p.max_threads_per_block;
  d.max_shared_per_block = p.max_shared_per_block;
  d.max_shared_per_block_optin = p.max_shared_per_block_optin;
  d.memory_bytes = p.memory_bytes;
  d.l2_bytes = p.l2_bytes;
  return d;
}

// The key of a loaded module in the device's cache (in memory only): target, arch, a 128-bit
// content hash of the emitted text and its length.
std::string content_key(std::string_view kind, std::string_view arch, std::string_view text) {
  return fmt::format("{}:{}:{}:{}", kind, arch, content_hash128(text), text.size());
}

}  // namespace

double DeviceProps::peak_bandwidth_gbs() const {
  return 2.0 * memory_clock_khz * 1e3 * memory_bus_width_bits / 8.0 / 1e9;
}

Result<Device> Device::open(std::string_view spec) {
  hrx_device* d = nullptr;
  std::string s(spec);
  LOOM_RETURN_IF_ERROR(st(hrx_device_open(s.c_str(), &d)));
  return Device(d);
}

std::vector<Device> Device::enumerate() {
  std::vector<Device> out;
  hrx_device* d = nullptr;
  if (hrx_device_get(HRX_DRIVER_CPU, 0, &d) == HRX_OK) out.push_back(Device(d));
  int32_t n = 0;
  if (hrx_device_count(HRX_DRIVER_CUDA, &n) == HRX_OK)
    for (int32_t i = 0; i < n; ++i)
      if (hrx_device_get(HRX_DRIVER_CUDA, i, &d) == HRX_OK) out.push_back(Device(d));
  n = 0;
  if (hrx_device_count(HRX_DRIVER_AMDGPU, &n) == HRX_OK)
    for (int32_t i = 0; i < n; ++i)
      if (hrx_device_get(HRX_DRIVER_AMDGPU, i, &d) == HRX_OK) out.push_back(Device(d));
  return out;
}

Status Device::cuda_status() {
  int32_t n = 0;
  return st(hrx_device_count(HRX_DRIVER_CUDA, &n));
}

Status Device::amdgpu_status() {
  int32_t n = 0;
  LOOM_RETURN_IF_ERROR(st(hrx_device_count(HRX_DRIVER_AMDGPU, &n)));
  if (n == 0) return unavailable("no AMD GPU: the HSA runtime lists no GPU agent");
  return Status();
}

const DeviceProps& Device::props() const {
  // Properties never change: converted once per device and kept for the process.
  static std::mutex mu;
  static std::unordered_map<hrx_device*, std::unique_ptr<DeviceProps>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[dev_];
  if (!slot) slot = std::make_unique<DeviceProps>(dev_ ? to_props(dev_->props) : DeviceProps{});
  return *slot;
}

ir::TargetKind Device::target() const {
  if (!dev_ || dev_->props.driver == HRX_DRIVER_CPU) return ir::TargetKind::kCpp;
  return dev_->props.driver == HRX_DRIVER_CUDA ? ir::TargetKind::kPtx : ir::TargetKind::kAmdgpu;
}

Status Device::synchronize() const { return st(hrx_device_synchronize(dev_)); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    b_ = o.b_;
    o.b_ = nullptr;
  }
  return *this;
}

Result<Buffer> Buffer::alloc(const Device& dev, uint64_t bytes, MemoryKind kind) {
  Buffer b;
  LOOM_RETURN_IF_ERROR(st(hrx_buffer_alloc(dev.raw(), bytes, static_cast<hrx_memory_kind>(kind), &b.b_)));
  return b;
}

void Buffer::reset() {
  hrx_buffer_free(b_);
  b_ = nullptr;
}

KernelArgs& KernelArgs::f32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return push(bits, 4);
}

KernelArgs& KernelArgs::push(uint64_t bits, uint32_t size) {
  values_.push_back(bits);  // little-endian: the low `size` bytes of the slot are the value
  sizes_.push_back(size);
  return *this;
}

void* const* KernelArgs::data() const {
  ptrs_.resize(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) ptrs_[i] = const_cast<uint64_t*>(&values_[i]);
  return ptrs_.data();
}

Kernel& Kernel::operator=(Kernel&& o) noexcept {
  if (this != &o) {
    reset();
    k_ = o.k_;
    m_ = o.m_;
    o.k_ = nullptr;
    o.m_ = nullptr;
  }
  return *this;
}

void Kernel::reset() {
  hrx_module_release(m_);
  m_ = nullptr;
  k_ = nullptr;
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    reset();
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

Result<Stream> Stream::create(const Device& dev) {
  Stream s;
  LOOM_RETURN_IF_ERROR(st(hrx_stream_create(dev.raw(), &s.s_)));
  return s;
}

void Stream::reset() {
  hrx_stream_destroy(s_);
  s_ = nullptr;
}

Status Stream::copy_h2d(const Buffer& dst, uint64_t dst_offset, const void* src, uint64_t bytes) {
  return st(hrx_copy_h2d(s_, dst.raw(), dst_offset, src, bytes));
}
Status Stream::copy_d2h(void* dst, const Buffer& src, uint64_t src_offset, uint64_t bytes) {
  return st(hrx_copy_d2h(s_, dst, src.raw(), src_offset, bytes));
}
Status Stream::copy_d2d(const Buffer& dst, uint64_t dst_offset, const Buffer& src, uint64_t src_offset,
                        uint64_t bytes) {
  return st(hrx_copy_d2d(s_, dst.raw(), dst_offset, src.raw(), src_offset, bytes));
}
Status Stream::memset(const Buffer& dst, uint64_t dst_offset, uint8_t value, uint64_t bytes) {
  return st(hrx_memset(s_, dst.raw(), dst_offset, value, bytes));
}

Status Stream::launch(const Kernel& k, Dim3 grid, Dim3 block, const KernelArgs& args, uint32_t shared_bytes) {
  return launch(k, grid, block, args.data(), args.count(), args.sizes(), shared_bytes);
}

Status Stream::launch(const Kernel& k, Dim3 grid, Dim3 block, void* const* args, uint32_t n_args,
                      const uint32_t* sizes, uint32_t shared_bytes) {
  hrx_launch_config c{{grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, shared_bytes};
  return st(hrx_launch(s_, k.raw(), &c, args, n_args, sizes));
}

Status Stream::synchronize() { return st(hrx_stream_synchronize(s_)); }
bool Stream::set_dependent_launch(bool on) {
  int in_effect = 0;
  return hrx_stream_set_dependent_launch(s_, on ? 1 : 0, &in_effect) == HRX_OK && in_effect != 0;
}
Status Stream::begin_capture() { return st(hrx_stream_begin_capture(s_)); }

Result<Graph> Stream::end_capture() {
  hrx_graph* g = nullptr;
  LOOM_RETURN_IF_ERROR(st(hrx_stream_end_capture(s_, &g)));
  return Graph(g);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    reset();
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}

Result<Event> Event::create(const Device& dev) {
  Event e;
  LOOM_RETURN_IF_ERROR(st(hrx_event_create(dev.raw(), &e.e_)));
  return e;
}

Status Event::record(Stream& s) { return st(hrx_event_record(e_, s.raw())); }
Status Event::synchronize() { return st(hrx_event_synchronize(e_)); }

Result<float> Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  LOOM_RETURN_IF_ERROR(st(hrx_event_elapsed_ms(start.e_, end.e_, &ms)));
  return ms;
}

void Event::reset() {
  hrx_event_destroy(e_);
  e_ = nullptr;
}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    reset();
    m_ = o.m_;
    o.m_ = nullptr;
  }
  return *this;
}

void Module::reset() {
  hrx_module_release(m_);
  m_ = nullptr;
}

Result<Module> Module::load_ptx(const Device& dev, std::string_view ptx) {
  std::string text(ptx);
  hrx_module* m = nullptr;
  LOOM_RETURN_IF_ERROR(st(hrx_module_load_ptx(dev.raw(), text.c_str(), &m)));
  return Module(m);
}

Result<Module> Module::load_shared_object(const Device& dev, const std::string& path) {
  hrx_module* m = nullptr;
  LOOM_RETURN_IF_ERROR(st(hrx_module_load_shared_object(dev.raw(), path.c_str(), &m)));
  return Module(m);
}

Result<Module> Module::load_code_object(const Device& dev, std::span<const uint8_t> elf) {
  hrx_module* m = nullptr;
  LOOM_RETURN_IF_ERROR(st(hrx_module_load_code_object(dev.raw(), elf.data(), elf.size(), &m)));
  return Module(m);
}

Result<Module> Module::compile(const Device& dev, const ir::Module& module) {
  if (!dev.valid()) return invalid_argument("Module::compile on an invalid device");
  const ir::TargetKind kind = dev.target();
  const codegen::Target* target = codegen::target(kind);
  // cpp: the instruction sets LOOM_CPU_ARCH selects (native unless told). ptx: the newest arch the emitter knows that the device runs
  // (PTX is JIT-compiled forward, so sm_90 PTX also serves newer GPUs). amdgpu: the device's own
  // gfx arch (code objects are not portable across chips).
  std::string use_arch = kind == ir::TargetKind::kAmdgpu ? dev.props().arch
                         : kind == ir::TargetKind::kCpp  ? codegen::selected_cpu_arch()
                                                          : target->archs().front();
  if (kind == ir::TargetKind::kPtx) {
    const int cc = dev.props().cc_major * 10 + dev.props().cc_minor;
    use_arch.clear();
    for (const std::string& a : target->archs())
      if (std::atoi(a.c_str() + 3) <= cc) use_arch = a;
    if (use_arch.empty())
      return unimplemented("{} ({}) is older than every PTX arch Loom emits", dev.props().spec, dev.props().arch);
  }
  LOOM_ASSIGN_OR_RETURN(std::string text, target->emit(module, use_arch));
  const std::string key = content_key(target->name(), use_arch, text);

  hrx_device* d = dev.raw();
  {
    std::lock_guard<std::mutex> lock(d->cache_mu);
    if (auto it = d->compile_cache.find(key); it != d->compile_cache.end()) {
      hrx_module_retain(it->second);
      return Module(it->second);
    }
  }
  // Compile and load outside the lock (a cpp compile takes seconds); a racing twin is dropped.
  Module loaded;
  if (kind == ir::TargetKind::kPtx) {
    LOOM_ASSIGN_OR_RETURN(loaded, load_ptx(dev, text));
  } else if (kind == ir::TargetKind::kAmdgpu) {
    LOOM_ASSIGN_OR_RETURN(std::vector<uint8_t> elf, codegen::compile_amdgpu_code_object(text, use_arch));
    LOOM_ASSIGN_OR_RETURN(loaded, load_code_object(dev, elf));
  } else {
    LOOM_ASSIGN_OR_RETURN(std::string so, codegen::compile_shared_object(text, use_arch));
    LOOM_ASSIGN_OR_RETURN(loaded, load_shared_object(dev, so));
  }
  std::lock_guard<std::mutex> lock(d->cache_mu);
  auto [it, inserted] = d->compile_cache.emplace(key, loaded.m_);
  if (inserted) hrx_module_retain(loaded.m_);  // the cache's reference
  hrx_module_retain(it->second);
  return Module(it->second);
}

Result<Kernel> Module::kernel(std::string_view name) const {
  std::string n(name);
  Kernel k;
  LOOM_RETURN_IF_ERROR(st(hrx_kernel_get(m_, n.c_str(), &k.k_)));
  hrx_module_retain(m_);
  k.m_ = m_;
  return k;
}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    reset();
    g_ = o.g_;
    o.g_ = nullptr;
  }
  return *this;
}

Status Graph::launch(Stream& s) { return st(hrx_graph_launch(g_, s.raw())); }

void Graph::reset() {
  hrx_graph_destroy(g_);
  g_ = nullptr;
}

size_t compile_cache_size(const Device& dev) {
  if (!dev.valid()) return 0;
  std::lock_guard<std::mutex> lock(dev.raw()->cache_mu);
  return dev.raw()->compile_cache.size();
}

void clear_compile_cache(const Device& dev) {
  if (!dev.valid()) return;
  std::unordered_map<std::string, hrx_module*> old;
  {
    std::lock_guard<std::mutex> lock(dev.raw()->cache_mu);
    old.swap(dev.raw()->compile_cache);
  }
  for (auto& [key, m] : old) hrx_module_release(m);
}

}  // namespace loom::hrx
