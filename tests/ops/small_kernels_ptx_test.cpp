// The small decode kernels' forms must assemble with ptxas (sm_90) in every schedule that
// matters, not only the default and one random one of OpPtx: rms_norm_q8's vec form for every
// warps x split on every test shape, and attention_decode with out_q (not in its test shapes:
// attention_quant_test.cpp checks those on devices) for every split count.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"
#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"

namespace loom::kernels {
namespace {

TEST(SmallKernelsPtx, EveryScheduleAssembles) {
  const char* env = std::getenv("LOOM_PTXAS");
  auto ptxas = codegen::find_tool({env ? env : "", "ptxas", "/usr/local/cuda/bin/ptxas"});
  if (!ptxas.ok()) GTEST_SKIP() << "ptxas not found (install the CUDA toolkit): " << ptxas.status().to_string();
  const std::string dir = testing::TempDir();
  int n = 0;
  auto check = [&](const OpSpec& op, const Shape& s, const Schedule& sc) {
    auto g = op.generate(s, sc, ir::TargetKind::kPtx);
    ASSERT_TRUE(g.ok()) << op.name() << " " << s.key() << " " << schedule_key(sc) << ": " << g.status().to_string();
    auto text = codegen::ptx_target().emit(g->module, "sm_90");
    ASSERT_TRUE(text.ok()) << op.name() << " " << s.key() << ": " << text.status().to_string();
    const std::string file = dir + "/small_" + std::to_string(n++) + ".ptx";
    std::ofstream(file) << *text;
    auto r = codegen::run_tool({*ptxas, "-arch=sm_90", file, "-o", "/dev/null"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 0) << op.name() << " " << s.key() << " " << schedule_key(sc) << ":\n" << r->output;
    std::filesystem::remove(file);
  };
  const OpSpec* norm = find_op("rms_norm_q8");
  ASSERT_NE(norm, nullptr);
  for (const Shape& s : norm->test_shapes()) {
    const auto space = norm->schedule_space(s, ir::TargetKind::kPtx);
    for (const Knob& k : space)
      if (k.name == "warps")
        for (int64_t w : k.choices)
          for (int64_t split : {0, 1}) {
            Schedule sc = {{"warps", w}, {"regs", 0}, {"vec", 1}, {"split", split}};
            if (norm->schedule_space(s, ir::TargetKind::kPtx).back().choices.size() == 1) sc["split"] = 0;  // in place
            check(*norm, s, sc);
          }
  }
  const OpSpec* att = find_op("attention_decode");
  ASSERT_NE(att, nullptr);
  for (Shape s : att->test_shapes())
    for (int64_t q : {8, 9, 15}) {
      s.dims["out_q"] = q;
      if (!att->validate(s).ok()) continue;
      for (int64_t splits : {1, 4}) {
        Schedule sc = att->default_schedule(s, ir::TargetKind::kPtx);
        sc["splits"] = splits;
        check(*att, s, sc);
      }
    }
  EXPECT_GT(n, 100);
}

}  // namespace
}  // namespace loom::kernels
