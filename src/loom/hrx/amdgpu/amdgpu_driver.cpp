// The amdgpu driver: HRX objects over the HSA runtime (hsa_api.h, loaded with dlopen). A device is
// an HSA GPU agent; device buffers come from its coarse-grained global pool, pinned host buffers,
// staging and kernargs from the CPU agent's pools. A stream is one AQL queue plus the SDMA copies
// of hsa_amd_memory_async_copy, kept in order by a chain of completion signals: every kernel
// packet carries the barrier bit (it starts after the packets before it have completed), a copy
// waits for the signal of the operation before it, and a kernel after a copy waits behind a
// barrier-AND packet on that copy's signal. Events are barrier-AND packets whose completion
// signal the queue's profiler timestamps. Graphs record the stream's operations and replay them.
//
// Written against Debian's HSA headers and built in CI, but never run on an AMD GPU: only the
// paths that need no GPU (loading the runtime, reporting why there is no device) have run.
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "loom/codegen/amdgpu/code_object_info.h"
#include "loom/hrx/amdgpu/dispatch.h"
#include "loom/hrx/driver.h"
#include "loom/hrx/hsa_api.h"

namespace loom::hrx {

#if !LOOM_HRX_HAVE_HSA

Status amdgpu_device_count(int32_t* count) {
  *count = 0;
  return hsa::runtime_status();
}
Result<hrx_device*> amdgpu_device_get(int32_t) { return hsa::runtime_status(); }

#else

namespace {

using hsa::Api;
using hsa::check;

class AmdStream;

struct Pools {
  hsa_amd_memory_pool_t device{}, group{}, host{}, kernarg{};
  size_t device_bytes = 0, group_bytes = 0;
  bool has_device = false, has_group = false, has_host = false, has_kernarg = false;
};

class AmdDevice final : public hrx_device {
 public:
  AmdDevice(const Api& api, hsa_agent_t gpu, hsa_agent_t cpu, Pools pools, uint64_t timestamp_hz)
      : api_(api), gpu_(gpu), cpu_(cpu), pools_(pools), timestamp_hz_(timestamp_hz) {}

  const Api& api() const { return api_; }
  hsa_agent_t gpu() const { return gpu_; }
  hsa_agent_t cpu() const { return cpu_; }
  uint64_t timestamp_hz() const { return timestamp_hz_; }

  // Host memory the GPU may access at the same address: pinned buffers, staging, kernargs.
  Result<void*> alloc_host(size_t bytes, bool kernarg = false) {
    void* p = nullptr;
    const hsa_amd_memory_pool_t pool = kernarg ? pools_.kernarg : pools_.host;
    Status s = check(api_.hsa_amd_memory_pool_allocate(pool, bytes, 0, &p), "hsa_amd_memory_pool_allocate (host)");
    if (!s.ok()) return Status(StatusCode::kResourceExhausted, s.message());
    if (Status a = check(api_.hsa_amd_agents_allow_access(1, &gpu_, nullptr, p), "hsa_amd_agents_allow_access");
        !a.ok()) {
      (void)api_.hsa_amd_memory_pool_free(p);
      return a;
    }
    return p;
  }

  Result<hrx_buffer*> alloc(uint64_t bytes, hrx_memory_kind kind) override;
  Result<hrx_stream*> create_stream() override;
  Result<hrx_event*> create_event() override;
  Result<hrx_module*> load_ptx(std::string_view) override {
    return invalid_argument("{} cannot load PTX (an AMD GPU runs AMDGPU code objects)", props.spec);
  }
  Result<hrx_module*> load_shared_object(const std::string&) override {
    return invalid_argument("{} cannot load a shared object (those are cpu modules)", props.spec);
  }
  Result<hrx_module*> load_code_object(std::span<const uint8_t> elf) override;
  Status synchronize() override;

  std::mutex streams_mu;
  std::set<AmdStream*> streams;

