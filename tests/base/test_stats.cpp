// Summary statistics used by every benchmark (median and spread of repetitions).
#include <gtest/gtest.h>

#include <cmath>

#include "loom/base/stats.h"

namespace loom {
namespace {

TEST(Spread, OddAndEvenCounts) {
  const Spread odd = spread({5, 1, 3});
  EXPECT_EQ(odd.n, 3u);
  EXPECT_EQ(odd.median, 3);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 5);
  EXPECT_DOUBLE_EQ(odd.mean, 3);
  EXPECT_DOUBLE_EQ(odd.stdev, 2);  // sample deviation: sqrt((4 + 0 + 4) / 2)
  EXPECT_EQ(spread({4, 1, 3, 2}).median, 2.5);
  EXPECT_EQ(median({7}), 7);
  EXPECT_EQ(spread({7}).stdev, 0);
}

TEST(Spread, EmptyIsAllZeros) {
  const Spread s = spread({});
  EXPECT_EQ(s.n, 0u);
  EXPECT_EQ(s.median, 0);
  EXPECT_EQ(s.stdev, 0);
}

}  // namespace
}  // namespace loom
