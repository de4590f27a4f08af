// The planted cheating candidates of tests/evolve/cheats (one per cheat the evaluator must catch,
// plus honest kernels that must pass), judged on the cpu device in isolated processes exactly
// as a search judges candidates. CUDA C++ files need a GPU: skipped here, with the reason.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "loom/base/options.h"
#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/device.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/user_op.h"
#include "loom/evolve/worker.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

std::string header(const std::string& src, const std::string& key) {
  size_t p = src.find("// " + key + ":");
  if (p == std::string::npos) return "";
  size_t b = p + key.size() + 4, e = src.find('\n', b);
  std::string v = src.substr(b, e - b);
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

std::vector<std::string> files() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(LOOM_SOURCE_DIR) + "/tests/evolve/cheats")) {
    const std::string ext = e.path().extension().string();
    if (ext == ".loom" || ext == ".cpp" || ext == ".cu" || ext == ".ptx") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The loom binary beside this test serves as the exec'ed evaluation worker (cuda candidates,
// and LOOM_EVOLVE_ISOLATION=exec): this process initialises CUDA for its skip checks, and a
// forked child could not use CUDA after that.
const std::string kLoomBin = std::string(LOOM_BINARY_DIR) + "/loom";
const bool kWorkerSet = [] {
  if (std::filesystem::exists(kLoomBin)) set_worker_binary(kLoomBin);
  return true;
}();

double cpu_peak() {
  static double peak = [] {
    auto f = probe_device("cpu", true, 120);
    return f.ok() ? f->peak_gbps : 0.0;
  }();
  return peak;
}

bool expect_matches(const std::string& expect, const std::string& tag) {
  for (size_t p = 0; p <= expect.size();) {
    size_t e = expect.find('|', p);
    if (e == std::string::npos) e = expect.size();
    if (expect.substr(p, e - p) == tag) return true;
    p = e + 1;
  }
  return false;
}

const std::string& shared_pool_dir() {
  static const std::string dir = [] {
    auto p = std::filesystem::temp_directory_path() / ("loom_evolve_cheats_pool_" + std::to_string(getpid()));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

// Removes the shared pool after the last test.
class PoolCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(shared_pool_dir(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kPoolCleanup = ::testing::AddGlobalTestEnvironment(new PoolCleanup);

class Cheat : public ::testing::TestWithParam<std::string> {};

TEST_P(Cheat, JudgedAsExpected) {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/evolve/cheats/" + GetParam();
  auto c = candidate_from_file(path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  if (c->kind == CandKind::kCuda || c->kind == CandKind::kPtx) {
    Status s = hrx::Device::cuda_status();
    if (!s.ok() || hrx::Device::enumerate().size() < 2)
      GTEST_SKIP() << "needs a CUDA device (" << (s.ok() ? "no devices" : s.to_string())
                   << "); run on the H200 with `loom evolve check --device cuda`";
    ASSERT_TRUE(isolate_by_exec("cuda")) << "cuda candidates need the exec'ed worker: build " << kLoomBin;
  }
  const std::string expect = header(c->source, "expect");
  ASSERT_FALSE(expect.empty()) << "every planted file states what it expects";
  std::string shape_text = header(c->source, "shape");
  auto shape = kernels::Shape::parse(shape_text.empty() ? "n=1000" : shape_text);
  ASSERT_TRUE(shape.ok());
  // The op: `add`, or the library op a `// op:` line names, or the one a `// op-file:` line
  // names (relative to the source tree).
  const std::string op_file = header(c->source, "op-file");
  const std::string op_name = header(c->source, "op");
  auto op_or = resolve_op(op_file.empty() ? (op_name.empty() ? "add" : op_name) : "",
                          op_file.empty() ? "" : std::string(LOOM_SOURCE_DIR) + "/" + op_file);
  ASSERT_TRUE(op_or.ok()) << op_or.status().to_string();
  const kernels::OpSpec* op = *op_or;
  EvalOptions o;
  o.holdout = holdout_shapes(*op, *shape, 2);
  o.peak_gbps = cpu_peak();
  ASSERT_GT(o.peak_gbps, 0) << "measured peak read bandwidth";
  o.time_budget_s = 0.2;
  // A file may narrow the timing's input sets, to reach the rule behind the ones it would meet first.
  if (std::string ts = header(c->source, "timing-sets"); !ts.empty()) o.timing_sets = std::stoi(ts);
  if (header(c->source, "perturb") == "0") o.perturb = false;
  // As in a job: one fresh trial, the other trials and held-out shapes from a pool that the
  // planted files share (the cheats must be caught with pooled sets too).
  o.pool_dir = shared_pool_dir();
  const std::string dev = c->kind == CandKind::kCuda || c->kind == CandKind::kPtx ? "cuda" : "cpu";
  const double timeout = expect == "timeout" ? 8 : 120;
  EvalResult r = evaluate_isolated(dev, *op, *shape, *c, o, timeout);
  const bool match = expect_matches(expect, r.tag());
  EXPECT_TRUE(match) << GetParam() << ": expected " << expect << ", got " << r.status << " (" << r.tag() << "): " << r.reason
                     << " " << r.diagnosis;
  if (expect == "ok") EXPECT_GT(r.median_us, 0);
  if (expect != "ok") EXPECT_FALSE(r.ok()) << "a planted cheat is never accepted";
}

INSTANTIATE_TEST_SUITE_P(Planted, Cheat, ::testing::ValuesIn(files()), [](const auto& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// The exec'ed worker (the path cuda candidates take) judges like the forked child: results,
// rejections, a crash, a hang and the phase of a held-out shape all come back over its pipe.
TEST(EvolveWorker, ExecIsolationJudgesLikeFork) {
  ASSERT_TRUE(std::filesystem::exists(kLoomBin)) << "the worker is the loom binary: build the loom target";
  ASSERT_TRUE(opt::set_from_flag(opt::Opt::kEvolveIsolation, "exec").ok());
  ASSERT_TRUE(isolate_by_exec("cpu"));
  const kernels::OpSpec* op = kernels::find_op("add");
  ASSERT_NE(op, nullptr);
  auto facts = probe_device("cpu", false);
  ASSERT_TRUE(facts.ok()) << facts.status().to_string();
  EXPECT_EQ(facts->arch.rfind("cpu:", 0), 0u) << facts->arch;
  EXPECT_GT(facts->threads, 0);
  for (const char* name : {"cpp_honest.cpp", "ir_guard_after.loom", "cpp_shape.cpp", "cpp_crash.cpp", "cpp_hang.cpp"}) {
    auto c = candidate_from_file(std::string(LOOM_SOURCE_DIR) + "/tests/evolve/cheats/" + name);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const std::string expect = header(c->source, "expect");
    auto shape = kernels::Shape::parse(header(c->source, "shape").empty() ? "n=1000" : header(c->source, "shape"));
    ASSERT_TRUE(shape.ok());
    EvalOptions o;
    o.holdout = holdout_shapes(*op, *shape, 2);
    o.time_budget_s = 0.05;
    EvalResult r = evaluate_isolated("cpu", *op, *shape, *c, o, expect == "timeout" ? 3 : 120);
    EXPECT_TRUE(expect_matches(expect, r.tag())) << name << ": expected " << expect << ", got " << r.tag() << ": " << r.reason;
    if (expect == "ok") {
      EXPECT_GT(r.median_us, 0);
    }
  }
  opt::clear_flag(opt::Opt::kEvolveIsolation);
  opt::ScopedFlag by_device(opt::Opt::kEvolveIsolation, "auto");
  EXPECT_FALSE(isolate_by_exec("cpu")) << "the cpu device forks by default";
  EXPECT_TRUE(isolate_by_exec("cuda:0"));
}

TEST(CheatSuite, CoversEveryRule) {
  std::set<std::string> tags;
  for (const std::string& f : files()) {
    std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/evolve/cheats/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    tags.insert(header(ss.str(), "expect"));
  }
  for (const char* t : {"ok", "guard", "input", "stale", "cached", "order", "holdout", "wrong", "floor", "crash", "timeout",
                        "compile_error", "special", "timed", "async", "tamper"})
    EXPECT_TRUE(tags.count(t)) << "no planted file expects " << t;
}

}  // namespace
}  // namespace loom::evolve
