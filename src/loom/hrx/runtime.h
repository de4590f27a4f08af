// HRX's C++ API: move-only RAII wrappers over the runtime (see hrx.h for the C API and the
// semantics both share), with errors as loom::Status / Result, plus the IR glue Module::compile.
//
// Contract (same as hrx.h): devices live for the whole process, so Device is a cheap copyable
// handle; Buffer, Stream, Event, Module, Kernel and Graph own their object and free it on
// destruction. A Kernel keeps its module alive. Every call is thread-safe, except that one Stream
// is used by one thread at a time. Sizes and offsets are bytes; times milliseconds.
//
// Typical use:
//   LOOM_ASSIGN_OR_RETURN(auto dev, hrx::Device::open("cuda:0"));
//   LOOM_ASSIGN_OR_RETURN(auto mod, hrx::Module::compile(dev, ir_module));
//   LOOM_ASSIGN_OR_RETURN(auto add, mod.kernel("vector_add"));
//   LOOM_ASSIGN_OR_RETURN(auto x, hrx::Buffer::alloc(dev, n * 4));
//   LOOM_ASSIGN_OR_RETURN(auto s, hrx::Stream::create(dev));
//   LOOM_RETURN_IF_ERROR(s.launch(add, {blocks}, {256}, hrx::KernelArgs().buffer(x).i32(n)));
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/hrx/hrx.h"
#include "loom/ir/ops.h"

namespace loom::ir {
struct Module;
}

namespace loom::hrx {

enum class DriverKind { kCpu = HRX_DRIVER_CPU, kCuda = HRX_DRIVER_CUDA, kAmdgpu = HRX_DRIVER_AMDGPU };
enum class MemoryKind { kDevice = HRX_MEMORY_DEVICE, kHostPinned = HRX_MEMORY_HOST_PINNED };

// The Status for a failed C call (its code and this thread's last error message).
Status status_from(hrx_status s);

struct DeviceProps {
  std::string name, spec, arch;  // "NVIDIA H200", "cuda:0", "sm_90" (amdgpu: "gfx1100")
  DriverKind driver = DriverKind::kCpu;
  int ordinal = 0;
  int compute_units = 0;  // SMs / hardware threads
  int worker_threads = 0; // cpu: threads one launch runs on
  int clock_khz = 0, memory_clock_khz = 0, memory_bus_width_bits = 0;
  int cc_major = 0, cc_minor = 0, driver_version = 0, warp_size = 0;
  uint32_t max_threads_per_block = 0, max_shared_per_block = 0, max_shared_per_block_optin = 0;
  uint64_t memory_bytes = 0, l2_bytes = 0;
  // Theoretical DRAM bandwidth in GB/s from memory clock and bus width (0 on cpu).
  double peak_bandwidth_gbs() const;
};

class Device {
 public:
  Device() = default;
  // "cpu", "cuda" (= cuda:0), "cuda:N".
  static Result<Device> open(std::string_view spec);
  // The cpu, then every CUDA device (none when no NVIDIA driver is usable: see cuda_status()),
  // then every AMD GPU (none when the HSA runtime or a GPU is missing: see amdgpu_status()).
  static std::vector<Device> enumerate();
  // OK when the CUDA driver is usable (possibly with 0 devices), else why not.
  static Status cuda_status();
  // OK when at least one AMD GPU is usable, else "no AMD GPU: " and why (the HSA runtime library
  // is missing, /dev/kfd is absent, hsa_init failed, the runtime lists no GPU agent, or this
  // build has no amdgpu driver).
  static Status amdgpu_status();

  bool valid() const { return dev_ != nullptr; }
  const DeviceProps& props() const;
  DriverKind driver() const { return props().driver; }
  // The codegen target that produces this device's modules: kCpp (cpu), kPtx (cuda), kAmdgpu.
  ir::TargetKind target() const;
  Status synchronize() const;
  hrx_device* raw() const { return dev_; }

 private:
  explicit Device(hrx_device* d) : dev_(d) {}
  hrx_device* dev_ = nullptr;
};

class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : b_(o.b_) { o.b_ = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  static Result<Buffer> alloc(const Device& dev, uint64_t bytes, MemoryKind kind = MemoryKind::kDevice);
  uint64_t size() const { return b_ ? hrx_buffer_size(b_) : 0; }
  uint64_t address() const { return b_ ? hrx_buffer_device_address(b_) : 0; }
  void* host_pointer() const { return b_ ? hrx_buffer_host_pointer(b_) : nullptr; }
  hrx_buffer* raw() const { return b_; }
  void reset();

 private:
  hrx_buffer* b_ = nullptr;
};

// Builds the kernelParams array: one 8-byte slot per parameter, in parameter order.
class KernelArgs {
 public:
  KernelArgs& buffer(const Buffer& b, uint64_t byte_offset = 0) { return push(b.address() + byte_offset, 8); }
  KernelArgs& address(uint64_t device_address) { return push(device_address, 8); }
  KernelArgs& i32(int32_t v) { return push(static_cast<uint32_t>(v), 4); }
  KernelArgs& u32(uint32_t v) { return push(v, 4); }
  KernelArgs& i64(int64_t v) { return push(static_cast<uint64_t>(v), 8); }
  KernelArgs& f32(float v);

