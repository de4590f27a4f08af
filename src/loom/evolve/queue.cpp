// The evaluation queue: the coordinator's enqueue/collect and the worker loop (see queue.h).
#include "loom/evolve/queue.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "loom/base/hash.h"
#include "loom/base/options.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/lease.h"
#include "loom/evolve/user_op.h"
#include "loom/evolve/worker.h"

namespace loom::evolve {
namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string worker_name() {
  const Holder me = this_process();
  return fmt::format("{}:{}", me.host, me.pid);
}

// SIGTERM/SIGINT: a worker between evaluations removes its pools and exits 0; one in the middle
// of an evaluation dies as before (its lease passes to another worker): finishing would turn an
// evaluation whose child was signalled too (a Slurm step, a process group) into a wrong result.
std::atomic<bool> g_busy{false}, g_stop{false};
void on_stop_signal(int sig) {
  if (!g_busy.load()) {
    g_stop.store(true);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

// Gives a row leased just now back (a stop signal came while leasing it).
void give_back(Db& db, int64_t id, const std::string& me) {
  auto u = db.prepare("UPDATE evaluations SET status = 'pending', worker = NULL, lease_until = NULL, "
                      "attempts = attempts - 1 WHERE id = ?1 AND worker = ?2 AND status = 'leased'");
  if (u.ok()) (void)u->bind(1, id).bind(2, me).run();
}

struct Leased {
  int64_t id = 0, job = 0;
  int seq = 0, attempt = 0;
  std::string kind;
  nlohmann::json request;
};

// The next row for this device architecture: pending, or leased by a worker whose deadline has
// passed. A row that has used up its attempts is finished as failed instead (its workers died).
Result<std::optional<Leased>> lease_next(Db& db, const std::string& arch, const std::string& me, double lease_s) {
  while (true) {
    LOOM_ASSIGN_OR_RETURN(Transaction tx, Transaction::begin(db));
    Leased l;
    std::string last_worker;
    {
      LOOM_ASSIGN_OR_RETURN(
          Stmt s, db.prepare(fmt::format("SELECT id, job, seq, kind, request, attempts, worker FROM evaluations WHERE "
                                         "device_arch = ?1 AND (status = 'pending' OR (status = 'leased' AND "
                                         "lease_until < {})) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
                                         kSqlUnixNow)));
      s.bind(1, arch);
      LOOM_ASSIGN_OR_RETURN(bool has, s.step());
      if (!has) return std::optional<Leased>();
      l.id = s.i64(0);
      l.job = s.i64(1);
      l.seq = static_cast<int>(s.i64(2));
      l.kind = s.text(3);
      l.request = nlohmann::json::parse(s.text(4), nullptr, false);
      l.attempt = static_cast<int>(s.i64(5)) + 1;
      last_worker = s.text(6);
    }
    if (l.attempt > kMaxAttempts) {
      EvalResult e;
      e.status = "error";
      e.reason = fmt::format("lost: {} workers took this evaluation and none finished it (the last: {})", kMaxAttempts,
                             last_worker);
      LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE evaluations SET status = 'done', result = ?2, finished = "
                                               "julianday('now') WHERE id = ?1"));
      LOOM_RETURN_IF_ERROR(u.bind(1, l.id).bind(2, e.to_json()).run());
      LOOM_RETURN_IF_ERROR(tx.commit());
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare(fmt::format("UPDATE evaluations SET status = 'leased', worker = ?2, "
                                                         "lease_until = {} + ?3, attempts = attempts + 1 WHERE id = ?1",
                                                         kSqlUnixNow)));
    LOOM_RETURN_IF_ERROR(u.bind(1, l.id).bind(2, me).bind(3, lease_s).run());
    LOOM_RETURN_IF_ERROR(tx.commit());
    return std::optional<Leased>(std::move(l));
  }
}

// Moves the lease's deadline; false when the row is no longer this worker's.
Result<bool> extend_lease(Db& db, int64_t id, const std::string& me, double lease_s) {
  LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare(fmt::format("UPDATE evaluations SET lease_until = {} + ?3 WHERE id = ?1 AND "
                                                       "worker = ?2 AND status = 'leased'",
                                                       kSqlUnixNow)));
  LOOM_RETURN_IF_ERROR(u.bind(1, id).bind(2, me).bind(3, lease_s).run());
  return db.changes() > 0;
}

// Writes the result if the row is still this worker's; false when it was taken over.
Result<bool> finish(Db& db, int64_t id, const std::string& me, const std::string& result) {
  LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE evaluations SET status = 'done', result = ?3, finished = julianday('now') "
                                           "WHERE id = ?1 AND worker = ?2 AND status = 'leased'"));
  LOOM_RETURN_IF_ERROR(u.bind(1, id).bind(2, me).bind(3, result).run());
  return db.changes() > 0;
}

