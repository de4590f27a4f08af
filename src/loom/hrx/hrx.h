/* HRX, Loom's thin device runtime: the C API (usable from C and from any language with a C FFI).
 * Devices, buffers, streams, events, modules, kernels and graphs over three drivers: "cpu" (kernels
 * compiled by the cpp backend, run over a thread pool), "cuda" (the CUDA driver API, loaded with
 * dlopen: no CUDA toolkit needed at build or run time) and "amdgpu" (AMD GPUs through the HSA
 * runtime, also loaded with dlopen; written against the HSA headers but not yet run on an AMD GPU).
 *
 * Errors: every call that can fail returns an hrx_status; on failure the calling thread's last
 * error message (hrx_last_error) names the failing step and, for driver failures, the driver call
 * and its error text. Messages stay valid until the thread's next failing HRX call.
 *
 * Ownership: handles returned through `out` parameters belong to the caller, who frees them with
 * the matching destroy/free/release call. Devices are the exception: they live for the whole
 * process (a driver's primary context is per process, and buffers must never outlive it), so a
 * device handle is a plain borrowed pointer and is never freed. Everything made from a device
 * must be freed before the process exits if its destructor matters to you; nothing is freed for
 * you except kernels, which belong to their module.
 *
 * Threading: every call is thread-safe except that one stream must be used by one thread at a
 * time (streams are in-order queues; share work across threads with one stream per thread).
 * A stream that is capturing records its work instead of running it (see hrx_stream_begin_capture).
 *
 * Units: sizes and offsets in bytes, times in milliseconds, clocks in kHz. */
#ifndef LOOM_HRX_HRX_H_
#define LOOM_HRX_HRX_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hrx_status {
  HRX_OK = 0,
  HRX_INVALID_ARGUMENT = 1,    /* bad argument: null handle, block too large, wrong module kind */
  HRX_NOT_FOUND = 2,           /* missing kernel name, device, file */
  HRX_OUT_OF_RANGE = 3,        /* copy or memset beyond a buffer's end */
  HRX_UNIMPLEMENTED = 4,       /* valid request this driver does not support */
  HRX_FAILED_PRECONDITION = 5, /* state does not allow the call (e.g. event never recorded) */
  HRX_RESOURCE_EXHAUSTED = 6,  /* out of memory */
  HRX_UNAVAILABLE = 7,         /* driver or device not present */
  HRX_INTERNAL = 8             /* any other driver failure */
} hrx_status;

/* The message of this thread's last failed call ("" when none). */
const char* hrx_last_error(void);
const char* hrx_status_name(hrx_status status);

typedef struct hrx_device hrx_device;
typedef struct hrx_buffer hrx_buffer;
typedef struct hrx_stream hrx_stream;
typedef struct hrx_event hrx_event;
typedef struct hrx_module hrx_module;
typedef struct hrx_kernel hrx_kernel;
typedef struct hrx_graph hrx_graph;

typedef enum hrx_driver_kind { HRX_DRIVER_CPU = 0, HRX_DRIVER_CUDA = 1, HRX_DRIVER_AMDGPU = 2 } hrx_driver_kind;

typedef struct hrx_device_props {
  char name[256];              /* "NVIDIA H200", "AMD EPYC ..." */
  char spec[32];               /* what hrx_device_open accepts for this device: "cpu", "cuda:0" */
  char arch[32];               /* "sm_90" (cuda), "gfx1100" (amdgpu), "cpu" */
  hrx_driver_kind driver;
  int32_t ordinal;             /* index among the driver's devices */
  int32_t compute_units;       /* SMs (cuda), hardware threads (cpu) */
  int32_t worker_threads;      /* cpu: threads a launch runs on; cuda: 0 */
  int32_t clock_khz;           /* peak core clock (0 when unknown) */
  int32_t memory_clock_khz;    /* cuda; 0 on cpu */
  int32_t memory_bus_width_bits; /* cuda; 0 on cpu */
  int32_t compute_capability_major; /* cuda; 0 on cpu */
  int32_t compute_capability_minor;
  int32_t driver_version;      /* cuda: cuDriverGetVersion; cpu: 0 */
  int32_t warp_size;
  uint32_t max_threads_per_block;
  uint32_t max_shared_per_block;       /* static shared memory a block gets without opt-in */
  uint32_t max_shared_per_block_optin; /* with opt-in (dynamic shared > 48 KiB on cuda) */
  uint64_t memory_bytes;       /* device memory (cuda), physical RAM (cpu) */
  uint64_t l2_bytes;           /* 0 when unknown */
} hrx_device_props;

