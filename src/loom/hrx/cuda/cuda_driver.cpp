// The cuda driver: HRX objects over the CUDA driver API (cuda_api.h, loaded with dlopen). One
// primary context per device, made current on the calling thread lazily; streams are
// non-blocking CUstreams; graphs come from stream capture and are instantiated once.
// Programmatic dependent launch (sm_90+): a kernel whose PTX starts by waiting on its predecessor
// grid (griddepcontrol.wait) is launched with cuLaunchKernelEx and programmatic stream
// serialization, so its launch overlaps the tail of the kernel before it (hrx.h).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <mutex>
#include <vector>

#include "loom/hrx/cuda_api.h"
#include "loom/hrx/driver.h"

namespace loom::hrx {
namespace {

using namespace cuda;

class CudaDevice final : public hrx_device {
 public:
  CudaDevice(const Api& api, CUdevice dev, CUcontext ctx) : api_(api), dev_(dev), ctx_(ctx) {}

  const Api& api() const { return api_; }
  CUcontext context() const { return ctx_; }
  // Makes the primary context current on this thread (one compare when it already is).
  Status use() const {
    thread_local CUcontext current = nullptr;
    if (current == ctx_) [[likely]]
      return Status();
    LOOM_RETURN_IF_ERROR(check(api_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"));
    current = ctx_;
    return Status();
  }

  Result<hrx_buffer*> alloc(uint64_t bytes, hrx_memory_kind kind) override;
  Result<hrx_stream*> create_stream() override;
  Result<hrx_event*> create_event() override;
  Result<hrx_module*> load_ptx(std::string_view ptx) override;
  Result<hrx_module*> load_shared_object(const std::string&) override {
    return invalid_argument("a cuda device cannot load a shared object (those are cpu modules)");
  }
  Status synchronize() override {
    LOOM_RETURN_IF_ERROR(use());
    return check(api_.cuCtxSynchronize(), "cuCtxSynchronize");
  }
  void* native_context() const override { return ctx_; }

 private:
  const Api& api_;
  CUdevice dev_;
  CUcontext ctx_;
};

struct CudaBuffer final : hrx_buffer {
  using hrx_buffer::hrx_buffer;
  ~CudaBuffer() override {
    if (size == 0) return;
    auto* d = static_cast<CudaDevice*>(device);
    if (!d->use().ok()) return;
    // Errors here mean an earlier kernel fault poisoned the context; nothing to do about it.
    if (kind == HRX_MEMORY_HOST_PINNED) (void)d->api().cuMemFreeHost(host);
    else (void)d->api().cuMemFree(address);
  }
};

Result<hrx_buffer*> CudaDevice::alloc(uint64_t bytes, hrx_memory_kind kind) {
  auto b = std::make_unique<CudaBuffer>(this);
  b->kind = kind;
  if (bytes == 0) return b.release();
  LOOM_RETURN_IF_ERROR(use());
  // A size the driver cannot serve is resource exhaustion whichever code it picks (pinning a huge
  // host range can come back as an invalid value rather than out of memory).
  auto alloc_status = [&](CUresult r, const char* what) {
    Status s = check(r, what);
    if (r == CUDA_ERROR_INVALID_VALUE) s = Status(StatusCode::kResourceExhausted, s.message());
    return std::move(s).with_context(fmt::format("allocating {} bytes on {}", bytes, props.spec));
  };
  if (kind == HRX_MEMORY_HOST_PINNED) {
    void* p = nullptr;
    LOOM_RETURN_IF_ERROR(alloc_status(api_.cuMemAllocHost(&p, bytes), "cuMemAllocHost"));
    b->host = p;
    b->address = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same pointer on the device
  } else {
    CUdeviceptr p = 0;
    LOOM_RETURN_IF_ERROR(alloc_status(api_.cuMemAlloc(&p, bytes), "cuMemAlloc"));
    b->address = p;
  }
  b->size = bytes;
  return b.release();
}

struct CudaKernel final : hrx_kernel {
  CUfunction fn = nullptr;
  // The kernel waits for its predecessor grid before touching memory (griddepcontrol.wait), so
  // it may be launched with programmatic stream serialization.
  bool waits_on_grid = false;
  // Largest dynamic shared size opted in so far (cuFuncSetAttribute is needed above 48 KiB).
  std::atomic<uint32_t> shared_optin{48 * 1024};
  void* native_handle() const override { return fn; }
};

// Names of the PTX entries whose body contains griddepcontrol.wait. Loom's PTX emitter puts it
// first in every sm_90 kernel; hand-written or NVRTC PTX without it is launched the classic way.
std::set<std::string> entries_waiting_on_grid(std::string_view ptx) {
  std::set<std::string> out;
  size_t pos = ptx.find(".entry");
  while (pos != std::string_view::npos) {
    size_t name_begin = ptx.find_first_not_of(" \t", pos + 6);
    size_t name_end = ptx.find_first_of(" \t(\n", name_begin);
    if (name_begin == std::string_view::npos || name_end == std::string_view::npos) break;
    size_t next = ptx.find(".entry", name_end);
    std::string_view body = ptx.substr(name_end, next == std::string_view::npos ? std::string_view::npos : next - name_end);
    if (body.find("griddepcontrol.wait") != std::string_view::npos)
      out.emplace(ptx.substr(name_begin, name_end - name_begin));
    pos = next;
  }
  return out;
}

struct CudaModule final : hrx_module {
  CudaModule(CudaDevice* d, CUmodule m, std::set<std::string> waiting)
      : hrx_module(d), mod(m), waiting_on_grid(std::move(waiting)) {}
  ~CudaModule() override {
    auto* d = static_cast<CudaDevice*>(device);
    if (d->use().ok()) (void)d->api().cuModuleUnload(mod);
  }
  Result<std::unique_ptr<hrx_kernel>> lookup(const std::string& name) override {
    auto* d = static_cast<CudaDevice*>(device);
    LOOM_RETURN_IF_ERROR(d->use());
    CUfunction fn = nullptr;
    CUresult r = d->api().cuModuleGetFunction(&fn, mod, name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) return not_found("no kernel '{}' in the module", name);
    LOOM_RETURN_IF_ERROR(check(r, "cuModuleGetFunction").with_context(fmt::format("kernel '{}'", name)));
    auto k = std::make_unique<CudaKernel>();
    k->fn = fn;
    k->waits_on_grid = waiting_on_grid.count(name) > 0;
    return std::unique_ptr<hrx_kernel>(std::move(k));
  }
  CUmodule mod;
  std::set<std::string> waiting_on_grid;
};

Result<hrx_module*> CudaDevice::load_ptx(std::string_view ptx) {
  LOOM_RETURN_IF_ERROR(use());
  std::string text(ptx);  // the driver wants NUL-terminated text
  std::vector<char> error_log(16384, 0), info_log(16384, 0);
  int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                   CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size() - 1), info_log.data(),
                    reinterpret_cast<void*>(info_log.size() - 1)};
  CUmodule mod = nullptr;
  CUresult r = api_.cuModuleLoadDataEx(&mod, text.c_str(), 4, options, values);
  if (r != CUDA_SUCCESS) {
    Status s = check(r, "cuModuleLoadDataEx");
    std::string log(error_log.data());
    if (log.empty()) log = info_log.data();
    return Status(s.code(), fmt::format("{}; JIT log: {}", s.message(), log.empty() ? "(empty)" : log));
  }
  return new CudaModule(this, mod, entries_waiting_on_grid(text));
}

struct CudaGraph final : hrx_graph {
  CudaGraph(CudaDevice* d, CUgraphExec e) : hrx_graph(d), exec(e) {}
  ~CudaGraph() override {
    auto* d = static_cast<CudaDevice*>(device);
    if (d->use().ok()) (void)d->api().cuGraphExecDestroy(exec);
  }
  Status launch(hrx_stream* s) override;
  CUgraphExec exec;
};

class CudaStream final : public hrx_stream {
 public:
  CudaStream(CudaDevice* d, CUstream s) : hrx_stream(d), dev_(d), api_(d->api()), s_(s) {
    dependent_launch_ = supports_dependent_launch();
  }
  ~CudaStream() override {
    if (!dev_->use().ok()) return;
    (void)api_.cuStreamSynchronize(s_);
    (void)api_.cuStreamDestroy(s_);
  }