 private:
  const Api& api_;
  hsa_agent_t gpu_, cpu_;
  Pools pools_;
  uint64_t timestamp_hz_;
};

struct AmdBuffer final : hrx_buffer {
  using hrx_buffer::hrx_buffer;
  ~AmdBuffer() override {
    if (size > 0) (void)static_cast<AmdDevice*>(device)->api().hsa_amd_memory_pool_free(reinterpret_cast<void*>(address));
  }
};

Result<hrx_buffer*> AmdDevice::alloc(uint64_t bytes, hrx_memory_kind kind) {
  auto b = std::make_unique<AmdBuffer>(this);
  b->kind = kind;
  if (bytes == 0) return b.release();
  const std::string what = fmt::format("allocating {} bytes on {}", bytes, props.spec);
  if (kind == HRX_MEMORY_HOST_PINNED) {
    auto p = alloc_host(bytes);
    if (!p.ok()) return Status(p.status()).with_context(what);
    b->host = *p;
    b->address = reinterpret_cast<uint64_t>(*p);
  } else {
    if (bytes > pools_.device_bytes)
      return resource_exhausted("{}: the device has {} bytes", what, pools_.device_bytes);
    void* p = nullptr;
    Status s = check(api_.hsa_amd_memory_pool_allocate(pools_.device, bytes, 0, &p), "hsa_amd_memory_pool_allocate");
    if (!s.ok()) return Status(StatusCode::kResourceExhausted, s.message()).with_context(what);
    b->address = reinterpret_cast<uint64_t>(p);
  }
  b->size = bytes;
  return b.release();
}

struct AmdKernel final : hrx_kernel {
  uint64_t object = 0;  // the kernel descriptor's address, for the dispatch packet
  uint32_t group_bytes = 0, private_bytes = 0;
  codegen::AmdgpuKernelInfo info;  // argument layout (from the code object's metadata)
  void* native_handle() const override { return reinterpret_cast<void*>(object); }
};

struct AmdModule final : hrx_module {
  AmdModule(AmdDevice* d, std::vector<uint8_t> elf) : hrx_module(d), bytes(std::move(elf)) {}
  ~AmdModule() override {
    const Api& a = static_cast<AmdDevice*>(device)->api();
    if (exec.handle) (void)a.hsa_executable_destroy(exec);
    if (reader.handle) (void)a.hsa_code_object_reader_destroy(reader);
  }
  Result<std::unique_ptr<hrx_kernel>> lookup(const std::string& name) override;

  std::vector<uint8_t> bytes;  // the reader reads from here for as long as it lives
  codegen::AmdgpuCodeObjectInfo info;
  hsa_code_object_reader_t reader{};
  hsa_executable_t exec{};
};

Result<hrx_module*> AmdDevice::load_code_object(std::span<const uint8_t> elf) {
  auto m = std::make_unique<AmdModule>(this, std::vector<uint8_t>(elf.begin(), elf.end()));
  auto info = codegen::read_amdgpu_code_object(m->bytes);
  if (!info.ok()) return invalid_argument("not an AMDGPU code object: {}", info.status().message());
  m->info = std::move(*info);
  if (!m->info.target.ends_with(std::string("--") + props.arch))
    return invalid_argument("code object for {}; {} is {}", m->info.target, props.spec, props.arch);
  hsa_profile_t profile{};
  LOOM_RETURN_IF_ERROR(check(api_.hsa_agent_get_info(gpu_, HSA_AGENT_INFO_PROFILE, &profile), "hsa_agent_get_info"));
  LOOM_RETURN_IF_ERROR(check(api_.hsa_code_object_reader_create_from_memory(m->bytes.data(), m->bytes.size(), &m->reader),
                             "hsa_code_object_reader_create_from_memory"));
  LOOM_RETURN_IF_ERROR(check(api_.hsa_executable_create_alt(profile, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, nullptr,
                                                            &m->exec),
                             "hsa_executable_create_alt"));
  LOOM_RETURN_IF_ERROR(check(api_.hsa_executable_load_agent_code_object(m->exec, gpu_, m->reader, nullptr, nullptr),
                             "hsa_executable_load_agent_code_object"));
  LOOM_RETURN_IF_ERROR(check(api_.hsa_executable_freeze(m->exec, nullptr), "hsa_executable_freeze"));
  return m.release();
}

Result<std::unique_ptr<hrx_kernel>> AmdModule::lookup(const std::string& name) {
  auto* d = static_cast<AmdDevice*>(device);
  const codegen::AmdgpuKernelInfo* meta = nullptr;
  for (const auto& k : info.kernels)
    if (k.name == name) meta = &k;
  if (!meta) return not_found("no kernel '{}' in the module", name);
  const Api& a = d->api();
  hsa_agent_t agent = d->gpu();
  hsa_executable_symbol_t sym{};
  const std::string symbol = name + ".kd";  // code object v3+: the kernel descriptor's symbol
  LOOM_RETURN_IF_ERROR(check(a.hsa_executable_get_symbol_by_name(exec, symbol.c_str(), &agent, &sym),
                             "hsa_executable_get_symbol_by_name")
                           .with_context(fmt::format("kernel '{}'", name)));
  auto k = std::make_unique<AmdKernel>();
  uint32_t kernarg_bytes = 0;
  LOOM_RETURN_IF_ERROR(check(a.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &k->object),
                             "hsa_executable_symbol_get_info(KERNEL_OBJECT)"));
  LOOM_RETURN_IF_ERROR(check(a.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                                                              &k->group_bytes),
                             "hsa_executable_symbol_get_info(GROUP_SEGMENT_SIZE)"));
  LOOM_RETURN_IF_ERROR(check(a.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                                                              &k->private_bytes),
                             "hsa_executable_symbol_get_info(PRIVATE_SEGMENT_SIZE)"));
  LOOM_RETURN_IF_ERROR(check(a.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                                                              &kernarg_bytes),
                             "hsa_executable_symbol_get_info(KERNARG_SEGMENT_SIZE)"));
  if (kernarg_bytes != meta->kernarg_segment_size)
    return internal_error("kernel {}: the runtime says {} kernarg bytes, the metadata {}", name, kernarg_bytes,
                          meta->kernarg_segment_size);
  k->info = *meta;
  return std::unique_ptr<hrx_kernel>(std::move(k));
}

