// $LOOM_SCHEDULE: hand-set knob values over an op's default schedule (read at the first call;
// set_schedule_overrides replaces them and returns the old text, which the test puts back so the
// other tests of this binary see no overrides).
#include <gtest/gtest.h>

#include <cstdlib>

#include "loom/kernels/op_spec.h"

namespace loom::kernels {
namespace {

TEST(ScheduleOverride, NamesOpsAndKnobs) {
  const std::string before = set_schedule_overrides("matmul_mma:warps_m=4,k_tile=64;;matvec:threads=128");
  auto mma = schedule_override("matmul_mma");
  ASSERT_TRUE(mma.ok()) << mma.status().to_string();
  EXPECT_EQ(*mma, (Schedule{{"warps_m", 4}, {"k_tile", 64}}));
  auto mv = schedule_override("matvec");
  ASSERT_TRUE(mv.ok());
  EXPECT_EQ(mv->at("threads"), 128);
  auto none = schedule_override("rms_norm");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(set_schedule_overrides(before), "matmul_mma:warps_m=4,k_tile=64;;matvec:threads=128");
  auto after = schedule_override("matvec");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->count("threads"), before.find("matvec:") == std::string::npos ? 0u : 1u);
}

TEST(ScheduleOverride, ABadTextIsAnErrorUntilReplaced) {
  const std::string before = set_schedule_overrides("matvec threads=128");
  auto bad = schedule_override("matvec");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("LOOM_SCHEDULE"), std::string::npos) << bad.status().to_string();
  set_schedule_overrides("");
  auto none = schedule_override("matvec");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  set_schedule_overrides(before);
}

}  // namespace
}  // namespace loom::kernels
