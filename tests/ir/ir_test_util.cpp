// Test helpers: golden paths and the guarded CPU launcher.
#include "ir_test_util.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "loom/base/thread_pool.h"
#include "loom/ir/parser.h"

namespace loom::test {

std::string golden_dir() {
  // The build's source tree, else the working directory's (binaries carried to another machine
  // run from a copy of the repository root), unless $LOOM_IR_GOLDEN_DIR says otherwise.
  if (const char* d = std::getenv("LOOM_IR_GOLDEN_DIR"); d && *d) return d;
  std::string built = std::string(LOOM_SOURCE_DIR) + "/tests/ir/golden";
  if (std::filesystem::exists(built)) return built;
  return "tests/ir/golden";
}

std::string golden_path(const std::string& name, const std::string& ext) { return golden_dir() + "/" + name + "." + ext; }

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(golden_dir()))
    if (e.path().extension() == ".loom") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<ir::Module> load_golden(const std::string& name) { return ir::parse_file(golden_path(name, "loom")); }

uint32_t test_seed() {
  if (const char* s = std::getenv("LOOM_TEST_SEED"); s && *s) return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
  return std::random_device{}();
}

namespace {
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
}  // namespace

namespace {
std::string run_on_cpu_with(const codegen::CpuModule& module, const std::string& name, const GoldenRun& run,
                            const std::function<Status(codegen::CpuKernelFn, void* const*)>& launch);
}  // namespace

std::string run_on_cpu(const codegen::CpuModule& module, const std::string& name, const GoldenRun& run,
                       unsigned threads) {
  return run_on_cpu_with(module, name, run, [&](codegen::CpuKernelFn fn, void* const* args) {
    return codegen::launch_cpu(fn, args, run.grid, run.block, threads);
  });
}

std::string run_on_cpu(const codegen::CpuModule& module, const std::string& name, const GoldenRun& run,
                       ThreadPool& pool) {
  return run_on_cpu_with(module, name, run, [&](codegen::CpuKernelFn fn, void* const* args) {
    return codegen::launch_cpu(fn, args, run.grid, run.block, pool);
  });
}

namespace {
std::string run_on_cpu_with(const codegen::CpuModule& module, const std::string& name, const GoldenRun& run,
                            const std::function<Status(codegen::CpuKernelFn, void* const*)>& launch) {
  auto fn = module.kernel(name);
  if (!fn.ok()) return fn.status().to_string();
  std::vector<std::unique_ptr<uint8_t, AlignedFree>> mem;
  std::vector<void*> pointers(run.buffers.size());
  for (size_t i = 0; i < run.buffers.size(); ++i) {
    size_t size = run.buffers[i].size();
    size_t total = (size + 2 * kGuard + 63) / 64 * 64;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, total));
    mem.emplace_back(p);
    std::memset(p, kGuardByte, total);
    if (size) std::memcpy(p + kGuard, run.buffers[i].data(), size);
    pointers[i] = p + kGuard;
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
  Status s = launch(*fn, args.data());
  if (!s.ok()) return s.to_string();
  std::vector<std::vector<uint8_t>> after(run.buffers.size());
  for (size_t i = 0; i < run.buffers.size(); ++i) {
    const uint8_t* p = mem[i].get();
    size_t size = run.buffers[i].size();
    size_t total = (size + 2 * kGuard + 63) / 64 * 64;
    for (size_t b = 0; b < total; ++b) {
      bool guard = b < kGuard || b >= kGuard + size;
      if (guard && p[b] != kGuardByte)
        return fmt::format("buffer {}: guard byte at offset {} overwritten (out-of-bounds write)", i,
                           static_cast<long>(b) - static_cast<long>(kGuard));
    }
    after[i].assign(p + kGuard, p + kGuard + size);
  }
  return run.check(after);
}
}  // namespace

}  // namespace loom::test
