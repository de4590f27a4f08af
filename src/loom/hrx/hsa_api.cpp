// dlopen-based loading of the HSA runtime. /dev/kfd is checked before hsa_init so that the usual
// case on a machine without an AMD GPU (the library installed, no amdgpu kernel driver) names its
// cause instead of hsa_init's generic HSA_STATUS_ERROR_OUT_OF_RESOURCES.
#include "loom/hrx/hsa_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loom/base/options.h"

namespace loom::hrx::hsa {

#if !LOOM_HRX_HAVE_HSA

Status runtime_status() {
  return unavailable("no AMD GPU: this loom was built without the HSA headers (Debian: libhsa-runtime-dev), so it has "
                     "no amdgpu driver");
}

#else

namespace {

struct Loaded {
  Api api{};
  Status status;
};

Loaded load() {
  Loaded l;
  std::string path = opt::get_string(opt::Opt::kHsaRuntime);
  if (path.empty()) path = "libhsa-runtime64.so.1";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    l.status = unavailable("no AMD GPU: the HSA runtime library is missing: cannot load {} ({}; Debian: "
                           "libhsa-runtime64-1, or LOOM_HSA_RUNTIME=/opt/rocm/lib/libhsa-runtime64.so.1)",
                           path, dlerror());
    return l;
  }
  std::string missing;
#define LOOM_HSA_RESOLVE(f)                                                   \
  l.api.f = reinterpret_cast<decltype(l.api.f)>(dlsym(lib, #f));              \
  if (!l.api.f) missing += std::string(missing.empty() ? "" : ", ") + #f;
  LOOM_HSA_FUNCTIONS(LOOM_HSA_RESOLVE)
#undef LOOM_HSA_RESOLVE
  // The library stays loaded for the life of the process on purpose: the table points into it.
  if (!missing.empty()) {
    l.status = unavailable("no AMD GPU: {} lacks HSA entry points (too old, or not the HSA runtime): {}", path, missing);
    return l;
  }
  if (::access("/dev/kfd", R_OK | W_OK) != 0) {
    const int err = errno;
    l.status = err == ENOENT
                   ? unavailable("no AMD GPU: /dev/kfd is missing (the amdgpu kernel driver is not loaded here, or "
                                 "the device is not passed into this container); the HSA runtime {} loaded", path)
                   : unavailable("no AMD GPU: /dev/kfd is not usable by this process ({}; on most systems the user "
                                 "must be in the 'render' group)", std::strerror(err));
    return l;
  }
  if (hsa_status_t r = l.api.hsa_init(); r != HSA_STATUS_SUCCESS) {
    const char* text = nullptr;
    l.api.hsa_status_string(r, &text);
    l.status = unavailable("no AMD GPU: hsa_init failed: {} ({:#x})", text ? text : "?", static_cast<unsigned>(r));
  }
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

Status runtime_status() { return loaded().status; }

Result<const Api*> api() {
  const Loaded& l = loaded();
  if (!l.status.ok()) return l.status;
  return &l.api;
}

Status check(hsa_status_t r, const char* what) {
  if (r == HSA_STATUS_SUCCESS) return Status();
  const char* text = nullptr;
  if (auto a = api(); a.ok()) (*a)->hsa_status_string(r, &text);
  std::string msg = fmt::format("{} failed: {} ({:#x})", what, text ? text : "unknown HSA status", static_cast<unsigned>(r));
  switch (r) {
    case HSA_STATUS_ERROR_OUT_OF_RESOURCES:
    case HSA_STATUS_ERROR_INVALID_ALLOCATION: return Status(StatusCode::kResourceExhausted, std::move(msg));
    case HSA_STATUS_ERROR_INVALID_ARGUMENT:
    case HSA_STATUS_ERROR_INVALID_CODE_OBJECT:
    case HSA_STATUS_ERROR_INVALID_ISA:
    case HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: return Status(StatusCode::kInvalidArgument, std::move(msg));
    case HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: return Status(StatusCode::kNotFound, std::move(msg));
    default: return Status(StatusCode::kInternal, std::move(msg));
  }
}

#endif

}  // namespace loom::hrx::hsa
