// rope_kv on the cpp target through codegen's compile_cpu_module + launch_cpu against its
// reference, with fresh random inputs, guard bytes, outputs pre-filled with noise, inputs checked
// unchanged, and F16 outputs compared by value under the op's tolerance. The shared harness
// (test_ops.cpp) runs every op, rope_kv included, but compares F16 outputs bytewise, which
// rope_kv's reference cannot promise (docs/kernels.md); the other non-matrix ops ran here too
// until the harness took them over.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "loom/codegen/cpp/host_compiler.h"
#include "loom/gguf/quant.h"
#include "loom/kernels/elementwise.h"

namespace loom::kernels {
namespace {

constexpr size_t kGuard = 64;
constexpr uint8_t kCanary = 0xA7;

// A buffer with kGuard canary bytes on each side; data() is 64-byte aligned.
struct GuardedBuffer {
  std::vector<uint8_t> mem;
  size_t offset = 0, size = 0;
  explicit GuardedBuffer(size_t bytes) : size(bytes) {
    mem.assign(bytes + 3 * kGuard, kCanary);
    const auto addr = reinterpret_cast<uintptr_t>(mem.data()) + kGuard;
    offset = kGuard + ((64 - addr % 64) % 64);
  }
  uint8_t* data() { return mem.data() + offset; }
  bool guards_intact() const {
    for (size_t i = 0; i < mem.size(); ++i)
      if ((i < offset || i >= offset + size) && mem[i] != kCanary) return false;
    return true;
  }
};

double element(const std::vector<uint8_t>& bytes, ir::Scalar s, size_t i) {
  switch (s) {
    case ir::Scalar::kF32: {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    case ir::Scalar::kF16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      return llm::fp16_to_fp32(h);
    }
    case ir::Scalar::kI32: {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      return v;
    }
    default: return bytes[i];
  }
}

// Runs one op/shape/schedule on the cpu and compares; returns a failure description or "".
std::string run_case(const OpSpec& op, const Shape& shape, const Schedule& sch, uint64_t seed) {
  auto gen = op.generate(shape, sch, ir::TargetKind::kCpp);
  if (!gen.ok()) return "generate: " + gen.status().to_string();
  auto mod = codegen::compile_cpu_module(gen->module);
  if (!mod.ok()) return "compile: " + mod.status().to_string();

  const std::vector<ArgSpec> specs = op.args(shape);
  std::vector<HostArg> host(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) host[i].bytes.assign(static_cast<size_t>(specs[i].bytes), 0);
  std::mt19937_64 rng(seed);
  // Outputs start as noise too: a kernel that skips an element is caught.
  for (size_t i = 0; i < specs.size(); ++i)
    for (auto& byte : host[i].bytes) byte = static_cast<uint8_t>(rng() & 0x3F);
  op.fill_inputs(shape, rng, host);
  std::vector<GuardedBuffer> dev;
  for (size_t i = 0; i < specs.size(); ++i) {
    dev.emplace_back(host[i].bytes.size());
    if (!host[i].bytes.empty()) std::memcpy(dev.back().data(), host[i].bytes.data(), host[i].bytes.size());
  }
  std::vector<HostArg> want = host;
  Status rs = op.reference(shape, want);
  if (!rs.ok()) return "reference: " + rs.to_string();

  for (const KernelLaunch& l : gen->launches) {
    auto fn = mod->kernel(l.kernel);
    if (!fn.ok()) return "kernel: " + fn.status().to_string();
    std::vector<void*> ptrs;
    for (int a : l.args) ptrs.push_back(dev[static_cast<size_t>(a)].data());
    std::vector<int64_t> scalars = l.scalars;
    std::vector<void*> params;
    for (void*& p : ptrs) params.push_back(&p);
    for (int64_t& v : scalars) params.push_back(&v);  // (none of these ops has scalars)
    Status ls = codegen::launch_cpu(*fn, params.data(), l.grid, l.block, 2);
    if (!ls.ok()) return "launch: " + ls.to_string();
  }

  const Tolerance tol = op.tolerance(shape);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!dev[i].guards_intact()) return fmt::format("guard bytes of '{}' overwritten", specs[i].name);
    if (specs[i].role == ArgRole::kScratch) continue;
    std::vector<uint8_t> got(dev[i].data(), dev[i].data() + dev[i].size);
    const ir::Scalar s = specs[i].elem;
    const size_t n = got.size() / static_cast<size_t>((ir::scalar_bits(s) + 7) / 8);
    int bad = 0;
    std::string first;
    for (size_t e = 0; e < n; ++e) {
      const double g = element(got, s, e), w = element(want[i].bytes, s, e);
      const bool exact = tol.exact || specs[i].role == ArgRole::kInput;
      const double lim = exact ? 0.0 : tol.atol + tol.rtol * std::fabs(w);
      const bool same = g == w || (std::isnan(w) ? std::isnan(g) : std::fabs(g - w) <= lim);
      if (!same) {
        if (!bad) first = fmt::format("{}[{}]: got {} want {}", specs[i].name, e, g, w);
        ++bad;
      }
    }
    if (bad) return fmt::format("{} of {} elements of '{}' differ; first {}", bad, n, specs[i].name, first);
  }
  return "";
}

