// evolve's evaluator: proves a candidate correct, then times it and places it on the roofline.
//
// Correctness, on the device: `trials` fresh random inputs on the searched shape (outputs
// poisoned before every launch, with a different pattern each trial), guard bytes around every
// buffer, inputs compared byte for byte after the launch, a repeated launch on the first inputs
// after others (launch order, history, timing), and held-out shapes the search never sees (odd
// sizes). A failure is a rejection with a tag that says which rule it broke:
//   guard    wrote outside its outputs             input   modified an input
//   stale    left an output unwritten (poison)     cached  returned an earlier launch's output
//   wrong    outside the op's tolerance            holdout wrong (or failing) on a held-out shape
//   order    a repeated launch on the same inputs gives another answer
//   floor    timed faster than the bytes it must move allow (flagged, never accepted)
//   special  wrong where the inputs hold inf, NaN, -0.0, denormals or extremes (ops whose
//            reference defines them: OpSpec::special_values)
//   timed    a timed launch's outputs are wrong (checked at random right after launches return)
//   async    work still running after the launch returned (cpu: a thread left alive)
//   memory   the kernel kept memory of its own while timed (cpu: resident bytes grew by more
//            than 8 MiB plus its outputs' size: copies of inputs or answers)
//   tamper   the kernel changed the process the judge runs in (cpu): the floating-point control
//            registers (rounding, flush-to-zero), a signal handler or an interval timer
// Timing: every buffer argument is copied into a working set larger than the last-level cache
// and launches rotate through the copies (every launch streams its weights from memory); the
// copies hold input sets the trials never showed (one per copy where memory allows), in turn,
// moving on to the next set on every pass, and before each launch a few float elements of its
// inputs change (no two launches see the same inputs); after each launch its outputs are
// poisoned (no answer stays in memory), and references are computed only for the launches
// checked, after they returned. Warm-up, then repetitions up to a time budget; median and the
// 10th/90th percentiles. docs/evolve.md has the threat model: what the judge guarantees.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {

class EvalDevice;

struct EvalOptions {
  int trials = 3;
  std::vector<kernels::Shape> holdout;
  bool time = true;
  double time_budget_s = 0.4;
  int min_reps = 15;
  int max_reps = 400;
  double ws_factor = 4.0;  // working set >= ws_factor x last-level cache
  double peak_gbps = 0;    // measured peak read bandwidth; 0: no floor check
  double floor_margin = 1.5;  // flagged above floor_margin x peak (the peak is measured on a shared machine)
  uint64_t seed = 1;
  bool instrument = false;    // also time the regions of an instrumented copy (IR kernels)
  // Input sets (search throughput, docs/evolve.md): the first `fresh_trials` trials draw fresh
  // inputs from `seed` (a new seed per candidate); the other trials and the held-out shapes use
  // the job's shared sets, drawn from `pool_seed`, which are generated once and kept with their
  // reference outputs in `pool_dir` (empty: generated every time, nothing written).
  int fresh_trials = 1;
  uint64_t pool_seed = 0x9001;
  std::string pool_dir;
  int timing_sets = 0;  // input sets of the timing images; 0: one per image (within memory/time budgets), >= 3
  // Every timed launch gets new inputs (a few float elements of its image taken from another
  // set). Off only in tests that must reach a rule this one would meet first (`floor`).
  bool perturb = true;
  // Outputs must be the reference's bytes, not just within the op's tolerance (a `wrong`
  // rejection otherwise): jobs whose winners must keep the cpu driver bit-identical to the
  // reference engine (`loom evolve run --exact`, `loom evolve ship` on the cpu).
  bool exact = false;
};

struct EvalResult {
  std::string status = "error";  // ok | rejected | compile_error | crash | timeout | error
  std::string reason;            // rejected: "<tag>: detail"
  double median_us = 0, p10_us = 0, p90_us = 0;
  int reps = 0;
  int timed_checks = 0;          // timed launches whose outputs were verified right after they returned
  int timing_sets = 0;           // distinct input sets the timing images held
  double gbps = 0, frac_peak = 0;
  std::string diagnosis;
  double eval_s = 0;
  uint64_t ws_bytes = 0;
  std::string regions;           // instrument: "loads 9%, main loop 83%, ..." or "not measured: why"
  std::string phases;            // where eval_s went: "open 0.1s, compile 2.0s, inputs 0.6s (1 made, 4 pooled), ..."