  Status copy_h2d(hrx_buffer* dst, uint64_t off, const void* src, uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    if (dst->kind == HRX_MEMORY_HOST_PINNED)
      return check(api_.cuMemcpyAsync(dst->address + off, reinterpret_cast<CUdeviceptr>(src), bytes, s_),
                   "cuMemcpyAsync (host to pinned)");
    return check(api_.cuMemcpyHtoDAsync(dst->address + off, src, bytes, s_), "cuMemcpyHtoDAsync");
  }
  Status copy_d2h(void* dst, const hrx_buffer* src, uint64_t off, uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    if (src->kind == HRX_MEMORY_HOST_PINNED)
      return check(api_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), src->address + off, bytes, s_),
                   "cuMemcpyAsync (pinned to host)");
    return check(api_.cuMemcpyDtoHAsync(dst, src->address + off, bytes, s_), "cuMemcpyDtoHAsync");
  }
  Status copy_d2d(hrx_buffer* dst, uint64_t dst_off, const hrx_buffer* src, uint64_t src_off,
                  uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    // cuMemcpyAsync infers the direction from the addresses (unified addressing), so pinned host
    // buffers on either side work too.
    return check(api_.cuMemcpyAsync(dst->address + dst_off, src->address + src_off, bytes, s_), "cuMemcpyAsync");
  }
  Status memset(hrx_buffer* dst, uint64_t off, uint8_t value, uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    return check(api_.cuMemsetD8Async(dst->address + off, value, bytes, s_), "cuMemsetD8Async");
  }