using StreamOp = std::function<Status(AmdStream&)>;

struct AmdGraph final : hrx_graph {
  AmdGraph(hrx_device* d, std::vector<StreamOp> o) : hrx_graph(d), ops(std::move(o)) {}
  Status launch(hrx_stream* s) override;
  std::vector<StreamOp> ops;
};

class AmdStream final : public hrx_stream {
 public:
  AmdStream(AmdDevice* d, hsa_queue_t* q, uint8_t* kernargs)
      : hrx_stream(d), dev_(d), api_(d->api()), q_(q), kernargs_(kernargs) {}
  ~AmdStream() override {
    {
      std::lock_guard<std::mutex> lock(dev_->streams_mu);
      dev_->streams.erase(this);
    }
    (void)wait_idle();
    for (hsa_signal_t s : free_signals_) (void)api_.hsa_signal_destroy(s);
    (void)api_.hsa_queue_destroy(q_);
    (void)api_.hsa_amd_memory_pool_free(kernargs_);
  }

  // Public entry points lock the stream (device synchronize may wait on it from another thread)
  // and record instead of running while capturing.
  Status submit(const StreamOp& op) {
    std::lock_guard<std::mutex> lock(mu_);
    return run_or_record(op);
  }
  Status run_or_record(const StreamOp& op) {
    if (capturing_) {
      ops_.push_back(op);
      return Status();
    }
    return op(*this);
  }

  Status copy_h2d(hrx_buffer* dst, uint64_t off, const void* src, uint64_t bytes) override {
    return submit([=](AmdStream& s) { return s.h2d(dst, off, src, bytes); });
  }
  Status copy_d2h(void* dst, const hrx_buffer* src, uint64_t off, uint64_t bytes) override {
    return submit([=](AmdStream& s) { return s.d2h(dst, src, off, bytes); });
  }
  Status copy_d2d(hrx_buffer* dst, uint64_t dst_off, const hrx_buffer* src, uint64_t src_off,
                  uint64_t bytes) override {
    return submit([=](AmdStream& s) { return s.d2d(dst, dst_off, src, src_off, bytes); });
  }
  Status memset(hrx_buffer* dst, uint64_t off, uint8_t value, uint64_t bytes) override {
    return submit([=](AmdStream& s) { return s.fill(dst, off, value, bytes); });
  }

  Status launch(const LaunchRequest& r) override {
    auto* k = static_cast<AmdKernel*>(r.kernel);
    std::lock_guard<std::mutex> lock(mu_);
    if (!capturing_) return dispatch(k, r.config, r.args, r.n_args, r.arg_sizes);
    // Captured: keep copies of the explicit parameters' values at their metadata sizes.
    if (const size_t want = amdgpu::explicit_arg_count(k->info); want != r.n_args)
      return invalid_argument("kernel {} takes {} parameters; the launch passed {}", k->name, want, r.n_args);
    std::vector<std::vector<uint8_t>> values;
    uint32_t i = 0;
    for (const auto& a : k->info.args) {
      if (a.value_kind.starts_with("hidden_")) continue;
      const uint32_t have = r.arg_sizes ? r.arg_sizes[i] : 8;
      if (have < a.size)
        return invalid_argument("launch of {}: parameter {} has {} bytes; the launch passed {}", k->name, i, a.size, have);
      const auto* p = static_cast<const uint8_t*>(r.args[i++]);
      values.emplace_back(p, p + a.size);
    }
    const hrx_launch_config config = r.config;
    const uint32_t n_args = r.n_args;
    ops_.push_back([k, config, n_args, values = std::move(values)](AmdStream& s) {
      std::vector<void*> ptrs;
      std::vector<uint32_t> sizes;
      for (const auto& v : values) {
        ptrs.push_back(const_cast<uint8_t*>(v.data()));
        sizes.push_back(static_cast<uint32_t>(v.size()));
      }
      return s.dispatch(k, config, ptrs.data(), n_args, sizes.data());
    });
    return Status();
  }

