// The cpp target's toolchain side: compiles generated C++ with the system compiler into a shared
// object cached on disk by content hash, loads it with dlopen, and runs kernels over a grid.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/codegen/cpp/cpu_abi.h"
#include "loom/ir/ir.h"

namespace loom {
class ThreadPool;
}

namespace loom::codegen {

// Compiler and flags: $LOOM_CXX (default "c++") with
// -std=c++20 -O3 -march=ARCH -fPIC -shared -fwrapv -fno-math-errno, ARCH one of cpu_archs()
// ("" means $LOOM_CPU_ARCH, default native). An x86-64 level that this CPU lacks is refused
// (unavailable) before anything is compiled, since its code would die of an illegal instruction.
// Returns the path $LOOM_CACHE_DIR/kernels/cpp/<hash>.so, compiling only when it is missing
// (the key covers the source, the flags and the compiler's version, so each machine compiles a
// kernel once). With GCC, the system headers come precompiled (one .gch per compiler and flags,
// under kernels/cpp/pch/), which halves a small kernel's compile time and leaves the code as it
// was. Safe to call from several processes: results are renamed into place.
// A compiler failure is an internal error carrying the compiler's output.
Result<std::string> compile_shared_object(std::string_view source, std::string_view arch = "");

// The -march values the cpp target compiles for, "native" first; the one LOOM_CPU_ARCH selects.
const std::vector<std::string>& cpu_archs();
std::string selected_cpu_arch();
// OK when this CPU runs code compiled for `arch`; else unavailable, naming what it lacks.
Status check_cpu_arch(std::string_view arch);
// Vector registers that code compiled for `arch` (empty: the selected one) has: 32 with AVX-512
// (x86-64-v4, or native on an AVX-512 CPU), else 16. Register tiles are sized by it.
int cpu_vector_registers(std::string_view arch = "");

// Whether kernels compiled for `arch` ("" = the selected one) may use Intel AMX tiles (the IR's
// amx_* ops): arch is native, CPUID reports AMX-TILE, AMX-INT8 and AMX-BF16, the OS saves the
// tile state (XCR0), and Linux granted this process the tile data (arch_prctl
// ARCH_REQ_XCOMP_PERM, asked once here). LOOM_CPU_AMX=0 (opt::Opt::kCpuAmx) says no on any host.
bool cpu_amx_usable(std::string_view arch = "");

// A dlopen'ed shared object; move-only, dlclose on destruction.
class SharedLibrary {
 public:
  SharedLibrary() = default;
  ~SharedLibrary();
  SharedLibrary(SharedLibrary&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  static Result<SharedLibrary> open(const std::string& path);
  // not_found when the symbol is missing.
  Result<void*> symbol(const std::string& name) const;

 private:
  void* handle_ = nullptr;
};

// A compiled cpp module: its library and entry points (valid while the module lives).
class CpuModule {
 public:
  static Result<CpuModule> load(const std::string& so_path);
  Result<CpuKernelFn> kernel(std::string_view name) const;

 private:
  SharedLibrary lib_;
};

// Emits, compiles (or finds in the cache) and loads a verified module.
Result<CpuModule> compile_cpu_module(const ir::Module& module);

using Dim3 = std::array<uint32_t, 3>;

// Runs `fn` over grid x block on `pool`: blocks are split into contiguous ranges over its
// threads (one caller at a time, as ThreadPool requires). Blocks must not depend on each other
// (as on a GPU). Rejects empty grids or blocks of more than kMaxBlockThreads threads. The one CPU
// launcher: the HRX cpu driver, the op harness's direct device and the overload below run here.
Status launch_cpu(CpuKernelFn fn, void* const* args, Dim3 grid, Dim3 block, ThreadPool& pool);
// The same over `threads` threads (0: std::thread::hardware_concurrency()), on a pool of that
// size that the process keeps (made at the first launch with that count; concurrent launches
// with one count take turns). One thread, or one block, runs on the caller.
Status launch_cpu(CpuKernelFn fn, void* const* args, Dim3 grid, Dim3 block, unsigned threads = 0);

}  // namespace loom::codegen