  Status launch(const LaunchRequest& r) override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    auto* k = static_cast<CudaKernel*>(r.kernel);
    const hrx_launch_config& c = r.config;
    if (c.shared_bytes > k->shared_optin.load(std::memory_order_relaxed)) [[unlikely]] {
      LOOM_RETURN_IF_ERROR(check(api_.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                         static_cast<int>(c.shared_bytes)),
                                 "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
                               .with_context(fmt::format("launch of {}", k->name)));
      k->shared_optin.store(c.shared_bytes, std::memory_order_relaxed);
    }
    CUresult res;
    if (dependent_launch_ && k->waits_on_grid) {
      CUlaunchAttribute attr{};
      attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr.value.programmatic_stream_serialization_allowed = 1;
      CUlaunchConfig lc{c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2], c.shared_bytes, s_, &attr, 1};
      res = api_.cuLaunchKernelEx(&lc, k->fn, const_cast<void**>(r.args), nullptr);
    } else {
      res = api_.cuLaunchKernel(k->fn, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2],
                                c.shared_bytes, s_, const_cast<void**>(r.args), nullptr);
    }
    if (res != CUDA_SUCCESS) [[unlikely]]
      return check(res, dependent_launch_ && k->waits_on_grid ? "cuLaunchKernelEx" : "cuLaunchKernel")
          .with_context(fmt::format("launch of {} (grid {}x{}x{}, block {}x{}x{}, {} shared bytes)", k->name, c.grid[0],
                                    c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2], c.shared_bytes));
    return Status();
  }

  Status synchronize() override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    return check(api_.cuStreamSynchronize(s_), "cuStreamSynchronize");
  }
  Status begin_capture() override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    return check(api_.cuStreamBeginCapture(s_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  }
  Result<hrx_graph*> end_capture() override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    CUgraph g = nullptr;
    LOOM_RETURN_IF_ERROR(check(api_.cuStreamEndCapture(s_, &g), "cuStreamEndCapture"));
    CUgraphExec exec = nullptr;
    Status st = check(api_.cuGraphInstantiate(&exec, g, 0), "cuGraphInstantiateWithFlags");
    (void)api_.cuGraphDestroy(g);  // the executable graph does not need it
    LOOM_RETURN_IF_ERROR(st);
    return new CudaGraph(dev_, exec);
  }
  void* native_handle() const override { return s_; }
  CUstream handle() const { return s_; }

  bool set_dependent_launch(bool on) override {
    dependent_launch_ = on && supports_dependent_launch();
    return dependent_launch_;
  }
  bool dependent_launch() const override { return dependent_launch_; }

 private:
  // griddepcontrol needs sm_90; programmatic stream serialization needs cuLaunchKernelEx.
  bool supports_dependent_launch() const {
    return dev_->props.compute_capability_major >= 9 && api_.cuLaunchKernelEx != nullptr;
  }

  CudaDevice* dev_;
  const Api& api_;
  CUstream s_;
  bool dependent_launch_ = false;
};

Status CudaGraph::launch(hrx_stream* s) {
  auto* d = static_cast<CudaDevice*>(device);
  LOOM_RETURN_IF_ERROR(d->use());
  return check(d->api().cuGraphLaunch(exec, static_cast<CudaStream*>(s)->handle()), "cuGraphLaunch");
}