  Status synchronize() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing_) return failed_precondition("cannot synchronize a stream that is capturing");
    return wait_idle();
  }
  Status synchronize_from_device() {
    std::lock_guard<std::mutex> lock(mu_);
    return wait_idle();
  }
  Status begin_capture() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing_) return failed_precondition("stream is already capturing");
    capturing_ = true;
    ops_.clear();
    return Status();
  }
  Result<hrx_graph*> end_capture() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!capturing_) return failed_precondition("end_capture on a stream that is not capturing");
    capturing_ = false;
    return new AmdGraph(device, std::move(ops_));
  }
  void* native_handle() const override { return q_; }

  // Sets `done` to 1 and queues a barrier-AND packet after the stream's work so far that
  // completes it (events). `done` is unchanged when this fails.
  Status marker(hsa_signal_t done) {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing_) return unimplemented("the amdgpu driver cannot record events while a stream is capturing");
    LOOM_RETURN_IF_ERROR(join_copy());
    api_.hsa_signal_store_relaxed(done, 1);
    barrier_packet(hsa_signal_t{0}, done);
    return Status();
  }

  std::mutex mu_;  // held by the graph replay around its ops

 private:
  friend struct AmdGraph;
  struct InFlight {
    hsa_signal_t done;
    bool copy;
    void* staging;  // host memory freed once the operation has completed, or null
  };

  hsa_agent_t agent_of(const hrx_buffer* b) const { return b->host ? dev_->cpu() : dev_->gpu(); }

  Result<hsa_signal_t> take_signal() {
    hsa_signal_t s{};
    if (!free_signals_.empty()) {
      s = free_signals_.back();
      free_signals_.pop_back();
      api_.hsa_signal_store_relaxed(s, 1);
      return s;
    }
    LOOM_RETURN_IF_ERROR(check(api_.hsa_signal_create(1, 0, nullptr, &s), "hsa_signal_create"));
    return s;
  }

  // Frees what completed operations held and recycles their signals, oldest first (they
  // complete in order). A signal is read by the operation after it (a copy's dependency, or the
  // barrier-AND packet before a kernel), so it is recycled only once that one has completed too,
  // or, with `all`, when the whole stream has.
  void retire(bool all = false) {
    while (!inflight_.empty() &&
           (all || (inflight_.size() >= 2 && api_.hsa_signal_load_scacquire(inflight_[1].done) == 0))) {
      if (inflight_.front().staging) (void)api_.hsa_amd_memory_pool_free(inflight_.front().staging);
      free_signals_.push_back(inflight_.front().done);
      inflight_.pop_front();
    }
  }

  Status wait_idle() {
    if (!inflight_.empty())
      (void)api_.hsa_signal_wait_scacquire(inflight_.back().done, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX,
                                           HSA_WAIT_STATE_BLOCKED);
    retire(/*all=*/true);  // the last operation completes after every one before it
    kernarg_used_ = 0;
    return Status();
  }

  // Reserves the queue's next packet slot (waiting while the queue is full).
  template <typename Packet>
  Packet* reserve(uint64_t* index) {
    const uint64_t i = api_.hsa_queue_add_write_index_scacq_screl(q_, 1);
    while (i - api_.hsa_queue_load_read_index_scacquire(q_) >= q_->size) std::this_thread::yield();
    *index = i;
    return static_cast<Packet*>(q_->base_address) + (i & (q_->size - 1));
  }
  // Makes a filled packet valid (its header last, with release order) and rings the doorbell.
  void publish(void* packet, uint16_t header, uint16_t setup, uint64_t index) {
    __atomic_store_n(static_cast<uint32_t*>(packet), header | (uint32_t{setup} << 16), __ATOMIC_RELEASE);
    api_.hsa_signal_store_screlease(q_->doorbell_signal, static_cast<hsa_signal_value_t>(index));
  }
  static uint16_t header(hsa_packet_type_t type) {
    return static_cast<uint16_t>((type << HSA_PACKET_HEADER_TYPE) | (1 << HSA_PACKET_HEADER_BARRIER) |
                                 (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                                 (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
  }

  // A barrier-AND packet: waits for `dep` (0: none) and for the queue's earlier packets (its
  // barrier bit), then completes `done` (0: none).
  void barrier_packet(hsa_signal_t dep, hsa_signal_t done) {
    uint64_t index = 0;
    auto* p = reserve<hsa_barrier_and_packet_t>(&index);
    p->reserved0 = 0;
    p->reserved1 = 0;
    for (auto& d : p->dep_signal) d.handle = 0;
    p->dep_signal[0] = dep;
    p->reserved2 = 0;
    p->completion_signal = done;
    publish(p, header(HSA_PACKET_TYPE_BARRIER_AND), 0, index);
  }
  // Kernel and marker packets wait for the queue's earlier packets, not for copies: after a copy,
  // a barrier-AND packet on its signal joins it into the queue, as an operation of its own (so
  // that no packet but this one reads the copy's signal).
  Status join_copy() {
    if (inflight_.empty() || !inflight_.back().copy) return Status();
    LOOM_ASSIGN_OR_RETURN(hsa_signal_t done, take_signal());
    barrier_packet(inflight_.back().done, done);
    inflight_.push_back({done, false, nullptr});
    return Status();
  }

  Status dispatch(AmdKernel* k, const hrx_launch_config& c, void* const* args, uint32_t n_args, const uint32_t* sizes) {
    LOOM_ASSIGN_OR_RETURN(amdgpu::DispatchGeometry g, amdgpu::dispatch_geometry(c));
    const uint64_t group = uint64_t{k->group_bytes} + c.shared_bytes;
    if (group > dev_->props.max_shared_per_block_optin)
      return invalid_argument("launch of {}: {} bytes of LDS ({} static + {} dynamic); {} has {}", k->name, group,
                              k->group_bytes, c.shared_bytes, dev_->props.spec, dev_->props.max_shared_per_block_optin);
    // Kernargs come from a per-stream arena, reset whenever the stream is idle.
    const uint64_t align = std::max<int64_t>(k->info.kernarg_segment_align, 16);
    const uint64_t size = static_cast<uint64_t>(k->info.kernarg_segment_size);
    uint64_t at = (kernarg_used_ + align - 1) / align * align;
    if (size > kKernargBytes) return invalid_argument("launch of {}: {} kernarg bytes", k->name, size);
    if (at + size > kKernargBytes) {
      LOOM_RETURN_IF_ERROR(wait_idle());
      at = 0;
    }
    LOOM_RETURN_IF_ERROR(amdgpu::pack_kernargs(k->info, c, args, n_args, sizes, {kernargs_ + at, size})
                             .with_context(fmt::format("launch of {}", k->name)));
    kernarg_used_ = at + size;
    LOOM_RETURN_IF_ERROR(join_copy());
    LOOM_ASSIGN_OR_RETURN(hsa_signal_t done, take_signal());
    uint64_t index = 0;
    auto* p = reserve<hsa_kernel_dispatch_packet_t>(&index);
    p->workgroup_size_x = g.workgroup[0];
    p->workgroup_size_y = g.workgroup[1];
    p->workgroup_size_z = g.workgroup[2];
    p->reserved0 = 0;
    p->grid_size_x = g.grid_items[0];
    p->grid_size_y = g.grid_items[1];
    p->grid_size_z = g.grid_items[2];
    p->private_segment_size = k->private_bytes;
    p->group_segment_size = static_cast<uint32_t>(group);
    p->kernel_object = k->object;
    p->kernarg_address = kernargs_ + at;
    p->reserved2 = 0;
    p->completion_signal = done;
    publish(p, header(HSA_PACKET_TYPE_KERNEL_DISPATCH),
            static_cast<uint16_t>(g.dimensions << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS), index);
    inflight_.push_back({done, false, nullptr});
    if (inflight_.size() > 256) retire();
    return Status();
  }

  // An SDMA copy after the stream's last operation. `staging` is freed when it has completed.
  Status copy(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent, size_t bytes, void* staging) {
    auto done = take_signal();
    if (!done.ok()) {
      if (staging) (void)api_.hsa_amd_memory_pool_free(staging);
      return done.status();
    }
    const bool dep = !inflight_.empty();
    hsa_signal_t after = dep ? inflight_.back().done : hsa_signal_t{0};
    Status s = check(api_.hsa_amd_memory_async_copy(dst, dst_agent, src, src_agent, bytes, dep ? 1 : 0,
                                                    dep ? &after : nullptr, *done),
                     "hsa_amd_memory_async_copy");
    if (!s.ok()) {
      free_signals_.push_back(*done);
      if (staging) (void)api_.hsa_amd_memory_pool_free(staging);
      return s;
    }
    inflight_.push_back({*done, true, staging});
    if (inflight_.size() > 256) retire();
    return Status();
  }

  static void* at(const hrx_buffer* b, uint64_t off) { return reinterpret_cast<void*>(b->address + off); }

  Status h2d(hrx_buffer* dst, uint64_t off, const void* src, uint64_t bytes) {
    if (dst->host) {  // pinned host memory: in order with the stream's work, by the CPU
      LOOM_RETURN_IF_ERROR(wait_idle());
      std::memcpy(at(dst, off), src, bytes);
      return Status();
    }
    LOOM_ASSIGN_OR_RETURN(void* staging, dev_->alloc_host(bytes));
    std::memcpy(staging, src, bytes);  // the caller's memory may be reused once this returns
    return copy(at(dst, off), dev_->gpu(), staging, dev_->cpu(), bytes, staging);
  }
  // Synchronous: the copy lands in staging memory, read here once it has completed.
  Status d2h(void* dst, const hrx_buffer* src, uint64_t off, uint64_t bytes) {
    if (src->host) {
      LOOM_RETURN_IF_ERROR(wait_idle());
      std::memcpy(dst, at(src, off), bytes);
      return Status();
    }
    LOOM_ASSIGN_OR_RETURN(void* staging, dev_->alloc_host(bytes));
    Status s = copy(staging, dev_->cpu(), at(src, off), dev_->gpu(), bytes, nullptr);
    if (s.ok()) s = wait_idle();
    if (s.ok()) std::memcpy(dst, staging, bytes);
    (void)api_.hsa_amd_memory_pool_free(staging);
    return s;
  }
  Status d2d(hrx_buffer* dst, uint64_t dst_off, const hrx_buffer* src, uint64_t src_off, uint64_t bytes) {
    if (dst->host && src->host) {
      LOOM_RETURN_IF_ERROR(wait_idle());
      std::memmove(at(dst, dst_off), at(src, src_off), bytes);
      return Status();
    }
    return copy(at(dst, dst_off), agent_of(dst), at(src, src_off), agent_of(src), bytes, nullptr);
  }
  Status fill(hrx_buffer* dst, uint64_t off, uint8_t value, uint64_t bytes) {
    if (dst->host) {
      LOOM_RETURN_IF_ERROR(wait_idle());
      std::memset(at(dst, off), value, bytes);
      return Status();
    }
    LOOM_ASSIGN_OR_RETURN(void* staging, dev_->alloc_host(bytes));
    std::memset(staging, value, bytes);
    return copy(at(dst, off), dev_->gpu(), staging, dev_->cpu(), bytes, staging);
  }

  static constexpr uint64_t kKernargBytes = 1 << 20;

  AmdDevice* dev_;
  const Api& api_;
  hsa_queue_t* q_;
  uint8_t* kernargs_;
  uint64_t kernarg_used_ = 0;
  std::deque<InFlight> inflight_;
  std::vector<hsa_signal_t> free_signals_;
  bool capturing_ = false;
  std::vector<StreamOp> ops_;
};

Status AmdGraph::launch(hrx_stream* s) {
  auto* as = static_cast<AmdStream*>(s);
  std::lock_guard<std::mutex> lock(as->mu_);
  for (const StreamOp& op : ops) LOOM_RETURN_IF_ERROR(as->run_or_record(op));
  return Status();
}

Result<hrx_stream*> AmdDevice::create_stream() {
  uint32_t max_size = 0;
  LOOM_RETURN_IF_ERROR(check(api_.hsa_agent_get_info(gpu_, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &max_size),
                             "hsa_agent_get_info(QUEUE_MAX_SIZE)"));
  hsa_queue_t* q = nullptr;
  LOOM_RETURN_IF_ERROR(check(api_.hsa_queue_create(gpu_, std::min<uint32_t>(max_size, 4096), HSA_QUEUE_TYPE_SINGLE,
                                                   nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q),
                             "hsa_queue_create"));
  // Events read the packet timestamps the profiler writes into completion signals.
  (void)api_.hsa_amd_profiling_set_profiler_enabled(q, 1);
  auto kernargs = alloc_host(1 << 20, /*kernarg=*/true);
  if (!kernargs.ok()) {
    (void)api_.hsa_queue_destroy(q);
    return Status(kernargs.status()).with_context("kernarg memory of a new stream");
  }
  auto* s = new AmdStream(this, q, static_cast<uint8_t*>(*kernargs));
  std::lock_guard<std::mutex> lock(streams_mu);
  streams.insert(s);
  return s;
}

Status AmdDevice::synchronize() {
  std::lock_guard<std::mutex> lock(streams_mu);
  for (AmdStream* s : streams) LOOM_RETURN_IF_ERROR(s->synchronize_from_device());
  return Status();
}

class AmdEvent final : public hrx_event {
 public:
  AmdEvent(AmdDevice* d, hsa_signal_t s) : hrx_event(d), dev_(d), signal_(s) {}
  ~AmdEvent() override {
    if (recorded_) wait();
    (void)dev_->api().hsa_signal_destroy(signal_);
  }
  Status record(hrx_stream* s) override {
    if (recorded_) wait();  // the packet of the previous record still completes this signal
    LOOM_RETURN_IF_ERROR(static_cast<AmdStream*>(s)->marker(signal_));
    recorded_ = true;
    return Status();
  }
  Status synchronize() override {
    if (!recorded_) return failed_precondition("event synchronize before the event was recorded");
    wait();
    return Status();
  }
  Result<float> elapsed_ms_since(hrx_event* start) override {
    auto* s = static_cast<AmdEvent*>(start);
    if (!recorded_ || !s->recorded_) return failed_precondition("elapsed time of an event that was never recorded");
    s->wait();
    wait();
    hsa_amd_profiling_dispatch_time_t t0{}, t1{};
    const Api& a = dev_->api();
    LOOM_RETURN_IF_ERROR(check(a.hsa_amd_profiling_get_dispatch_time(dev_->gpu(), s->signal_, &t0),
                               "hsa_amd_profiling_get_dispatch_time"));
    LOOM_RETURN_IF_ERROR(check(a.hsa_amd_profiling_get_dispatch_time(dev_->gpu(), signal_, &t1),
                               "hsa_amd_profiling_get_dispatch_time"));
    const double ticks = static_cast<double>(t1.end) - static_cast<double>(t0.end);
    return static_cast<float>(ticks * 1000.0 / static_cast<double>(dev_->timestamp_hz()));
  }

 private:
  void wait() {
    (void)dev_->api().hsa_signal_wait_scacquire(signal_, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  }
  AmdDevice* dev_;
  hsa_signal_t signal_;
  bool recorded_ = false;
};

Result<hrx_event*> AmdDevice::create_event() {
  hsa_signal_t s{};
  LOOM_RETURN_IF_ERROR(check(api_.hsa_signal_create(0, 0, nullptr, &s), "hsa_signal_create"));
  return new AmdEvent(this, s);
}

// ---- enumeration ----------------------------------------------------------------------------

struct Agents {
  const Api* api;
  std::vector<hsa_agent_t> gpus;
  hsa_agent_t cpu{};
  bool has_cpu = false;
};

hsa_status_t collect_agent(hsa_agent_t agent, void* data) {
  auto* a = static_cast<Agents*>(data);
  hsa_device_type_t type{};
  if (a->api->hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS) return HSA_STATUS_SUCCESS;
  if (type == HSA_DEVICE_TYPE_GPU) a->gpus.push_back(agent);
  if (type == HSA_DEVICE_TYPE_CPU && !a->has_cpu) {
    a->cpu = agent;
    a->has_cpu = true;
  }
  return HSA_STATUS_SUCCESS;
}

struct PoolSearch {
  const Api* api;
  bool gpu;
  Pools* pools;
};

hsa_status_t collect_pool(hsa_amd_memory_pool_t pool, void* data) {
  auto* s = static_cast<PoolSearch*>(data);
  const Api& a = *s->api;
  hsa_amd_segment_t segment{};
  uint32_t flags = 0;
  bool alloc_ok = false;
  size_t size = 0;
  (void)a.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  (void)a.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &size);
  (void)a.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc_ok);
  if (segment == HSA_AMD_SEGMENT_GLOBAL)
    (void)a.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  Pools& p = *s->pools;
  if (s->gpu) {
    if (segment == HSA_AMD_SEGMENT_GROUP && !p.has_group) {
      p.group = pool;
      p.group_bytes = size;
      p.has_group = true;
    }
    if (segment == HSA_AMD_SEGMENT_GLOBAL && alloc_ok && (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) &&
        !p.has_device) {
      p.device = pool;
      p.device_bytes = size;
      p.has_device = true;
    }
    return HSA_STATUS_SUCCESS;
  }
  if (segment != HSA_AMD_SEGMENT_GLOBAL || !alloc_ok) return HSA_STATUS_SUCCESS;
  if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) && !p.has_kernarg) {
    p.kernarg = pool;
    p.has_kernarg = true;
  }
  if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) && !p.has_host) {
    p.host = pool;
    p.has_host = true;
  }
  return HSA_STATUS_SUCCESS;
}

