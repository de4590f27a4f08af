// evolve's core pieces: templates, budgets, IR rewrites (semantics kept, checked on the device),
// search determinism, the database, the kernel store and held-out shapes.
#include <filesystem>
#include <random>
#include <set>

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "loom/store/candidate.h"
#include "loom/store/cpp_family.h"
#include "loom/store/db.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/job.h"
#include "loom/evolve/kb.h"
#include "loom/evolve/llm.h"
#include "loom/store/rewrites.h"
#include "loom/evolve/search.h"
#include "loom/store/store.h"
#include "loom/evolve/store_names.h"
#include "loom/base/version.h"
#include "loom/ir/verifier.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

std::string temp_db(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("loom_evolve_test_" + name + "_" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(p);
  return p.string();
}

TEST(EvolveTemplate, ExpressionsAndSubstitution) {
  kernels::Shape s;
  s.dims = {{"n", 1000}, {"n_out", 37}};
  EXPECT_EQ(*eval_expr("(n+255)/256", s), 4);
  EXPECT_EQ(*eval_expr("n_out * 2 - -3 % 2", s), 75);
  EXPECT_FALSE(eval_expr("n / 0", s).ok());
  EXPECT_FALSE(eval_expr("m + 1", s).ok());
  EXPECT_EQ(*substitute("a ${n} b ${(n_out+3)/4}", s), "a 1000 b 10");
  EXPECT_FALSE(substitute("x ${n", s).ok());
}

// `loom ops ir` output (its "// launch NAME grid (X,Y,Z) block (X,Y,Z)" line, no args) is a valid
// IR candidate for its own shape: args are the kernel's pointer parameters in op order.
TEST(EvolveTemplate, OpsIrOutputIsACandidate) {
  const kernels::OpSpec* op = kernels::find_op("matvec");
  auto shape = *kernels::Shape::parse("n_in=64,n_out=37,n_tokens=1,wtype=2");
  auto gen = op->generate(shape, op->default_schedule(shape, ir::TargetKind::kCpp), ir::TargetKind::kCpp);
  ASSERT_TRUE(gen.ok());
  const auto& l = gen->launches[0];
  Candidate c;
  c.kind = CandKind::kIr;
  c.source = fmt::format("// launch {} grid ({},{},{}) block ({},{},{})\n", l.kernel, l.grid[0], l.grid[1], l.grid[2], l.block[0],
                         l.block[1], l.block[2]) + ir::print(gen->module);
  auto inst = instantiate(c, *op, shape, ir::TargetKind::kCpp);
  ASSERT_TRUE(inst.ok()) << inst.status().to_string();
  ASSERT_EQ(inst->launches.size(), 1u);
  EXPECT_EQ(inst->launches[0].args, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(inst->launches[0].grid, l.grid);
  EvalOptions o;
  o.time = false;
  EvalResult r = evaluate_isolated("cpu", *op, shape, c, o, 120);
  EXPECT_TRUE(r.ok()) << r.status << " " << r.reason;
}

TEST(EvolveBudget, Parses) {
  JobConfig c;
  ASSERT_TRUE(parse_budget("10m,500", c).ok());
  EXPECT_EQ(c.budget_s, 600);
  EXPECT_EQ(c.budget_count, 500);
  JobConfig d;
  ASSERT_TRUE(parse_budget("120s", d).ok());
  EXPECT_EQ(d.budget_s, 120);
  EXPECT_EQ(d.budget_count, 0);
  EXPECT_FALSE(parse_budget("10x", d).ok());
  EXPECT_FALSE(parse_budget("", d).ok());
}

TEST(EvolveCandidate, BodyRoundTripAndHash) {
  Candidate c;
  c.knobs = {{"rows_per_block", 4}, {"ev_fma", 1}};
  auto back = Candidate::from_body(c.body());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->knobs, c.knobs);
  EXPECT_EQ(back->hash(), c.hash());
  Candidate d = c;
  d.knobs["ev_fma"] = 0;
  EXPECT_NE(d.hash(), c.hash());
  Candidate t;
  t.kind = CandKind::kCpp;
  t.source = "int x;";
  EXPECT_EQ(Candidate::from_body(t.body())->source, "int x;");
}

// Every rewrite keeps the kernel verified and the op correct on the cpu device (the evaluator's
// full check: trials, repeated launches, held-out shapes).
TEST(EvolveRewrites, KeepMatvecCorrect) {
  const kernels::OpSpec* op = kernels::find_op("matvec");
  ASSERT_NE(op, nullptr);
  auto shape = *kernels::Shape::parse("n_in=192,n_out=45,n_tokens=1,wtype=2");
  for (auto knobs : std::vector<kernels::Schedule>{{{"ev_fma", 1}, {"ev_unroll", 3}, {"ev_opt", 1}},
                                                   {{"ev_fma", 1}, {"ev_unroll", 2}, {"ev_opt", 0}},
                                                   {{"ev_fma", 0}, {"ev_unroll", 6}, {"ev_opt", 1}}}) {
    Candidate c;
    c.knobs = op->default_schedule(shape, ir::TargetKind::kCpp);
    c.knobs.insert(knobs.begin(), knobs.end());
    auto inst = instantiate(c, *op, shape, ir::TargetKind::kCpp);
    ASSERT_TRUE(inst.ok()) << inst.status().to_string();
    EXPECT_TRUE(ir::verify(inst->gen.module, ir::TargetKind::kCpp).ok());
    EvalOptions o;
    o.time = false;
    o.holdout = holdout_shapes(*op, shape, 2);
    EvalResult r = evaluate_isolated("cpu", *op, shape, c, o, 120);
    EXPECT_TRUE(r.ok()) << c.summary() << ": " << r.status << " " << r.reason;
  }
}

// The AVX2 family's table path (cx_xpre, cx_pair), one-thread launches and prefetch spacing
// against the reference on Q4_0, Q4_1 and Q8_0, with an odd block count (a pair path tail) and
// held-out shapes; the knobs that do not change the code are canonicalized away.
TEST(EvolveFamily, TablePathsKeepMatvecCorrect) {
  const kernels::OpSpec* op = kernels::find_op("matvec");
  ASSERT_NE(op, nullptr);
  for (int64_t wt : {2, 3, 8}) {
    auto shape = *kernels::Shape::parse(fmt::format("n_in=224,n_out=45,n_tokens=1,wtype={}", wt));
    const auto space = family_knobs(*op, shape, ir::TargetKind::kCpp);
    ASSERT_FALSE(space.empty());
    for (auto knobs : std::vector<kernels::Schedule>{
             {{"cx_xpre", 1}, {"cx_pair", 1}, {"cx_threads", 1}, {"cx_pf", 2048}, {"cx_pfstep", 2}},
             {{"cx_xpre", 1}, {"cx_pair", 0}, {"cx_threads", 0}, {"cx_pf", 256}, {"cx_pfstep", 4}, {"cx_acc", 2}},
             {{"cx_xpre", 0}, {"cx_pair", 1}, {"cx_threads", 0}, {"cx_rows", 8}, {"cx_unroll", 2}, {"cx_acc", 2}}}) {
      Candidate c;
      c.knobs = op->default_schedule(shape, ir::TargetKind::kCpp);
      for (const kernels::Knob& k : space) c.knobs[k.name] = k.choices[0];
      c.knobs["ev_family"] = 1;
      for (const auto& [k, v] : knobs) c.knobs[k] = v;
      if (wt == 8) c.knobs.erase("cx_pair");
      EvalOptions o;
      o.time = false;
      o.holdout = holdout_shapes(*op, shape, 2);
      EvalResult r = evaluate_isolated("cpu", *op, shape, c, o, 120);
      EXPECT_TRUE(r.ok()) << "wtype " << wt << " " << c.summary() << ": " << r.status << " " << r.reason;
    }
  }
  // Row tiles and the Q4_0 offset mean nothing on the table path; the block size nothing with one thread.
  auto shape = *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2");
  const auto space = family_knobs(*op, shape, ir::TargetKind::kCpp);
  const kernels::Schedule def = op->default_schedule(shape, ir::TargetKind::kCpp);
  kernels::Schedule a = def, b = def;
  for (const kernels::Knob& k : space) a[k.name] = b[k.name] = k.choices[0];
  a["ev_family"] = b["ev_family"] = 1;
  a["cx_pair"] = b["cx_pair"] = 1;
  a["cx_threads"] = b["cx_threads"] = 1;
  a["cx_tile"] = 4;
  a["cx_offset"] = 1;
  a["cx_rows"] = 8;
  canonicalize(a, space, def);
  canonicalize(b, space, def);
  EXPECT_EQ(a, b);
  b["cx_threads"] = 0;
  b["cx_rows"] = 64;
  canonicalize(b, space, def);
  EXPECT_NE(a, b);
}

TEST(EvolveRewrites, UnrollAndSplitChangeTheIr) {
  const kernels::OpSpec* op = kernels::find_op("matvec");
  auto shape = *kernels::Shape::parse("n_in=192,n_out=45,n_tokens=1,wtype=2");
  auto gen = op->generate(shape, op->default_schedule(shape, ir::TargetKind::kCpp), ir::TargetKind::kCpp);
  ASSERT_TRUE(gen.ok());
  ir::Kernel& k = *gen->module.kernels[0];
  const std::string before = ir::print(k);
  EXPECT_GT(split_vector_fma(k), 0);
  EXPECT_GT(unroll_inner_loops(k, 3), 0);  // 6 blocks per row: divisible by 3
  EXPECT_TRUE(ir::verify(gen->module, ir::TargetKind::kCpp).ok());
  const std::string after = ir::print(k);
  EXPECT_EQ(after.find(" fma "), std::string::npos);
  EXPECT_NE(before, after);
  EXPECT_EQ(unroll_inner_loops(k, 4), 0);  // 2 iterations left: not divisible by 4
}

TEST(EvolveSearch, DeterministicGivenSeedAndHistory) {
  std::vector<kernels::Knob> space = {{"a", {1, 2, 4, 8}}, {"b", {1, 2, 3}}, {"ev_fma", {0, 1}}};
  auto run = [&](uint64_t seed, StrategyKind s) {
    History h;
    Node root;
    root.id = 1;
    root.cand.knobs = {{"a", 1}, {"b", 1}, {"ev_fma", 0}};
    root.hash = root.cand.hash();
    root.ok = true;
    root.speedup = 1;
    h.add(root);
    std::vector<std::string> seq;
    for (int i = 1; i < 12; ++i) {
      std::mt19937_64 rng(step_seed(seed, i));
      Pick p = pick_parent(s, h, i, rng);
      const Node* par = p.parent ? h.find(*p.parent) : nullptr;
      auto m = mutate(space, par ? &par->cand : nullptr, h, nullptr, rng);
      if (!m) break;
      Node n;
      n.id = i + 1;
      n.seq = i;
      n.parent = par ? par->id : 0;
      n.cand = m->cand;
      n.hash = m->cand.hash();
      n.ok = i % 4 != 0;
      n.speedup = 1.0 + 0.01 * static_cast<double>(m->cand.knobs["a"] + m->cand.knobs["b"]);  // a fixed "measurement"
      n.island = p.island;
      h.add(n);
      seq.push_back(n.cand.summary());
    }
    return seq;
  };
  for (StrategyKind s : {StrategyKind::kMcts, StrategyKind::kEvolution, StrategyKind::kRandom}) {
    auto a = run(7, s), b = run(7, s), c = run(8, s);
    EXPECT_EQ(a, b) << strategy_name(s);
    EXPECT_NE(a, c) << strategy_name(s);
    std::set<std::string> uniq(a.begin(), a.end());
    EXPECT_EQ(uniq.size(), a.size()) << "no candidate proposed twice";
  }
}

// The opening move: the baseline at the widest vector width first, the next narrower width only
// after a wider one failed, then the strategy's moves; the same from the history alone (resume).
TEST(EvolveSearch, OpeningTriesTheWidestVectorWidthFirst) {
  std::vector<kernels::Knob> space = {{"vw", {1, 4, 8, 16}}, {"ev", {1, 2, 4}}, {"bs", {64, 32}}};
  History h;
  Node root;
  root.id = 1;
  root.cand.knobs = {{"vw", 1}, {"ev", 1}, {"bs", 64}};
  root.hash = root.cand.hash();
  root.ok = true;
  root.speedup = 1;
  h.add(root);
  auto first = opening_move(space, h, h);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->cand.knobs.at("vw"), 16);
  EXPECT_EQ(first->cand.knobs.at("ev"), 1);  // only the width moves
  EXPECT_EQ(first->cand.knobs.at("bs"), 64);
  EXPECT_NE(first->diff.find("vw 1->16"), std::string::npos) << first->diff;
  // Proposed but not evaluated yet (a batch): no second opening.
  History seen = h;
  Node pending;
  pending.seq = 1;
  pending.hash = first->cand.hash();
  seen.add(pending);
  EXPECT_FALSE(opening_move(space, h, seen).has_value());
  // vw=16 failed (e.g. the shape does not allow it): vw=8 next.
  Node failed;
  failed.id = 2;
  failed.seq = 1;
  failed.parent = 1;
  failed.cand = first->cand;
  failed.hash = first->cand.hash();
  failed.ok = false;
  History h2 = h;
  h2.add(failed);
  auto second = opening_move(space, h2, h2);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->cand.knobs.at("vw"), 8);
  auto again = opening_move(space, h2, h2);  // no generator: the same answer every time
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->cand.hash(), second->cand.hash());
  // vw=16 worked: the opening is over.
  History h3 = h;
  failed.ok = true;
  failed.speedup = 3;
  h3.add(failed);
  EXPECT_FALSE(opening_move(space, h3, h3).has_value());
  // No vw knob, or a baseline already at the widest: no opening.
  std::vector<kernels::Knob> no_vw = {{"ev", {1, 2, 4}}, {"bs", {64, 32}}};
  EXPECT_FALSE(opening_move(no_vw, h, h).has_value());
  History wide;
  Node w = root;
  w.cand.knobs["vw"] = 16;
  w.hash = w.cand.hash();
  wide.add(w);
  EXPECT_FALSE(opening_move(space, wide, wide).has_value());
}

