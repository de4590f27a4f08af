// $LOOM_SCHEDULE: hand-set knob values over an op's default schedule (read once per process;
// ctest runs each test in its own process, so setting it first here is what the reader sees).
#include <gtest/gtest.h>

#include <cstdlib>

#include "loom/kernels/op_spec.h"

namespace loom::kernels {
namespace {

TEST(ScheduleOverride, NamesOpsAndKnobs) {
  ASSERT_EQ(setenv("LOOM_SCHEDULE", "matmul_mma:warps_m=4,k_tile=64;;matvec:threads=128", 1), 0);
  auto mma = schedule_override("matmul_mma");
  ASSERT_TRUE(mma.ok()) << mma.status().to_string();
  EXPECT_EQ(*mma, (Schedule{{"warps_m", 4}, {"k_tile", 64}}));
  auto mv = schedule_override("matvec");
  ASSERT_TRUE(mv.ok());
  EXPECT_EQ(mv->at("threads"), 128);
  auto none = schedule_override("rms_norm");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace loom::kernels
