// The fusion pass and the lowering table, without a device: fused Programs run on the reference
// backend bit-identical to the model's plain Program (every fused op computes its parts; the one
// exception is the tensor-core matmul, whose f16 activations are its own definition), the
// weight plan's planar choice, and every launch of a fused Program lowering to one op call that
// its op accepts with every argument bound. Uses tiny llama and gemma3 models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "../llm/tiny_model.h"
#include "loom/exec/fuse.h"
#include "loom/exec/lowering.h"
#include "loom/exec/weight_plan.h"
#include "loom/model/backend.h"
#include "loom/model/model.h"

namespace loom::exec {
namespace {

using llm::GgmlType;
using llm::OpCode;

std::unique_ptr<llm::Model> load_tiny(const std::string& arch, GgmlType t) {
  llm::tiny::TinySpec spec;
  spec.arch = arch;
  spec.matrix_type = t;
  spec.random_norms = true;
  const std::string path = llm::tiny::write_tiny(spec, "fuse_" + arch + "_" + std::string(llm::ggml_type_name(t)) + ".gguf");
  auto m = llm::Model::load(path, false);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

size_t count(const llm::Program& p, OpCode op) {
  return static_cast<size_t>(std::count_if(p.launches.begin(), p.launches.end(), [&](const llm::Launch& l) { return l.op == op; }));
}

// Logits of a prompt of n tokens and then one more token, each step through `program_for`.
std::vector<float> run(const llm::Model& m, int64_t n, const std::function<llm::Program(int64_t)>& program_for) {
  auto backend = llm::make_ref_backend(2);
  EXPECT_TRUE(backend->init(m, 64, 1).ok());
  const int64_t vocab = m.config().n_vocab;
  std::vector<float> all;
  int64_t past = 0;
  for (int64_t step : {n, int64_t{1}}) {
    const llm::Program p = program_for(step);
    std::vector<int32_t> tokens(static_cast<size_t>(step)), pos(static_cast<size_t>(step));
    for (int64_t t = 0; t < step; ++t) {
      tokens[static_cast<size_t>(t)] = static_cast<int32_t>((7 * (past + t) + 3) % vocab);
      pos[static_cast<size_t>(t)] = static_cast<int32_t>(past + t);
    }
    std::vector<int32_t> rows(static_cast<size_t>(step));
    std::iota(rows.begin(), rows.end(), 0);
    llm::StepInputs in;
    in.tokens = tokens.data();
    in.positions = pos.data();
    in.output_rows = rows.data();
    in.n_kv = past + step;
    std::vector<float> logits(static_cast<size_t>(step * vocab));
    Status s = backend->execute(p, in, logits.data());
    EXPECT_TRUE(s.ok()) << s.to_string();
    all.insert(all.end(), logits.begin(), logits.end());
    past += step;
  }
  return all;
}

struct Case {
  std::string arch;
  GgmlType type;
  ir::TargetKind target;
};

class FusedOnReference : public ::testing::TestWithParam<Case> {};

TEST_P(FusedOnReference, BitIdenticalToThePlainProgram) {
  const Case c = GetParam();
  auto m = load_tiny(c.arch, c.type);
  ASSERT_TRUE(m);
  const WeightPlan plan = WeightPlan::make(*m, c.target);
  FuseOptions on;
  for (int64_t n : {1, 3, 8, 16, 32}) {
    SCOPED_TRACE(testing::Message() << c.arch << " " << llm::ggml_type_name(c.type) << " " << n << " tokens");
    auto plain = [&](int64_t t) { return m->build_program(t, t); };
    bool mma = false;
    auto fused = [&](int64_t t) {
      auto f = fuse_program(m->build_program(t, t), *m, plan, on);
      EXPECT_TRUE(f.ok()) << f.status().to_string();
      // A matmul whose activations are not its weight's vec_dot_type runs a tensor-core
      // matmul's definition (f16 for matmul_mma, Q8_1 blocks for matmul_mmq).
      for (const llm::Launch& l : f->launches) {
        if (l.op != OpCode::kMatMul) continue;
        const GgmlType xt = f->values[static_cast<size_t>(l.in0)].type;
        auto dot = llm::ref::vec_dot_type(m->weight(l.weight).view.type);
        if (xt != GgmlType::F32 && dot.ok() && xt != *dot) mma = true;
      }
      return f.ok() ? std::move(f).value() : llm::Program{};
    };
    const std::vector<float> a = run(*m, n, plain), b = run(*m, n, fused);
    ASSERT_EQ(a.size(), b.size());
    if (!mma) {
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "fused logits differ from the plain Program's";
    } else {
      // Tensor-core matmul steps: close, not equal (their own definitions).
      double num = 0, da = 0, db = 0;
      for (size_t i = 0; i < a.size(); ++i) num += double(a[i]) * b[i], da += double(a[i]) * a[i], db += double(b[i]) * b[i];
      EXPECT_GT(num / std::sqrt(da * db), 0.999) << "tensor-core matmul steps";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, FusedOnReference,
    ::testing::Values(Case{"llama", GgmlType::Q8_0, ir::TargetKind::kPtx}, Case{"llama", GgmlType::Q4_0, ir::TargetKind::kPtx},
                      Case{"llama", GgmlType::Q4_1, ir::TargetKind::kPtx}, Case{"gemma3", GgmlType::Q8_0, ir::TargetKind::kPtx},
                      Case{"llama", GgmlType::Q4_0, ir::TargetKind::kCpp}, Case{"gemma3", GgmlType::Q4_0, ir::TargetKind::kCpp}),
    [](const auto& info) {
      return info.param.arch + "_" + std::string(llm::ggml_type_name(info.param.type)) +
             (info.param.target == ir::TargetKind::kPtx ? "_ptx" : "_cpp");
    });

// The fused forms a GPU decode step of a llama model takes (so the test above is not vacuous):
// norms writing Q8 blocks with the residual add folded in, q|k|v as one launch, gate|up with the
// SwiGLU, the attention writing the o projection's blocks; and none of them with fusions off.
TEST(FusePass, GpuDecodeStepTakesEveryFusedForm) {
  auto m = load_tiny("llama", GgmlType::Q8_0);
  ASSERT_TRUE(m);
  const WeightPlan plan = WeightPlan::make(*m, ir::TargetKind::kPtx);
  const llm::Program plain = m->build_program(1, 1);
  auto f = fuse_program(plain, *m, plan, FuseOptions{});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const size_t n_layer = m->layers().size();
  EXPECT_EQ(count(*f, OpCode::kRmsNormQ8), 2 * n_layer + 1);
  EXPECT_EQ(count(*f, OpCode::kAdd), 0u) << "every residual add folds into the norm after it";
  EXPECT_EQ(count(*f, OpCode::kQuantize), n_layer) << "only the down projection's input is quantized apart";
  EXPECT_EQ(count(*f, OpCode::kSwiGlu), 0u);
  size_t qkv = 0, glu = 0, attn_q = 0;
  for (const llm::Launch& l : f->launches) {
    qkv += l.op == OpCode::kMatMul && l.weight2 >= 0;
    glu += l.op == OpCode::kMatMul && l.glu;
    attn_q += l.op == OpCode::kAttention && l.out1 >= 0;
  }
  EXPECT_EQ(qkv, n_layer);
  EXPECT_EQ(glu, n_layer);
  EXPECT_EQ(attn_q, n_layer) << "64-value attention rows: the attention writes the o projection's blocks";
  const std::string text = f->to_string(m->weight_names());
  EXPECT_NE(text.find("rms_norm_q8"), std::string::npos) << text;
  EXPECT_NE(text.find("rope_kv"), std::string::npos) << text;
  FuseOptions off;
  off.fuse = false;
  auto u = fuse_program(plain, *m, plan, off);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(count(*u, OpCode::kRmsNormQ8) + count(*u, OpCode::kAddRmsNorm), 0u);
  EXPECT_EQ(count(*u, OpCode::kMatMul), count(plain, OpCode::kMatMul));
  // A prompt step uses the prompt attention, which does not quantize.
  auto pp = fuse_program(m->build_program(32, 1), *m, plan, FuseOptions{});
  ASSERT_TRUE(pp.ok());
  for (const llm::Launch& l : pp->launches) EXPECT_FALSE(l.op == OpCode::kAttention && l.out1 >= 0);
}

// One table for both users of the op library: a matrix in GGUF rows that no model binds
// (ggml-hrx's MUL_MAT weights) gets from WeightPlan::for_rows the kernel the engine's plan gives
// the same weight, planar aside, at every step size and on both targets; on PTX that is
// matvec_gpu up to 16 tokens and a tensor-core matmul for prompts, on cpp matvec/matmul.
TEST(WeightPlan, RowsOutsideAModelGetTheEnginesKernel) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1}) {
    auto m = load_tiny("llama", t);
    ASSERT_TRUE(m);
    for (ir::TargetKind target : {ir::TargetKind::kPtx, ir::TargetKind::kCpp}) {
      const WeightPlan plan = WeightPlan::make(*m, target);
      for (size_t w = 0; w < m->weights().size(); ++w) {
        const llm::ref::WeightView& v = m->weights()[w].view;
        if (v.n_out <= 1 || m->weights()[w].n_expert > 0 || !llm::ref::vec_dot_type(v.type).ok()) continue;
        for (int64_t nt : {1, 16, 17, 512}) {
          auto engine = plan.matmul(static_cast<int32_t>(w), nt);
          auto rows = WeightPlan::for_rows(v.type, v.n_in, v.n_out, nt, target);
          ASSERT_TRUE(engine.ok() && rows.ok()) << m->weights()[w].name;
          EXPECT_EQ(rows->op->name(), engine->op->name()) << m->weights()[w].name << " " << nt << " tokens";
          EXPECT_EQ(rows->xtype, engine->xtype);
          EXPECT_EQ(rows->shape.dims.count("planar"), 0u);
          if (target == ir::TargetKind::kCpp) EXPECT_EQ(rows->op->name(), nt == 1 ? "matvec" : "matmul");
        }
      }
    }
  }
  // Llama-3-8B projections on PTX: the decode and prompt kernels the engine measured best.
  const auto ptx = ir::TargetKind::kPtx;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    EXPECT_EQ(WeightPlan::for_rows(t, 4096, 4096, 1, ptx)->op->name(), "matvec_gpu") << llm::ggml_type_name(t);
    EXPECT_EQ(WeightPlan::for_rows(t, 4096, 4096, 512, ptx)->op->name(),
              t == GgmlType::Q6_K ? "matmul_mma" : "matmul_mmq") << llm::ggml_type_name(t);
    EXPECT_EQ(WeightPlan::for_rows(t, 4096, 4096, 512, ptx, PrefillMatmul::kF16)->op->name(), "matmul_mma");
  }
  // On Hopper (wgmma) Q4_0 and Q4_K prompts of planar weights take matmul_mma's weights-in-registers
  // kernel; GGUF rows (for_rows: ggml-hrx's weights), which it does not read, keep matmul_mmq.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q8_0}) {
    auto r = WeightPlan::for_rows(t, 4096, 4096, 512, ptx, PrefillMatmul::kAuto, true);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->op->name(), "matmul_mmq") << llm::ggml_type_name(t);
  }
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0}) {
    auto m = load_tiny("llama", t);
    ASSERT_TRUE(m);
    const WeightPlan plan = WeightPlan::make(*m, ptx, PrefillMatmul::kAuto, true);
    const int32_t wq = m->layers()[0].wq;
    auto k = plan.matmul(wq, 512);
    ASSERT_TRUE(k.ok());
    if (t == GgmlType::Q8_0) {
      EXPECT_EQ(k->op->name(), "matmul_mmq");
      continue;
    }
    ASSERT_EQ(k->op->name(), "matmul_mma");
    EXPECT_EQ(k->shape.at("wgmma"), 1);
    EXPECT_EQ(k->shape.at("planar"), 1);
    EXPECT_EQ(k->op->default_schedule(k->shape, ptx).at("wg_rs"), 1) << k->shape.key();
  }
}