  uint32_t count() const { return static_cast<uint32_t>(values_.size()); }
  // Valid until the builder changes or dies.
  void* const* data() const;
  const uint32_t* sizes() const { return sizes_.data(); }

 private:
  KernelArgs& push(uint64_t bits, uint32_t size);
  std::vector<uint64_t> values_;
  std::vector<uint32_t> sizes_;
  mutable std::vector<void*> ptrs_;
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  Dim3() = default;
  Dim3(uint32_t x_, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT: {n} reads well
};

class Module;
class Graph;
class Event;

class Kernel {
 public:
  Kernel() = default;
  ~Kernel() { reset(); }
  Kernel(Kernel&& o) noexcept : k_(o.k_), m_(o.m_) { o.k_ = nullptr; o.m_ = nullptr; }
  Kernel& operator=(Kernel&& o) noexcept;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  hrx_kernel* raw() const { return k_; }
  void reset();

 private:
  friend class Module;
  hrx_kernel* k_ = nullptr;
  hrx_module* m_ = nullptr;  // one reference, keeps the kernel valid
};

class Stream {
 public:
  Stream() = default;
  ~Stream() { reset(); }
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  static Result<Stream> create(const Device& dev);

  Status copy_h2d(const Buffer& dst, uint64_t dst_offset, const void* src, uint64_t bytes);
  Status copy_d2h(void* dst, const Buffer& src, uint64_t src_offset, uint64_t bytes);
  Status copy_d2d(const Buffer& dst, uint64_t dst_offset, const Buffer& src, uint64_t src_offset, uint64_t bytes);
  Status memset(const Buffer& dst, uint64_t dst_offset, uint8_t value, uint64_t bytes);
  Status launch(const Kernel& k, Dim3 grid, Dim3 block, const KernelArgs& args, uint32_t shared_bytes = 0);
  // kernelParams-style arguments (see hrx_launch; sizes may be null).
  Status launch(const Kernel& k, Dim3 grid, Dim3 block, void* const* args, uint32_t n_args,
                const uint32_t* sizes, uint32_t shared_bytes = 0);
  Status synchronize();

  // Programmatic dependent launch (see hrx.h): asks for it on or off; returns whether it is on.
  bool set_dependent_launch(bool on);
  bool dependent_launch() const { return hrx_stream_dependent_launch(s_) != 0; }

  // Records instead of running until end_capture (see hrx.h).
  Status begin_capture();
  Result<Graph> end_capture();

  hrx_stream* raw() const { return s_; }
  void reset();

 private:
  hrx_stream* s_ = nullptr;
};

class Event {
 public:
  Event() = default;
  ~Event() { reset(); }
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  static Result<Event> create(const Device& dev);
  Status record(Stream& s);
  Status synchronize();
  // Milliseconds from `start` to `end` (both recorded and complete).
  static Result<float> elapsed_ms(const Event& start, const Event& end);
  hrx_event* raw() const { return e_; }
  void reset();

 private:
  hrx_event* e_ = nullptr;
};

class Module {
 public:
  Module() = default;
  ~Module() { reset(); }
  Module(Module&& o) noexcept : m_(o.m_) { o.m_ = nullptr; }
  Module& operator=(Module&& o) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  static Result<Module> load_ptx(const Device& dev, std::string_view ptx);
  static Result<Module> load_shared_object(const Device& dev, const std::string& path);
  static Result<Module> load_code_object(const Device& dev, std::span<const uint8_t> elf);
  // IR -> the device's code (cpu: cpp backend, compiled and cached on disk; cuda: PTX for the
  // device's sm arch, JIT-loaded; amdgpu: a code object for the device's gfx arch, built with
  // llc and ld.lld, which must then be installed). Loaded modules are cached in the device by a hash of the
  // emitted code, so compiling the same IR twice returns the same module without recompiling.
  static Result<Module> compile(const Device& dev, const ir::Module& module);

  Result<Kernel> kernel(std::string_view name) const;
  hrx_module* raw() const { return m_; }
  void reset();

 private:
  explicit Module(hrx_module* m) : m_(m) {}
  hrx_module* m_ = nullptr;
};

class Graph {
 public:
  Graph() = default;
  ~Graph() { reset(); }
  Graph(Graph&& o) noexcept : g_(o.g_) { o.g_ = nullptr; }
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Status launch(Stream& s);
  hrx_graph* raw() const { return g_; }
  void reset();

 private:
  friend class Stream;
  explicit Graph(hrx_graph* g) : g_(g) {}
  hrx_graph* g_ = nullptr;
};

// Number of modules the device's compile cache holds, and a way to empty it (the cache holds one
// reference per module; modules still used elsewhere stay alive).
size_t compile_cache_size(const Device& dev);
void clear_compile_cache(const Device& dev);

}  // namespace loom::hrx