uint64_t fresh_seed() {
  if (const char* s = std::getenv("LOOM_OPS_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

std::string dims_text(const std::map<std::string, int64_t>& m) {
  std::string out;
  for (const auto& [k, v] : m) out += fmt::format("{}{}={}", out.empty() ? "" : ",", k, v);
  return out;
}

class EltOpCpu : public testing::TestWithParam<const OpSpec*> {};

TEST_P(EltOpCpu, EveryShapeDefaultAndRandomSchedules) {
  const OpSpec& op = *GetParam();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 pick(seed);
  for (const Shape& shape : op.test_shapes()) {
    ASSERT_TRUE(op.validate(shape).ok()) << op.validate(shape).to_string();
    const auto space = op.schedule_space(shape, ir::TargetKind::kCpp);
    std::vector<Schedule> schedules = {op.default_schedule(shape, ir::TargetKind::kCpp)};
    for (int r = 0; r < 3; ++r) {
      Schedule s;
      for (const Knob& k : space) s[k.name] = k.choices[pick() % k.choices.size()];
      schedules.push_back(s);
    }
    for (const Schedule& sch : schedules) {
      const uint64_t case_seed = pick();
      EXPECT_EQ(run_case(op, shape, sch, case_seed), "")
          << op.name() << " shape " << dims_text(shape.dims) << " schedule " << dims_text(sch)
          << " (LOOM_OPS_SEED=" << seed << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, EltOpCpu, testing::Values(&rope_kv_op()),
                         [](const testing::TestParamInfo<const OpSpec*>& i) { return std::string(i.param->name()); });

// geglu's GELU is a table over fp16 inputs: the vector kernel (a fast tanh, the C library's where
// an entry could round either way) gives the reference's entry for every one of the 65536 fp16
// values of g, as 8- and 4-lane vectors and as scalars, bit for bit.
TEST(EltOpsCpu, GegluMatchesTheReferenceOnEveryF16Input) {
  const OpSpec& op = geglu_op();
  const int64_t n = 65536;
  Shape shape;
  shape.dims["n"] = n;
  ASSERT_TRUE(op.validate(shape).ok());
  std::mt19937_64 rng(fresh_seed());
  for (int64_t vec : {8, 4, 1}) {
    SCOPED_TRACE(fmt::format("vec {}", vec));
    Schedule sch = op.default_schedule(shape, ir::TargetKind::kCpp);
    sch["vec"] = vec;
    auto gen = op.generate(shape, sch, ir::TargetKind::kCpp);
    ASSERT_TRUE(gen.ok()) << gen.status().to_string();
    auto mod = codegen::compile_cpu_module(gen->module);
    ASSERT_TRUE(mod.ok()) << mod.status().to_string();
    const std::vector<ArgSpec> specs = op.args(shape);
    ASSERT_EQ(specs.size(), 3u);  // g, u, y
    std::vector<HostArg> host(3);
    for (auto& h : host) h.bytes.assign(static_cast<size_t>(n) * 4, 0);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float g = llm::fp16_to_fp32(static_cast<uint16_t>(i));
      const float uv = u(rng);
      std::memcpy(host[0].bytes.data() + 4 * i, &g, 4);
      std::memcpy(host[1].bytes.data() + 4 * i, &uv, 4);
    }
    std::vector<HostArg> want = host;
    ASSERT_TRUE(op.reference(shape, want).ok());
    for (const KernelLaunch& l : gen->launches) {
      auto fn = mod->kernel(l.kernel);
      ASSERT_TRUE(fn.ok());
      std::vector<void*> ptrs;
      for (int a : l.args) ptrs.push_back(host[static_cast<size_t>(a)].bytes.data());
      std::vector<void*> params;
      for (void*& p : ptrs) params.push_back(&p);
      ASSERT_TRUE(codegen::launch_cpu(*fn, params.data(), l.grid, l.block, 2).ok());
    }
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t got, exp;
      std::memcpy(&got, host[2].bytes.data() + 4 * i, 4);
      std::memcpy(&exp, want[2].bytes.data() + 4 * i, 4);
      if (got != exp && bad++ < 5)
        ADD_FAILURE() << fmt::format("g = fp16 {:#06x}: got {:#010x} want {:#010x}", i, got, exp);
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(EltOpsCpu, OutsideTheScheduleSpaceIsAnError) {
  const OpSpec& op = rms_norm_op();
  Shape shape = op.test_shapes().front();
  Schedule s = op.default_schedule(shape, ir::TargetKind::kCpp);
  s["vec"] = 3;
  EXPECT_FALSE(op.generate(shape, s, ir::TargetKind::kCpp).ok());
  shape.dims.erase("n");
  EXPECT_FALSE(op.validate(shape).ok());
}

}  // namespace
}  // namespace loom::kernels
