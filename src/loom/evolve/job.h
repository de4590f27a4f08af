// evolve jobs: a search of one op at one shape on one device, stored in the evolve database.
// run_job takes the job's lease (lease.h), evaluates the baseline (the op's default schedule)
// first, then proposes, evaluates and records candidates until the budget is spent; every
// evaluation is committed before the next starts, so `resume` after SIGKILL continues with
// nothing lost. At the end the best are re-timed against the baseline (interleaved), the job's
// winner is written (winner.h) and, when faster, put into the kernel store.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/llm.h"

namespace loom::evolve {

struct JobConfig {
  std::string op_file;    // a user-defined op (user_op.h); op may then be empty (the file's name)
  std::string op, shape, device = "cpu", strategy = "mcts", synth = "mutate";
  uint64_t seed = 1;
  int budget_count = 0;   // evaluations after the baseline (0: no count limit)
  double budget_s = 0;    // seconds of search (0: no time limit)
  bool skills = true;
  int trials = 3;         // fresh random inputs per candidate on the searched shape
  int holdout = 3;        // held-out shapes
  double time_budget_s = 0.3;  // timing per candidate
  double timeout_s = 120;      // per evaluation (hang -> timeout)
  int confirm_rounds = 5;      // interleaved re-timing rounds of the finalists against the baseline
  double ws_factor = 4.0;      // timing working set >= ws_factor x last-level cache (EvalOptions)
  bool store = true;      // put a confirmed winner into the kernel store
  bool exact = false;     // candidates must give the reference's exact bytes (EvalOptions::exact)
  int compile_jobs = 0;   // candidates proposed and compiled in parallel per batch (0: on cpu
                          // the machine's cores, at most 8; on cuda 1); kept with the job
  std::string llm_memory = "parent";  // what an llm prompt remembers of the tree: the parent's
                                      // code (parent), its other children (siblings), both, none
  LlmConfig llm;          // key is never stored
};

// "120s", "10m", "1h", "500", or both joined by a comma ("10m,500").
Status parse_budget(std::string_view text, JobConfig& cfg);

Result<int64_t> create_job(Db& db, const JobConfig& cfg);

// A search's baseline: the op's default schedule, evolve's other knobs at their first choices.
// exact: the space of an exact job (keep_exact_choices), so that the family knobs it carries are
// ones the job may use.
Candidate baseline_candidate(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind target,
                             bool exact = false);
// The held-out shapes of a search: holdout_shapes() kept to those the baseline builds for (a
// schedule's vector width must divide n, say: a shape the op's default cannot take would
// reject every candidate, the baseline first).
std::vector<kernels::Shape> search_holdout_shapes(const kernels::OpSpec& op, const kernels::Shape& shape,
                                                  ir::TargetKind target, int max);

struct RunOptions {
  std::function<void(const std::string&)> log;  // progress lines (default: stdout)
  std::string llm_key;                          // for resumed jobs
  std::string llm_url;                          // override the stored URL (tests)
  // Evaluations go through the database's queue (queue.h) to `loom evolve worker` processes;
  // this process only proposes, records and confirms from their results.
  bool queue = false;
  int local_workers = 0;     // workers this process starts for the job (queue only)
  std::string db_url;        // what they open (the --db text, password included)
  double worker_lease_s = 30;
};
// Errors: those of the search; failed_precondition naming the process (pid, host) when another
// live process runs the job. A failed job is recorded as failed with the error's message.
Status run_job(Db& db, int64_t job, const RunOptions& opt = {});

// Text for `loom evolve status` (job 0: every job): the job's state from its lease (lease.h)
// and its winner (winner.h), the line the report shows too.
Result<std::string> job_status(Db& db, int64_t job);

}  // namespace loom::evolve
