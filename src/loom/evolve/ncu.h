// Hardware counters from NVIDIA Nsight Compute (`ncu`), where it is installed: one candidate's
// first kernel profiled once in an exec'ed evaluation worker, for its DRAM throughput and
// achieved occupancy. Everywhere else a one-line reason says why there are no counters.
#pragma once

#include <string>

#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/evaluator.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {

// "ncu: dram throughput 71.2% of peak, achieved occupancy 45.3% (kernel K)" or
// "ncu: skipped: <why>" / "ncu: failed: <why>". Never fails the caller.
std::string ncu_diagnosis(const std::string& device_spec, const kernels::OpSpec& op, const kernels::Shape& shape,
                          const Candidate& c, const EvalOptions& opt);

// The numbers out of `ncu --csv --metrics ...` output (the last quoted field of each line that
// names a metric; thousands separators dropped); negative when absent.
struct NcuMetrics {
  double dram_pct = -1, occupancy_pct = -1;
};
NcuMetrics parse_ncu_csv(const std::string& output);

}  // namespace loom::evolve
