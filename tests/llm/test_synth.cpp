// `loom model synth`: files carry the real shapes, the requested quant mix and sane weights.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/gguf/gguf.h"
#include "loom/gguf/quant.h"
#include "loom/model/synth.h"

namespace loom::llm {
namespace {

TEST(Synth, SmolLM2ShapeQ4_0) {
  std::string path = ::testing::TempDir() + "/synth_135m.gguf";
  auto bytes = write_synthetic_model({"llama", "smollm2-135m", "q4_0", 7}, path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors().size(), 2u + 30u * 9u);  // embd + output_norm + 9 per layer, tied output
  EXPECT_EQ(*f->get_u64("llama.block_count"), 30u);
  EXPECT_EQ((*f->get_array("tokenizer.ggml.tokens"))->size(), 49152u);
  const GgufTensor* q = f->tensor("blk.3.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::Q4_0);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(f->tensor("blk.0.attn_k.weight")->shape, (std::vector<int64_t>{576, 192}));
  // Weights dequantize to finite values with a spread near 1/sqrt(n_embd).
  std::vector<float> row(576 * 576);
  ASSERT_TRUE(dequantize(q->type, q->data, row.data(), static_cast<int64_t>(row.size())).ok());
  double ss = 0;
  for (float x : row) { ASSERT_TRUE(std::isfinite(x)); ss += x * x; }
  double sd = std::sqrt(ss / row.size());
  EXPECT_GT(sd, 0.5 / 24);
  EXPECT_LT(sd, 2.0 / 24);
}

TEST(Synth, Q4KMixUsesQ6KWhereLlamaCppDoes) {
  std::string path = ::testing::TempDir() + "/synth_q4k.gguf";
  auto bytes = write_synthetic_model({"llama", "smollm2-135m", "q4_k", 1}, path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  // ffn_down has 1536-element rows: K-quants fit. The first and last eighth of the layers and
  // every third between them get Q6_K, the others Q4_K.
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight")->type, GgmlType::Q6_K);
  EXPECT_EQ(f->tensor("blk.29.ffn_down.weight")->type, GgmlType::Q6_K);
  int q6 = 0;
  for (int l = 0; l < 30; ++l) q6 += f->tensor(fmt::format("blk.{}.ffn_down.weight", l))->type == GgmlType::Q6_K;
  EXPECT_GT(q6, 5);
  EXPECT_LT(q6, 25);
  // 576-element rows cannot hold 256-element super-blocks: Q4_K falls back to Q5_0, Q6_K to Q8_0.
  EXPECT_EQ(f->tensor("blk.10.ffn_gate.weight")->type, GgmlType::Q5_0);
  EXPECT_EQ(f->tensor("blk.0.attn_v.weight")->type, GgmlType::Q8_0);
}

TEST(Synth, RefusesUnknownShapeQuantArch) {
  std::string path = ::testing::TempDir() + "/synth_bad.gguf";
  EXPECT_EQ(write_synthetic_model({"llama", "gpt5", "q4_0", 1}, path).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_synthetic_model({"llama", "llama3-8b", "q9_k", 1}, path).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_synthetic_model({"mamba", "llama3-8b", "q4_0", 1}, path).status().code(), StatusCode::kInvalidArgument);
  // A shape keeps its architecture (llama and mistral share one layout).
  auto wrong = write_synthetic_model({"llama", "qwen3-8b", "q4_0", 1}, path);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().to_string().find("qwen3-8b is a qwen3 model"), std::string::npos) << wrong.status().to_string();
  EXPECT_EQ(write_synthetic_model({"gemma2", "phi4-mini", "q4_0", 1}, path).status().code(), StatusCode::kInvalidArgument);
}

// Each architecture's tensors and keys, as llama.cpp's converters write them.
TEST(Synth, EveryArchitectureGetsItsLayout) {
  for (const std::string& arch : synth_architectures()) {
    SCOPED_TRACE(arch);
    const std::string path = ::testing::TempDir() + "/synth_" + arch + ".gguf";
    ASSERT_TRUE(write_synthetic_model({arch, "tiny", "q8_0", 1}, path).ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    const std::string stored = arch == "mistral" ? "llama" : arch;
    EXPECT_EQ(f->architecture(), stored);
    EXPECT_EQ(*f->get_u64(stored + ".block_count"), 2u);
    EXPECT_EQ(*f->get_u64(stored + ".attention.key_length"), 64u);
    const bool fused = arch == "phi3", gemma = arch.starts_with("gemma"), moe = arch == "qwen3moe";
    EXPECT_EQ(f->tensor("blk.1.attn_qkv.weight") != nullptr, fused);
    EXPECT_EQ(f->tensor("blk.1.attn_q.weight") != nullptr, !fused);
    EXPECT_EQ(f->tensor("blk.1.ffn_gate.weight") != nullptr, !fused && !moe);
    EXPECT_EQ(f->tensor("blk.1.attn_q.bias") != nullptr, arch == "qwen2");
    EXPECT_EQ(f->tensor("blk.1.attn_k_norm.weight") != nullptr, arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3");
    EXPECT_EQ(f->tensor("blk.1.post_ffw_norm.weight") != nullptr, gemma);
    EXPECT_EQ(f->tensor("output.weight") != nullptr, !gemma);  // Gemma always ties its output
    EXPECT_EQ(f->has(stored + ".attention.sliding_window"), gemma);
    EXPECT_EQ(f->has(stored + ".expert_count"), moe);
    if (moe) {
      // The test default: 8 experts of 256, 2 per token; stacked [n_in, n_out, n_expert]; f32 router.
      EXPECT_EQ(*f->get_u64("qwen3moe.expert_used_count"), 2u);
      EXPECT_EQ(f->tensor("blk.1.ffn_gate_inp.weight")->shape, (std::vector<int64_t>{256, 8}));
      EXPECT_EQ(f->tensor("blk.1.ffn_gate_inp.weight")->type, GgmlType::F32);
      EXPECT_EQ(f->tensor("blk.1.ffn_up_exps.weight")->shape, (std::vector<int64_t>{256, 256, 8}));
      EXPECT_EQ(f->tensor("blk.1.ffn_down_exps.weight")->shape, (std::vector<int64_t>{256, 256, 8}));
    }
    if (fused) {
      EXPECT_EQ(f->tensor("blk.0.attn_qkv.weight")->shape, (std::vector<int64_t>{256, 256 + 2 * 128}));
      EXPECT_EQ(f->tensor("blk.0.ffn_up.weight")->shape, (std::vector<int64_t>{256, 2 * 512}));
    }
  }
}

// The 5-bit formats: the layers' matrices in Q5_0 / Q5_1 (output Q6_K), values of the intended
// spread (Q5_1's m = -15.5 d centres them).
TEST(Synth, FiveBitQuants) {
  for (const auto& [quant, type] : {std::pair{"q5_0", GgmlType::Q5_0}, std::pair{"q5_1", GgmlType::Q5_1}}) {
    SCOPED_TRACE(quant);
    const std::string path = ::testing::TempDir() + "/synth_" + quant + ".gguf";
    ASSERT_TRUE(write_synthetic_model({"llama", "tiny", quant, 3}, path).ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok());
    const GgufTensor* q = f->tensor("blk.1.ffn_up.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, type);
    EXPECT_EQ(f->tensor("output.weight")->type, GgmlType::Q6_K);
    std::vector<float> x(256 * 512);
    ASSERT_TRUE(dequantize(q->type, q->data, x.data(), static_cast<int64_t>(x.size())).ok());
    double sum = 0, ss = 0;
    for (float v : x) { ASSERT_TRUE(std::isfinite(v)); sum += v; ss += double(v) * v; }
    const double mean = sum / x.size(), sd = std::sqrt(ss / x.size() - mean * mean);
    EXPECT_LT(std::fabs(mean), 0.01);
    EXPECT_GT(sd, 0.5 / 16);  // 1/sqrt(n_embd) = 1/16
    EXPECT_LT(sd, 2.0 / 16);
  }
}

}  // namespace
}  // namespace loom::llm