// Which weights go to the planar layout: on PTX every layer projection of a Q4_0 or Q8_0 model
// (matvec_gpu, matmul_mmq and matmul_mma read those planar), none of a Q4_1 model (the prompt
// matmuls refuse Q4_1, and the prompt path must read the same copy), and nothing on the cpp
// target.
TEST(WeightPlan, PlanarWhereBothGpuOpsReadThePlanarForm) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1}) {
    auto m = load_tiny("llama", t);
    ASSERT_TRUE(m);
    size_t expect = 0;
    for (const llm::LayerWeights& l : m->layers())
      for (int32_t id : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) expect += id >= 0 ? 1 : 0;
    const std::vector<bool> ptx = WeightPlan::make(*m, ir::TargetKind::kPtx).planar_flags();
    const std::vector<bool> cpp = WeightPlan::make(*m, ir::TargetKind::kCpp).planar_flags();
    ASSERT_EQ(ptx.size(), m->weights().size());
    EXPECT_EQ(std::count(cpp.begin(), cpp.end(), true), 0);
    const size_t n = static_cast<size_t>(std::count(ptx.begin(), ptx.end(), true));
    if (t == GgmlType::Q4_1) EXPECT_EQ(n, 0u) << "matmul_mma has no Q4_1";
    else EXPECT_EQ(n, expect) << llm::ggml_type_name(t);
    // Layout and kernel agree: every planar weight gets matvec_gpu, matmul_mmq or matmul_mma at
    // every size (matmul_mmq for Q4_0/Q8_0 prompts, matmul_mma when the plan is made without it).
    const WeightPlan plan = WeightPlan::make(*m, ir::TargetKind::kPtx);
    for (size_t w = 0; w < ptx.size(); ++w) {
      if (!ptx[w]) continue;
      for (int64_t nt : {1, 8, 16, 17, 512}) {
        auto k = plan.matmul(static_cast<int32_t>(w), nt);
        ASSERT_TRUE(k.ok()) << k.status().to_string();
        EXPECT_EQ(k->op->name(), nt <= 16 ? "matvec_gpu" : "matmul_mmq");
        auto f16 = WeightPlan::make(*m, ir::TargetKind::kPtx, PrefillMatmul::kF16).matmul(static_cast<int32_t>(w), nt);
        ASSERT_TRUE(f16.ok()) << f16.status().to_string();
        EXPECT_EQ(f16->op->name(), nt <= 16 ? "matvec_gpu" : "matmul_mma");
      }
    }
  }
}

