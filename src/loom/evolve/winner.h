// The winner of an evolve job: the one record that `loom evolve status`, the HTML report and the
// kernel store all read, so they name the same candidate with the same timings. It lives in the
// job's row (best_candidate and the confirmed_* columns) plus the candidate row it points at.
// During the search it names the best so far (not re-timed); the confirmation writes it once,
// in one transaction with the kernel it stores, which is made from it (stored_kernel_of).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/base/status.h"
#include "loom/store/candidate.h"
#include "loom/store/store.h"
#include "loom/evolve/store_names.h"

namespace loom::evolve {

struct Winner {
  int64_t job = 0;
  int64_t candidate = 0;         // candidates.id (the store names it evolve-JOB.CANDIDATE)
  int seq = 0;                   // #seq in logs and reports; 0 is the baseline
  Candidate cand;
  double search_speedup = 0;     // from its one search-time evaluation
  double search_us = 0;          // that evaluation's median
  int rounds = 0;                // rounds re-timed interleaved with the baseline (0: not re-timed)
  double confirmed_speedup = 0;  // median of those rounds' ratios
  double median_us = 0, baseline_us = 0;  // medians of its and the baseline's rounds (us)
  std::string kernel;            // the stored kernel's id; "" when not stored
  bool final = false;            // the confirmation has run (the job wrote its winner)

  // What a store entry claims: the smaller of the search and re-timed speed-ups.
  double claim() const;
  // One line, the same in status and report: "#9 (candidate 10): 12.3 us vs the baseline's 20.1
  // us, re-timed in 5 interleaved rounds: 1.63x (search 1.90x); stored as evolve-1.10 at 1.63x".
  std::string line() const;
};

// The job's winner, or the best so far while it runs (nullopt: nothing evaluated yet).
Result<std::optional<Winner>> read_winner(Db& db, int64_t job);
// Candidate `candidate` of `job` as a winner not yet re-timed: its search figures, and the
// baseline's search-time timing.
Result<Winner> search_winner(Db& db, int64_t job, int64_t candidate);
// The store entry of a winner found for `op` at `shape` on `device_arch`.
StoredKernel stored_kernel_of(const Winner& w, const std::string& op, const kernels::Shape& shape,
                              const std::string& device_arch);
// Writes the final winner into the job's row and, when `k` is given, k into the store (k.id()
// becomes w.kernel), in one transaction.
Status record_winner(Db& db, Winner w, const StoredKernel* k);

}  // namespace loom::evolve
