// Engine tests on tiny synthetic models written with GgufWriter (random weights in the real
// layouts): batched and token-by-token decoding agree bit for bit, the context limit is a clean
// error, prefix reuse, thread-count independence, and refusal of unsupported architectures.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom/llm/engine.h"
#include "loom/llm/gguf_writer.h"
#include "loom/llm/model.h"
#include "loom/llm/quant.h"
#include "tiny_model.h"

namespace loom::llm {
namespace {

using tiny::kEmbd;
using tiny::kHeadDim;
using tiny::kVocab;
using tiny::ones;
using tiny::TinySpec;

std::string model_file(const TinySpec& s, const std::string& name) { return tiny::write_tiny(s, "test_engine_" + name); }

std::unique_ptr<Model> load(const std::string& path) {
  auto m = Model::load(path, /*show_progress=*/false);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<Engine> engine(const Model& m, int threads = 2, int64_t batch = 512, int64_t ctx = 64) {
  EngineOptions o;
  o.n_threads = threads;
  o.n_batch = batch;
  o.n_ctx = ctx;
  auto e = Engine::create(m, o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

const std::vector<int32_t> kPrompt{5, 17, 3, 88, 42, 42, 7, 60, 1, 95};

std::vector<float> last_logits(Engine& e) { return std::vector<float>(e.logits(), e.logits() + e.n_vocab()); }

class TinyModels : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModels, BatchedAndTokenByTokenDecodingAreBitIdentical) {
  TinySpec spec;
  spec.arch = GetParam();
  auto m = load(model_file(spec, GetParam() + "_batch"));
  ASSERT_TRUE(m);
  auto batched = engine(*m);
  ASSERT_TRUE(batched->decode(kPrompt, /*all_logits=*/true).ok());
  auto stepwise = engine(*m, 1, 3);  // one thread, batches of 3
  std::vector<float> rows;
  for (int32_t t : kPrompt) {
    const int32_t one[1] = {t};
    ASSERT_TRUE(stepwise->decode(one).ok());
    auto l = last_logits(*stepwise);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  ASSERT_EQ(batched->all_logits().size(), rows.size());
  EXPECT_EQ(0, std::memcmp(batched->all_logits().data(), rows.data(), rows.size() * sizeof(float)));
  EXPECT_EQ(last_logits(*batched), last_logits(*stepwise));
  // The logits depend on the context: the same token after different prefixes differs.
  EXPECT_NE(0, std::memcmp(batched->all_logits().data() + 4 * kVocab, batched->all_logits().data() + 5 * kVocab,
                           kVocab * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyModels, ::testing::Values("llama", "gemma3"));

TEST(Engine, ContextLimitIsACleanError) {
  auto m = load(model_file(TinySpec{}, "ctx"));
  ASSERT_TRUE(m);
  auto e = engine(*m, 2, 512, 8);
  Status s = e->decode(kPrompt);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("context"), std::string::npos) << s.message();
  EXPECT_EQ(e->n_past(), 0);  // nothing half-done
  // The context is capped at the model's training length.
  auto big = engine(*m, 2, 512, 100000);
  EXPECT_EQ(big->n_ctx(), 128);
}

TEST(Engine, SyncReusesTheCommonPrefix) {
  auto m = load(model_file(TinySpec{}, "sync"));
  ASSERT_TRUE(m);
  auto e = engine(*m);
  auto reused = e->sync(kPrompt);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, 0);
  auto fresh = last_logits(*e);
  std::vector<int32_t> longer = kPrompt;
  longer.push_back(9);
  longer.push_back(10);
  reused = e->sync(longer);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, static_cast<int64_t>(kPrompt.size()));
  // Same tokens again: all but the last are reused and its logits come back unchanged.
  reused = e->sync(kPrompt);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, static_cast<int64_t>(kPrompt.size()) - 1);
  EXPECT_EQ(last_logits(*e), fresh);
  // A different continuation after a shared prefix.
  std::vector<int32_t> branch(kPrompt.begin(), kPrompt.begin() + 4);
  branch.push_back(50);
  reused = e->sync(branch);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, 4);
  EXPECT_EQ(e->n_past(), 5);
}

TEST(Engine, ThreadCountDoesNotChangeLogits) {
  TinySpec spec;
  spec.matrix_type = GgmlType::Q4_1;
  auto m = load(model_file(spec, "threads"));
  ASSERT_TRUE(m);
  auto a = engine(*m, 1), b = engine(*m, 3);
  ASSERT_TRUE(a->decode(kPrompt).ok());
  ASSERT_TRUE(b->decode(kPrompt).ok());
  EXPECT_EQ(last_logits(*a), last_logits(*b));
}

TEST(Engine, RejectsOutOfVocabularyTokens) {
  auto m = load(model_file(TinySpec{}, "vocab"));
  ASSERT_TRUE(m);
  auto e = engine(*m);
  const int32_t bad[2] = {3, static_cast<int32_t>(kVocab)};
  Status s = e->decode(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("vocabulary"), std::string::npos);
}

TEST(Model, UnsupportedArchitectureListsTheSupportedOnes) {
  TinySpec spec;
  spec.arch = "falcon";
  auto m = Model::load(model_file(spec, "falcon"), false);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().to_string();
  EXPECT_NE(msg.find("falcon"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gemma3"), std::string::npos) << msg;
}

TEST(Model, MissingTensorIsNamed) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", kEmbd);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", tiny::kFf);
  w.set_u32("llama.attention.head_count", 4);
  ASSERT_TRUE(w.add_tensor("token_embd.weight", GgmlType::Q8_0, {kEmbd, kVocab}, tiny::random_matrix(GgmlType::Q8_0, kEmbd, kVocab, 3, 1.0f)).ok());
  ASSERT_TRUE(w.add_tensor("output_norm.weight", GgmlType::F32, {kEmbd}, ones(kEmbd)).ok());
  const std::string path = ::testing::TempDir() + "/test_engine_missing.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto m = Model::load(path, false);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("blk.0.attn_norm.weight"), std::string::npos) << m.status().to_string();
}

TEST(Model, ConfigComesFromMetadata) {
  TinySpec spec;
  spec.n_layer = 3;
  spec.n_head_kv = 1;
  auto m = load(model_file(spec, "config"));
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.n_vocab, kVocab);
  EXPECT_EQ(c.head_dim_k, kHeadDim);
  EXPECT_EQ(m->output(), m->tok_embd());  // no output.weight: tied
  // The decode Program has the launches the recipe promises, in order.
  Program p = m->build_program(1, 1);
  EXPECT_EQ(p.launches.front().op, OpCode::kGetRows);
  int attention = 0;
  for (const auto& l : p.launches) attention += l.op == OpCode::kAttention;
  EXPECT_EQ(attention, 3);
  EXPECT_NE(p.to_string(m->weight_names()).find("blk.2.ffn_down.weight"), std::string::npos);
}

}  // namespace
}  // namespace loom::llm
