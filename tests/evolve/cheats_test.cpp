// The planted cheating candidates of tests/evolve/cheats (one per cheat the evaluator must catch,
// plus honest kernels that must pass), judged on the cpu device in isolated processes exactly
// as a search judges candidates. CUDA C++ files need a GPU: skipped here, with the reason.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "loom/evolve/candidate.h"
#include "loom/evolve/device.h"
#include "loom/evolve/evaluator.h"
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

double cpu_peak() {
  static double peak = [] {
    auto out = run_isolated([]() -> std::string {
      auto d = EvalDevice::open("cpu");
      if (!d.ok()) return "0";
      auto g = measure_read_gbps(**d);
      return g.ok() ? std::to_string(*g) : "0";
    }, 120);
    return out.ok() ? std::atof(out->c_str()) : 0.0;
  }();
  return peak;
}

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
  }
  const std::string expect = header(c->source, "expect");
  ASSERT_FALSE(expect.empty()) << "every planted file states what it expects";
  std::string shape_text = header(c->source, "shape");
  auto shape = kernels::Shape::parse(shape_text.empty() ? "n=1000" : shape_text);
  ASSERT_TRUE(shape.ok());
  const kernels::OpSpec* op = kernels::find_op("add");
  ASSERT_NE(op, nullptr);
  EvalOptions o;
  o.holdout = holdout_shapes(*op, *shape, 2);
  o.peak_gbps = cpu_peak();
  ASSERT_GT(o.peak_gbps, 0) << "measured peak read bandwidth";
  o.time_budget_s = 0.2;
  const std::string dev = c->kind == CandKind::kCuda || c->kind == CandKind::kPtx ? "cuda" : "cpu";
  const double timeout = expect == "timeout" ? 8 : 120;
  EvalResult r = evaluate_isolated(dev, *op, *shape, *c, o, timeout);
  bool match = false;
  for (size_t p = 0; p <= expect.size();) {
    size_t e = expect.find('|', p);
    if (e == std::string::npos) e = expect.size();
    match = match || expect.substr(p, e - p) == r.tag();
    p = e + 1;
  }
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

TEST(CheatSuite, CoversEveryRule) {
  std::set<std::string> tags;
  for (const std::string& f : files()) {
    std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/evolve/cheats/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    tags.insert(header(ss.str(), "expect"));
  }
  for (const char* t : {"ok", "guard", "input", "stale", "cached", "order", "holdout", "wrong", "floor", "crash", "timeout",
                        "compile_error"})
    EXPECT_TRUE(tags.count(t)) << "no planted file expects " << t;
}

}  // namespace
}  // namespace loom::evolve
