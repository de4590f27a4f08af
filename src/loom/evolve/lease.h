// Who runs an evolve job, kept as facts in the job's row: the holder's host, pid and process
// start time (its lease) and its last heartbeat. A job's state is derived from them (a live
// holder: running; a holder that is gone: interrupted), never from a flag written at start.
// run_job takes the lease before it touches a job and gives it back with the outcome; a
// process that is killed never gives it back, which is how `status` knows it was interrupted.
#pragma once

#include <cstdint>
#include <string>

#include "loom/base/status.h"

namespace loom::store {
class Db;
}  // namespace loom::store

namespace loom::evolve {

using store::Db;

// A process that holds (or held) a job's lease.
struct Holder {
  std::string host;      // gethostname()
  int64_t pid = 0;       // 0: nobody
  std::string start;     // the process's start time (/proc/PID/stat), so a reused pid is not the holder
  double heartbeat = 0;  // unix seconds of its last heartbeat
  double since = 0;      // unix seconds when it took the lease (0: unknown, older files)
};

// A holder on another host is taken for gone when its heartbeat is older than this (seconds;
// a job beats after every evaluation, and one evaluation ends within its timeout).
inline constexpr double kLeaseStaleS = 900;

double unix_now();
Holder this_process();
// On this host: the pid runs and started when the holder did. On another host (not checkable
// here): its heartbeat is younger than stale_s.
bool holder_alive(const Holder& h, double stale_s = kLeaseStaleS);

// A job's state as `loom evolve status` prints it: "done", "failed: REASON", "running (pid P on
// HOST, heartbeat 3 s ago)", "interrupted (pid P on HOST is gone, ...)", "new (...)".
Result<std::string> job_state(Db& db, int64_t job);

// The lease of one job, held by this process until released (move-only; the Db must outlive it).
class JobLease {
 public:
  // Errors: not_found (no such job); failed_precondition naming the live holder's pid and host.
  static Result<JobLease> acquire(Db& db, int64_t job);
  JobLease(JobLease&& o) noexcept : db_(o.db_), job_(o.job_) { o.db_ = nullptr; }
  JobLease& operator=(JobLease&&) = delete;
  JobLease(const JobLease&) = delete;
  JobLease& operator=(const JobLease&) = delete;
  // Released as failed ("ended without a result") when release() was never called.
  ~JobLease();

  Status beat();  // the heartbeat; failed_precondition when another process took the job over
  // Gives the lease back. outcome ok: the job keeps the status it wrote (done); otherwise the job
  // is failed with outcome's message as its reason. Returns outcome, or the release's own error.
  Status release(const Status& outcome);

 private:
  JobLease(Db* db, int64_t job) : db_(db), job_(job) {}
  Db* db_ = nullptr;  // null once released
  int64_t job_ = 0;
};

}  // namespace loom::evolve
