// Host compilation with a content-hash disk cache, dlopen wrappers, and the CPU grid launcher.
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/ir/passes/passes.h"

#include <dlfcn.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "loom/base/file.h"
#include "loom/base/options.h"
#include "loom/base/thread_pool.h"
#include "loom/codegen/cpp/cpp_emitter.h"
#include "loom/codegen/tool_run.h"
#include "loom/ir/verifier.h"

namespace loom::codegen {
namespace {

std::vector<std::string> compile_flags(std::string_view arch) {
  return {"-std=c++20", "-O3", fmt::format("-march={}", arch), "-fPIC", "-shared", "-fwrapv", "-fno-math-errno",
          "-ffp-contract=off", "-w"};
}

std::string compiler_name() {
  return opt::get_string(opt::Opt::kCxx);
}

// "<path>\n<first line of --version>": part of the cache key, computed once per process.
Result<std::string> compiler_identity(const std::string& compiler) {
  static std::mutex mu;
  static std::string cached_for, cached;
  std::lock_guard<std::mutex> lock(mu);
  if (cached_for == compiler && !cached.empty()) return cached;
  LOOM_ASSIGN_OR_RETURN(std::string path, find_tool({compiler}));
  LOOM_ASSIGN_OR_RETURN(ToolResult r, run_tool({path, "--version"}));
  if (r.exit_code != 0) return unavailable("{} --version failed: {}", path, r.output);
  cached_for = compiler;
  cached = path + "\n" + r.output.substr(0, r.output.find('\n'));
  return cached;
}

// The compiler of `identity` ("<path>\n<version>") with `flags`, without -shared where the
// output is not a shared object.
std::vector<std::string> compiler_argv(const std::string& identity, const std::vector<std::string>& flags, bool shared) {
  std::vector<std::string> argv = {identity.substr(0, identity.find('\n'))};
  for (const auto& f : flags)
    if (shared || f != "-shared") argv.push_back(f);
  return argv;
}

// The system headers of every emitted unit, precompiled (a GCC .gch) once per compiler, flags
// and header list, under $LOOM_CACHE_DIR/kernels/cpp/pch/<hash>/. Returns the header to pass to
// -include (GCC then reads the .gch beside it), or "" where there is none: clang (whose
// precompiled headers work differently) or a failed build, after which kernels compile as
// before. The generated code is the same either way; only the parsing is skipped.
std::string precompiled_includes(const std::string& identity, const std::vector<std::string>& flags) {
  static std::mutex mu;
  static std::map<std::string, std::string> built;  // directory -> header path, or "" after a failure
  if (identity.find("clang") != std::string::npos) return "";
  std::string key_text = identity;
  for (const auto& f : flags) key_text += '\0' + f;
  key_text += '\0';
  key_text += cpp_system_includes();
  const std::string hash = content_hash(key_text);
  const std::string dir = cache_dir() + "/kernels/cpp/pch/" + hash;
  const std::string header = dir + "/loom_prelude.h";
  std::lock_guard<std::mutex> lock(mu);
  // A failed build is not retried in this process; a removed cache is rebuilt.
  if (auto it = built.find(dir); it != built.end() && (it->second.empty() || file_exists(header + ".gch")))
    return it->second;
  std::string& result = built[dir];
  if (file_exists(header + ".gch")) return result = header;
  // Built in a unique directory renamed into place: another process either sees none or all.
  std::error_code ec;
  const std::string tmp = fmt::format("{}.tmp.{}", dir, ::getpid());
  std::filesystem::remove_all(tmp, ec);
  std::filesystem::create_directories(tmp, ec);
  if (ec || !write_file(tmp + "/loom_prelude.h", cpp_system_includes()).ok()) return "";
  std::vector<std::string> argv = compiler_argv(identity, flags, false);
  argv.insert(argv.end(), {"-x", "c++-header", tmp + "/loom_prelude.h", "-o", tmp + "/loom_prelude.h.gch"});
  auto r = run_tool(argv);
  if (!r.ok() || r->exit_code != 0) {
    std::filesystem::remove_all(tmp, ec);
    return "";
  }
  std::filesystem::rename(tmp, dir, ec);
  if (ec) std::filesystem::remove_all(tmp, ec);  // another process put its own in place first
  return result = file_exists(header + ".gch") ? header : "";
}

}  // namespace

const std::vector<std::string>& cpu_archs() {
  static const std::vector<std::string> archs = {"native", "x86-64-v4", "x86-64-v3", "x86-64-v2"};
  return archs;
}

std::string selected_cpu_arch() { return opt::get_string(opt::Opt::kCpuArch); }

Status check_cpu_arch(std::string_view arch) {
  if (arch == "native") return Status();
  // The features of each x86-64 level that the kernels' code paths test for.
  struct Need {
    const char* level;
    const char* feature;
    bool have;
  };
#if defined(__x86_64__)
  __builtin_cpu_init();
  const Need needs[] = {
      {"x86-64-v2", "sse4.2", __builtin_cpu_supports("sse4.2") != 0},
      {"x86-64-v2", "popcnt", __builtin_cpu_supports("popcnt") != 0},
      {"x86-64-v3", "avx2", __builtin_cpu_supports("avx2") != 0},
      {"x86-64-v3", "fma", __builtin_cpu_supports("fma") != 0},
      {"x86-64-v3", "bmi2", __builtin_cpu_supports("bmi2") != 0},
      {"x86-64-v4", "avx512f", __builtin_cpu_supports("avx512f") != 0},
      {"x86-64-v4", "avx512bw", __builtin_cpu_supports("avx512bw") != 0},
      {"x86-64-v4", "avx512vl", __builtin_cpu_supports("avx512vl") != 0},
      {"x86-64-v4", "avx512dq", __builtin_cpu_supports("avx512dq") != 0},
  };
  const std::vector<std::string>& all = cpu_archs();
  auto rank = [&](std::string_view a) { return std::find(all.begin(), all.end(), a) - all.begin(); };
  if (rank(arch) == static_cast<std::ptrdiff_t>(all.size()))
    return invalid_argument("cpu arch '{}' is not one of native, x86-64-v4, x86-64-v3, x86-64-v2", arch);
  for (const Need& n : needs)
    if (rank(n.level) >= rank(arch) && !n.have)
      return unavailable("this CPU cannot run {} code: it lacks {}", arch, n.feature);
  return Status();
#else
  return unavailable("cpu arch '{}' is an x86-64 level; this CPU is not x86-64 (use native)", arch);
#endif
}

int cpu_vector_registers(std::string_view arch_in) {
  const std::string arch = arch_in.empty() ? selected_cpu_arch() : std::string(arch_in);
  if (arch == "x86-64-v4") return 32;
#if defined(__x86_64__)
  if (arch == "native") {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 32 : 16;
  }
#endif
  return 16;
}

bool cpu_amx_usable(std::string_view arch_in) {
  const std::string arch = arch_in.empty() ? selected_cpu_arch() : std::string(arch_in);
  if (arch != "native" || !opt::get_bool(opt::Opt::kCpuAmx)) return false;
#if defined(__x86_64__) && defined(__linux__)
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1, i8 = (d >> 25) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !i8 || !bf16) return false;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;  // OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3) != 3) return false;  // XTILECFG and XTILEDATA enabled by the OS
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return ::syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

Result<std::string> compile_shared_object(std::string_view source, std::string_view arch_in) {
  const std::string arch = arch_in.empty() ? selected_cpu_arch() : std::string(arch_in);
  LOOM_RETURN_IF_ERROR(check_cpu_arch(arch));
  if (source.find("_tile_loadconfig(") != std::string_view::npos && !cpu_amx_usable(arch))
    return unavailable("these kernels use Intel AMX tiles, which this CPU, OS or cpu arch '{}' cannot run "
                       "(needs native code on a CPU with AMX-TILE, AMX-INT8 and AMX-BF16, Linux 5.16 or later, "
                       "and LOOM_CPU_AMX unset or 1)", arch);
  const std::vector<std::string> flags = compile_flags(arch);
  std::string compiler = compiler_name();
  LOOM_ASSIGN_OR_RETURN(std::string identity, compiler_identity(compiler));
  std::string key_text(source);
  key_text += '\0';
  key_text += identity;
  for (const auto& f : flags) {
    key_text += '\0';
    key_text += f;
  }
  std::string hash = content_hash(key_text);

  std::string dir = cache_dir() + "/kernels/cpp";
  std::string so = dir + "/" + hash + ".so";
  if (file_exists(so)) return so;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return unavailable("cannot create kernel cache {}: {}", dir, ec.message());

  // Unique temporaries, renamed into place: concurrent compilers never see half-written files.
  std::string tag = fmt::format("{}.{}", ::getpid(), std::hash<std::thread::id>()(std::this_thread::get_id()));
  std::string src = dir + "/" + hash + ".cpp";
  std::string tmp_src = src + ".tmp." + tag;
  std::string tmp_so = so + ".tmp." + tag;
  LOOM_RETURN_IF_ERROR(write_file(tmp_src, source));
  std::vector<std::string> argv = compiler_argv(identity, flags, true);
  if (std::string pch = precompiled_includes(identity, flags); !pch.empty()) argv.insert(argv.end(), {"-include", pch});
  argv.insert(argv.end(), {"-x", "c++", tmp_src, "-o", tmp_so});
  auto result = run_tool(argv);
  if (!result.ok() || result->exit_code != 0) {
    std::filesystem::remove(tmp_so, ec);
    std::filesystem::rename(tmp_src, src, ec);  // keep the source for the bug report
    if (!result.ok()) return std::move(result).status();
    return internal_error("compiling generated C++ {} failed:\n{}", src, result->output.substr(0, 4000));
  }
  std::filesystem::rename(tmp_src, src, ec);
  std::filesystem::rename(tmp_so, so, ec);
  if (ec) return unavailable("cannot move {} into the kernel cache: {}", tmp_so, ec.message());
  return so;
}

SharedLibrary::~SharedLibrary() {
  if (handle_) ::dlclose(handle_);
}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) ::dlclose(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Result<SharedLibrary> SharedLibrary::open(const std::string& path) {
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* err = ::dlerror();
    return unavailable("dlopen {}: {}", path, err ? err : "unknown error");
  }
  SharedLibrary lib;
  lib.handle_ = h;
  return lib;
}