/* Number of devices of a driver. cpu: always 1. cuda: HRX_UNAVAILABLE (with the reason) when no
 * NVIDIA driver is usable here; 0 devices is not an error. amdgpu (AMD GPUs through the HSA
 * runtime, loaded with dlopen): HRX_UNAVAILABLE with the reason ("no AMD GPU: ...": library
 * missing, no /dev/kfd, hsa_init failed) when the runtime is not usable; 0 when it has no GPU agent. */
hrx_status hrx_device_count(hrx_driver_kind driver, int32_t* count);
hrx_status hrx_device_get(hrx_driver_kind driver, int32_t ordinal, hrx_device** out);
/* spec: "cpu", "cuda" (= "cuda:0"), "cuda:N", "amdgpu" (= "amdgpu:0") or "amdgpu:N". The same spec
 * always yields the same device. */
hrx_status hrx_device_open(const char* spec, hrx_device** out);
hrx_status hrx_device_get_props(hrx_device* device, hrx_device_props* out);
/* Waits for all work on all of the device's streams. */
hrx_status hrx_device_synchronize(hrx_device* device);

typedef enum hrx_memory_kind {
  HRX_MEMORY_DEVICE = 0,      /* device memory (cpu: host memory) */
  HRX_MEMORY_HOST_PINNED = 1  /* page-locked host memory the device can read and write (cpu: host memory) */
} hrx_memory_kind;

/* Allocates `bytes` (0 is valid: an empty buffer with address 0). Memory is 64-byte aligned on
 * cpu, 256-byte aligned on cuda. Contents are undefined. Too large: HRX_RESOURCE_EXHAUSTED. */
hrx_status hrx_buffer_alloc(hrx_device* device, uint64_t bytes, hrx_memory_kind kind, hrx_buffer** out);
/* Frees the buffer (NULL is ignored). Work still queued on it must have finished. */
void hrx_buffer_free(hrx_buffer* buffer);
uint64_t hrx_buffer_size(const hrx_buffer* buffer);
hrx_memory_kind hrx_buffer_memory_kind(const hrx_buffer* buffer);
/* The address kernels use for this buffer (a CUdeviceptr on cuda, a host address on cpu). */
uint64_t hrx_buffer_device_address(const hrx_buffer* buffer);
/* The host address of host-visible memory (cpu buffers, host-pinned buffers), else NULL. */
void* hrx_buffer_host_pointer(const hrx_buffer* buffer);

hrx_status hrx_stream_create(hrx_device* device, hrx_stream** out);
/* Waits for the stream's work, then destroys it (NULL is ignored). */
void hrx_stream_destroy(hrx_stream* stream);
hrx_status hrx_stream_synchronize(hrx_stream* stream);

/* Stream-ordered copies and fills; offsets and sizes are bounds-checked (HRX_OUT_OF_RANGE).
 * Host memory passed to h2d/d2h must stay valid until the stream has run the copy. */
hrx_status hrx_copy_h2d(hrx_stream* stream, hrx_buffer* dst, uint64_t dst_offset, const void* src, uint64_t bytes);
hrx_status hrx_copy_d2h(hrx_stream* stream, void* dst, const hrx_buffer* src, uint64_t src_offset, uint64_t bytes);
hrx_status hrx_copy_d2d(hrx_stream* stream, hrx_buffer* dst, uint64_t dst_offset, const hrx_buffer* src,
                        uint64_t src_offset, uint64_t bytes);
hrx_status hrx_memset(hrx_stream* stream, hrx_buffer* dst, uint64_t dst_offset, uint8_t value, uint64_t bytes);

/* Events mark a point in a stream; elapsed time between two recorded, completed events. */
hrx_status hrx_event_create(hrx_device* device, hrx_event** out);
void hrx_event_destroy(hrx_event* event);
hrx_status hrx_event_record(hrx_event* event, hrx_stream* stream);
hrx_status hrx_event_synchronize(hrx_event* event);
hrx_status hrx_event_elapsed_ms(hrx_event* start, hrx_event* end, float* ms);

/* Modules. PTX text (cuda only; the JIT's error log is part of the error message), the path of
 * a shared object made by Loom's cpp backend (cpu only), or an AMDGPU code object (amdgpu only,
 * below). Modules are reference-counted:
 * hrx_module_release drops the caller's reference. */
