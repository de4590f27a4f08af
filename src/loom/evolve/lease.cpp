// Job leases and the state of a job derived from them (see lease.h).
#include "loom/evolve/lease.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <chrono>
#include <fstream>
#include <sstream>

#include "loom/store/db.h"
#include "loom/evolve/store_names.h"

namespace loom::evolve {
namespace {

// Fields 3 (state) and 22 (start time, clock ticks since boot) of /proc/PID/stat; empty when
// unreadable. The fields after the command name are read from its closing parenthesis (names
// may hold spaces).
struct ProcStat {
  std::string state, start;
};
ProcStat proc_stat(int64_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ProcStat st;
  const size_t p = text.rfind(')');
  if (p == std::string::npos) return st;
  std::istringstream in(text.substr(p + 1));
  std::string field;
  for (int i = 3; i <= 22 && (in >> field); ++i) {
    if (i == 3) st.state = field;
    if (i == 22) st.start = field;
  }
  return st;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

Result<std::pair<std::string, Holder>> read_lease(Db& db, int64_t job, std::string* reason = nullptr,
                                                 bool for_update = false) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT status, lease_host, lease_pid, lease_start, heartbeat, reason, "
                                           "leased_at FROM jobs WHERE id = ?1" +
                                           std::string(for_update ? " FOR UPDATE" : "")));
  s.bind(1, job);
  LOOM_ASSIGN_OR_RETURN(bool has, s.step());
  if (!has) return not_found("no evolve job {} in {}", job, db.path());
  Holder h{s.text(1), s.is_null(2) ? 0 : s.i64(2), s.text(3), s.f64(4), s.f64(6)};
  if (reason) *reason = s.text(5);
  std::string status = s.text(0);
  LOOM_RETURN_IF_ERROR(s.reset());
  return std::make_pair(std::move(status), h);
}

// " since 2026-12-03 17:40:02 UTC" (empty when unknown).
std::string since_text(const Holder& h) {
  if (h.since <= 0) return "";
  const time_t t = static_cast<time_t>(h.since);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return std::string(" since ") + buf;
}

bool is_self(const Holder& h) {
  const Holder me = this_process();
  return h.pid == me.pid && h.host == me.host && h.start == me.start;
}

}  // namespace

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Holder this_process() {
  static const Holder me{host_name(), static_cast<int64_t>(getpid()), proc_stat(getpid()).start, 0};
  Holder h = me;
  h.heartbeat = unix_now();
  return h;
}

bool holder_alive(const Holder& h, double stale_s) {
  if (h.pid <= 0) return false;
  if (h.host != host_name()) return unix_now() - h.heartbeat < stale_s;
  if (kill(static_cast<pid_t>(h.pid), 0) != 0 && errno != EPERM) return false;
  const ProcStat st = proc_stat(h.pid);  // a killed process not yet reaped is a zombie (Z): gone
  if (st.state == "Z" || st.state == "X") return false;
  return h.start.empty() || st.start == h.start;
}

Result<std::string> job_state(Db& db, int64_t job) {
  std::string reason;
  LOOM_ASSIGN_OR_RETURN(auto row, read_lease(db, job, &reason));
  const auto& [status, h] = row;
  if (status == "done") return std::string("done");
  if (status == "failed") return "failed: " + reason;
  const double age = unix_now() - h.heartbeat;
  if (h.pid > 0 && holder_alive(h))
    return fmt::format("running (pid {} on {}{}, heartbeat {:.0f} s ago)", h.pid, h.host, since_text(h), age);
  if (h.pid > 0)
    return fmt::format("interrupted (pid {} on {} is gone, last heartbeat {:.0f} s ago): `loom evolve resume {}` "
                       "finishes it", h.pid, h.host, age, job);
  if (status == "running")  // a file from before leases
    return fmt::format("interrupted (no live process holds it): `loom evolve resume {}` finishes it", job);
  return fmt::format("new (not started): `loom evolve resume {}` runs it", job);
}

Result<JobLease> JobLease::acquire(Db& db, int64_t job) {
  // Read and take under the write lock: two resumes cannot both see the job free.
  LOOM_ASSIGN_OR_RETURN(Transaction tx, Transaction::begin(db));
  LOOM_ASSIGN_OR_RETURN(auto row, read_lease(db, job, nullptr, true));
  const Holder& h = row.second;
  if (h.pid > 0 && !is_self(h) && holder_alive(h))
    return failed_precondition("job {} is being run by pid {} on {}{} (heartbeat {:.0f} s ago); `loom evolve status {}` "
                               "follows it, and `resume` works once that process has ended{}",
                               job, h.pid, h.host, since_text(h), unix_now() - h.heartbeat, job,
                               h.host == this_process().host ? ""
                                   : fmt::format(" (a holder on another host counts as gone once its heartbeat is "
                                                 "{:.0f} s old)", kLeaseStaleS));
  const Holder me = this_process();
  LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE jobs SET lease_host = ?2, lease_pid = ?3, lease_start = ?4, "
                                           "heartbeat = ?5, leased_at = ?5, reason = NULL, status = CASE status WHEN 'done' THEN "
                                           "'done' ELSE 'running' END WHERE id = ?1"));
  LOOM_RETURN_IF_ERROR(u.bind(1, job).bind(2, me.host).bind(3, me.pid).bind(4, me.start).bind(5, me.heartbeat).run());
  LOOM_RETURN_IF_ERROR(tx.commit());
  return JobLease(&db, job);
}

JobLease::~JobLease() {
  if (db_) (void)release(internal_error("the job ended without a result"));
}

Status JobLease::beat() {
  const Holder me = this_process();
  LOOM_ASSIGN_OR_RETURN(Stmt u, db_->prepare("UPDATE jobs SET heartbeat = ?2 WHERE id = ?1 AND lease_pid = ?3 AND "
                                             "lease_host = ?4"));
  LOOM_RETURN_IF_ERROR(u.bind(1, job_).bind(2, me.heartbeat).bind(3, me.pid).bind(4, me.host).run());
  if (db_->changes() == 0)
    return failed_precondition("job {}: another process took the job over (`loom evolve status {}`)", job_, job_);
  return Status();
}

Status JobLease::release(const Status& outcome) {
  Db* db = db_;
  db_ = nullptr;
  const Holder me = this_process();
  auto stmt = db->prepare("UPDATE jobs SET lease_pid = NULL, heartbeat = ?2, "
                          "status = CASE WHEN ?3 = '' THEN status ELSE 'failed' END, "
                          "reason = CASE WHEN ?3 = '' THEN reason ELSE ?3 END "
                          "WHERE id = ?1 AND lease_pid = ?4 AND lease_host = ?5");
  if (!stmt.ok()) return outcome.ok() ? stmt.status() : outcome;
  stmt->bind(1, job_).bind(2, me.heartbeat).bind(3, outcome.ok() ? std::string() : outcome.to_string());
  Status s = stmt->bind(4, me.pid).bind(5, me.host).run();
  return outcome.ok() ? s : outcome;
}

}  // namespace loom::evolve
