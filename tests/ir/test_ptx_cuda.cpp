// The PTX goldens on a real GPU: each golden kernel's PTX (sm_80, and sm_90 on Hopper) is loaded
// through the CUDA driver (libcuda.so.1 via dlopen, no toolkit needed), run on fresh random inputs
// with guard bytes around every buffer, and checked against the same references as the CPU run.
// Skipped, with the reason, on machines without a CUDA driver or GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "ir_test_util.h"
#include "loom/codegen/target.h"
#include "loom/ir/passes/passes.h"

namespace loom::test {
namespace {

// The few driver entry points the test needs (CUDA driver API signatures; handles are opaque).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;

struct Driver {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUcontext ctx = nullptr;
  int cc_major = 0;
  std::string why_not;  // set when unusable

  template <class F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib, name));
    if (!f) why_not = std::string("libcuda lacks ") + name;
    return f != nullptr;
  }

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (cuGetErrorString) cuGetErrorString(r, &s);
    return fmt::format("CUDA error {} ({})", r, s ? s : "?");
  }

  static Driver& get() {
    static Driver d = [] {
      Driver d;
      d.lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!d.lib) {
        d.why_not = "no CUDA driver (libcuda.so.1) on this machine";
        return d;
      }
      bool ok = d.sym(d.cuInit, "cuInit") && d.sym(d.cuDeviceGet, "cuDeviceGet") &&
                d.sym(d.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
                d.sym(d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
                d.sym(d.cuCtxSetCurrent, "cuCtxSetCurrent") && d.sym(d.cuModuleLoadDataEx, "cuModuleLoadDataEx") &&
                d.sym(d.cuModuleUnload, "cuModuleUnload") && d.sym(d.cuModuleGetFunction, "cuModuleGetFunction") &&
                d.sym(d.cuMemAlloc, "cuMemAlloc_v2") && d.sym(d.cuMemFree, "cuMemFree_v2") &&
                d.sym(d.cuMemcpyHtoD, "cuMemcpyHtoD_v2") && d.sym(d.cuMemcpyDtoH, "cuMemcpyDtoH_v2") &&
                d.sym(d.cuLaunchKernel, "cuLaunchKernel") && d.sym(d.cuCtxSynchronize, "cuCtxSynchronize") &&
                d.sym(d.cuGetErrorString, "cuGetErrorString");
      if (!ok) return d;
      CUdevice dev = 0;
      if (CUresult r = d.cuInit(0); r != 0) {
        d.why_not = "cuInit failed: " + d.error(r);
        return d;
      }
      if (CUresult r = d.cuDeviceGet(&dev, 0); r != 0) {
        d.why_not = "no CUDA device: " + d.error(r);
        return d;
      }
      d.cuDeviceGetAttribute(&d.cc_major, 75, dev);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
      if (CUresult r = d.cuDevicePrimaryCtxRetain(&d.ctx, dev); r != 0) {
        d.why_not = "no context: " + d.error(r);
        return d;
      }
      d.cuCtxSetCurrent(d.ctx);
      return d;
    }();
    return d;
  }
};

constexpr size_t kGuard = 256;
constexpr uint8_t kGuardByte = 0x5A;

// Loads `ptx`, runs `run` with kernel `name`; "" on success, else what went wrong.
std::string run_on_gpu(Driver& d, const std::string& ptx, const std::string& name, const GoldenRun& run) {
  char log[8192] = {0};
  int options[] = {5, 6};  // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
  void* values[] = {log, reinterpret_cast<void*>(sizeof(log))};
  CUmodule mod = nullptr;
  if (CUresult r = d.cuModuleLoadDataEx(&mod, ptx.c_str(), 2, options, values); r != 0)
    return "cuModuleLoadDataEx: " + d.error(r) + "\n" + log;
  std::unique_ptr<void, std::function<void(void*)>> mod_guard(mod, [&](void* m) { d.cuModuleUnload(m); });
  CUfunction fn = nullptr;
  if (CUresult r = d.cuModuleGetFunction(&fn, mod, name.c_str()); r != 0) return "cuModuleGetFunction: " + d.error(r);

  std::vector<CUdeviceptr> mem(run.buffers.size(), 0);
  auto free_all = [&] {
    for (CUdeviceptr p : mem)
      if (p) d.cuMemFree(p);
  };
  std::vector<CUdeviceptr> pointers(run.buffers.size());
  for (size_t i = 0; i < run.buffers.size(); ++i) {
    size_t size = run.buffers[i].size(), total = size + 2 * kGuard;
    if (CUresult r = d.cuMemAlloc(&mem[i], total); r != 0) {
      free_all();
      return "cuMemAlloc: " + d.error(r);
    }
    std::vector<uint8_t> host(total, kGuardByte);
    std::memcpy(host.data() + kGuard, run.buffers[i].data(), size);
    d.cuMemcpyHtoD(mem[i], host.data(), total);
    pointers[i] = mem[i] + kGuard;
  }
  std::vector<std::array<uint8_t, 8>> scalars(run.args.size());
  std::vector<void*> args(run.args.size());
  for (size_t i = 0; i < run.args.size(); ++i) {
    if (run.args[i].buffer >= 0) {
      args[i] = &pointers[static_cast<size_t>(run.args[i].buffer)];
    } else {
      scalars[i] = run.args[i].scalar;
      args[i] = scalars[i].data();
    }
  }
  CUresult r = d.cuLaunchKernel(fn, run.grid[0], run.grid[1], run.grid[2], run.block[0], run.block[1], run.block[2], 0,
                                nullptr, args.data(), nullptr);
  if (r == 0) r = d.cuCtxSynchronize();
  if (r != 0) {
    free_all();
    return "launch: " + d.error(r);
  }
  std::vector<std::vector<uint8_t>> after(run.buffers.size());
  for (size_t i = 0; i < run.buffers.size(); ++i) {
    size_t size = run.buffers[i].size(), total = size + 2 * kGuard;
    std::vector<uint8_t> host(total);
    d.cuMemcpyDtoH(host.data(), mem[i], total);
    for (size_t b = 0; b < total; ++b)
      if ((b < kGuard || b >= kGuard + size) && host[b] != kGuardByte) {
        free_all();
        return fmt::format("buffer {}: guard byte at offset {} overwritten", i, static_cast<long>(b) - static_cast<long>(kGuard));
      }
    after[i].assign(host.begin() + kGuard, host.begin() + kGuard + size);
  }
  free_all();
  return run.check(after);
}

class PtxOnGpu : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(PtxOnGpu, MatchesReferenceOnFreshInputs) {
  Driver& d = Driver::get();
  if (!d.why_not.empty()) GTEST_SKIP() << "PTX goldens not run on a GPU: " << d.why_not;
  const GoldenCase& c = GetParam();
  for (bool optimized : {true, false}) {
    auto m = load_golden(c.name);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    if (optimized) ir::optimize(*m);
    for (const char* arch : {"sm_80", "sm_90"}) {
      if (std::string(arch) == "sm_90" && d.cc_major < 9) continue;
      SCOPED_TRACE(fmt::format("{} {}", arch, optimized ? "after passes" : "without passes"));
      auto ptx = codegen::ptx_target().emit(*m, arch);
      ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
      for (int trial = 0; trial < 2; ++trial) {
        uint32_t seed = test_seed();
        SCOPED_TRACE(fmt::format("seed {} (LOOM_TEST_SEED to replay)", seed));
        std::mt19937 rng(seed);
        EXPECT_EQ(run_on_gpu(d, *ptx, c.name, c.make(rng)), "");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PtxOnGpu, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::test