Result<void*> SharedLibrary::symbol(const std::string& name) const {
  if (!handle_) return failed_precondition("symbol {} looked up in a closed library", name);
  ::dlerror();
  void* sym = ::dlsym(handle_, name.c_str());
  if (!sym) return not_found("symbol {} not found in kernel library", name);
  return sym;
}

Result<CpuModule> CpuModule::load(const std::string& so_path) {
  CpuModule m;
  LOOM_ASSIGN_OR_RETURN(m.lib_, SharedLibrary::open(so_path));
  return m;
}

Result<CpuKernelFn> CpuModule::kernel(std::string_view name) const {
  LOOM_ASSIGN_OR_RETURN(void* sym, lib_.symbol(std::string(name)));
  return reinterpret_cast<CpuKernelFn>(sym);
}

Result<CpuModule> compile_cpu_module(const ir::Module& module) {
  LOOM_RETURN_IF_ERROR(ir::verify(module, ir::TargetKind::kCpp));
  ir::Module storage;  // asynchronous copies run at once on the cpu
  LOOM_ASSIGN_OR_RETURN(std::string source, emit_cpp(ir::without_async_copies(module, storage)));
  LOOM_ASSIGN_OR_RETURN(std::string so, compile_shared_object(source));
  return CpuModule::load(so);
}