TEST(EvolveSearch, SkillsBiasMutations) {
  std::vector<kernels::Knob> space = {{"a", {1, 2, 4, 8}}, {"b", {1, 2, 3}}, {"ev_fma", {0, 1}}};
  Candidate parent;
  parent.knobs = {{"a", 1}, {"b", 1}, {"ev_fma", 0}};
  SkillTable skills;
  skills.score[{"ev_fma", 1}] = 0.5;
  int with = 0, without = 0;
  for (int i = 0; i < 400; ++i) {
    History h;
    std::mt19937_64 r1(i), r2(i);
    with += mutate(space, &parent, h, &skills, r1)->cand.knobs["ev_fma"] == 1;
    without += mutate(space, &parent, h, nullptr, r2)->cand.knobs["ev_fma"] == 1;
  }
  EXPECT_GT(with, without + 80);
}

TEST(EvolveDb, StoreAndSkills) {
  const std::string path = temp_db("store");
  {
    auto db = Db::open(path);
    ASSERT_TRUE(db.ok()) << db.status().to_string();
    StoredKernel k;
    k.op = "matvec";
    auto shape = *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2");
    k.shape_key = shape.key();
    k.shape_class = shape_class("matvec", shape);
    k.device_arch = "cpu:test";
    k.loom_version = std::string(loom_version());
    k.cand.knobs = {{"rows_per_block", 8}, {"row_tile", 2}};
    k.speedup = 1.4;
    ASSERT_TRUE(put_kernel(*db, k).ok());
    ASSERT_TRUE(record_skill(*db, "matvec", "cpu", {{"a", 1}}, {{"a", 2}}, 0.2).ok());
    ASSERT_TRUE(record_skill(*db, "matvec", "cpu", {{"a", 1}}, {{"a", 2}}, 0.0).ok());
    auto sk = load_skills(*db, "matvec", "cpu");
    ASSERT_TRUE(sk.ok());
    EXPECT_NEAR((sk->score[{"a", 2}]), 0.1, 1e-9);
  }
  auto same = best_kernel("matvec", *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2"), "cpu:test", path);
  ASSERT_TRUE(same.ok() && same->has_value());
  EXPECT_EQ((*same)->cand.knobs.at("rows_per_block"), 8);
  auto cls = best_kernel("matvec", *kernels::Shape::parse("n_in=1536,n_out=576,n_tokens=1,wtype=2"), "cpu:test", path);
  ASSERT_TRUE(cls.ok() && cls->has_value()) << "same shape class";
  auto other = best_kernel("matvec", *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=3"), "cpu:test", path);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value()) << "another weight type is another class";
  auto none = best_kernel("matvec", *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2"), "cpu:other", path);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto missing = best_kernel("matvec", *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2"), "cpu:test",
                             path + ".absent");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  std::filesystem::remove(path);
}

TEST(EvolveHoldout, ShapesDifferAndValidate) {
  const kernels::OpSpec* op = kernels::find_op("matvec");
  auto shape = *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2");
  auto hs = holdout_shapes(*op, shape, 3);
  ASSERT_GE(hs.size(), 2u);
  bool odd = false;
  for (const auto& s : hs) {
    EXPECT_NE(s.key(), shape.key());
    EXPECT_TRUE(op->validate(s).ok()) << s.key();
    EXPECT_EQ(s.at("wtype"), 2);
    odd = odd || s.at("n_out") % 2 == 1;
  }
  EXPECT_TRUE(odd) << "an odd n_out among the held-out shapes";
}

TEST(EvolveKb, DocumentsSearchable) {
  const std::string path = temp_db("kb");
  auto db = Db::open(path);
  ASSERT_TRUE(db.ok());
  auto n = index_documents(*db, std::string(LOOM_SOURCE_DIR) + "/kb");
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  ASSERT_GE(*n, 3);
  auto docs = search_documents(*db, "instruction/latency-bound: 20% of the measured read bandwidth", 3);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_FALSE(docs->empty());
  std::filesystem::remove(path);
}

TEST(EvolveLlm, ParsesKernelsOutOfReplies) {
  auto c = parse_reply("Here:\n```loom\n// launch k grid=1,1,1 block=1,1,1 args=0\nkernel @k(%a: ptr<global, f32>) {\n}\n```\nDone",
                       ir::TargetKind::kCpp, "");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, CandKind::kIr);
  auto d = parse_reply("```cpp\nextern \"C\" void k(void* const* a, const LoomLaunchDims* d) {}\n```", ir::TargetKind::kCpp, "");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, CandKind::kCpp);
  EXPECT_TRUE(parse_reply("I cannot help with that.", ir::TargetKind::kCpp, "").empty());
  EXPECT_TRUE(parse_reply("```cuda\n__global__ void k() {}\n```", ir::TargetKind::kCpp, "").empty()) << "CUDA is not for the cpu";
}

}  // namespace
}  // namespace loom::evolve