hrx_status hrx_module_load_ptx(hrx_device* device, const char* ptx, hrx_module** out);
hrx_status hrx_module_load_shared_object(hrx_device* device, const char* path, hrx_module** out);
/* An AMDGPU code object (the ELF that llc + ld.lld make; amdgpu only), copied before the call
 * returns. Kernels are looked up by name; their parameters' layout comes from its metadata. */
hrx_status hrx_module_load_code_object(hrx_device* device, const void* data, size_t bytes, hrx_module** out);
void hrx_module_retain(hrx_module* module);
void hrx_module_release(hrx_module* module);

/* A kernel of the module (HRX_NOT_FOUND when absent); owned by the module, valid while the module
 * lives. Looking up the same name twice gives the same handle. */
hrx_status hrx_kernel_get(hrx_module* module, const char* name, hrx_kernel** out);

typedef struct hrx_launch_config {
  uint32_t grid[3];      /* blocks in x, y, z (each >= 1) */
  uint32_t block[3];     /* threads per block in x, y, z (product <= max_threads_per_block) */
  uint32_t shared_bytes; /* dynamic shared memory per block (cuda; must be 0 on cpu) */
} hrx_launch_config;

/* Enqueues a kernel launch. args[i] points at the value of parameter i, as in cuLaunchKernel's
 * kernelParams (a buffer parameter: at a uint64_t holding hrx_buffer_device_address + offset).
 * arg_sizes[i] is the byte size of parameter i; it may be NULL, in which case 8 bytes must be
 * readable at every args[i] (the C++ KernelArgs builder guarantees it). The values are read
 * before the call returns (a captured launch keeps copies). A block over the device's thread
 * limit or an empty grid: HRX_INVALID_ARGUMENT. */
hrx_status hrx_launch(hrx_stream* stream, hrx_kernel* kernel, const hrx_launch_config* config, void* const* args,
                      uint32_t n_args, const uint32_t* arg_sizes);

/* Programmatic dependent launch (cuda, compute capability 9.0+, a driver with cuLaunchKernelEx):
 * a kernel launched on such a stream may be scheduled while the kernel before it is still
 * running, so the launch latency hides behind its predecessor's tail. Only kernels whose PTX
 * entry contains griddepcontrol.wait take part (Loom's PTX emitter starts every sm_90 kernel with
 * it): that instruction holds the kernel until its predecessor grids have completed and their
 * memory is visible, so a kernel still sees all of its predecessor's writes. Other kernels, and
 * copies and fills, are ordered as always. Captured graphs keep the programmatic edges.
 * On by default where supported. hrx_stream_set_dependent_launch asks for it on or off and writes
 * to `in_effect` (may be NULL) whether it is now on: always 0 on cpu and on devices without it. */
hrx_status hrx_stream_set_dependent_launch(hrx_stream* stream, int enable, int* in_effect);
/* 1 when launches on the stream use programmatic dependent launch, else 0 (also for NULL). */
int hrx_stream_dependent_launch(const hrx_stream* stream);

/* Graphs: between begin and end, work enqueued on the stream is recorded, not run; end returns it
 * as a graph that hrx_graph_launch replays on any stream of the same device, as often as wanted.
 * Kernel arguments are the values at capture time; buffers are referenced by address, so they
 * must outlive the graph. cuda: host memory in captured copies must be pinned. */
hrx_status hrx_stream_begin_capture(hrx_stream* stream);
hrx_status hrx_stream_end_capture(hrx_stream* stream, hrx_graph** out);
hrx_status hrx_graph_launch(hrx_graph* graph, hrx_stream* stream);
void hrx_graph_destroy(hrx_graph* graph);

/* Escape hatches for benchmarks and interop: the driver's own handles (CUfunction / CUstream /
 * CUcontext on cuda; the CpuKernelFn pointer, NULL, NULL on cpu). */
void* hrx_kernel_native_handle(const hrx_kernel* kernel);
void* hrx_stream_native_handle(const hrx_stream* stream);
void* hrx_device_native_context(const hrx_device* device);

/* Live handle counts, for leak tests. */
typedef enum hrx_handle_kind {
  HRX_HANDLE_BUFFER = 0,
  HRX_HANDLE_STREAM = 1,
  HRX_HANDLE_EVENT = 2,
  HRX_HANDLE_MODULE = 3,
  HRX_HANDLE_GRAPH = 4,
  HRX_HANDLE_KIND_COUNT = 5
} hrx_handle_kind;
int64_t hrx_live_handles(hrx_handle_kind kind);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* LOOM_HRX_HRX_H_ */
