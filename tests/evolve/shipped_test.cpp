// The kernels that ship with Loom (store/shipped.h, data/kernels/*.json): the compiled-in files
// are the source tree's, they parse, every cpu kernel reproduces its op's default schedule bit for
// bit (the cpu driver's contract with the reference engine), GPU kernels build for their target
// (and pass the judge where such a GPU is here); lookups match exact shapes and never mix keys;
// bad files are refused with the entry named.
#include "loom/store/shipped.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <set>
#include <sstream>

#include "loom/codegen/cpp/host_compiler.h"
#include "loom/evolve/device.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/job.h"
#include "loom/evolve/ship.h"
#include "loom/kernels/matmul_cpu.h"
#include "loom/kernels/op_spec.h"
#include "loom/store/candidate.h"
#include "loom/store/cpp_family.h"

namespace loom::evolve {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ShippedKernels, CompiledInFilesAreTheSourceTreesAndParse) {
  auto files = store::shipped_files();
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  std::set<std::string> in_binary, in_tree;
  for (const store::ShippedFile& f : **files) {
    in_binary.insert(f.name);
    const auto path = std::filesystem::path(LOOM_SOURCE_DIR) / "data" / "kernels" / f.name;
    auto again = store::parse_shipped(f.name, slurp(path));
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(again->kernels.size(), f.kernels.size()) << f.name << ": rebuild to embed the current file";
    EXPECT_TRUE(f.device_arch.rfind("cpu:", 0) == 0 || f.device_arch.rfind("cuda:sm_", 0) == 0 ||
                f.device_arch.rfind("amdgpu:gfx", 0) == 0)
        << f.name << ": key " << f.device_arch;
    EXPECT_FALSE(f.commit.empty() || f.command.empty() || f.searched_on.empty()) << f.name << ": provenance missing";
  }
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(LOOM_SOURCE_DIR) / "data" / "kernels"))
    if (e.is_regular_file() && e.path().extension() == ".json") in_tree.insert(e.path().filename().string());
  EXPECT_EQ(in_binary, in_tree);
}

TEST(ShippedKernels, EveryKernelKeepsItsBaselinesBitsOnTheCpuAndBuildsForItsGpu) {
  auto files = store::shipped_files();
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  auto cpu = EvalDevice::open("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  int checked = 0;
  for (const store::ShippedFile& f : **files) {
    for (const store::StoredKernel& k : f.kernels) {
      SCOPED_TRACE(f.name + ": " + k.id() + " " + k.op + " {" + k.shape_key + "}");
      const kernels::OpSpec* op = kernels::find_op(k.op);
      ASSERT_NE(op, nullptr);
      const kernels::Shape shape = *kernels::Shape::parse(k.shape_key);
      if (f.device_arch.rfind("cpu:", 0) == 0) {
        const std::string level = f.device_arch.substr(4);
        if (Status s = codegen::check_cpu_arch(level); !s.ok()) {
          std::printf("not run here (%s): %s\n", f.name.c_str(), s.to_string().c_str());
          continue;
        }
        EXPECT_EQ(differs_from_baseline(**cpu, *op, shape, k.cand), "");
        ++checked;
      } else if (f.device_arch.rfind("cuda:", 0) == 0) {
        auto inst = store::instantiate(k.cand, *op, shape, ir::TargetKind::kPtx);
        ASSERT_TRUE(inst.ok()) << inst.status().to_string();
        auto gpu = EvalDevice::open("cuda");
        if (!gpu.ok()) continue;  // built above; judged where the GPU is (the GPU runs of the op tests)
        EvalOptions o;
        o.time = false;
        EvalResult r = evaluate(**gpu, *op, shape, k.cand, o);
        EXPECT_TRUE(r.ok()) << r.status << " " << r.reason;
        ++checked;
      }
    }
  }
  std::printf("%d shipped kernels checked on this machine\n", checked);
}

constexpr std::string_view kFile = R"({"format": 1, "device_arch": "cpu:x86-64-v3", "searched_on": "cpu:test",
  "commit": "abc", "date": "2026-12-07", "command": "loom evolve ship ...",
  "kernels": [
   {"op": "matvec", "shape": "n_in=576,n_out=1536,n_tokens=1,wtype=2", "body": {"kind": "schedule", "knobs": {"rows_per_block": 8}}, "speedup": 1.1},
   {"op": "matvec", "shape": "n_in=2048,n_out=8192,n_tokens=1,wtype=2", "body": {"kind": "schedule", "knobs": {"rows_per_block": 16}}, "speedup": 1.3}
  ]})";

