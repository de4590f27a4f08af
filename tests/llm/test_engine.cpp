// Engine tests on tiny synthetic models written with GgufWriter (random weights in the real
// layouts): batched and token-by-token decoding agree bit for bit, the context limit is a clean
// error, prefix reuse, thread-count independence, and refusal of unsupported architectures and of
// NaN / infinite / non-positive float hyper-parameters.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "loom/base/file.h"
#include "loom/engine/engine.h"
#include "loom/gguf/gguf_writer.h"
#include "loom/gguf/quant.h"
#include "loom/model/model.h"
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

// Every device runs the model that Model::load returns, so a bad float hyper-parameter must be
// refused there, naming the key and the value (the kernels of --device cpu refused some of these
// only when compiling; the reference backend ran them and produced garbage).
struct BadHparam {
  std::string arch, key;  // key after "<arch>."
  float value;
  std::string shown;      // how the message prints the value
};

TinySpec spec_with(const BadHparam& b) {
  TinySpec s;
  s.arch = b.arch;
  if (b.key == "attention.layer_norm_rms_epsilon") s.norm_eps = b.value;
  else if (b.key == "rope.freq_base") s.rope_freq_base = b.value;
  else s.extra_f32.emplace_back(b.key, b.value);
  return s;
}

std::vector<BadHparam> bad_hparams() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  return {
      {"llama", "attention.layer_norm_rms_epsilon", nan, "nan"},
      {"llama", "attention.layer_norm_rms_epsilon", inf, "inf"},
      {"llama", "attention.layer_norm_rms_epsilon", 0.0f, "0"},
      {"llama", "attention.layer_norm_rms_epsilon", -1e-5f, "-1e-05"},
      {"llama", "rope.freq_base", nan, "nan"},
      {"llama", "rope.freq_base", -inf, "-inf"},
      {"llama", "rope.freq_base", 0.0f, "0"},
      {"llama", "rope.scaling.factor", -2.0f, "-2"},
      {"llama", "rope.scaling.factor", nan, "nan"},
      {"llama", "attention.scale", nan, "nan"},
      {"llama", "final_logit_softcapping", -30.0f, "-30"},
      {"gemma3", "attention.layer_norm_rms_epsilon", nan, "nan"},
      {"gemma3", "rope.freq_base_swa", nan, "nan"},
      {"gemma3", "attn_logit_softcapping", inf, "inf"},
  };
}

TEST(Model, BadFloatHyperParametersAreRefusedWithKeyAndValue) {
  int i = 0;
  for (const BadHparam& b : bad_hparams()) {
    const std::string key = b.arch + "." + b.key;
    auto m = Model::load(model_file(spec_with(b), "bad_hparam_" + std::to_string(i++)), false);
    ASSERT_FALSE(m.ok()) << key << " = " << b.shown << " was accepted";
    const std::string msg = m.status().to_string();
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << msg;
    EXPECT_NE(msg.find(key + " = " + b.shown), std::string::npos) << msg;
  }
}

TEST(Model, ZeroMeansNoneForOptionalFloatHyperParameters) {
  TinySpec s;
  s.extra_f32 = {{"attention.scale", 0.0f}, {"rope.scaling.factor", 0.0f}, {"final_logit_softcapping", 0.0f}};
  auto m = load(model_file(s, "zero_optional"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config().attn_scale, 0.0f);
  EXPECT_EQ(m->config().rope_freq_scale, 1.0f);
}

// The CLI refuses such a file on the reference backend and the kernel backend alike, with one
// line on stderr and exit code 1.
TEST(Model, BadHyperParameterFailsLoomRunOnEveryCpuDevice) {
  const char* env = std::getenv("LOOM_BIN");
  const std::string bin = env ? env : LOOM_BINARY_DIR "/loom";
  ASSERT_TRUE(file_exists(bin)) << "loom binary missing at " << bin;
  TinySpec s;
  s.rope_freq_base = std::numeric_limits<float>::quiet_NaN();
  const std::string path = model_file(s, "nan_rope_cli");
  for (const char* device : {"cpu-ref", "cpu"}) {
    const std::string err = path + "." + device + ".err";
    int rc = std::system(fmt::format("timeout 120 '{}' run -m '{}' --device {} -p hi -n 1 >/dev/null 2>'{}'", bin,
                                     path, device, err).c_str());
    ASSERT_TRUE(WIFEXITED(rc)) << device;
    EXPECT_EQ(WEXITSTATUS(rc), 1) << device;
    auto text = read_file(err);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(std::count(text->begin(), text->end(), '\n'), 1) << device << ": " << *text;
    EXPECT_NE(text->find("llama.rope.freq_base = nan"), std::string::npos) << device << ": " << *text;
  }
}

}  // namespace
}  // namespace loom::llm
