// Nsight Compute counters: the CSV that `ncu --csv --metrics` prints is parsed into the two
// figures, and without ncu (or on the cpu device) the diagnosis says why there are none.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "loom/evolve/ncu.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

TEST(EvolveNcu, ParsesMetricLines) {
  const std::string out =
      "==PROF== Connected to process 4242 (/usr/bin/loom)\n"
      "==PROF== Profiling \"matvec_q4_0\" - 0: 0%....50%....100% - 9 passes\n"
      "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\","
      "\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
      "\"0\",\"4242\",\"loom\",\"127.0.0.1\",\"matvec_q4_0\",\"1\",\"7\",\"(256, 1, 1)\",\"(1792, 1, 1)\",\"0\",\"9.0\","
      "\"Command line profiler metrics\",\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"71.23\"\n"
      "\"0\",\"4242\",\"loom\",\"127.0.0.1\",\"matvec_q4_0\",\"1\",\"7\",\"(256, 1, 1)\",\"(1792, 1, 1)\",\"0\",\"9.0\","
      "\"Command line profiler metrics\",\"sm__warps_active.avg.pct_of_peak_sustained_active\",\"%\",\"1,045.5\"\n";
  NcuMetrics m = parse_ncu_csv(out);
  EXPECT_DOUBLE_EQ(m.dram_pct, 71.23);
  EXPECT_DOUBLE_EQ(m.occupancy_pct, 1045.5) << "thousands separators dropped";
  NcuMetrics none = parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no permission to access counters\n");
  EXPECT_LT(none.dram_pct, 0);
  EXPECT_LT(none.occupancy_pct, 0);
}

TEST(EvolveNcu, SkipsWithAReason) {
  const kernels::OpSpec* op = kernels::find_op("add");
  ASSERT_NE(op, nullptr);
  auto shape = kernels::Shape::parse("n=1000");
  Candidate c;
  c.knobs = op->default_schedule(*shape, ir::TargetKind::kPtx);
  EXPECT_EQ(ncu_diagnosis("cpu", *op, *shape, c, {}), "ncu: skipped: not a cuda device");
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", "/nonexistent", 1);
  EXPECT_EQ(ncu_diagnosis("cuda", *op, *shape, c, {}), "ncu: skipped: ncu (Nsight Compute) is not on PATH");
  setenv("PATH", saved.c_str(), 1);
}

}  // namespace
}  // namespace loom::evolve
