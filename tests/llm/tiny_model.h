// Tiny random models for the engine tests (test_engine, test_batch, test_archs): a GGUF file in
// the real tensor layout of a llama, qwen2, qwen3, phi3, gemma2 or gemma3 model, small enough to
// run in milliseconds. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "loom/gguf/gguf_writer.h"
#include "loom/gguf/quant.h"

namespace loom::llm::tiny {

inline constexpr int64_t kEmbd = 64, kFf = 128, kVocab = 96, kHeadDim = 16;

struct TinySpec {
  std::string arch = "llama";  // gemma2/3 also get a sliding window of 4 and their extra norms,
                               // qwen2 q/k/v biases, qwen3 q/k norms, phi3 fused qkv and gate|up
  int n_layer = 2, n_head = 4, n_head_kv = 2;
  int64_t head_dim = kHeadDim;  // 32 and up: the cpu driver's exact attention applies (bit-identity)
  GgmlType matrix_type = GgmlType::Q8_0;
  int64_t n_ctx_train = 128;
  uint32_t seed = 1;          // first seed; each tensor takes the next
  float matrix_scale = 0.2f;  // standard deviation of the layer matrices' values
  bool random_norms = false;  // norm weights uniform in [0.5, 1.5) instead of all ones
  bool rope_freqs = false;    // a rope_freqs.weight (Llama 3's RoPE scaling) with divisors in [1, 8)
  float norm_eps = 1e-6f, rope_freq_base = 10000.0f;
  int llama_window = 0;       // llama/mistral: attention.sliding_window (0: none written)
  std::vector<std::pair<std::string, float>> extra_f32;  // more float keys, "<arch>." prepended
};

// A [n_out, n_in] matrix of normal(0, scale) values quantized to `type`, as stored in GGUF.
inline std::string random_matrix(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n_in * n_out));
  for (auto& v : x) v = dist(rng);
  std::string out(row_bytes(type, n_in) * n_out, '\0');
  for (int64_t r = 0; r < n_out; ++r)
    EXPECT_TRUE(quantize(type, x.data() + r * n_in, out.data() + r * row_bytes(type, n_in), n_in).ok());
  return out;
}

inline std::string f32_bytes(const std::vector<float>& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}

inline std::string ones(int64_t n, float v = 1.0f) { return f32_bytes(std::vector<float>(static_cast<size_t>(n), v)); }

inline std::string random_norm(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.5f, 1.5f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return f32_bytes(x);
}

// Writes the model to ::testing::TempDir()/<file_name>.gguf and returns the path.
inline std::string write_tiny(const TinySpec& s, const std::string& file_name) {
  GgufWriter w;
  const std::string& a = s.arch;
  w.set_string("general.architecture", a);
  w.set_u32(a + ".embedding_length", kEmbd);
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", kFf);
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32(a + ".attention.key_length", s.head_dim);
  w.set_u32(a + ".attention.value_length", s.head_dim);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx_train));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_f32(a + ".rope.freq_base", s.rope_freq_base);
  for (const auto& [k, v] : s.extra_f32) w.set_f32(a + "." + k, v);
  const bool gemma = a == "gemma2" || a == "gemma3";
  if (gemma) w.set_u32(a + ".attention.sliding_window", 4);
  if (s.llama_window > 0) w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.llama_window));
  if (a == "gemma2") {
    w.set_f32(a + ".attn_logit_softcapping", 2.0f);
    w.set_f32(a + ".final_logit_softcapping", 3.0f);
  }
  const int64_t nq = s.n_head * s.head_dim, nkv = s.n_head_kv * s.head_dim;
  uint32_t seed = s.seed;
  auto norm = [&](const std::string& name, int64_t len) {
    EXPECT_TRUE(w.add_tensor(name, GgmlType::F32, {len}, s.random_norms ? random_norm(len, seed++) : ones(len)).ok());
  };
  auto bias = [&](const std::string& name, int64_t len) {
    std::string b = random_norm(len, seed++);  // in [0.5, 1.5): far from zero, so a lost bias shows
    EXPECT_TRUE(w.add_tensor(name, GgmlType::F32, {len}, b).ok());
  };
  EXPECT_TRUE(w.add_tensor("token_embd.weight", GgmlType::Q8_0, {kEmbd, kVocab},
                           random_matrix(GgmlType::Q8_0, kEmbd, kVocab, seed++, 1.0f)).ok());
  norm("output_norm.weight", kEmbd);
  if (s.rope_freqs) {
    std::vector<float> ff(static_cast<size_t>(s.head_dim / 2));
    for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(ff.size());
    EXPECT_TRUE(w.add_tensor("rope_freqs.weight", GgmlType::F32, {s.head_dim / 2}, f32_bytes(ff)).ok());
  }
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    auto mat = [&](const std::string& n, int64_t in, int64_t out) {
      EXPECT_TRUE(w.add_tensor(p + n, s.matrix_type, {in, out}, random_matrix(s.matrix_type, in, out, seed++, s.matrix_scale)).ok());
    };
    norm(p + "attn_norm.weight", kEmbd);
    if (a == "phi3") {
      mat("attn_qkv.weight", kEmbd, nq + 2 * nkv);
    } else {
      mat("attn_q.weight", kEmbd, nq);
      mat("attn_k.weight", kEmbd, nkv);
      mat("attn_v.weight", kEmbd, nkv);
    }
    if (a == "qwen2") {
      bias(p + "attn_q.bias", nq);
      bias(p + "attn_k.bias", nkv);
      bias(p + "attn_v.bias", nkv);
    }
    mat("attn_output.weight", nq, kEmbd);
    norm(p + "ffn_norm.weight", kEmbd);
    if (a == "phi3") {
      mat("ffn_up.weight", kEmbd, 2 * kFf);
    } else {
      mat("ffn_gate.weight", kEmbd, kFf);
      mat("ffn_up.weight", kEmbd, kFf);
    }
    mat("ffn_down.weight", kFf, kEmbd);
    if (a == "gemma3" || a == "qwen3") {
      norm(p + "attn_q_norm.weight", s.head_dim);
      norm(p + "attn_k_norm.weight", s.head_dim);
    }
    if (gemma) {
      norm(p + "post_attention_norm.weight", kEmbd);
      norm(p + "post_ffw_norm.weight", kEmbd);
    }
  }
  const std::string path = ::testing::TempDir() + "/" + file_name + ".gguf";
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

}  // namespace loom::llm::tiny
