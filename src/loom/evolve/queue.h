// Evaluations as a queue in the evolve database, for searches spread over processes and
// machines: a job's coordinator (run_job with RunOptions::queue) proposes and records; workers
// (`loom evolve worker --db URL --device D`, serve_queue below) lease the next evaluation of
// their device architecture, evaluate it on their own device through the usual isolated path,
// and write the result.
//
// Table `evaluations` (db.cpp, schema version 2): one row per (job, kind, seq); kind `eval` (a
// candidate, the baseline at seq 0), `confirm` (the finalists' interleaved re-timing rounds) or
// `regions` (the instrumented run of the best). A worker takes a row with SELECT ... FOR UPDATE
// SKIP LOCKED (workers never wait on each other) and holds it with a lease deadline that a
// heartbeat thread moves forward (every lease/3 seconds). A worker that dies stops beating; once
// its deadline passes another worker takes the row again (at most kMaxAttempts times, then the
// evaluation is recorded as failed). A result is accepted only from the row's current holder, so
// a late answer from a worker whose lease was taken over is dropped: each evaluation counts once,
// and the coordinator records it once, in seq order. Deadlines and "now" are the database
// server's clock (kSqlUnixNow), so hosts need not agree on the time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/base/status.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/lease.h"
#include "loom/evolve/store_names.h"

namespace loom::evolve {

inline constexpr int kMaxAttempts = 3;

// The coordinator's side.
// Adds the evaluation unless the row exists (a resumed coordinator proposes the same again).
Status enqueue_evaluation(Db& db, int64_t job, std::string_view kind, int seq, std::string_view device_arch,
                          const nlohmann::json& request);
struct QueueRow {
  std::string status;     // pending | leased | done; "" when there is no such row (cancelled)
  nlohmann::json result;  // done: EvalResult JSON (eval, regions) or the confirm rounds
  std::string worker;     // host:pid of the worker holding it, or whose answer counted
};
Result<QueueRow> queued(Db& db, int64_t job, std::string_view kind, int seq);
// Rows of the job not yet leased are removed (a search out of time); returns how many.
Result<int64_t> cancel_pending(Db& db, int64_t job);
// "2 pending, 3 leased (worker h:1 #4, ...)" for the coordinator's waiting lines.
Result<std::string> queue_summary(Db& db, int64_t job);

// A coordinator's queue for one job: adds rows and waits for their answers, beating the job's
// lease while it waits and saying every 30 s what it waits for.
struct JobQueue {
  Db& db;
  int64_t job;
  std::string arch, device;  // the job's device architecture (workers of it answer) and spec
  double timeout_s;          // per evaluation, passed to the worker
  JobLease& lease;
  std::function<void(const std::string&)> log;
  std::function<bool()> out_of_time;  // a pending search evaluation (eval, seq > 0) is cancelled once this holds

  // Adds the row (idempotent: a resumed coordinator proposes the same again).
  Status enqueue(std::string_view kind, int seq, nlohmann::json request);
  // The row's answer; nullopt when it was cancelled.
  Result<std::optional<QueueRow>> wait(std::string_view kind, int seq);
};

// The worker's side.
struct WorkerOptions {
  std::string db;               // file or postgresql:// URL
  std::string device = "cpu";   // this worker's device (cpu, cuda, cuda:N)
  double lease_s = 30;          // lease deadline; the heartbeat moves it every lease_s / 3
  double poll_s = 0.5;          // wait between empty polls
  double idle_exit_s = 0;       // > 0: exit after this long with nothing to do
  int max_evaluations = 0;      // > 0: exit after this many
};
// Runs until killed (or idle_exit_s / max_evaluations); progress lines on stdout. SIGTERM or
// SIGINT between evaluations ends it cleanly (exit 0); in the middle of one they end it as a
// kill does (the lease passes on). Keeps a pool of input sets per job under TMPDIR and removes
// it once the job has ended. Errors: the database cannot be reached (after db.h's
// reconnection), the device cannot be probed.
Status serve_queue(const WorkerOptions& o);

// `n` local workers (`loom evolve worker --db DB --device D --lease L`, the running loom binary)
// for the life of this object (a coordinator's `--workers N`); ended with SIGTERM (an
// evaluation they hold then goes to another worker when its lease runs out), and sent SIGTERM by
// the kernel if this process dies first.
class LocalWorkers {
 public:
  LocalWorkers(int n, const std::string& db, const std::string& device, double lease_s);
  ~LocalWorkers();
  LocalWorkers(const LocalWorkers&) = delete;
  LocalWorkers& operator=(const LocalWorkers&) = delete;
  size_t size() const { return pids_.size(); }

 private:
  std::vector<int> pids_;
};

// The confirmation rounds (shared by a local job and a worker): `rounds` rounds, each timing the
// baseline, then every finalist; returns per round [base_us, f1_us, ...] with null for a failed
// timing (the objective of the op: median or p90). `beat` runs after every timing.
nlohmann::json confirm_rounds(const std::string& device, const kernels::OpSpec& op, const kernels::Shape& shape,
                              const Candidate& baseline, const std::vector<Candidate>& finalists, EvalOptions o,
                              int rounds, double timeout_s, const std::function<Status()>& beat);

}  // namespace loom::evolve