// A heartbeat thread with its own connection (one Db per thread), for one leased row.
class Heartbeat {
 public:
  Heartbeat(const std::string& url, int64_t id, std::string me, double lease_s)
      : thread_([this, url, id, me = std::move(me), lease_s] {
          auto db = Db::open(url);
          std::unique_lock<std::mutex> lock(mu_);
          while (!stop_) {
            cv_.wait_for(lock, std::chrono::duration<double>(lease_s / 3));
            if (stop_ || !db.ok()) break;
            lock.unlock();
            auto kept = extend_lease(*db, id, me, lease_s);
            lock.lock();
            if (kept.ok() && !*kept) lost_ = true;
          }
        }) {}
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool lost() {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, lost_ = false;
  std::thread thread_;
};

struct Parsed {
  const kernels::OpSpec* op = nullptr;
  kernels::Shape shape;
  Candidate cand;
  EvalOptions options;
  double timeout_s = 120;
};

// This host's pool of a job's input sets (the coordinator's directory may be on another
// machine); the sets are drawn from the job's pool seed, so every host makes the same ones.
std::filesystem::path worker_pool_dir(const std::string& db_key, int64_t job) {
  return std::filesystem::path(opt::get_string(opt::Opt::kTmpdir)) /
         fmt::format("loom-evolve-pool-{:016x}-{}-w", key_hash64(db_key), job);
}

// Removes the pools of jobs that have ended (done or failed); the others stay for their next
// evaluations (a pool at Llama-3-8B shapes holds hundreds of MB).
void remove_ended_pools(Db& db, std::set<int64_t>& jobs) {
  for (auto it = jobs.begin(); it != jobs.end();) {
    auto s = db.prepare("SELECT status FROM jobs WHERE id = ?1");
    if (!s.ok()) return;
    s->bind(1, *it);
    auto has = s->step();
    if (!has.ok()) return;
    const bool ended = !*has || s->text(0) == "done" || s->text(0) == "failed";
    if (!ended) {
      ++it;
      continue;
    }
    std::error_code ec;
    std::filesystem::remove_all(worker_pool_dir(db.path(), *it), ec);
    it = jobs.erase(it);
  }
}

Result<Parsed> parse_request(const nlohmann::json& req, const std::string& db_key, int64_t job) {
  if (!req.is_object()) return invalid_argument("the queued request is not a JSON object");
  Parsed p;
  LOOM_ASSIGN_OR_RETURN(p.op, resolve_op(req.value("op", ""), req.value("op_file", "")));
  LOOM_ASSIGN_OR_RETURN(p.shape, kernels::Shape::parse(req.value("shape", "")));
  LOOM_ASSIGN_OR_RETURN(p.cand, Candidate::from_body(req.value("candidate", "")));
  LOOM_ASSIGN_OR_RETURN(p.options, eval_options_from_json(req.value("options", nlohmann::json::object())));
  p.timeout_s = req.value("timeout_s", 120.0);
  std::error_code ec;
  const std::filesystem::path dir = worker_pool_dir(db_key, job);
  p.options.pool_dir = std::filesystem::create_directories(dir, ec) || std::filesystem::is_directory(dir, ec)
                           ? dir.string() : std::string();
  return p;
}

// Runs one leased row on `device`; the answer as JSON text.
std::string execute(const Leased& l, const std::string& device, const std::string& db_key) {
  auto p = parse_request(l.request, db_key, l.job);
  if (!p.ok()) {
    EvalResult e;
    e.reason = p.status().to_string();
    return e.to_json();
  }
  if (l.kind == "confirm") {
    std::vector<Candidate> finalists;
    for (const auto& b : l.request.value("finalists", nlohmann::json::array())) {
      auto c = Candidate::from_body(b.get<std::string>());
      if (c.ok()) finalists.push_back(*c);
    }
    return confirm_rounds(device, *p->op, p->shape, p->cand, finalists, p->options, l.request.value("rounds", 1),
                          p->timeout_s, [] { return Status(); })
        .dump();
  }
  return evaluate_isolated(device, *p->op, p->shape, p->cand, p->options, p->timeout_s).to_json();
}

}  // namespace