Result<hrx_stream*> CudaDevice::create_stream() {
  LOOM_RETURN_IF_ERROR(use());
  CUstream s = nullptr;
  LOOM_RETURN_IF_ERROR(check(api_.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  return new CudaStream(this, s);
}

class CudaEvent final : public hrx_event {
 public:
  CudaEvent(CudaDevice* d, CUevent e) : hrx_event(d), dev_(d), e_(e) {}
  ~CudaEvent() override {
    if (dev_->use().ok()) (void)dev_->api().cuEventDestroy(e_);
  }
  Status record(hrx_stream* s) override {
    LOOM_RETURN_IF_ERROR(dev_->use());
    LOOM_RETURN_IF_ERROR(check(dev_->api().cuEventRecord(e_, static_cast<CudaStream*>(s)->handle()), "cuEventRecord"));
    recorded_ = true;
    return Status();
  }
  Status synchronize() override {
    if (!recorded_) return failed_precondition("event synchronize before the event was recorded");
    LOOM_RETURN_IF_ERROR(dev_->use());
    return check(dev_->api().cuEventSynchronize(e_), "cuEventSynchronize");
  }
  Result<float> elapsed_ms_since(hrx_event* start) override {
    auto* s = static_cast<CudaEvent*>(start);
    if (!recorded_ || !s->recorded_) return failed_precondition("elapsed time of an event that was never recorded");
    LOOM_RETURN_IF_ERROR(dev_->use());
    float ms = 0;
    LOOM_RETURN_IF_ERROR(check(dev_->api().cuEventElapsedTime(&ms, s->e_, e_), "cuEventElapsedTime"));
    return ms;
  }

 private:
  CudaDevice* dev_;
  CUevent e_;
  bool recorded_ = false;
};

Result<hrx_event*> CudaDevice::create_event() {
  LOOM_RETURN_IF_ERROR(use());
  CUevent e = nullptr;
  LOOM_RETURN_IF_ERROR(check(api_.cuEventCreate(&e, 0), "cuEventCreate"));
  return new CudaEvent(this, e);
}

Result<CudaDevice*> make_device(const Api& a, int ordinal) {
  CUdevice dev = 0;
  LOOM_RETURN_IF_ERROR(check(a.cuDeviceGet(&dev, ordinal), "cuDeviceGet"));
  CUcontext ctx = nullptr;
  LOOM_RETURN_IF_ERROR(check(a.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
  auto* d = new CudaDevice(a, dev, ctx);
  hrx_device_props& p = d->props;
  auto attr = [&](Attr at) {
    int v = 0;
    (void)a.cuDeviceGetAttribute(&v, static_cast<int>(at), dev);
    return v;
  };
  (void)a.cuDeviceGetName(p.name, sizeof p.name - 1, dev);
  std::snprintf(p.spec, sizeof p.spec, "cuda:%d", ordinal);
  p.compute_capability_major = attr(Attr::kCcMajor);
  p.compute_capability_minor = attr(Attr::kCcMinor);
  std::snprintf(p.arch, sizeof p.arch, "sm_%d%d", p.compute_capability_major, p.compute_capability_minor);
  p.driver = HRX_DRIVER_CUDA;
  p.ordinal = ordinal;
  p.compute_units = attr(Attr::kSmCount);
  p.clock_khz = attr(Attr::kClockRateKHz);
  p.memory_clock_khz = attr(Attr::kMemoryClockKHz);
  p.memory_bus_width_bits = attr(Attr::kMemoryBusWidthBits);
  (void)a.cuDriverGetVersion(&p.driver_version);
  p.warp_size = attr(Attr::kWarpSize);
  p.max_threads_per_block = static_cast<uint32_t>(attr(Attr::kMaxThreadsPerBlock));
  p.max_shared_per_block = static_cast<uint32_t>(attr(Attr::kMaxSharedPerBlock));
  p.max_shared_per_block_optin = static_cast<uint32_t>(attr(Attr::kMaxSharedPerBlockOptin));
  size_t mem = 0;
  (void)a.cuDeviceTotalMem(&mem, dev);
  p.memory_bytes = mem;
  p.l2_bytes = static_cast<uint64_t>(attr(Attr::kL2CacheBytes));
  return d;
}

}  // namespace

Status cuda_device_count(int32_t* count) {
  *count = 0;
  LOOM_ASSIGN_OR_RETURN(const Api* a, api());
  int n = 0;
  LOOM_RETURN_IF_ERROR(check(a->cuDeviceGetCount(&n), "cuDeviceGetCount"));
  *count = n;
  return Status();
}

Result<hrx_device*> cuda_device_get(int32_t ordinal) {
  int32_t n = 0;
  LOOM_RETURN_IF_ERROR(cuda_device_count(&n));
  if (ordinal < 0 || ordinal >= n) return not_found("no device cuda:{} ({} CUDA devices here)", ordinal, n);
  // Devices live for the process (see hrx.h): created once per ordinal, never destroyed.
  static std::mutex mu;
  static std::vector<CudaDevice*> devices;
  std::lock_guard<std::mutex> lock(mu);
  if (devices.size() < static_cast<size_t>(n)) devices.resize(static_cast<size_t>(n), nullptr);
  auto& slot = devices[static_cast<size_t>(ordinal)];
  if (!slot) {
    LOOM_ASSIGN_OR_RETURN(slot, make_device(**api(), ordinal));
  }
  return static_cast<hrx_device*>(slot);
}

}  // namespace loom::hrx
