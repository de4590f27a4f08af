// Loading text kernels (see load.h).
#include "loom/store/load.h"

#include <dlfcn.h>

#include "loom/codegen/cpp/host_compiler.h"

namespace loom::store {
namespace {

// What a C++ candidate may use without declaring it: the launch dimensions of cpu_abi.h.
constexpr std::string_view kCppPrelude = R"(#include <cstdint>
#include <cstring>
#include <cmath>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
struct LoomLaunchDims { uint32_t grid[3]; uint32_t block[3]; uint64_t block_begin; uint64_t block_end; };
)";

}  // namespace

bool is_text_kind(CandKind k) { return k == CandKind::kCpp || k == CandKind::kPtx || k == CandKind::kCuda; }

std::string cpp_source_for_cpu(const Instance& inst) {
  if (inst.source.find("LoomLaunchDims {") != std::string::npos) return inst.source;
  return std::string(kCppPrelude) + inst.source;
}

Result<hrx::Module> load_text_module(const hrx::Device& dev, const Instance& inst) {
  switch (inst.kind) {
    case CandKind::kCpp: {
      if (dev.driver() != hrx::DriverKind::kCpu) return invalid_argument("a C++ kernel needs the cpu device");
      LOOM_ASSIGN_OR_RETURN(std::string so, codegen::compile_shared_object(cpp_source_for_cpu(inst)));
      return hrx::Module::load_shared_object(dev, so);
    }
    case CandKind::kPtx:
    case CandKind::kCuda: {
      if (dev.driver() != hrx::DriverKind::kCuda) return invalid_argument("PTX and CUDA C++ kernels need a cuda device");
      if (inst.kind == CandKind::kPtx) return hrx::Module::load_ptx(dev, inst.source);
      LOOM_ASSIGN_OR_RETURN(std::string ptx, nvrtc_compile(inst.source, dev.props().arch));
      return hrx::Module::load_ptx(dev, ptx);
    }
    case CandKind::kSchedule:
    case CandKind::kIr:
      break;
  }
  return invalid_argument("a {} instance is Loom IR, not text: compile it with hrx::Module::compile",
                          cand_kind_name(inst.kind));
}

Result<std::string> nvrtc_compile(const std::string& source, const std::string& arch) {
  // The NVRTC C API, declared here (the header is not needed at build time).
  using Prog = void*;
  using CreateFn = int (*)(Prog*, const char*, const char*, int, const char* const*, const char* const*);
  using CompileFn = int (*)(Prog, int, const char* const*);
  using SizeFn = int (*)(Prog, size_t*);
  using GetFn = int (*)(Prog, char*);
  using DestroyFn = int (*)(Prog*);
  static void* lib = [] {
    for (const char* n : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"})
      if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
    return static_cast<void*>(nullptr);
  }();
  if (!lib) return unavailable("NVRTC (libnvrtc.so) is not installed: CUDA C++ candidates cannot be compiled here");
  auto create = reinterpret_cast<CreateFn>(dlsym(lib, "nvrtcCreateProgram"));
  auto compile = reinterpret_cast<CompileFn>(dlsym(lib, "nvrtcCompileProgram"));
  auto log_size = reinterpret_cast<SizeFn>(dlsym(lib, "nvrtcGetProgramLogSize"));
  auto get_log = reinterpret_cast<GetFn>(dlsym(lib, "nvrtcGetProgramLog"));
  auto ptx_size = reinterpret_cast<SizeFn>(dlsym(lib, "nvrtcGetPTXSize"));
  auto get_ptx = reinterpret_cast<GetFn>(dlsym(lib, "nvrtcGetPTX"));
  auto destroy = reinterpret_cast<DestroyFn>(dlsym(lib, "nvrtcDestroyProgram"));
  if (!create || !compile || !log_size || !get_log || !ptx_size || !get_ptx || !destroy)
    return unavailable("libnvrtc lacks the expected entry points");
  Prog p = nullptr;
  if (create(&p, source.c_str(), "candidate.cu", 0, nullptr, nullptr) != 0) return internal_error("nvrtcCreateProgram failed");
  std::string arch_opt = "--gpu-architecture=" + (arch.rfind("sm_", 0) == 0 ? "compute_" + arch.substr(3) : arch);
  const char* opts[] = {arch_opt.c_str(), "--std=c++17", "-default-device"};
  int rc = compile(p, 3, opts);
  size_t n = 0;
  log_size(p, &n);
  std::string log(n, '\0');
  if (n) get_log(p, log.data());
  if (rc != 0) {
    destroy(&p);
    return invalid_argument("NVRTC: {}", log.substr(0, 2000));
  }
  ptx_size(p, &n);
  std::string ptx(n, '\0');
  get_ptx(p, ptx.data());
  destroy(&p);
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace loom::store
