// The IR passes: constant folding, CSE, DCE and unrolling on small kernels whose result is known
// by arithmetic, and the tanh/erf lowering's accuracy measured by running it on the CPU.
#include <gtest/gtest.h>

#include <cmath>

#include "ir_test_util.h"
#include "loom/codegen/tool_run.h"
#include "loom/ir/parser.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/verifier.h"

namespace loom::test {
namespace {

using namespace ir;

Module parse_ok(const std::string& text) {
  auto m = parse_module(text, "pass.loom");
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : Module();
}

int count_op(const Module& m, Op op) {
  int n = 0;
  walk(m.kernels.at(0)->body, [&](const Inst* i) { n += i->op == op; });
  return n;
}

// Body of a kernel storing one value `%r` of type T to out[0].
std::string store_kernel(const std::string& type, const std::string& body) {
  return "kernel @k(%out: ptr<global, " + type + ">) {\n  %zero = const 0 : i32\n" + body +
         "  store %out[%zero], %r\n}\n";
}

// Folds, then returns the literal stored to out[0] as printed.
std::string folded_store(const std::string& type, const std::string& body) {
  Module m = parse_ok(store_kernel(type, body));
  if (m.kernels.empty()) return "<parse error>";
  optimize(*m.kernels[0]);
  EXPECT_TRUE(verify(m).ok()) << verify(m).to_string();
  const Inst* store = m.kernels[0]->body.insts.back();
  const Value* v = store->operands[2];
  if (!v->def || v->def->op != Op::kConst) return "<not folded>";
  return print_literal(v->def->lit, v->type);
}

TEST(Fold, IntegerArithmeticWrapsToTheType) {
  EXPECT_EQ(folded_store("i32", "  %a = const 2 : i32\n  %b = const 3 : i32\n  %r = mul %a, %b\n"), "6");
  EXPECT_EQ(folded_store("i8", "  %a = const 100 : i8\n  %r = add %a, %a\n"), "-56");
  EXPECT_EQ(folded_store("u8", "  %a = const 200 : u8\n  %r = add %a, %a\n"), "144");
  EXPECT_EQ(folded_store("i32", "  %a = const -7 : i32\n  %b = const 2 : i32\n  %r = div %a, %b\n"), "-3");
  EXPECT_EQ(folded_store("u32", "  %a = const -1 : u32\n  %b = const 28 : u32\n  %r = shr %a, %b\n"), "15");
  EXPECT_EQ(folded_store("i32", "  %a = const -1 : i32\n  %b = const 28 : i32\n  %r = shr %a, %b\n"), "-1");
  EXPECT_EQ(folded_store("u64", "  %a = const 0 : u64\n  %b = const 1 : u64\n  %r = sub %a, %b\n"),
            "18446744073709551615");
}

TEST(Fold, UndefinedResultsAreLeftAlone) {
  EXPECT_EQ(folded_store("i32", "  %a = const 1 : i32\n  %b = const 0 : i32\n  %r = div %a, %b\n"), "<not folded>");
  EXPECT_EQ(folded_store("i32", "  %a = const 1 : i32\n  %b = const 32 : i32\n  %r = shl %a, %b\n"), "<not folded>");
  EXPECT_EQ(folded_store("i32", "  %a = const 3e9 : f32\n  %r = convert %a : i32\n"), "<not folded>");
}

TEST(Fold, FloatsRoundToTheirType) {
  // 0.1 + 0.2 in f32 is the f32 nearest to the exact sum of the two f32 constants.
  float expect = 0.1f + 0.2f;
  EXPECT_EQ(folded_store("f32", "  %a = const 0.1 : f32\n  %b = const 0.2 : f32\n  %r = add %a, %b\n"),
            print_literal(make_literal(Scalar::kF32, expect, 0), Type::scalar(Scalar::kF32)));
  EXPECT_EQ(folded_store("f16", "  %a = const 2048 : f16\n  %b = const 1 : f16\n  %r = add %a, %b\n"), "2048.0");
  EXPECT_EQ(folded_store("i32", "  %a = const -2.7 : f32\n  %r = convert %a : i32\n"), "-2");
}

TEST(Fold, ComparesUseSignedness) {
  EXPECT_EQ(folded_store("i32", "  %a = const -1 : u32\n  %b = const 1 : u32\n  %c = cmp.gt %a, %b\n"
                                "  %one = const 1 : i32\n  %r = select %c, %one, %zero\n"), "1");
  EXPECT_EQ(folded_store("i32", "  %a = const -1 : i32\n  %b = const 1 : i32\n  %c = cmp.gt %a, %b\n"
                                "  %one = const 1 : i32\n  %r = select %c, %one, %zero\n"), "0");
  EXPECT_EQ(folded_store("i32", "  %a = const nan : f32\n  %c = cmp.ne %a, %a\n"
                                "  %one = const 1 : i32\n  %r = select %c, %one, %zero\n"), "1");
}

TEST(Fold, ConstantIfIsInlinedAndIdentitiesVanish) {
  Module m = parse_ok(store_kernel("i32", R"(  %n = thread_id.x
  %t = const true : i1
  %one = const 1 : i32
  %v = if %t : i32 {
    %x = mul %n, %one
    yield %x
  } else {
    yield %zero
  }
  %r = add %v, %zero
)"));
  ASSERT_FALSE(m.kernels.empty());
  optimize(*m.kernels[0]);
  ASSERT_TRUE(verify(m).ok()) << verify(m).to_string();
  EXPECT_EQ(count_op(m, Op::kIf), 0) << print(m);
  EXPECT_EQ(count_op(m, Op::kMul), 0) << print(m);
  EXPECT_EQ(count_op(m, Op::kAdd), 0) << print(m);
  // What is stored is thread_id.x itself.
  EXPECT_EQ(m.kernels[0]->body.insts.back()->operands[2]->def->op, Op::kThreadId) << print(m);
}

TEST(Cse, MergesEqualPureOpsButNotLoadsOrSiblingRegions) {
  Module m = parse_ok(R"(kernel @k(%p: ptr<global, i32>, %n: i32) {
  %a = add %n, %n
  %b = add %n, %n
  %c = mul %a, %n
  %d = mul %n, %b
  %l1 = load %p[%n]
  %l2 = load %p[%n]
  %s = add %c, %d
  %s2 = add %s, %l1
  %s3 = add %s2, %l2
  %cond = cmp.lt %n, %s3
  if %cond {
    %x = sub %n, %s3
    store %p[%n], %x
  } else {
    %y = sub %n, %s3
    store %p[%s3], %y
  }
}
)");
  ASSERT_FALSE(m.kernels.empty());
  EXPECT_TRUE(eliminate_common_subexpressions(*m.kernels[0]));
  ASSERT_TRUE(verify(m).ok()) << verify(m).to_string();
  EXPECT_EQ(count_op(m, Op::kMul), 1) << print(m);    // commutative operands canonicalized
  EXPECT_EQ(count_op(m, Op::kLoad), 2) << print(m);   // memory may change between loads
  EXPECT_EQ(count_op(m, Op::kSub), 2) << print(m);    // then/else do not dominate each other
  EXPECT_FALSE(eliminate_common_subexpressions(*m.kernels[0]));  // fixed point
}

TEST(Dce, RemovesUnusedWorkButKeepsEffects) {
  Module m = parse_ok(R"(kernel @k(%p: ptr<global, i32>, %n: i32) {
  %unused = mul %n, %n
  %dead_load = load %p[%n]
  %old = atomic.add %p[%n], %n
  %z = const 0 : i32
  %one = const 1 : i32
  %s, %live = for %i = %z to %n step %one iter(%a = %z, %b = %z) {
    %a2 = add %a, %i
    %b2 = add %b, %i
    yield %a2, %b2
  }
  %w = for %j = %z to %n step %one iter(%c = %z) {
    %c2 = add %c, %j
    yield %c2
  }
  store %p[%z], %live
}
)");
  ASSERT_FALSE(m.kernels.empty());
  EXPECT_TRUE(eliminate_dead_code(*m.kernels[0]));
  ASSERT_TRUE(verify(m).ok()) << verify(m).to_string();
  EXPECT_EQ(count_op(m, Op::kMul), 0) << print(m);
  EXPECT_EQ(count_op(m, Op::kLoad), 0) << print(m);
  EXPECT_EQ(count_op(m, Op::kAtomic), 1) << print(m);  // side effect, result unused
  EXPECT_EQ(count_op(m, Op::kFor), 1) << print(m);     // the loop whose result nothing uses is gone
  const Inst* loop = nullptr;
  walk(m.kernels[0]->body, [&](const Inst* i) { if (i->op == Op::kFor) loop = i; });
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->results.size(), 1u) << print(m);  // the unused carried value was dropped
  EXPECT_EQ(count_op(m, Op::kStore), 1);
}