  bool ok() const { return status == "ok"; }
  std::string tag() const { return status == "rejected" ? reason.substr(0, reason.find(':')) : status; }
  std::string to_json() const;
  static EvalResult from_json(std::string_view text);
};

// Shapes of the same class (same non-size dimensions) that differ from `shape`: each size
// dimension moved to the nearest odd/other valid value, plus the op's smallest test shape of
// that class. At most `max`; with `fits`, only shapes for which it returns true.
std::vector<kernels::Shape> holdout_shapes(const kernels::OpSpec& op, const kernels::Shape& shape, int max = 3,
                                           const std::function<bool(const kernels::Shape&)>& fits = {});

// Evaluates in this process.
EvalResult evaluate(EvalDevice& dev, const kernels::OpSpec& op, const kernels::Shape& shape, const Candidate& c,
                    const EvalOptions& opt);

// Whether candidates a and b compute the same bytes on `trials` random input sets of `shape`
// (drawn from `seed`): "" when every output byte agrees, else where the first one differs.
// `loom evolve ship` holds cpu winners to their baseline's bits this way: the cpu driver's
// kernels are bit-identical to the reference engine's.
Result<std::string> differs_in_bits(EvalDevice& dev, const kernels::OpSpec& op, const kernels::Shape& shape,
                                    const Candidate& a, const Candidate& b, int trials, uint64_t seed);

// Evaluates in a forked child that opens `device_spec` itself: a crash (signal) or a hang
// (longer than timeout_s) ends only the child and comes back as status crash/timeout.
EvalResult evaluate_isolated(const std::string& device_spec, const kernels::OpSpec& op, const kernels::Shape& shape,
                             const Candidate& c, const EvalOptions& opt, double timeout_s);

// Runs `fn` in a forked child with a timeout; its string result comes back over a pipe.
// Errors: deadline_exceeded (hang), internal (crash, with the signal); either message ends with
// the last note_phase() text the child sent ("during: holdout {n=1}").
Result<std::string> run_isolated(const std::function<std::string()>& fn, double timeout_s);
// Inside run_isolated's child: tells the parent what the child is doing now (no-op elsewhere).
void note_phase(const std::string& phase);
// run_isolated in two halves, for several children at once: spawn, then collect (which waits
// at most timeout_s, kills a hung child, reaps it and removes its request file, if any).
struct IsolatedChild {
  int pid = -1;
  int fd = -1;               // read end of the result pipe
  std::string request_file;  // exec'ed workers: removed by collect
};
Result<IsolatedChild> spawn_isolated(const std::function<std::string()>& fn);
// The fork both kinds of isolation share: a pipe (close-on-exec), fork, and in the child
// `in_child(write_fd)`, which ends the child with exec or _exit (returning also exits, status 0);
// the parent gets the pid and the read end. Flushes stdio first so the child does not repeat it.
Result<IsolatedChild> fork_with_pipe(const std::function<void(int write_fd)>& in_child);
Result<std::string> collect(IsolatedChild& c, double timeout_s);
// The parent's half of run_isolated (also used for exec'ed workers): reads child `pid`'s pipe
// `read_fd` (closed here) until EOF or timeout_s, kills a hung child, reaps it.
Result<std::string> collect_isolated(int pid, int read_fd, double timeout_s);
// Where note_phase writes (a worker process sets its result pipe).
void set_phase_fd(int fd);

// Facts about a device found in an isolated process (the caller never opens the device).
struct DeviceFacts {
  std::string arch;       // device_arch_of(props)
  int threads = 0;        // worker threads (cpu)
  uint64_t llc = 0;       // last-level cache bytes
  double peak_gbps = 0;   // measured peak read bandwidth (when asked for)
};
Result<DeviceFacts> probe_device(const std::string& device_spec, bool measure_peak, double timeout_s = 300);

}  // namespace loom::evolve
