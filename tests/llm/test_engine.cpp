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

namespace loom::llm {
namespace {

constexpr int64_t kEmbd = 64, kFf = 128, kVocab = 96, kHeadDim = 16;

struct TinySpec {
  std::string arch = "llama";
  int n_layer = 2, n_head = 4, n_head_kv = 2;
  GgmlType matrix_type = GgmlType::Q8_0;
  int64_t n_ctx_train = 128;
};

std::string bytes_of(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n_in * n_out));
  for (auto& v : x) v = dist(rng);
  std::string out(row_bytes(type, n_in) * n_out, '\0');
  for (int64_t r = 0; r < n_out; ++r)
    EXPECT_TRUE(quantize(type, x.data() + r * n_in, out.data() + r * row_bytes(type, n_in), n_in).ok());
  return out;
}

std::string ones(int64_t n, float v = 1.0f) {
  std::vector<float> x(static_cast<size_t>(n), v);
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}

// Writes a tiny model to a temporary file and returns its path.
std::string write_tiny(const TinySpec& s, const std::string& name) {
  GgufWriter w;
  const std::string a = s.arch;
  w.set_string("general.architecture", a);
  w.set_u32(a + ".embedding_length", kEmbd);
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", kFf);
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32(a + ".attention.key_length", kHeadDim);
  w.set_u32(a + ".attention.value_length", kHeadDim);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx_train));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_f32(a + ".rope.freq_base", 10000.0f);
  if (a == "gemma3") {
    w.set_u32(a + ".attention.sliding_window", 4);
  }
  const int64_t nq = s.n_head * kHeadDim, nkv = s.n_head_kv * kHeadDim;
  uint32_t seed = 1;
  EXPECT_TRUE(w.add_tensor("token_embd.weight", GgmlType::Q8_0, {kEmbd, kVocab}, bytes_of(GgmlType::Q8_0, kEmbd, kVocab, seed++, 1.0f)).ok());
  EXPECT_TRUE(w.add_tensor("output_norm.weight", GgmlType::F32, {kEmbd}, ones(kEmbd)).ok());
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    auto mat = [&](const std::string& n, int64_t in, int64_t out) {
      EXPECT_TRUE(w.add_tensor(p + n, s.matrix_type, {in, out}, bytes_of(s.matrix_type, in, out, seed++, 0.2f)).ok());
    };
    EXPECT_TRUE(w.add_tensor(p + "attn_norm.weight", GgmlType::F32, {kEmbd}, ones(kEmbd)).ok());
    mat("attn_q.weight", kEmbd, nq);
    mat("attn_k.weight", kEmbd, nkv);
    mat("attn_v.weight", kEmbd, nkv);
    mat("attn_output.weight", nq, kEmbd);
    EXPECT_TRUE(w.add_tensor(p + "ffn_norm.weight", GgmlType::F32, {kEmbd}, ones(kEmbd)).ok());
    mat("ffn_gate.weight", kEmbd, kFf);
    mat("ffn_up.weight", kEmbd, kFf);
    mat("ffn_down.weight", kFf, kEmbd);
    if (a == "gemma3") {
      EXPECT_TRUE(w.add_tensor(p + "attn_q_norm.weight", GgmlType::F32, {kHeadDim}, ones(kHeadDim)).ok());
      EXPECT_TRUE(w.add_tensor(p + "attn_k_norm.weight", GgmlType::F32, {kHeadDim}, ones(kHeadDim)).ok());
      EXPECT_TRUE(w.add_tensor(p + "post_attention_norm.weight", GgmlType::F32, {kEmbd}, ones(kEmbd)).ok());
      EXPECT_TRUE(w.add_tensor(p + "post_ffw_norm.weight", GgmlType::F32, {kEmbd}, ones(kEmbd)).ok());
    }
  }
  const std::string path = ::testing::TempDir() + "/test_engine_" + name + ".gguf";
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

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
  auto m = load(write_tiny(spec, GetParam() + "_batch"));
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
  auto m = load(write_tiny(TinySpec{}, "ctx"));
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
  auto m = load(write_tiny(TinySpec{}, "sync"));
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
  auto m = load(write_tiny(spec, "threads"));
  ASSERT_TRUE(m);
  auto a = engine(*m, 1), b = engine(*m, 3);
  ASSERT_TRUE(a->decode(kPrompt).ok());
  ASSERT_TRUE(b->decode(kPrompt).ok());
  EXPECT_EQ(last_logits(*a), last_logits(*b));
}

TEST(Engine, RejectsOutOfVocabularyTokens) {
  auto m = load(write_tiny(TinySpec{}, "vocab"));
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
  auto m = Model::load(write_tiny(spec, "falcon"), false);
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
  w.set_u32("llama.feed_forward_length", kFf);
  w.set_u32("llama.attention.head_count", 4);
  ASSERT_TRUE(w.add_tensor("token_embd.weight", GgmlType::Q8_0, {kEmbd, kVocab}, bytes_of(GgmlType::Q8_0, kEmbd, kVocab, 3, 1.0f)).ok());
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
  auto m = load(write_tiny(spec, "config"));
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
