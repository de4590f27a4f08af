// Persistent evaluation workers (`loom evolve worker @serve`, the path cuda candidates take),
// driven on the cpu device through LOOM_EVOLVE_ISOLATION=exec: one process serves passing
// candidates one after another with its device kept open; a crash, a hang or a rejection ends
// that worker only, is judged as with one process per candidate, and the next candidate gets a
// fresh worker.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "loom/base/options.h"
#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/worker.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

const std::string kLoomBin = std::string(LOOM_BINARY_DIR) + "/loom";

struct Planted {
  Candidate cand;
  kernels::Shape shape;
};

Planted planted(const std::string& name) {
  auto c = candidate_from_file(std::string(LOOM_SOURCE_DIR) + "/tests/evolve/cheats/" + name);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  std::string shape = "n=1000";
  if (size_t p = c->source.find("// shape:"); p != std::string::npos) {
    size_t e = c->source.find('\n', p);
    shape = c->source.substr(p + 9, e - p - 9);
    while (!shape.empty() && shape.front() == ' ') shape.erase(0, 1);
  }
  auto s = kernels::Shape::parse(shape);
  EXPECT_TRUE(s.ok());
  return {*c, *s};
}

TEST(EvolveServe, OneWorkerForPassingCandidatesAFreshOneAfterAnyFailure) {
  ASSERT_TRUE(std::filesystem::exists(kLoomBin)) << "the worker is the loom binary: build the loom target";
  set_worker_binary(kLoomBin);
  opt::ScopedFlag exec(opt::Opt::kEvolveIsolation, "exec");
  opt::ScopedFlag persistent(opt::Opt::kEvolvePersistent, "1");
  ASSERT_TRUE(persistent_workers());
  stop_persistent_workers();
  const kernels::OpSpec* op = kernels::find_op("add");
  ASSERT_NE(op, nullptr);
  auto eval = [&](const std::string& name, double timeout_s = 120) {
    Planted p = planted(name);
    EvalOptions o;
    o.holdout = holdout_shapes(*op, p.shape, 2);
    o.time_budget_s = 0.05;
    return evaluate_isolated("cpu", *op, p.shape, p.cand, o, timeout_s);
  };

  EvalResult a = eval("cpp_honest.cpp");
  ASSERT_TRUE(a.ok()) << a.status << " " << a.reason;
  const int pid1 = persistent_worker_pid("cpu");
  EXPECT_GT(pid1, 0) << "a passing candidate keeps its worker";
  EXPECT_EQ(a.phases.find("(kept)"), std::string::npos) << "the first request opens the device: " << a.phases;
  EvalResult b = eval("ir_honest.loom");
  ASSERT_TRUE(b.ok()) << b.status << " " << b.reason;
  EXPECT_EQ(persistent_worker_pid("cpu"), pid1) << "the same worker serves the next candidate";
  EXPECT_EQ(b.phases.rfind("open 0.00s (kept)", 0), 0u) << b.phases;

  // A crash: judged as in a one-shot worker (tag crash), the worker is gone, the next candidate
  // gets a fresh one.
  EvalResult c = eval("cpp_crash.cpp");
  EXPECT_EQ(c.tag(), "crash") << c.reason;
  EXPECT_EQ(persistent_worker_pid("cpu"), -1);
  EvalResult d = eval("cpp_honest.cpp");
  ASSERT_TRUE(d.ok()) << d.status << " " << d.reason;
  const int pid2 = persistent_worker_pid("cpu");
  EXPECT_GT(pid2, 0);
  EXPECT_NE(pid2, pid1);
  EXPECT_EQ(d.phases.find("(kept)"), std::string::npos) << d.phases;

  // A hang: killed at the timeout, recorded as timeout; the next candidate is served.
  EvalResult e = eval("cpp_hang.cpp", 3);
  EXPECT_EQ(e.tag(), "timeout") << e.reason;
  EXPECT_EQ(persistent_worker_pid("cpu"), -1);
  EXPECT_NE(kill(pid2, 0), 0) << "the hung worker was killed and reaped";
  EvalResult f = eval("cpp_honest.cpp");
  ASSERT_TRUE(f.ok()) << f.status << " " << f.reason;

  // A rejection ends the worker too (it may have written outside its buffers), with its tag.
  const int pid3 = persistent_worker_pid("cpu");
  EXPECT_GT(pid3, 0);
  EvalResult g = eval("ir_guard_after.loom");
  EXPECT_EQ(g.tag(), "guard") << g.reason;
  EXPECT_EQ(persistent_worker_pid("cpu"), -1);
  EvalResult h = eval("cpp_shape.cpp");
  EXPECT_EQ(h.tag(), "holdout") << h.reason;
  EvalResult i = eval("cpp_honest.cpp");
  ASSERT_TRUE(i.ok()) << i.status << " " << i.reason;
  EXPECT_NE(persistent_worker_pid("cpu"), pid3);

  stop_persistent_workers();
  EXPECT_EQ(persistent_worker_pid("cpu"), -1);
  // LOOM_EVOLVE_PERSISTENT=0: one process per request again.
  opt::ScopedFlag one_per_request(opt::Opt::kEvolvePersistent, "0");
  EvalResult j = eval("cpp_honest.cpp");
  EXPECT_TRUE(j.ok()) << j.status << " " << j.reason;
  EXPECT_EQ(persistent_worker_pid("cpu"), -1);
}

}  // namespace
}  // namespace loom::evolve
