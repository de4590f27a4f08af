// The PTX goldens on a real GPU: each golden kernel's PTX (sm_80, and sm_90 on Hopper) is loaded
// through HRX's cuda driver (libcuda.so.1 via dlopen, no toolkit needed), run on fresh random
// inputs with guard bytes around every buffer, and checked against the same references as the CPU
// run. Skipped, with the reason, on machines without a CUDA driver or GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "ir_test_util.h"
#include "loom/codegen/target.h"
#include "loom/hrx/runtime.h"
#include "loom/ir/passes/passes.h"

namespace loom::test {
namespace {

constexpr size_t kGuard = 256;
constexpr uint8_t kGuardByte = 0x5A;

// Loads `ptx`, runs `run` with kernel `name`; "" on success, else what went wrong.
std::string run_on_gpu(const hrx::Device& dev, const std::string& ptx, const std::string& name, const GoldenRun& run) {
  auto mod = hrx::Module::load_ptx(dev, ptx);
  if (!mod.ok()) return mod.status().to_string();
  auto fn = mod->kernel(name);
  if (!fn.ok()) return fn.status().to_string();
  auto stream = hrx::Stream::create(dev);
  if (!stream.ok()) return stream.status().to_string();

  std::vector<hrx::Buffer> mem(run.buffers.size());
  std::vector<uint64_t> pointers(run.buffers.size());
  for (size_t i = 0; i < run.buffers.size(); ++i) {
    size_t size = run.buffers[i].size(), total = size + 2 * kGuard;
    auto b = hrx::Buffer::alloc(dev, total);
    if (!b.ok()) return b.status().to_string();
    mem[i] = std::move(*b);
    std::vector<uint8_t> host(total, kGuardByte);
    std::memcpy(host.data() + kGuard, run.buffers[i].data(), size);
    if (Status s = stream->copy_h2d(mem[i], 0, host.data(), total); !s.ok()) return s.to_string();
    if (Status s = stream->synchronize(); !s.ok()) return s.to_string();
    pointers[i] = mem[i].address() + kGuard;
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
  Status launched = stream->launch(*fn, {run.grid[0], run.grid[1], run.grid[2]}, {run.block[0], run.block[1], run.block[2]},
                                   args.data(), static_cast<uint32_t>(args.size()), nullptr);
  if (launched.ok()) launched = stream->synchronize();
  if (!launched.ok()) return "launch: " + launched.to_string();
  std::vector<std::vector<uint8_t>> after(run.buffers.size());
  for (size_t i = 0; i < run.buffers.size(); ++i) {
    size_t size = run.buffers[i].size(), total = size + 2 * kGuard;
    std::vector<uint8_t> host(total);
    if (Status s = stream->copy_d2h(host.data(), mem[i], 0, total); !s.ok()) return s.to_string();
    if (Status s = stream->synchronize(); !s.ok()) return s.to_string();
    for (size_t b = 0; b < total; ++b)
      if ((b < kGuard || b >= kGuard + size) && host[b] != kGuardByte)
        return fmt::format("buffer {}: guard byte at offset {} overwritten", i, static_cast<long>(b) - static_cast<long>(kGuard));
    after[i].assign(host.begin() + kGuard, host.begin() + kGuard + size);
  }
  return run.check(after);
}

class PtxOnGpu : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(PtxOnGpu, MatchesReferenceOnFreshInputs) {
  auto dev = hrx::Device::open("cuda:0");
  if (!dev.ok()) GTEST_SKIP() << "PTX goldens not run on a GPU: " << dev.status().to_string();
  const GoldenCase& c = GetParam();
  if (c.needs_amx) GTEST_SKIP() << c.name << " is a cpp-only kernel (Intel AMX tiles)";
  for (bool optimized : {true, false}) {
    auto m = load_golden(c.name);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    if (optimized) ir::optimize(*m);
    for (const char* arch : {"sm_80", "sm_90"}) {
      if (std::string(arch) == "sm_90" && dev->props().cc_major < 9) continue;
      SCOPED_TRACE(fmt::format("{} {}", arch, optimized ? "after passes" : "without passes"));
      auto ptx = codegen::ptx_target().emit(*m, arch);
      if (!ptx.ok() && ptx.status().code() == StatusCode::kUnimplemented && std::string(arch) == "sm_80") continue;  // wgmma: sm_90a only
      ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
      for (int trial = 0; trial < 2; ++trial) {
        uint32_t seed = test_seed();
        SCOPED_TRACE(fmt::format("seed {} (LOOM_TEST_SEED to replay)", seed));
        std::mt19937 rng(seed);
        EXPECT_EQ(run_on_gpu(*dev, *ptx, c.name, c.make(rng)), "");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PtxOnGpu, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::test
