// Differential op tests: every op x every test shape x every device x {default schedule, three
// random schedules from the op's space}, against the op's host reference, with fresh random
// inputs (the seed is printed on failure) and guard bytes around every buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <random>
#include <set>

#include <filesystem>
#include <fstream>

#include "loom/codegen/cpp/cpp_emitter.h"
#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"
#include "loom/gguf/quant.h"
#include "loom/ir/builder.h"
#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"

namespace loom::kernels {
namespace {

struct Case {
  const OpSpec* op;
  Shape shape;
  std::string device;
};

// gtest prints a parameter in test listings and CI logs: the op, device and shape, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.op->name() << " on " << c.device << " {" << c.shape.key() << "}"; }

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const OpSpec* op : all_ops())
    for (const Shape& s : op->test_shapes())
      for (const char* dev : {"cpu", "cuda"}) out.push_back({op, s, dev});
  return out;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string n = std::string(info.param.op->name()) + "_" + info.param.device + "_" + info.param.shape.key();
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n + "_" + std::to_string(info.index);
}

uint64_t fresh_seed() {
  if (const char* s = std::getenv("LOOM_OPS_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
}

class OpTest : public testing::TestWithParam<Case> {};

TEST_P(OpTest, MatchesReference) {
  const Case& c = GetParam();
  auto dev = OpDevice::open(c.device, 2);
  if (!dev.ok()) GTEST_SKIP() << "device " << c.device << " not available: " << dev.status().to_string();
  ASSERT_TRUE(c.op->validate(c.shape).ok()) << c.op->validate(c.shape).to_string();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const ir::TargetKind target = (*dev)->target();
  std::vector<Schedule> schedules = {c.op->default_schedule(c.shape, target)};
  auto space = c.op->schedule_space(c.shape, target);
  // GPU-first ops (matvec_gpu, matmul_mma) run on the cpu only to check their numerics, and
  // their unrolled kernels are slow to compile there: one random schedule instead of three, and
  // one whose C++ stays within 1 MiB (a few draws unroll a row's every block for every lane into
  // 2-3 MB, which the host compiler takes minutes over; the first of 16 draws that fits, else
  // the smallest).
  const std::string_view name = c.op->name();
  const bool gpu_first = name == "matvec_gpu" || name == "matmul_mma";
  if (gpu_first && target == ir::TargetKind::kCpp) {
    Schedule best;
    size_t best_bytes = SIZE_MAX;
    for (int draw = 0; draw < 16 && best_bytes > (size_t{1} << 20); ++draw) {
      Schedule sc = random_schedule(space, rng);
      auto g = c.op->generate(c.shape, sc, target);
      if (!g.ok()) continue;
      auto text = codegen::emit_cpp(g->module);
      if (text.ok() && text->size() < best_bytes) best = sc, best_bytes = text->size();
    }
    ASSERT_NE(best_bytes, SIZE_MAX) << "no random schedule generates";
    schedules.push_back(best);
  } else {
    for (int i = 0; i < 3; ++i) schedules.push_back(random_schedule(space, rng));
  }
  for (size_t i = 0; i < schedules.size(); ++i) {
    CheckResult r = check_op(*c.op, c.shape, schedules[i], **dev, seed + i);
    EXPECT_TRUE(r.passed) << r.message << "\n(reproduce with LOOM_OPS_SEED=" << seed << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTest, testing::ValuesIn(all_cases()), case_name);

// On the cpu the matrix kernels walk each row's blocks in order with the reference's lane
// structure, so they must agree with llm::ref bit for bit (token-exactness with llama.cpp
// depends on it), whatever the schedule.
TEST(OpNumerics, CpuMatrixKernelsAreBitExact) {
  auto dev = OpDevice::open("cpu", 2);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (const char* name : {"matvec", "matmul"}) {
    const OpSpec* op = find_op(name);
    ASSERT_NE(op, nullptr);
    for (const Shape& s : op->test_shapes()) {
      Schedule sc = random_schedule(op->schedule_space(s, ir::TargetKind::kCpp), rng);
      CheckResult r = check_op(*op, s, sc, **dev, seed);
      EXPECT_TRUE(r.passed) << r.message;
      EXPECT_EQ(r.max_abs_err, 0.0) << r.message;
    }
  }
}

// The harness itself must catch what it claims to: a kernel that writes past its output, and
// one that computes the wrong value.
class BrokenOp : public OpSpec {
 public:
  explicit BrokenOp(int mode) : mode_(mode) {}
  std::string_view name() const override { return "broken"; }
  std::string_view description() const override { return "test double"; }
  Status validate(const Shape&) const override { return Status(); }
  std::vector<ArgSpec> args(const Shape&) const override {
    return {{"x", ArgKind::kBuffer, ArgRole::kInput, 64 * 4, ir::Scalar::kF32},
            {"y", ArgKind::kBuffer, ArgRole::kOutput, 64 * 4, ir::Scalar::kF32}};
  }
  Cost cost(const Shape&) const override { return {}; }
  Tolerance tolerance(const Shape&) const override { return {1e-6, 0, false}; }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind) const override { return {}; }
  Schedule default_schedule(const Shape&, ir::TargetKind) const override { return {}; }
  Result<Generated> generate(const Shape&, const Schedule&, ir::TargetKind) const override {
    Generated g;
    ir::Kernel* k = g.module.add_kernel("copy");
    ir::Builder b(*k);
    ir::Value* x = b.param(ir::Type::pointer(ir::AddrSpace::kGlobal, ir::Scalar::kF32), "x");
    ir::Value* y = b.param(ir::Type::pointer(ir::AddrSpace::kGlobal, ir::Scalar::kF32), "y");
    ir::Value* i = b.thread_id(ir::Mode::kX);
    ir::Value* v = b.load(x, i);
    if (mode_ == 1) v = b.add(v, b.f32(0.5));
    b.store(y, mode_ == 0 ? b.add(i, b.i32(1)) : i, v);  // mode 0: one element too far
    g.launches.push_back({"copy", {1, 1, 1}, {64, 1, 1}, {0, 1}, {}});
    return g;
  }
  void fill_inputs(const Shape&, std::mt19937_64& rng, std::span<HostArg> a) const override {
    std::uniform_real_distribution<float> d(-1, 1);
    a[0].bytes.resize(256);
    for (int i = 0; i < 64; ++i) {
      float f = d(rng);
      std::memcpy(a[0].bytes.data() + 4 * i, &f, 4);
    }
  }
  Status reference(const Shape&, std::span<HostArg> a) const override {
    a[1].bytes = a[0].bytes;
    return Status();
  }
  std::vector<Shape> test_shapes() const override { return {Shape{}}; }

 private:
  int mode_;
};

TEST(OpHarness, CatchesOutOfBoundsWriteAndWrongValues) {
  auto dev = OpDevice::open("cpu", 1);
  ASSERT_TRUE(dev.ok());
  CheckResult oob = check_op(BrokenOp(0), Shape{}, {}, **dev, 7);
  EXPECT_FALSE(oob.passed);
  EXPECT_NE(oob.message.find("guard byte"), std::string::npos) << oob.message;
  CheckResult wrong = check_op(BrokenOp(1), Shape{}, {}, **dev, 7);
  EXPECT_FALSE(wrong.passed);
  EXPECT_NE(wrong.message.find("reference"), std::string::npos) << wrong.message;
  CheckResult good = check_op(BrokenOp(2), Shape{}, {}, **dev, 7);
  EXPECT_TRUE(good.passed) << good.message;
}

TEST(OpRegistry, NamesAreUniqueAndFindable) {
  std::set<std::string_view> names;
  for (const OpSpec* op : all_ops()) {
    EXPECT_TRUE(names.insert(op->name()).second) << op->name();
    EXPECT_EQ(find_op(op->name()), op);
    for (const Shape& s : op->test_shapes()) {
      EXPECT_TRUE(op->validate(s).ok()) << op->name() << " " << s.key();
      for (ir::TargetKind t : {ir::TargetKind::kCpp, ir::TargetKind::kPtx}) {
        Schedule d = op->default_schedule(s, t);
        auto g = op->generate(s, d, t);
        EXPECT_TRUE(g.ok()) << op->name() << " " << s.key() << ": " << g.status().to_string();
      }
    }
  }
  EXPECT_EQ(find_op("no_such_op"), nullptr);
}

// Every op's PTX (default schedule and random ones, every test shape) must assemble with ptxas
// for sm_80 and sm_90, so GPU runs fail on numbers, not on codegen.
TEST(OpPtx, AssemblesWithPtxas) {
  const char* env = std::getenv("LOOM_PTXAS");
  auto ptxas = codegen::find_tool({env ? env : "", "ptxas", "/usr/local/cuda/bin/ptxas"});
  if (!ptxas.ok()) GTEST_SKIP() << "ptxas not found (install the CUDA toolkit): " << ptxas.status().to_string();
  std::mt19937_64 rng(11);
  const std::string dir = testing::TempDir();
  int n = 0;
  for (const OpSpec* op : all_ops()) {
    for (const Shape& s : op->test_shapes()) {
      std::vector<Schedule> scheds = {op->default_schedule(s, ir::TargetKind::kPtx),
                                      random_schedule(op->schedule_space(s, ir::TargetKind::kPtx), rng)};
      for (const Schedule& sc : scheds) {
        auto g = op->generate(s, sc, ir::TargetKind::kPtx);
        ASSERT_TRUE(g.ok()) << op->name() << " " << s.key() << ": " << g.status().to_string();
        for (const char* arch : {"sm_90"}) {
          auto text = codegen::ptx_target().emit(g->module, arch);
          ASSERT_TRUE(text.ok()) << op->name() << " " << s.key() << ": " << text.status().to_string();
          std::string file = dir + "/op_" + std::to_string(n++) + ".ptx";
          std::ofstream(file) << *text;
          // A module with sm_90a features (wgmma) says so in its .target line.
          const std::string ptx_arch = text->find(".target sm_90a") != std::string::npos ? "sm_90a" : arch;
          auto r = codegen::run_tool({*ptxas, "-arch=" + ptx_arch, file, "-o", "/dev/null"});
          ASSERT_TRUE(r.ok());
          EXPECT_EQ(r->exit_code, 0) << op->name() << " " << s.key() << " " << schedule_key(sc) << ":\n" << r->output;
          std::filesystem::remove(file);
        }
      }
    }
  }
}

// matmul_mma's weights-in-registers kernel (wgmma=1, wg_rs=1) at every test shape it takes (Q4_0
// and Q4_K planar, f16 activations), every stage count and k step that fits: it is generated (not
// the shared-memory fallback: its PTX has wgmma's register form and cp.async) and assembles for sm_90a.
TEST(OpPtx, MatmulMmaWeightsInRegistersAssemble) {
  const char* env = std::getenv("LOOM_PTXAS");
  auto ptxas = codegen::find_tool({env ? env : "", "ptxas", "/usr/local/cuda/bin/ptxas"});
  if (!ptxas.ok()) GTEST_SKIP() << "ptxas not found (install the CUDA toolkit): " << ptxas.status().to_string();
  const OpSpec* op = find_op("matmul_mma");
  ASSERT_NE(op, nullptr);
  const std::string dir = testing::TempDir();
  int n = 0;
  for (const Shape& s : op->test_shapes()) {
    const int64_t wt = s.at("wtype");
    const bool q4k = wt == static_cast<int64_t>(loom::llm::GgmlType::Q4_K);
    if ((wt != static_cast<int64_t>(loom::llm::GgmlType::Q4_0) && !q4k) || !s.dims.count("planar") || s.at("planar") != 1 ||
        !s.dims.count("xtype") || s.at("xtype") != 1 || s.at("n_in") % 64)
      continue;
    // (warpgroups, stages, k_tile): those whose buffers fit 48 KiB of static shared memory at
    // 128 x 128, and deeper ones in dynamic shared memory (Q4_K takes whole pairs of sub-blocks
    // per step: 64 values).
    struct Config {
      int64_t wg_m, stages, kt;
    };
    const std::vector<Config> configs =
        q4k ? std::vector<Config>{{2, 2, 64}, {2, 4, 64}, {4, 4, 64}}
            : std::vector<Config>{{2, 2, 64}, {2, 2, 32}, {2, 3, 32}, {2, 4, 32}, {2, 4, 64}, {4, 4, 64}, {4, 6, 64}};
    for (const auto& [wg_m, stages, kt] : configs) {
        Schedule sc = op->default_schedule(s, ir::TargetKind::kPtx);
        sc["wgmma"] = 1;
        sc["wg_rs"] = 1;
        sc["wg_m"] = wg_m;
        sc["stages"] = stages;
        sc["k_tile"] = kt;
        auto g = op->generate(s, sc, ir::TargetKind::kPtx);
        ASSERT_TRUE(g.ok()) << s.key() << ": " << g.status().to_string();
        auto text = codegen::ptx_target().emit(g->module, "sm_90");
        ASSERT_TRUE(text.ok()) << s.key() << ": " << text.status().to_string();
        SCOPED_TRACE(s.key() + " " + schedule_key(sc));
        EXPECT_NE(text->find("wgmma.mma_async.sync.aligned"), std::string::npos);
        EXPECT_NE(text->find("}, {%r"), std::string::npos) << "no register A operand";
        EXPECT_NE(text->find("cp.async.cg.shared.global"), std::string::npos);
        // Beyond 48 KiB the stages are dynamic shared memory, and the text says how much.
        const int64_t hdr = q4k ? 16 : std::max<int64_t>(4, kt / 16), bm = 64 * wg_m;
        const bool dynamic = stages * (sc.at("wg_n") * kt * 2 + bm * kt / 2 + bm * hdr) > 48 * 1024;
        EXPECT_EQ(text->find("// loom.dynamic_shared_bytes") != std::string::npos, dynamic);
        std::string file = dir + "/mma_rs_" + std::to_string(n++) + ".ptx";
        std::ofstream(file) << *text;
        auto r = codegen::run_tool({*ptxas, "-arch=sm_90a", file, "-o", "/dev/null"});
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(r->exit_code, 0) << r->output;
        std::filesystem::remove(file);
      }
  }
  EXPECT_GE(n, 20);
}

TEST(OpShape, KeyRoundTripAndErrors) {
  Shape s{{{"n_out", 1536}, {"n_in", 576}, {"wtype", 3}}};
  EXPECT_EQ(s.key(), "n_in=576,n_out=1536,wtype=3");
  auto p = Shape::parse(s.key());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->dims, s.dims);
  EXPECT_FALSE(Shape::parse("n_in").ok());
  EXPECT_FALSE(Shape::parse("n_in=x").ok());
  EXPECT_FALSE(Shape::parse("n_in=1,n_in=2").ok());
  EXPECT_FALSE(s.get("n_tokens").ok());
  EXPECT_EQ(schedule_key({{"threads", 128}, {"rows", 4}}), "rows=4,threads=128");
}

}  // namespace
}  // namespace loom::kernels
