// What a job records about itself: held-out shapes every op's baseline can take, the lease
// that says whether a job runs, was interrupted or failed, and the one winner record that
// `loom evolve status`, the report and the kernel store read.
#include <filesystem>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "loom/store/db.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/job.h"
#include "loom/evolve/lease.h"
#include "loom/evolve/report.h"
#include "loom/store/store.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/winner.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

struct TempDb {
  std::string path;
  Db db;
  explicit TempDb(const std::string& name) {
    path = (std::filesystem::temp_directory_path() /
            ("loom_evolve_records_" + name + "_" + std::to_string(getpid()) + ".db")).string();
    std::filesystem::remove(path);
    Result<Db> opened = Db::open(path);
    EXPECT_TRUE(opened.ok()) << opened.status().to_string();
    if (opened.ok()) db = std::move(*opened);
  }
  ~TempDb() {
    db = Db();
    for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(path + ext);
  }
};

int64_t new_job(Db& db) {
  JobConfig c;
  c.op = "add";
  c.shape = "n=1000";
  c.budget_count = 1;
  auto job = create_job(db, c);
  EXPECT_TRUE(job.ok()) << job.status().to_string();
  return job.ok() ? *job : 0;
}

void set_lease(Db& db, int64_t job, int64_t pid, const std::string& start) {
  auto u = db.prepare("UPDATE jobs SET status = 'running', lease_host = ?2, lease_pid = ?3, lease_start = ?4, "
                      "heartbeat = ?5 WHERE id = ?1");
  ASSERT_TRUE(u.ok());
  ASSERT_TRUE(u->bind(1, job).bind(2, this_process().host).bind(3, pid).bind(4, start).bind(5, unix_now()).run().ok());
}

// Every op's example shape (what `loom evolve ops` prints) gets held-out shapes that its
// baseline builds for: vec=8 of an elementwise op at n=14336 cannot take n=1 or n=14337.
TEST(EvolveHoldout, EveryOpsBaselineBuildsForItsHeldOutShapes) {
  const ir::TargetKind t = ir::TargetKind::kCpp;
  for (const kernels::OpSpec* op : kernels::all_ops()) {
    const auto tests = op->test_shapes();
    if (tests.empty()) continue;
    const kernels::Shape& shape = tests.back();
    const Candidate base = baseline_candidate(*op, shape, t);
    const auto hs = search_holdout_shapes(*op, shape, t, 3);
    for (const kernels::Shape& s : hs) {
      EXPECT_NE(s.key(), shape.key());
      auto inst = instantiate(base, *op, s, t);
      EXPECT_TRUE(inst.ok()) << op->name() << " {" << s.key() << "}: " << inst.status().to_string();
    }
  }
  const kernels::OpSpec* add = kernels::find_op("add");
  const auto hs = search_holdout_shapes(*add, *kernels::Shape::parse("n=14336"), t, 3);
  ASSERT_FALSE(hs.empty());
  EXPECT_EQ(hs[0].key(), "n=576") << "the smallest test shape the baseline can take";
  for (const kernels::Shape& s : hs) EXPECT_EQ(s.at("n") % 8, 0) << s.key();
}

TEST(EvolveLease, StateComesFromTheHolderNotAFlag) {
  TempDb t("lease");
  const int64_t job = new_job(t.db);
  EXPECT_EQ(job_state(t.db, job)->rfind("new", 0), 0u) << *job_state(t.db, job);

  // A holder that is gone (killed, reaped): interrupted; another process may take the job.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  set_lease(t.db, job, dead, "");
  EXPECT_EQ(job_state(t.db, job)->rfind("interrupted (pid " + std::to_string(dead), 0), 0u) << *job_state(t.db, job);

  // A live holder: running, and a second run is refused with its pid and host.
  const pid_t live = fork();
  if (live == 0) {
    pause();
    _exit(0);
  }
  set_lease(t.db, job, live, "");
  EXPECT_EQ(job_state(t.db, job)->rfind("running (pid " + std::to_string(live), 0), 0u) << *job_state(t.db, job);
  auto refused = JobLease::acquire(t.db, job);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(fmt::format("pid {} on {}", live, this_process().host)), std::string::npos)
      << refused.status().to_string();
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);
  EXPECT_EQ(job_state(t.db, job)->rfind("interrupted", 0), 0u) << *job_state(t.db, job);

  // Taken over, then given back with an error: failed, with the reason.
  auto lease = JobLease::acquire(t.db, job);
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_EQ(job_state(t.db, job)->rfind(fmt::format("running (pid {}", getpid()), 0), 0u);
  EXPECT_TRUE(lease->beat().ok());
  Status s = lease->release(failed_precondition("the baseline fails"));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(*job_state(t.db, job), "failed: the baseline fails");
}