// An exact job's space and baseline hold no knob value that its knob names inexact: the C++
// family's two-block registers and second accumulator, fma contraction, the summed token lanes
// (which are the cpu's default for Q4_0 prompts, so the exact baseline leaves them).
TEST(ShippedKernels, ExactJobsDropTheKnobsInexactValues) {
  const kernels::OpSpec* mv = kernels::find_op("matvec");
  const kernels::OpSpec* mm = kernels::find_op("matmul");
  ASSERT_NE(mv, nullptr);
  ASSERT_NE(mm, nullptr);
  const kernels::Shape vec{{{"n_in", 576}, {"n_out", 1536}, {"n_tokens", 1}, {"wtype", 2}}};
  const kernels::Shape mat{{{"n_in", 576}, {"n_out", 1536}, {"n_tokens", 128}, {"wtype", 2}}};
  std::vector<kernels::Knob> space = mm->schedule_space(mat, ir::TargetKind::kCpp);
  for (const kernels::Knob& k : store::rewrite_knobs(ir::TargetKind::kCpp)) space.push_back(k);
  for (const kernels::Knob& k : store::family_knobs(*mv, vec, ir::TargetKind::kCpp)) space.push_back(k);
  std::map<std::string, std::vector<int64_t>> before, after;
  for (const kernels::Knob& k : space) before[k.name] = k.choices;
  store::keep_exact_choices(space);
  for (const kernels::Knob& k : space) after[k.name] = k.choices;
  // tok_lanes 3 (AMX tiles) is offered where the CPU has AMX; like 2 it is not the reference's bits.
  const bool amx = kernels::matmul_amx_takes(mat);
  EXPECT_EQ(before["tok_lanes"], amx ? (std::vector<int64_t>{0, 1, 2, 3}) : (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(after["tok_lanes"], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(after["ev_fma"], (std::vector<int64_t>{0}));
  EXPECT_EQ(after["cx_pair"], (std::vector<int64_t>{0}));
  EXPECT_EQ(after["cx_acc"], (std::vector<int64_t>{1}));
  EXPECT_EQ(after["rows_per_block"], before["rows_per_block"]);  // knobs with no inexact value keep all

  // The default: AMX tiles where the CPU has them, else summed lanes.
  EXPECT_EQ(baseline_candidate(*mm, mat, ir::TargetKind::kCpp).knobs.at("tok_lanes"), amx ? 3 : 2);
  const Candidate exact = baseline_candidate(*mm, mat, ir::TargetKind::kCpp, true);
  EXPECT_NE(exact.knobs.at("tok_lanes"), 2);
  EXPECT_NE(exact.knobs.at("tok_lanes"), 3);
  EXPECT_EQ(exact.knobs.at("ev_fma"), 0);
  const Candidate family = baseline_candidate(*mv, vec, ir::TargetKind::kCpp, true);
  EXPECT_EQ(family.knobs.at("cx_pair"), 0);
  EXPECT_EQ(family.knobs.at("cx_acc"), 1);
}

TEST(ShippedKernels, ExactShapesOnlyAndKeysNeverMix) {
  auto f = store::parse_shipped("t.json", kFile);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::vector<store::ShippedFile> files = {*f};
  auto knob = [](const std::optional<store::StoredKernel>& k) { return k ? k->cand.knobs.at("rows_per_block") : -1; };
  EXPECT_EQ(knob(store::find_shipped(files, "matvec", *kernels::Shape::parse("n_in=2048,n_out=8192,n_tokens=1,wtype=2"),
                                     "cpu:x86-64-v3")), 16);
  const auto exact = *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2");
  EXPECT_EQ(knob(store::find_shipped(files, "matvec", exact, "cpu:x86-64-v3")), 8);
  const auto other = *kernels::Shape::parse("n_in=576,n_out=576,n_tokens=1,wtype=2");
  EXPECT_EQ(store::find_shipped(files, "matvec", other, "cpu:x86-64-v3"), std::nullopt);  // not another shape's
  EXPECT_EQ(store::find_shipped(files, "matvec", exact, "cpu:x86-64-v4"), std::nullopt);
  const auto q4_1 = *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=3");
  EXPECT_EQ(store::find_shipped(files, "matvec", q4_1, "cpu:x86-64-v3"), std::nullopt);
  auto found = store::find_shipped(files, "matvec", exact, "cpu:x86-64-v3");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->origin, "shipped:t.json");
  // Written back, it reads the same.
  auto again = store::parse_shipped("t.json", store::shipped_json(*f));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  ASSERT_EQ(again->kernels.size(), 2u);
  for (const store::StoredKernel& k : f->kernels) {
    auto same = store::find_shipped({*again}, "matvec", *kernels::Shape::parse(k.shape_key), "cpu:x86-64-v3");
    ASSERT_TRUE(same);
    EXPECT_EQ(same->cand.body(), k.cand.body());
    EXPECT_EQ(same->speedup, k.speedup);
  }
  EXPECT_EQ(again->command, f->command);
}

TEST(ShippedKernels, BadFilesAreRefusedNamingTheEntry) {
  auto err = [](std::string_view text) {
    auto f = store::parse_shipped("bad.json", text);
    return f.ok() ? std::string("parsed") : f.status().to_string();
  };
  EXPECT_NE(err("{").find("not a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"format": 2, "device_arch": "cpu:x86-64-v3", "kernels": []})").find("format 2"), std::string::npos);
  EXPECT_NE(err(R"({"format": 1, "kernels": []})").find("no device_arch"), std::string::npos);
  const std::string unknown = err(R"({"format": 1, "device_arch": "cpu:x86-64-v3", "kernels": [
      {"op": "no_such_op", "shape": "n=1", "body": {"kind": "schedule", "knobs": {}}}]})");
  EXPECT_NE(unknown.find("kernel 0 names unknown op 'no_such_op'"), std::string::npos) << unknown;
  const std::string twice = err(R"({"format": 1, "device_arch": "cpu:x86-64-v3", "kernels": [
      {"op": "matvec", "shape": "n_in=64,n_out=8,n_tokens=1,wtype=2", "body": {"kind": "schedule", "knobs": {}}},
      {"op": "matvec", "shape": "n_in=64,n_out=8,n_tokens=1,wtype=2", "body": {"kind": "schedule", "knobs": {}}}]})");
  EXPECT_NE(twice.find("listed twice"), std::string::npos) << twice;
  EXPECT_NE(err(R"({"format": 1, "device_arch": "cpu:x86-64-v3", "kernels": [{"op": "matvec", "shape": "n_in=64,n_out=8,n_tokens=1,wtype=2"}]})")
                .find("has no body"),
            std::string::npos);
}

TEST(ShippedKernels, SearchesFileErrorsNameTheSearch) {
  EXPECT_FALSE(parse_ship_searches("s.json", "[]").ok());
  auto unknown = parse_ship_searches("s.json", R"({"searches": [{"op": "nope", "shape": "n=1"}]})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().to_string().find("search 0 names unknown op 'nope'"), std::string::npos);
  auto bad_shape = parse_ship_searches("s.json", R"({"searches": [{"op": "matvec", "shape": "n_in=64,n_out=8,n_tokens=1,wtype=999"}]})");
  EXPECT_FALSE(bad_shape.ok());
  auto ok = parse_ship_searches("s.json", slurp(std::filesystem::path(LOOM_SOURCE_DIR) / "data/kernels/searches/cpu.json"));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_GE(ok->size(), 5u);
}

}  // namespace
}  // namespace loom::evolve