namespace {
Status check_launch(Dim3 grid, Dim3 block, uint64_t* blocks) {
  *blocks = uint64_t{grid[0]} * grid[1] * grid[2];
  uint64_t block_threads = uint64_t{block[0]} * block[1] * block[2];
  if (*blocks == 0 || block_threads == 0)
    return invalid_argument("empty launch: grid {}x{}x{}, block {}x{}x{}", grid[0], grid[1], grid[2], block[0], block[1],
                            block[2]);
  if (block_threads > kMaxBlockThreads)
    return invalid_argument("block of {} threads exceeds the limit of {}", block_threads, kMaxBlockThreads);
  return Status();
}

LaunchDims dims_for(Dim3 grid, Dim3 block, uint64_t begin, uint64_t end) {
  return LaunchDims{{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, begin, end};
}
}  // namespace

Status launch_cpu(CpuKernelFn fn, void* const* args, Dim3 grid, Dim3 block, ThreadPool& pool) {
  uint64_t blocks = 0;
  LOOM_RETURN_IF_ERROR(check_launch(grid, block, &blocks));
  // One pointer captured, so the task fits std::function's inline buffer: no allocation per launch.
  struct Job {
    CpuKernelFn fn;
    void* const* args;
    Dim3 grid, block;
  } job{fn, args, grid, block};
  const Job* j = &job;
  pool.parallel_for(static_cast<int64_t>(blocks), [j](int64_t begin, int64_t end, int) {
    LaunchDims d = dims_for(j->grid, j->block, static_cast<uint64_t>(begin), static_cast<uint64_t>(end));
    j->fn(j->args, &d);
  });
  return Status();
}

namespace {

// The pools of the thread-count overload: one per count, made on first use and never destroyed
// (no exit-time join, and a launch from a static destructor still finds its pool), so a launch
// hands its blocks to standing workers instead of starting OS threads. A pool takes one caller
// at a time (ThreadPool's contract): launches with one count take turns on `mu`.
struct SharedPool {
  explicit SharedPool(int n) : pool(n) {}
  std::mutex mu;
  ThreadPool pool;
};

SharedPool& shared_pool(unsigned threads) {
  static std::mutex mu;
  static std::map<unsigned, std::unique_ptr<SharedPool>>* pools = new std::map<unsigned, std::unique_ptr<SharedPool>>();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<SharedPool>& p = (*pools)[threads];
  if (!p) p = std::make_unique<SharedPool>(static_cast<int>(threads));
  return *p;
}

}  // namespace

Status launch_cpu(CpuKernelFn fn, void* const* args, Dim3 grid, Dim3 block, unsigned threads) {
  uint64_t blocks = 0;
  LOOM_RETURN_IF_ERROR(check_launch(grid, block, &blocks));
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  if (threads == 1 || blocks == 1) {
    LaunchDims d = dims_for(grid, block, 0, blocks);
    fn(args, &d);
    return Status();
  }
  SharedPool& sp = shared_pool(threads);
  std::lock_guard<std::mutex> lock(sp.mu);
  return launch_cpu(fn, args, grid, block, sp.pool);
}

}  // namespace loom::codegen