Result<Agents> agents() {
  LOOM_ASSIGN_OR_RETURN(const Api* a, hsa::api());
  Agents out{a, {}, {}, false};
  LOOM_RETURN_IF_ERROR(check(a->hsa_iterate_agents(collect_agent, &out), "hsa_iterate_agents"));
  return out;
}

Result<AmdDevice*> make_device(const Agents& ag, int ordinal) {
  const Api& a = *ag.api;
  const hsa_agent_t gpu = ag.gpus[static_cast<size_t>(ordinal)];
  if (!ag.has_cpu) return unavailable("amdgpu:{}: the HSA runtime lists no CPU agent (needed for host memory)", ordinal);
  Pools pools;
  PoolSearch gs{&a, true, &pools}, cs{&a, false, &pools};
  LOOM_RETURN_IF_ERROR(check(a.hsa_amd_agent_iterate_memory_pools(gpu, collect_pool, &gs), "hsa_amd_agent_iterate_memory_pools"));
  LOOM_RETURN_IF_ERROR(check(a.hsa_amd_agent_iterate_memory_pools(ag.cpu, collect_pool, &cs), "hsa_amd_agent_iterate_memory_pools"));
  if (!pools.has_device || !pools.has_group || !pools.has_host || !pools.has_kernarg)
    return unavailable("amdgpu:{}: missing a memory pool (device {}, LDS {}, host {}, kernarg {})", ordinal,
                       pools.has_device, pools.has_group, pools.has_host, pools.has_kernarg);
  uint64_t hz = 0;
  LOOM_RETURN_IF_ERROR(check(a.hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &hz), "hsa_system_get_info"));
  auto* d = new AmdDevice(a, gpu, ag.cpu, pools, hz);
  hrx_device_props& p = d->props;
  auto u32 = [&](int attr) {
    uint32_t v = 0;
    (void)a.hsa_agent_get_info(gpu, static_cast<hsa_agent_info_t>(attr), &v);
    return v;
  };
  char name[64] = {}, product[64] = {};
  (void)a.hsa_agent_get_info(gpu, HSA_AGENT_INFO_NAME, name);
  (void)a.hsa_agent_get_info(gpu, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_PRODUCT_NAME), product);
  std::snprintf(p.name, sizeof p.name, "%s", product[0] ? product : name);
  std::snprintf(p.arch, sizeof p.arch, "%s", name);
  std::snprintf(p.spec, sizeof p.spec, "amdgpu:%d", ordinal);
  p.driver = HRX_DRIVER_AMDGPU;
  p.ordinal = ordinal;
  p.compute_units = static_cast<int32_t>(u32(HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT));
  p.clock_khz = static_cast<int32_t>(u32(HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY) * 1000);  // MHz
  p.memory_bus_width_bits = static_cast<int32_t>(u32(HSA_AMD_AGENT_INFO_MEMORY_WIDTH));
  // memory_clock_khz stays 0: HSA's memory frequency is not the data rate peak_bandwidth_gbs assumes.
  uint16_t major = 0, minor = 0;
  (void)a.hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MAJOR, &major);
  (void)a.hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MINOR, &minor);
  p.driver_version = major * 1000 + minor * 10;
  p.warp_size = static_cast<int32_t>(u32(HSA_AGENT_INFO_WAVEFRONT_SIZE));
  p.max_threads_per_block = u32(HSA_AGENT_INFO_WORKGROUP_MAX_SIZE);
  p.max_shared_per_block = p.max_shared_per_block_optin = static_cast<uint32_t>(pools.group_bytes);
  p.memory_bytes = pools.device_bytes;
  uint32_t caches[4] = {};
  (void)a.hsa_agent_get_info(gpu, HSA_AGENT_INFO_CACHE_SIZE, caches);
  p.l2_bytes = caches[1];
  return d;
}

}  // namespace