TEST(Unroll, ConstantTripLoopsFoldAway) {
  // sum of i*i for i in [0, 10) step 1 = 285; sum over [3, 20) step 4 of i = 3+7+11+15+19 = 55.
  Module m = parse_ok(store_kernel("i32", R"(  %ten = const 10 : i32
  %one = const 1 : i32
  %s = for %i = %zero to %ten step %one iter(%a = %zero) {
    %sq = mul %i, %i
    %a2 = add %a, %sq
    yield %a2
  }
  %three = const 3 : i32
  %twenty = const 20 : i32
  %four = const 4 : i32
  %t = for %j = %three to %twenty step %four iter(%b = %s) {
    %b2 = add %b, %j
    yield %b2
  }
  %r = sub %t, %s
)"));
  ASSERT_FALSE(m.kernels.empty());
  optimize(*m.kernels[0]);
  ASSERT_TRUE(verify(m).ok()) << verify(m).to_string();
  EXPECT_EQ(count_op(m, Op::kFor), 0) << print(m);
  const Value* stored = m.kernels[0]->body.insts.back()->operands[2];
  ASSERT_EQ(stored->def->op, Op::kConst) << print(m);
  EXPECT_EQ(stored->def->lit.i, 55);
}

TEST(Unroll, NestedLoopsWithCarriedValuesUnrollTogether) {
  // sum over i in [0, 3) of (sum over j in [0, 2) of i + j) = (0+1) + (1+2) + (2+3) = 9: the inner
  // loop's result is the outer body's yield, so unrolling the outer loop must use the inner
  // loop's unrolled values.
  Module m = parse_ok(store_kernel("i32", R"(  %three = const 3 : i32
  %two = const 2 : i32
  %one = const 1 : i32
  %r = for %i = %zero to %three step %one iter(%a = %zero) {
    %s = for %j = %zero to %two step %one iter(%b = %a) {
      %ij = add %i, %j
      %b2 = add %b, %ij
      yield %b2
    }
    yield %s
  }
)"));
  ASSERT_FALSE(m.kernels.empty());
  optimize(*m.kernels[0]);
  ASSERT_TRUE(verify(m).ok()) << verify(m).to_string() << print(m);
  EXPECT_EQ(count_op(m, Op::kFor), 0) << print(m);
  const Value* stored = m.kernels[0]->body.insts.back()->operands[2];
  ASSERT_EQ(stored->def->op, Op::kConst) << print(m);
  EXPECT_EQ(stored->def->lit.i, 9);
}

TEST(Unroll, RespectsTheTripLimitAndNonConstantBounds) {
  Module m = parse_ok(R"(kernel @k(%p: ptr<global, i32>, %n: i32) {
  %z = const 0 : i32
  %one = const 1 : i32
  %big = const 1000 : i32
  for %i = %z to %big step %one {
    store %p[%i], %i
  }
  for %j = %z to %n step %one {
    store %p[%j], %j
  }
}
)");
  ASSERT_FALSE(m.kernels.empty());
  EXPECT_FALSE(unroll_loops(*m.kernels[0]));
  EXPECT_EQ(count_op(m, Op::kFor), 2);
}

// tanh and erf as expanded for the GPU targets, run on the CPU against libm.
TEST(LowerMath, TanhAndErfExpansionsAreAccurate) {
  const char* cxx = std::getenv("LOOM_CXX");
  if (!codegen::find_tool({cxx && *cxx ? cxx : "c++"}).ok()) GTEST_SKIP() << "no host C++ compiler";
  Module m = parse_ok(R"(kernel @math(%x: ptr<global, f32>, %t: ptr<global, f32>, %e: ptr<global, f32>, %n: i32) {
  %i = thread_id.x
  %b = block_id.x
  %d = block_dim.x
  %o = mul %b, %d
  %k = add %o, %i
  %in = cmp.lt %k, %n
  if %in {
    %v = load %x[%k]
    %th = tanh %v
    %er = erf %v
    store %t[%k], %th
    store %e[%k], %er
  }
}
)");
  ASSERT_FALSE(m.kernels.empty());
  EXPECT_TRUE(lower_tanh_erf(*m.kernels[0]));
  EXPECT_EQ(count_op(m, Op::kTanh) + count_op(m, Op::kErf), 0);
  ASSERT_TRUE(verify(m, TargetKind::kCpp).ok()) << verify(m).to_string();
  auto cpu = codegen::compile_cpu_module(m);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  std::vector<float> x;
  for (double v = -9; v <= 9; v += 0.00731) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 1e-6f, -3e-5f, 4.9e-4f, 5.1e-4f, 0.4999f, 0.5f, 0.5001f, 20.0f, -40.0f}) x.push_back(v);
  GoldenRun run;
  const int n = static_cast<int>(x.size());
  run.buffers = {std::vector<uint8_t>(reinterpret_cast<uint8_t*>(x.data()), reinterpret_cast<uint8_t*>(x.data() + n)),
                 std::vector<uint8_t>(n * 4, 0xFF), std::vector<uint8_t>(n * 4, 0xFF)};
  run.args.resize(4);
  for (int i = 0; i < 3; ++i) run.args[i].buffer = i;
  std::memcpy(run.args[3].scalar.data(), &n, 4);
  run.block = {128, 1, 1};
  run.grid = {static_cast<uint32_t>((n + 127) / 128), 1, 1};
  run.check = [&](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    const float* t = reinterpret_cast<const float*>(out[1].data());
    const float* e = reinterpret_cast<const float*>(out[2].data());
    double worst_t = 0, worst_e = 0;
    for (int i = 0; i < n; ++i) {
      double rt = std::tanh(static_cast<double>(x[i])), re = std::erf(static_cast<double>(x[i]));
      worst_t = std::max(worst_t, std::fabs(t[i] - rt) / std::max(std::fabs(rt), 1e-30));  // relative
      worst_e = std::max(worst_e, std::fabs(e[i] - re));                                 // absolute
      if (std::signbit(t[i]) != std::signbit(rt) && rt != 0) return fmt::format("tanh({}) has the wrong sign", x[i]);
    }
    if (worst_t > 2e-6) return fmt::format("tanh relative error {:.3g}", worst_t);
    if (worst_e > 3e-7) return fmt::format("erf absolute error {:.3g}", worst_e);
    return "";
  };
  EXPECT_EQ(run_on_cpu(*cpu, "math", run, 1), "");
}

}  // namespace
}  // namespace loom::test
