// dlopen-based loading of the CUDA driver API. Versioned symbols (_v2, _v3) are the ones cuda.h
// maps the plain names to; we resolve them explicitly because we do not include cuda.h.
#include "loom/hrx/cuda_api.h"

#include <dlfcn.h>

#include <mutex>

namespace loom::hrx::cuda {
namespace {

struct Loaded {
  Api api{};
  Status status;
};

template <typename F>
bool resolve(void* lib, F*& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<F*>(dlsym(lib, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  return fn != nullptr;
}

Loaded load() {
  Loaded l;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    l.status = unavailable("no NVIDIA driver: cannot load libcuda.so.1 ({})", dlerror());
    return l;
  }
  Api& a = l.api;
  std::string missing;
#define R(field, sym) resolve(lib, a.field, sym, missing)
  R(cuInit, "cuInit");
  R(cuDriverGetVersion, "cuDriverGetVersion");
  R(cuDeviceGetCount, "cuDeviceGetCount");
  R(cuDeviceGet, "cuDeviceGet");
  R(cuDeviceGetName, "cuDeviceGetName");
  R(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  R(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  R(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  R(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  R(cuCtxSetCurrent, "cuCtxSetCurrent");
  R(cuCtxSynchronize, "cuCtxSynchronize");
  R(cuMemAlloc, "cuMemAlloc_v2");
  R(cuMemFree, "cuMemFree_v2");
  R(cuMemAllocHost, "cuMemAllocHost_v2");
  R(cuMemFreeHost, "cuMemFreeHost");
  R(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  R(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  R(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  R(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  R(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  R(cuMemcpyAsync, "cuMemcpyAsync");
  R(cuMemsetD8Async, "cuMemsetD8Async");
  R(cuModuleLoadDataEx, "cuModuleLoadDataEx");
  R(cuModuleUnload, "cuModuleUnload");
  R(cuModuleGetFunction, "cuModuleGetFunction");
  R(cuFuncSetAttribute, "cuFuncSetAttribute");
  R(cuLaunchKernel, "cuLaunchKernel");
  R(cuStreamCreate, "cuStreamCreate");
  R(cuStreamDestroy, "cuStreamDestroy_v2");
  R(cuStreamSynchronize, "cuStreamSynchronize");
  R(cuEventCreate, "cuEventCreate");
  R(cuEventDestroy, "cuEventDestroy_v2");
  R(cuEventRecord, "cuEventRecord");
  R(cuEventSynchronize, "cuEventSynchronize");
  R(cuEventElapsedTime, "cuEventElapsedTime");
  R(cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  R(cuStreamEndCapture, "cuStreamEndCapture");
  R(cuGraphInstantiate, "cuGraphInstantiateWithFlags");
  R(cuGraphLaunch, "cuGraphLaunch");
  R(cuGraphExecDestroy, "cuGraphExecDestroy");
  R(cuGraphDestroy, "cuGraphDestroy");
  R(cuGetErrorName, "cuGetErrorName");
  R(cuGetErrorString, "cuGetErrorString");
#undef R
  // Optional (CUDA 11.8+ / 12.3+): a missing one only turns its feature off.
  a.cuLaunchKernelEx = reinterpret_cast<decltype(a.cuLaunchKernelEx)>(dlsym(lib, "cuLaunchKernelEx"));
  a.cuGraphGetEdges_v2 = reinterpret_cast<decltype(a.cuGraphGetEdges_v2)>(dlsym(lib, "cuGraphGetEdges_v2"));
  if (!missing.empty()) {
    l.status = unavailable("NVIDIA driver too old: libcuda.so.1 lacks {}", missing);
    return l;
  }
  CUresult r = a.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    a.cuGetErrorName(r, &name);
    l.status = unavailable("NVIDIA driver present but cuInit failed: {} ({})", name ? name : "?", r);
  }
  // The library stays loaded for the life of the process on purpose: the table points into it.
  return l;
}

}  // namespace

Result<const Api*> api() {
  static const Loaded loaded = load();
  if (!loaded.status.ok()) return loaded.status;
  return &loaded.api;
}

Status check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status();
  const char* name = "?";
  const char* text = "";
  if (auto a = api(); a.ok()) {
    (*a)->cuGetErrorName(r, &name);
    (*a)->cuGetErrorString(r, &text);
  }
  std::string msg = fmt::format("{} failed: {} ({}): {}", what, name ? name : "?", r, text ? text : "");
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return Status(StatusCode::kResourceExhausted, std::move(msg));
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX: return Status(StatusCode::kInvalidArgument, std::move(msg));
    case CUDA_ERROR_NOT_FOUND: return Status(StatusCode::kNotFound, std::move(msg));
    default: return Status(StatusCode::kInternal, std::move(msg));
  }
}

}  // namespace loom::hrx::cuda
