// The evaluator's pool of shared input sets (EvalOptions::pool_dir): sets made once, read back by
// later evaluations, never trusted when the file is not the one asked for, and the phase timings.
#include <filesystem>
#include <cstdio>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/worker.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("loom_evolve_pool_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

size_t count_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

// "(input sets: M made, P from the pool)" -> {M, P}; {-1, -1} when absent.
std::pair<int, int> sets_of(const std::string& phases) {
  int m = -1, p = -1;
  size_t at = phases.find("(input sets: ");
  if (at != std::string::npos && std::sscanf(phases.c_str() + at, "(input sets: %d made, %d from the pool)", &m, &p) != 2)
    m = p = -1;
  return {m, p};
}

struct Fixture {
  const kernels::OpSpec* op = kernels::find_op("matvec");
  kernels::Shape shape = *kernels::Shape::parse("n_in=192,n_out=45,n_tokens=1,wtype=2");
  Candidate c;
  EvalOptions o;
  Fixture(const std::string& dir) {
    c.knobs = op->default_schedule(shape, ir::TargetKind::kCpp);
    o.time_budget_s = 0.02;
    o.min_reps = 3;
    o.holdout = holdout_shapes(*op, shape, 2);
    o.pool_dir = dir;
  }
};

TEST(EvolvePool, SetsAreMadeOnceThenRead) {
  ASSERT_NE(kernels::find_op("matvec"), nullptr);
  const std::string dir = temp_dir("reuse");
  Fixture f(dir);
  ASSERT_EQ(f.o.trials, 3);
  ASSERT_EQ(f.o.holdout.size(), 2u);
  f.o.seed = 11;
  EvalResult a = evaluate_isolated("cpu", *f.op, f.shape, f.c, f.o, 120);
  ASSERT_TRUE(a.ok()) << a.status << " " << a.reason;
  // 1 fresh trial + 2 pooled trials + 2 held-out shapes; the pooled ones (4) are written.
  EXPECT_EQ(sets_of(a.phases), std::make_pair(5, 0)) << a.phases;
  EXPECT_EQ(count_files(dir), 4u);
  // The timing images hold sets of their own, counted apart (small ones: one per image, not pooled).
  EXPECT_GT(a.timing_sets, 8) << a.phases;
  EXPECT_NE(a.phases.find(fmt::format("(timing: {} input sets)", a.timing_sets)), std::string::npos) << a.phases;
  EXPECT_GT(a.timed_checks, 0);
  for (const char* p : {"compile ", "inputs ", "reference ", "launch ", "check ", "timing "})
    EXPECT_NE(a.phases.find(p), std::string::npos) << p << " missing from: " << a.phases;
  // Another candidate's evaluation: its own fresh trial, the rest from the pool.
  f.o.seed = 12;
  EvalResult b = evaluate_isolated("cpu", *f.op, f.shape, f.c, f.o, 120);
  ASSERT_TRUE(b.ok()) << b.status << " " << b.reason;
  EXPECT_EQ(sets_of(b.phases), std::make_pair(1, 4)) << b.phases;
  EXPECT_EQ(count_files(dir), 4u);
  // No fresh trial (the job's confirmation rounds): everything from the pool.
  f.o.fresh_trials = 0;
  EvalResult c = evaluate_isolated("cpu", *f.op, f.shape, f.c, f.o, 120);
  ASSERT_TRUE(c.ok()) << c.status << " " << c.reason;
  EXPECT_EQ(sets_of(c.phases), std::make_pair(1, 4)) << "trial 0 is a pool set now, made once: " << c.phases;
  EvalResult d = evaluate_isolated("cpu", *f.op, f.shape, f.c, f.o, 120);
  EXPECT_EQ(sets_of(d.phases), std::make_pair(0, 5)) << d.phases;
  std::filesystem::remove_all(dir);
}

// A pool file whose header names another set (or is damaged) is made again, not used: a wrong
// reference in the pool would judge every later candidate against it.
TEST(EvolvePool, ForeignOrDamagedFilesAreNotUsed) {
  const std::string dir = temp_dir("damaged");
  Fixture f(dir);
  f.o.holdout.clear();
  f.o.fresh_trials = 0;
  EvalResult a = evaluate_isolated("cpu", *f.op, f.shape, f.c, f.o, 120);
  ASSERT_TRUE(a.ok()) << a.status << " " << a.reason;
  ASSERT_EQ(sets_of(a.phases), std::make_pair(3, 0)) << a.phases;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 3u);
  {  // one truncated, one with another seed in its header
    std::filesystem::resize_file(files[0], std::filesystem::file_size(files[0]) / 2);
    std::fstream g(files[1], std::ios::in | std::ios::out | std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
    size_t nl = text.find('\n', text.find('\n', text.find('\n') + 1) + 1);  // after the shape line
    ASSERT_NE(nl, std::string::npos);
    text[nl + 1] = text[nl + 1] == '1' ? '2' : '1';
    g.seekp(0);
    g.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  EvalResult b = evaluate_isolated("cpu", *f.op, f.shape, f.c, f.o, 120);
  ASSERT_TRUE(b.ok()) << b.status << " " << b.reason;
  EXPECT_EQ(sets_of(b.phases), std::make_pair(2, 1)) << b.phases;
  std::filesystem::remove_all(dir);
}

// EvalOptions' pool fields survive the worker's request (the exec'ed path, cuda).
TEST(EvolvePool, OptionsRoundTripThroughTheWorkerRequest) {
  EvalOptions o;
  o.fresh_trials = 2;
  o.pool_seed = 77;
  o.pool_dir = "/tmp/somewhere";
  auto back = eval_options_from_json(eval_options_to_json(o));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->fresh_trials, 2);
  EXPECT_EQ(back->pool_seed, 77u);
  EXPECT_EQ(back->pool_dir, "/tmp/somewhere");
}

}  // namespace
}  // namespace loom::evolve
