// The region instrumentation pass (ir::instrument_regions) and the evaluator's region shares:
// counters land around the main loop, the kernel still verifies on cpp and ptx and computes the
// same result, and a row-sum spends most of its cycles in its loop.
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/user_op.h"
#include "loom/ir/parser.h"
#include "loom/ir/passes/instrument.h"
#include "loom/ir/verifier.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

constexpr const char* kRowSum = R"(kernel @row_sum(%x: ptr<global, f32>, %y: ptr<global, f32>, %nc: i32) {
  %tid = thread_id.x
  %bid = block_id.x
  %bdim = block_dim.x
  %base = mul %bid, %bdim
  %r = add %base, %tid
  %nr = const 100 : i32
  %in = cmp.lt %r, %nr
  if %in {
    %row0 = mul %r, %nc
    %z = const 0.0 : f32
    %zero = const 0 : i32
    %one = const 1 : i32
    %s = for %c = %zero to %nc step %one iter(%a = %z) : f32 {
      %idx = add %row0, %c
      %v = load %x[%idx]
      %a2 = add %a, %v
      yield %a2
    }
    %two = const 2.0 : f32
    %d = mul %s, %two
    store %y[%r], %d
  }
}
)";

int count_clocks(const ir::Block& b) {
  int n = 0;
  ir::walk(b, [&](const ir::Inst* i) { n += i->op == ir::Op::kClock; });
  return n;
}

TEST(EvolveInstrument, CountersAroundTheMainLoop) {
  auto m = ir::parse_module(kRowSum, "row_sum.loom");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ir::Kernel& k = *m->kernels[0];
  auto info = ir::instrument_regions(k, 2);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_TRUE(info->has_loop);
  ASSERT_EQ(k.params.size(), 4u);
  EXPECT_EQ(k.params[2]->name, "loom_prof") << "inserted before the scalar parameter";
  EXPECT_TRUE(k.params[2]->type.is_pointer());
  EXPECT_EQ(k.params[3]->name, "nc");
  EXPECT_EQ(count_clocks(k.body), 5) << "start, before and after the loop, before the store, end";
  // The counters sit in the `if` block, bracketing the loop.
  const ir::Inst* guard = nullptr;
  for (const ir::Inst* i : k.body.insts)
    if (i->op == ir::Op::kIf) guard = i;
  ASSERT_NE(guard, nullptr);
  const auto& in = guard->regions[0].insts;
  size_t loop = 0;
  while (loop < in.size() && in[loop]->op != ir::Op::kFor) ++loop;
  ASSERT_LT(loop, in.size());
  ASSERT_GT(loop, 0u);
  EXPECT_EQ(in[loop - 1]->op, ir::Op::kClock);
  EXPECT_EQ(in[loop + 1]->op, ir::Op::kClock);
  EXPECT_EQ(in.front()->op, ir::Op::kClock);
  for (ir::TargetKind t : {ir::TargetKind::kCpp, ir::TargetKind::kPtx}) {
    Status s = ir::verify(*m, t);
    EXPECT_TRUE(s.ok()) << ir::target_kind_name(t) << ": " << s.to_string();
  }
  EXPECT_FALSE(ir::verify(*m, ir::TargetKind::kAmdgpu).ok()) << "no clock op on amdgpu";
  // The printed kernel parses back (the op is in the one op table).
  auto again = ir::parse_module(ir::print(*m), "again.loom");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(count_clocks(again->kernels[0]->body), 5);
}

TEST(EvolveInstrument, KernelsWithoutLoopOrStore) {
  auto m = ir::parse_module(R"(kernel @k(%a: ptr<global, f32>, %y: ptr<global, f32>) {
  %i = thread_id.x
  %x = load %a[%i]
  %s = add %x, %x
  store %y[%i], %s
}
)", "k.loom");
  ASSERT_TRUE(m.ok());
  auto info = ir::instrument_regions(*m->kernels[0], 2);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_FALSE(info->has_loop);
  EXPECT_EQ(count_clocks(m->kernels[0]->body), 3);
  EXPECT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok());
  auto none = ir::parse_module("kernel @n(%a: ptr<global, f32>) {\n  %i = thread_id.x\n  %x = load %a[%i]\n}\n", "n.loom");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(ir::instrument_regions(*none->kernels[0], 1).ok());
  EXPECT_EQ(none->kernels[0]->params.size(), 1u) << "a failed instrumentation leaves the kernel alone";
}

// The evaluator runs an instrumented copy after timing: the example row-sum (1024 adds per row
// in its loop) spends most of its counted cycles in the main loop, and the shares add up.
TEST(EvolveInstrument, EvaluatorReportsRegionShares) {
  auto op = resolve_op("", std::string(LOOM_SOURCE_DIR) + "/examples/evolve/row_sum.json");
  ASSERT_TRUE(op.ok()) << op.status().to_string();
  auto shape = kernels::Shape::parse("rows=512,cols=1024");
  Candidate c;
  c.knobs = (*op)->default_schedule(*shape, ir::TargetKind::kCpp);
  EvalOptions o;
  o.trials = 1;
  o.time_budget_s = 0.02;
  o.instrument = true;
  EvalResult r = evaluate_isolated("cpu", **op, *shape, c, o, 120);
  ASSERT_TRUE(r.ok()) << r.status << " " << r.reason;
  ASSERT_NE(r.regions.find("main loop"), std::string::npos) << r.regions;
  std::smatch mm;
  std::string rest = r.regions;
  int sum = 0, loop = -1;
  while (std::regex_search(rest, mm, std::regex(R"(([a-z ]+) (\d+)%)"))) {
    sum += std::stoi(mm[2]);
    if (mm[1].str().find("main loop") != std::string::npos) loop = std::stoi(mm[2]);
    rest = mm.suffix();
  }
  EXPECT_NEAR(sum, 100, 3) << r.regions;
  EXPECT_GE(loop, 50) << r.regions;
  // Without the flag nothing is instrumented; C++ text candidates say why they are not.
  o.instrument = false;
  EXPECT_TRUE(evaluate_isolated("cpu", **op, *shape, c, o, 120).regions.empty());
  auto text = candidate_from_file(std::string(LOOM_SOURCE_DIR) + "/tests/evolve/cheats/cpp_honest.cpp");
  ASSERT_TRUE(text.ok());
  const kernels::OpSpec* add = kernels::find_op("add");
  o.instrument = true;
  EvalResult t = evaluate_isolated("cpu", *add, *kernels::Shape::parse("n=1000"), *text, o, 120);
  ASSERT_TRUE(t.ok()) << t.reason;
  EXPECT_EQ(t.regions.rfind("not measured", 0), 0u) << t.regions;
}

}  // namespace
}  // namespace loom::evolve