Status enqueue_evaluation(Db& db, int64_t job, std::string_view kind, int seq, std::string_view device_arch,
                          const nlohmann::json& request) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("INSERT INTO evaluations(job, kind, seq, device_arch, request, status, created) "
                                           "VALUES (?1, ?2, ?3, ?4, ?5, 'pending', julianday('now')) "
                                           "ON CONFLICT(job, kind, seq) DO NOTHING"));
  return s.bind(1, job).bind(2, kind).bind(3, seq).bind(4, device_arch).bind(5, request.dump()).run();
}

Result<QueueRow> queued(Db& db, int64_t job, std::string_view kind, int seq) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT status, result, worker FROM evaluations WHERE job = ?1 AND kind = ?2 AND "
                                           "seq = ?3"));
  s.bind(1, job).bind(2, kind).bind(3, seq);
  LOOM_ASSIGN_OR_RETURN(bool has, s.step());
  QueueRow r;
  if (!has) return r;
  r.status = s.text(0);
  if (r.status == "done") r.result = nlohmann::json::parse(s.text(1), nullptr, false);
  r.worker = s.text(2);
  LOOM_RETURN_IF_ERROR(s.reset());
  return r;
}

LocalWorkers::LocalWorkers(int n, const std::string& db, const std::string& device, double lease_s) {
  const std::string bin = worker_binary();
  for (int i = 0; i < n && !bin.empty(); ++i) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // a coordinator that is killed leaves no workers behind
      const std::string lease = fmt::format("{}", lease_s);
      execl(bin.c_str(), bin.c_str(), "evolve", "worker", "--db", db.c_str(), "--device", device.c_str(), "--lease",
            lease.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    if (pid > 0) pids_.push_back(pid);
  }
}

LocalWorkers::~LocalWorkers() {
  for (int pid : pids_) kill(pid, SIGTERM);
  for (int pid : pids_) waitpid(pid, nullptr, 0);
}

Result<int64_t> cancel_pending(Db& db, int64_t job) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("DELETE FROM evaluations WHERE job = ?1 AND status = 'pending'"));
  LOOM_RETURN_IF_ERROR(s.bind(1, job).run());
  return db.changes();
}

Result<std::string> queue_summary(Db& db, int64_t job) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT status, count(*) FROM evaluations WHERE job = ?1 AND status <> 'done' "
                                           "GROUP BY status ORDER BY status"));
  s.bind(1, job);
  std::string out;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) break;
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", s.i64(1), s.text(0));
  }
  return out.empty() ? std::string("nothing queued") : out;
}

Status JobQueue::enqueue(std::string_view kind, int seq, nlohmann::json request) {
  request["timeout_s"] = timeout_s;
  return enqueue_evaluation(db, job, kind, seq, arch, request);
}

