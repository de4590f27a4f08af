// The lowering's decisions that need no device: FusionPlanner's default for the quantizing
// attention (out_q: on for GPU decode steps of models with short attention rows, off with
// LOOM_FUSE_ATTN=0, never on the cpu driver unless fusions are asked for), which weights go to
// the planar layout, and the environment's switches parsed once into LoweringOptions. Uses tiny
// llama models (64-value attention rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../llm/tiny_model.h"
#include "loom/exec/fusion_plan.h"
#include "loom/exec/planar_weights.h"
#include "loom/model/model.h"

namespace loom::exec {
namespace {

size_t attention_quantized(const llm::Model& m, ir::TargetKind target, const LoweringOptions& o) {
  const llm::Program p = m.build_program(1, 1);
  FusionPlanner planner(m, target, false, o);
  auto f = planner.plan(p, 1);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? f->attn_q.size() : 0;
}

TEST(FusionPlan, QuantizingAttentionByDefaultOnShortRowsOnGpus) {
  llm::tiny::TinySpec spec;
  spec.matrix_type = llm::GgmlType::Q4_0;
  const std::string path = llm::tiny::write_tiny(spec, "fusion_plan_tiny_q4_0.gguf");
  auto model = llm::Model::load(path, false);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const LoweringOptions def;
  EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kPtx, def), static_cast<size_t>(spec.n_layer))
      << "64-value rows: every layer's attention writes the o projection's blocks";
  EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kCpp, def), 0u) << "no fusions on the cpu driver by default";
  LoweringOptions off;
  off.fuse_attn = LoweringOptions::FuseAttn::kOff;
  EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kPtx, off), 0u);
  LoweringOptions all;
  all.fuse_attn = LoweringOptions::FuseAttn::kAll;
  all.fuse = LoweringOptions::Fuse::kOn;
  EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kCpp, all), static_cast<size_t>(spec.n_layer));
}

// Which weights go to the planar layout: on PTX every layer projection of a Q4_0 or Q8_0 model
// (both matvec_gpu and matmul_mma read those planar), none of a Q4_1 model (matvec_gpu has a
// planar Q4_1 form, matmul_mma refuses Q4_1, and the prompt path must read the same copy), and
// nothing on the cpp target.
TEST(PlanarWeights, ProjectionsWhoseOpsBothReadThePlanarForm) {
  for (llm::GgmlType t : {llm::GgmlType::Q4_0, llm::GgmlType::Q8_0, llm::GgmlType::Q4_1}) {
    llm::tiny::TinySpec spec;
    spec.matrix_type = t;
    const std::string path = llm::tiny::write_tiny(spec, "planar_tiny_" + std::string(llm::ggml_type_name(t)) + ".gguf");
    auto model = llm::Model::load(path, false);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const llm::Model& m = **model;
    size_t expect = 0;
    for (const llm::LayerWeights& l : m.layers())
      for (int32_t id : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) expect += id >= 0 ? 1 : 0;
    const std::vector<bool> ptx = exec::planar_weights(m, ir::TargetKind::kPtx);
    const std::vector<bool> cpp = exec::planar_weights(m, ir::TargetKind::kCpp);
    ASSERT_EQ(ptx.size(), m.weights().size());
    EXPECT_EQ(std::count(cpp.begin(), cpp.end(), true), 0);
    const size_t n = static_cast<size_t>(std::count(ptx.begin(), ptx.end(), true));
    if (t == llm::GgmlType::Q4_1) EXPECT_EQ(n, 0u) << "matmul_mma has no Q4_1";
    else EXPECT_EQ(n, expect) << llm::ggml_type_name(t);
  }
}

// The A/B switches as the environment sets them; unknown values keep the default and say so.
TEST(LoweringOptions, FromEnvironment) {
  const char* names[] = {"LOOM_GPU_FAST_OPS", "LOOM_GPU_BATCH_MATVEC", "LOOM_PLANAR",    "LOOM_FUSE",
                         "LOOM_FUSE_NORM",    "LOOM_FUSE_ATTN",        "LOOM_GPU_PDL_PROMPT", "LOOM_DECODE_ATTENTION_MAX"};
  for (const char* n : names) unsetenv(n);
  std::vector<std::string> w;
  LoweringOptions d = LoweringOptions::from_env(&w);
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(d.gpu_fast_ops && d.gpu_batch_matvec && d.planar && !d.pdl_prompt);
  EXPECT_EQ(d.fuse, LoweringOptions::Fuse::kGpuOnly);
  EXPECT_EQ(d.fuse_norm, LoweringOptions::FuseNorm::kQ8);
  EXPECT_EQ(d.fuse_attn, LoweringOptions::FuseAttn::kShortRows);
  EXPECT_EQ(d.decode_attention_max, 8);
  setenv("LOOM_GPU_FAST_OPS", "0", 1);
  setenv("LOOM_PLANAR", "0", 1);
  setenv("LOOM_FUSE", "1", 1);
  setenv("LOOM_FUSE_NORM", "q8_0", 1);
  setenv("LOOM_FUSE_ATTN", "0", 1);
  setenv("LOOM_GPU_PDL_PROMPT", "1", 1);
  setenv("LOOM_DECODE_ATTENTION_MAX", "16", 1);
  LoweringOptions o = LoweringOptions::from_env(&w);
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(!o.gpu_fast_ops && o.gpu_batch_matvec && !o.planar && o.pdl_prompt);
  EXPECT_EQ(o.fuse, LoweringOptions::Fuse::kOn);
  EXPECT_EQ(o.fuse_norm, LoweringOptions::FuseNorm::kQ8_0);
  EXPECT_EQ(o.fuse_attn, LoweringOptions::FuseAttn::kOff);
  EXPECT_EQ(o.decode_attention_max, 16);
  setenv("LOOM_FUSE_NORM", "q9", 1);
  setenv("LOOM_DECODE_ATTENTION_MAX", "eight", 1);
  o = LoweringOptions::from_env(&w);
  EXPECT_EQ(o.fuse_norm, LoweringOptions::FuseNorm::kQ8);
  EXPECT_EQ(o.decode_attention_max, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("LOOM_FUSE_NORM=q9"), std::string::npos) << w[0];
  for (const char* n : names) unsetenv(n);
}

}  // namespace
}  // namespace loom::exec
