// Isolated evaluation in a fresh process: fork + exec of a worker (`loom evolve worker`), which
// reads one request (JSON file) and answers over a pipe on fd 3 with the same protocol as
// run_isolated (phase notes, then the result text).
//
// Why exec: a CUDA context does not survive fork(), so a process that has initialised CUDA
// (a test that checks for a GPU, an engine) cannot fork a child that uses CUDA; and a process
// with threads (parallel compilation) is only safe to fork into a new program. The cpu device
// keeps plain fork() by default (no exec cost); LOOM_EVOLVE_ISOLATION=exec|fork overrides.
//
// The worker binary: $LOOM_EVOLVE_WORKER, else what set_worker_binary() set (the loom CLI
// names itself; tests name $LOOM_BINARY_DIR/loom). Without one, isolation falls back to fork.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loom/base/status.h"
#include "loom/evolve/evaluator.h"

namespace loom::evolve {

void set_worker_binary(std::string path);
// The worker program, "" when none is known.
std::string worker_binary();
// Whether isolated work on `device_spec` runs in an exec'ed worker (else a plain fork).
bool isolate_by_exec(const std::string& device_spec);

// Runs `request` in a worker process with a timeout; errors as run_isolated's.
Result<std::string> run_worker(const nlohmann::json& request, double timeout_s);
Result<IsolatedChild> spawn_worker(const nlohmann::json& request);

// Persistent workers (cuda, and whatever else isolates by exec): one `loom evolve worker @serve`
// process per device spec, kept across evaluations, so the device is opened (a CUDA context,
// ~0.3-1 s) once per job instead of once per candidate. Requests go one at a time over a
// socket (one JSON line each); the answer is the phase notes, then "@result N\n" and N bytes.
// Isolation is as strong as one process per candidate: a crash or a hang (timeout_s: the
// worker is killed) costs only that worker, which the next call replaces, and comes back as
// run_isolated's errors, with the phase; and a worker is kept only after an evaluation that
// passed (status "ok"): after a rejection (which may have written outside its buffers), an
// error (a sticky device fault) or anything else, it is ended and the next candidate gets a
// fresh process. LOOM_EVOLVE_PERSISTENT=0: a fresh process for every request.
bool persistent_workers();
Result<std::string> run_in_persistent_worker(const std::string& device_spec, const nlohmann::json& request,
                                             double timeout_s);
// The persistent worker's pid for `device_spec` in this process, -1 when none is alive (tests).
int persistent_worker_pid(const std::string& device_spec);
// Ends every persistent worker of this process (they also end by themselves when it exits).
void stop_persistent_workers();

// Compiles candidates for `shapes` into the kernel cache ahead of their evaluation, `jobs`
// isolated processes at a time (the evaluations then only load them, one at a time, so timing
// never competes with a compiler). cpp target only; other targets return untouched results.
struct PrebuildResult {
  bool ok = false;
  double seconds = 0;  // compile time inside the process
  std::string error;   // why not (the evaluation will report it as compile_error)
};
std::vector<PrebuildResult> prebuild_parallel(const std::string& device_spec, const kernels::OpSpec& op,
                                              const std::vector<kernels::Shape>& shapes,
                                              const std::vector<Candidate>& cands, ir::TargetKind target, int jobs,
                                              double timeout_s);

// The worker's side: runs the request in `path` and writes its answer to fd `fd`. Returns the
// process exit code. `path` "@serve": a persistent worker, serving requests read from `fd`
// until the other end closes it (the device stays open between them). Requests: {"task":"evaluate", device, op, op_file, shape, candidate, options}
// -> EvalResult JSON; {"task":"probe", device, peak} -> device facts JSON.
int worker_main(const std::string& path, int fd);

// The request that evaluates `c` (for evaluate_isolated).
nlohmann::json evaluate_request(const std::string& device_spec, const kernels::OpSpec& op, const kernels::Shape& shape,
                                const Candidate& c, const EvalOptions& opt);

// Options as JSON (the worker protocol).
nlohmann::json eval_options_to_json(const EvalOptions& o);
Result<EvalOptions> eval_options_from_json(const nlohmann::json& j);

}  // namespace loom::evolve