// The lowering table: every launch of a fused Program becomes one call of the op the table
// names, in a shape the op accepts, with every argument of the op bound.
TEST(Lowering, EveryLaunchIsOneCallWithEveryArgumentBound) {
  for (const std::string arch : {"llama", "gemma3"}) {
    auto m = load_tiny(arch, GgmlType::Q8_0);
    ASSERT_TRUE(m);
    for (ir::TargetKind target : {ir::TargetKind::kPtx, ir::TargetKind::kCpp}) {
      const WeightPlan plan = WeightPlan::make(*m, target);
      Bindings at;
      at.value = [](int32_t v) { return 0x100000ull * static_cast<uint64_t>(v + 1); };
      at.weight = [](int32_t w) { return 0x10000000ull + 0x100000ull * static_cast<uint64_t>(w); };
      at.k_cache = at.v_cache = [](int32_t l) { return 0x40000000ull + 0x100000ull * static_cast<uint64_t>(l); };
      at.tokens = 0x10, at.positions = 0x20, at.seq_ids = 0x30, at.output_rows = 0x40;
      at.n_seq_slots = 2, at.n_ctx = 64;
      const LoweringContext ctx{*m, plan, at, 8};
      for (int64_t n : {1, 4, 32}) {
        auto p = fuse_program(m->build_program(n, 1), *m, plan, FuseOptions{});
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        for (const llm::Launch& l : p->launches) {
          auto call = lower_launch(*p, l, ctx);
          ASSERT_TRUE(call.ok()) << llm::op_name(l.op) << ": " << call.status().to_string();
          EXPECT_NE(lowered_op(l.op).find(call->op->name()), std::string_view::npos)
              << llm::op_name(l.op) << " lowered to " << call->op->name();
          Status v = call->op->validate(call->shape);
          EXPECT_TRUE(v.ok()) << call->label << ": " << v.to_string();
          for (const kernels::ArgSpec& a : call->op->args(call->shape))
            if (a.kind == kernels::ArgKind::kBuffer && a.role != kernels::ArgRole::kScratch)  // scratch: the compile step's
              EXPECT_TRUE(call->bind.count(a.name)) << call->label << ": argument " << a.name << " unbound";
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::exec
