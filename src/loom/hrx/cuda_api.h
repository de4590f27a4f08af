// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"): no link-time dependency on
// CUDA, so one binary runs on machines with and without an NVIDIA GPU. Only the entry points
// Loom uses are declared, with our own minimal type declarations (ABI-compatible with cuda.h).
// Thread-safe: the table is loaded once and immutable afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/base/status.h"

namespace loom::hrx::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUgraphNode = struct CUgraphNode_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;

// Other constants (values as in cuda.h).
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// Launch attributes for cuLaunchKernelEx (layouts and values as in cuda.h: the id is padded to 8
// bytes, the value is a 64-byte union of which we use the leading int).
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
};
struct CUlaunchConfig {
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x, block_y, block_z;
  unsigned shared_bytes;
  CUstream stream;
  CUlaunchAttribute* attrs;
  unsigned n_attrs;
};
static_assert(sizeof(CUlaunchAttribute) == 72 && sizeof(CUlaunchConfig) == 56, "cuda.h layout");

// Graph edge annotations (cuGraphGetEdges_v2; CUDA 12.3+). A programmatic dependency between two
// kernel nodes (from a launch with programmatic stream serialization) has type 1.
struct CUgraphEdgeData {
  unsigned char from_port, to_port, type, reserved[5];
};
constexpr unsigned char CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1;

// Device attributes (values as in cuda.h's CUdevice_attribute).
enum class Attr : int {
  kMaxThreadsPerBlock = 1,
  kMaxSharedPerBlock = 8,
  kWarpSize = 10,
  kClockRateKHz = 13,
  kSmCount = 16,
  kMemoryClockKHz = 36,
  kMemoryBusWidthBits = 37,
  kL2CacheBytes = 38,
  kMaxThreadsPerSm = 39,
  kCcMajor = 75,
  kCcMinor = 76,
  kMaxSharedPerBlockOptin = 97,
};

// JIT options used with cuModuleLoadDataEx (values as in cuda.h's CUjit_option).
constexpr int CU_JIT_INFO_LOG_BUFFER = 3;
constexpr int CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;

struct Api {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* dev, int ordinal);
  CUresult (*cuDeviceGetName)(char* name, int len, CUdevice dev);
  CUresult (*cuDeviceGetAttribute)(int* value, int attr, CUdevice dev);
  CUresult (*cuDeviceTotalMem)(size_t* bytes, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr ptr);
  CUresult (*cuMemAllocHost)(void** ptr, size_t bytes);
  CUresult (*cuMemFreeHost)(void* ptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void* src, size_t bytes, CUstream s);
  CUresult (*cuMemcpyDtoHAsync)(void* dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
  CUresult (*cuModuleLoadDataEx)(CUmodule* mod, const void* image, unsigned n_options, int* options, void** values);
  CUresult (*cuModuleUnload)(CUmodule mod);
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule mod, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction fn, int attr, int value);
  CUresult (*cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared_bytes, CUstream s, void** params, void** extra);
  CUresult (*cuStreamCreate)(CUstream* s, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream s);
  CUresult (*cuStreamSynchronize)(CUstream s);
  CUresult (*cuEventCreate)(CUevent* e, unsigned flags);
  CUresult (*cuEventDestroy)(CUevent e);
  CUresult (*cuEventRecord)(CUevent e, CUstream s);
  CUresult (*cuEventSynchronize)(CUevent e);
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end);
  CUresult (*cuStreamBeginCapture)(CUstream s, int mode);
  CUresult (*cuStreamEndCapture)(CUstream s, CUgraph* g);
  CUresult (*cuGraphInstantiate)(CUgraphExec* exec, CUgraph g, unsigned long long flags);
  CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream s);
  CUresult (*cuGraphExecDestroy)(CUgraphExec exec);
  CUresult (*cuGraphDestroy)(CUgraph g);
  CUresult (*cuGetErrorName)(CUresult r, const char** str);
  // Optional entry points (null when the driver lacks them; callers check).
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig* config, CUfunction fn, void** params, void** extra);
  CUresult (*cuGraphGetEdges_v2)(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data,
                                 size_t* n_edges);
  CUresult (*cuGetErrorString)(CUresult r, const char** str);
};

// The loaded driver table, or kUnavailable ("no NVIDIA driver: ...") when libcuda.so.1 is absent
// or cuInit fails. Loaded and initialized once per process.
Result<const Api*> api();

// Status for a driver result: OK, or an error naming the call and the driver's error text. The
// code follows the cause: out of memory -> kResourceExhausted, invalid value/PTX/device ->
// kInvalidArgument, not found -> kNotFound, anything else -> kInternal.
Status check(CUresult r, const char* what);

}  // namespace loom::hrx::cuda
