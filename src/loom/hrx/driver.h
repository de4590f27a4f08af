// HRX internals: the objects behind hrx.h's opaque handles, which each driver (cpu/, cuda/)
// subclasses. Not for use outside src/loom/hrx; the C API (hrx_api.cpp) validates arguments
// (null handles, bounds, launch shapes) before calling into a driver, so drivers may assume them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "loom/base/status.h"
#include "loom/hrx/hrx.h"

namespace loom::hrx {

// Counts live objects of one handle kind (for hrx_live_handles): constructed = +1, destroyed = -1.
class LiveCount {
 public:
  explicit LiveCount(hrx_handle_kind kind);
  ~LiveCount();
  LiveCount(const LiveCount&) = delete;
  LiveCount& operator=(const LiveCount&) = delete;
  static int64_t get(hrx_handle_kind kind);

 private:
  hrx_handle_kind kind_;
};

// Args of one launch, validated by the C API.
struct LaunchRequest {
  hrx_kernel* kernel;
  hrx_launch_config config;
  void* const* args;
  uint32_t n_args;
  const uint32_t* arg_sizes;  // may be null: 8 bytes each
};

Status cuda_device_count(int32_t* count);
Result<hrx_device*> cuda_device_get(int32_t ordinal);
// AMD GPUs through the HSA runtime (amdgpu/amdgpu_driver.cpp); unavailable with the reason when
// there is no usable runtime, 0 devices when it has no GPU agents.
Status amdgpu_device_count(int32_t* count);
Result<hrx_device*> amdgpu_device_get(int32_t ordinal);
hrx_device* cpu_device();

}  // namespace loom::hrx

struct hrx_device {
  virtual ~hrx_device() = default;
  hrx_device_props props{};

  virtual loom::Result<hrx_buffer*> alloc(uint64_t bytes, hrx_memory_kind kind) = 0;
  virtual loom::Result<hrx_stream*> create_stream() = 0;
  virtual loom::Result<hrx_event*> create_event() = 0;
  virtual loom::Result<hrx_module*> load_ptx(std::string_view ptx) = 0;
  virtual loom::Result<hrx_module*> load_shared_object(const std::string& path) = 0;
  virtual loom::Result<hrx_module*> load_code_object(std::span<const uint8_t>) {
    return loom::invalid_argument("{} cannot load an AMDGPU code object (those are amdgpu modules)", props.spec);
  }
  virtual loom::Status synchronize() = 0;
  virtual void* native_context() const { return nullptr; }

  // Module::compile's cache: hash of the emitted code -> module (one reference held here).
  std::mutex cache_mu;
  std::unordered_map<std::string, hrx_module*> compile_cache;
};

struct hrx_buffer {
  explicit hrx_buffer(hrx_device* d) : device(d) {}
  virtual ~hrx_buffer() = default;
  hrx_device* device;
  uint64_t size = 0;
  uint64_t address = 0;  // what kernels see
  void* host = nullptr;  // host-visible pointer, or null
  hrx_memory_kind kind = HRX_MEMORY_DEVICE;
  loom::hrx::LiveCount live{HRX_HANDLE_BUFFER};
};

struct hrx_stream {
  explicit hrx_stream(hrx_device* d) : device(d) {}
  virtual ~hrx_stream() = default;
  hrx_device* device;
  loom::hrx::LiveCount live{HRX_HANDLE_STREAM};

  // Ranges are already bounds-checked; bytes > 0.
  virtual loom::Status copy_h2d(hrx_buffer* dst, uint64_t off, const void* src, uint64_t bytes) = 0;
  virtual loom::Status copy_d2h(void* dst, const hrx_buffer* src, uint64_t off, uint64_t bytes) = 0;
  virtual loom::Status copy_d2d(hrx_buffer* dst, uint64_t dst_off, const hrx_buffer* src, uint64_t src_off,
                                uint64_t bytes) = 0;
  virtual loom::Status memset(hrx_buffer* dst, uint64_t off, uint8_t value, uint64_t bytes) = 0;
  virtual loom::Status launch(const loom::hrx::LaunchRequest& req) = 0;
  virtual loom::Status synchronize() = 0;
  virtual loom::Status begin_capture() = 0;
  virtual loom::Result<hrx_graph*> end_capture() = 0;
  virtual void* native_handle() const { return nullptr; }

  // Programmatic dependent launch (see hrx_stream_set_dependent_launch): asks for it and returns
  // whether it is now in effect. Drivers that cannot overlap launches keep it off.
  virtual bool set_dependent_launch(bool) { return false; }
  virtual bool dependent_launch() const { return false; }
};

struct hrx_event {
  explicit hrx_event(hrx_device* d) : device(d) {}
  virtual ~hrx_event() = default;
  hrx_device* device;
  loom::hrx::LiveCount live{HRX_HANDLE_EVENT};
  virtual loom::Status record(hrx_stream* s) = 0;
  virtual loom::Status synchronize() = 0;
  virtual loom::Result<float> elapsed_ms_since(hrx_event* start) = 0;
};

struct hrx_kernel {
  virtual ~hrx_kernel() = default;
  hrx_module* module = nullptr;
  std::string name;
  // Dynamic shared memory every launch needs (a kernel whose shared buffers exceed the static
  // limit; see ir::dynamic_shared_bytes): hrx_launch gives at least this much.
  uint32_t dynamic_shared = 0;
  virtual void* native_handle() const = 0;
};

struct hrx_module {
  explicit hrx_module(hrx_device* d) : device(d) {}
  virtual ~hrx_module() = default;
  hrx_device* device;
  std::atomic<int> refs{1};
  loom::hrx::LiveCount live{HRX_HANDLE_MODULE};

  // Kernels by name, created on first lookup and owned here.
  loom::Result<hrx_kernel*> kernel(const std::string& name);
  // Records that kernel `name` needs `bytes` of dynamic shared memory per launch (set by whoever
  // compiled the module, before its kernels are looked up).
  void require_dynamic_shared(const std::string& name, uint32_t bytes);

 protected:
  virtual loom::Result<std::unique_ptr<hrx_kernel>> lookup(const std::string& name) = 0;

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<hrx_kernel>> kernels_;
  std::unordered_map<std::string, uint32_t> dynamic_shared_;
};

struct hrx_graph {
  explicit hrx_graph(hrx_device* d) : device(d) {}
  virtual ~hrx_graph() = default;
  hrx_device* device;
  loom::hrx::LiveCount live{HRX_HANDLE_GRAPH};
  virtual loom::Status launch(hrx_stream* s) = 0;
};