Result<std::optional<QueueRow>> JobQueue::wait(std::string_view kind, int seq) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto last_beat = t0, last_log = t0;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(QueueRow r, queued(db, job, kind, seq));
    if (r.status == "done") return std::optional<QueueRow>(std::move(r));
    if (r.status.empty()) return std::optional<QueueRow>();
    if (r.status == "pending" && kind == "eval" && seq > 0 && out_of_time && out_of_time()) {
      LOOM_RETURN_IF_ERROR(cancel_pending(db, job).status());
      continue;  // cancelled, or a worker took it just before
    }
    const auto now = clock::now();
    if (now - last_beat > std::chrono::seconds(5)) {
      LOOM_RETURN_IF_ERROR(lease.beat());
      last_beat = now;
    }
    if (now - last_log > std::chrono::seconds(30)) {
      LOOM_ASSIGN_OR_RETURN(std::string q, queue_summary(db, job));
      log(fmt::format("waiting {:.0f} s for a worker on {} ({} #{}; queue: {}); start one with `loom evolve worker "
                      "--db URL --device {}`",
                      std::chrono::duration<double>(now - t0).count(), arch, kind, seq, q, device));
      last_log = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

nlohmann::json confirm_rounds(const std::string& device, const kernels::OpSpec& op, const kernels::Shape& shape,
                              const Candidate& baseline, const std::vector<Candidate>& finalists, EvalOptions o,
                              int rounds, double timeout_s, const std::function<Status()>& beat) {
  const bool tail = op_objective(op) == "p90";
  auto objective = [&](const EvalResult& e) -> nlohmann::json {
    if (!e.ok()) return nullptr;
    return tail ? e.p90_us : e.median_us;
  };
  nlohmann::json out = nlohmann::json::array();
  for (int round = 0; round < std::max(1, rounds); ++round) {
    nlohmann::json row = nlohmann::json::array();
    EvalResult b = evaluate_isolated(device, op, shape, baseline, o, timeout_s);
    if (Status s = beat(); !s.ok()) return {{"error", s.to_string()}};
    row.push_back(objective(b));
    for (const Candidate& f : finalists) {
      if (!b.ok()) {
        row.push_back(nullptr);
        continue;
      }
      EvalResult w = evaluate_isolated(device, op, shape, f, o, timeout_s);
      if (Status s = beat(); !s.ok()) return {{"error", s.to_string()}};
      row.push_back(objective(w));
    }
    out.push_back(row);
  }
  return out;
}

Status serve_queue(const WorkerOptions& o) {
  // Evaluations are isolated by exec here: the heartbeat thread makes fork() without exec unsafe.
  if (opt::registry().source(opt::Opt::kEvolveIsolation) == opt::Source::kDefault)
    LOOM_RETURN_IF_ERROR(opt::registry().set_from_flag(opt::Opt::kEvolveIsolation, "exec"));
  LOOM_ASSIGN_OR_RETURN(Db db, Db::open(o.db));
  LOOM_ASSIGN_OR_RETURN(DeviceFacts facts, probe_device(o.device, false));
  signal(SIGTERM, on_stop_signal);
  signal(SIGINT, on_stop_signal);
  const std::string me = worker_name();
  say(fmt::format("worker {}: device {} ({}), database {}, lease {:.0f} s", me, o.device, facts.arch, db.path(), o.lease_s));
  auto idle_since = std::chrono::steady_clock::now();
  auto last_cleanup = idle_since;
  std::set<int64_t> pools;  // jobs whose input sets this worker keeps
  int done = 0, failures = 0;
  auto stop = [&]() -> Status {
    remove_ended_pools(db, pools);
    say(fmt::format("worker {}: stopped between evaluations, {} done", me, done));
    return Status();
  };
  while (o.max_evaluations <= 0 || done < o.max_evaluations) {
    if (g_stop.load()) return stop();
    auto next = lease_next(db, facts.arch, me, o.lease_s);
    if (next.ok() && *next && g_stop.load()) {
      give_back(db, (**next).id, me);
      return stop();
    }
    if (!next.ok()) {
      // A lost connection inside the lease's transaction: try again (the connection itself is
      // re-made by the database layer, which gives up after its own deadline).
      if (++failures > 3) return std::move(next).status().with_context("worker " + me);
      say(fmt::format("worker {}: {} (trying again)", me, next.status().to_string()));
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    failures = 0;
    if (!*next) {
      if (!pools.empty() && std::chrono::steady_clock::now() - last_cleanup > std::chrono::seconds(2)) {
        remove_ended_pools(db, pools);
        last_cleanup = std::chrono::steady_clock::now();
      }
      const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - idle_since).count();
      if (o.idle_exit_s > 0 && idle >= o.idle_exit_s) {
        remove_ended_pools(db, pools);
        say(fmt::format("worker {}: idle for {:.0f} s, {} evaluations done; exiting", me, idle, done));
        return Status();
      }
      if (!g_stop.load()) std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_s));
      continue;
    }
    const Leased& l = **next;
    pools.insert(l.job);
    say(fmt::format("worker {}: leased job {} {} #{} (attempt {})", me, l.job, l.kind, l.seq, l.attempt));
    const auto t0 = std::chrono::steady_clock::now();
    std::string answer;
    bool lost = false;
    {
      Heartbeat hb(o.db, l.id, me, o.lease_s);
      g_busy.store(true);
      if (g_stop.load()) {  // a stop that came just before the evaluation
        g_busy.store(false);
        give_back(db, l.id, me);
        return stop();
      }
      answer = execute(l, o.device, db.path());
      g_busy.store(false);
      lost = hb.lost();
    }
    auto kept = finish(db, l.id, me, answer);
    if (!kept.ok()) return std::move(kept).status().with_context(fmt::format("worker {}: writing job {} #{}", me, l.job, l.seq));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!*kept || lost) {
      say(fmt::format("worker {}: job {} {} #{}: result dropped, the lease passed to another worker ({:.1f} s)", me, l.job,
                      l.kind, l.seq, secs));
    } else {
      std::string what = "done";
      if (l.kind != "confirm") {
        const EvalResult e = EvalResult::from_json(answer);
        what = e.ok() ? fmt::format("ok {:.1f} us", e.median_us) : e.status;
      }
      say(fmt::format("worker {}: job {} {} #{}: {} ({:.1f} s)", me, l.job, l.kind, l.seq, what, secs));
    }
    ++done;
    idle_since = std::chrono::steady_clock::now();
  }
  remove_ended_pools(db, pools);
  say(fmt::format("worker {}: {} evaluations done; exiting", me, done));
  return Status();
}

}  // namespace loom::evolve