Status amdgpu_device_count(int32_t* count) {
  *count = 0;
  LOOM_ASSIGN_OR_RETURN(Agents ag, agents());
  *count = static_cast<int32_t>(ag.gpus.size());
  return Status();
}

Result<hrx_device*> amdgpu_device_get(int32_t ordinal) {
  LOOM_ASSIGN_OR_RETURN(Agents ag, agents());
  const auto n = static_cast<int32_t>(ag.gpus.size());
  if (n == 0) return unavailable("no AMD GPU: the HSA runtime lists no GPU agent");
  if (ordinal < 0 || ordinal >= n) return not_found("no device amdgpu:{} ({} AMD GPUs here)", ordinal, n);
  // Devices live for the process (see hrx.h): created once per ordinal, never destroyed.
  static std::mutex mu;
  static std::vector<AmdDevice*> devices;
  std::lock_guard<std::mutex> lock(mu);
  if (devices.size() < static_cast<size_t>(n)) devices.resize(static_cast<size_t>(n), nullptr);
  auto& slot = devices[static_cast<size_t>(ordinal)];
  if (!slot) {
    LOOM_ASSIGN_OR_RETURN(slot, make_device(ag, ordinal));
  }
  return static_cast<hrx_device*>(slot);
}

#endif  // LOOM_HRX_HAVE_HSA

}  // namespace loom::hrx