void add_candidate(Db& db, int64_t job, int id, int seq, double speedup, double median_us) {
  Candidate c;
  c.knobs = {{"vec", seq}, {"threads", 1}};
  auto s = db.prepare("INSERT INTO candidates(id, job, seq, parent, synth, kind, hash, body, status, speedup, median_us) "
                      "VALUES (?1, ?2, ?3, 0, 'mutate', 'schedule', ?4, ?5, 'ok', ?6, ?7)");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->bind(1, id).bind(2, job).bind(3, seq).bind(4, c.hash()).bind(5, c.body()).bind(6, speedup)
                  .bind(7, median_us).run().ok());
}

// The tester's case: the search's fastest sample (#2, 2.37x) re-times slower than #1, which
// wins. Status, report and store name #1 with the same timings; #2 is named as the sample.
TEST(EvolveWinner, StatusReportAndStoreReadOneRecord) {
  TempDb t("winner");
  const int64_t job = new_job(t.db);
  add_candidate(t.db, job, 10, 0, 1.0, 20.0);
  add_candidate(t.db, job, 11, 1, 1.90, 10.5);
  add_candidate(t.db, job, 12, 2, 2.37, 8.4);
  ASSERT_TRUE(t.db.exec(fmt::format("UPDATE jobs SET best_candidate = 12, baseline_us = 20, status = 'done' WHERE id = {}", job)).ok());
  ASSERT_TRUE(t.db.exec("UPDATE candidates SET confirmed_speedup = 1.52 WHERE id = 12").ok());

  auto w = search_winner(t.db, job, 11);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  w->rounds = 5;
  w->confirmed_speedup = 1.68;
  w->median_us = 12.3;
  w->baseline_us = 20.7;
  w->final = true;
  const StoredKernel k = stored_kernel_of(*w, "add", *kernels::Shape::parse("n=1000"), "cpu:test");
  ASSERT_TRUE(record_winner(t.db, *w, &k).ok());
  w->kernel = k.id();

  auto read = read_winner(t.db, job);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->candidate, 11);
  EXPECT_EQ((*read)->seq, 1);
  EXPECT_EQ((*read)->line(), w->line());
  EXPECT_NE(w->line().find("#1 (candidate 11): 12.3 us vs the baseline's 20.7 us"), std::string::npos) << w->line();
  EXPECT_NE(w->line().find("stored as evolve-" + std::to_string(job) + ".11 at 1.68x"), std::string::npos) << w->line();

  auto status = job_status(t.db, job);
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->find("  winner: " + w->line() + "\n"), std::string::npos) << *status;

  auto html = job_report_html(t.db, job);
  ASSERT_TRUE(html.ok()) << html.status().to_string();
  EXPECT_NE(html->find("Winner: " + w->line()), std::string::npos);
  EXPECT_NE(html->find("fastest sample was #2 at 2.37x, re-timed at 1.52x"), std::string::npos);
  // The judge's answers by tag: three passed, none rejected yet.
  EXPECT_NE(html->find("<h2>Judged</h2>"), std::string::npos);
  EXPECT_NE(html->find("<td class=''>ok</td><td>3</td><td>#0</td>"), std::string::npos);
  ASSERT_TRUE(t.db.exec(fmt::format("INSERT INTO candidates(id, job, seq, parent, synth, kind, hash, body, status, reason) "
                                    "VALUES (13, {}, 3, 0, 'llm', 'cpp', 'h13', 'x', 'rejected', "
                                    "'timed: timed launch 40 answered wrongly')",
                                    job))
                  .ok());
  html = job_report_html(t.db, job);
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("<td class='rej'>timed</td><td>1</td><td>#3</td><td>timed: timed launch 40 answered wrongly</td>"),
            std::string::npos);

  auto ks = list_kernels(t.db);
  ASSERT_TRUE(ks.ok() && ks->size() == 1u);
  const StoredKernel& s = ks->front();
  EXPECT_EQ(s.id(), w->kernel);
  EXPECT_EQ(s.candidate, 11);
  EXPECT_EQ(s.seq, 1);
  EXPECT_DOUBLE_EQ(s.median_us, 12.3);
  EXPECT_DOUBLE_EQ(s.baseline_us, 20.7);
  EXPECT_DOUBLE_EQ(s.speedup, 1.68);  // the smaller of search (1.90x) and re-timed
  EXPECT_EQ(s.cand.body(), w->cand.body());
}

}  // namespace
}  // namespace loom::evolve
