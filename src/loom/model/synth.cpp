// Synthetic GGUF generation: real llama-family tensor names and shapes, random block contents.
#include "loom/model/synth.h"

#include <cmath>
#include <cstring>
#include <map>

#include "loom/base/file.h"
#include "loom/base/log.h"
#include "loom/gguf/gguf_writer.h"
#include "loom/gguf/quant.h"
#include "loom/gguf/quant_blocks.h"

namespace loom::llm {
namespace {

// splitmix64: fast, seedable, good enough for filling weights.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1ull << 24); }  // [0,1)
};

void fill_random(uint8_t* dst, size_t n, Rng& rng) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(dst + i, &v, 8);
  }
  for (uint64_t v = rng.next(); i < n; ++i, v >>= 8) dst[i] = static_cast<uint8_t>(v);
}

// Random blocks of `type` whose dequantized values have a standard deviation near `stddev`.
void fill_blocks(GgmlType type, uint8_t* dst, size_t n_bytes, float stddev, uint64_t seed) {
  Rng rng{seed};
  fill_random(dst, n_bytes, rng);  // quant bits; scales overwritten below
  auto half = [&](float base) { return fp32_to_fp16(base * (0.75f + 0.5f * rng.uniform())); };
  switch (type) {
    case GgmlType::Q4_0:
      for (auto* b = reinterpret_cast<BlockQ4_0*>(dst); b < reinterpret_cast<BlockQ4_0*>(dst + n_bytes); ++b)
        b->d = half(stddev / 4.6f);  // (q - 8) for uniform q has stddev ~4.6
      break;
    case GgmlType::Q4_1:
      for (auto* b = reinterpret_cast<BlockQ4_1*>(dst); b < reinterpret_cast<BlockQ4_1*>(dst + n_bytes); ++b) {
        b->d = half(stddev / 4.6f);
        b->m = fp32_to_fp16(-7.5f * fp16_to_fp32(b->d));
      }
      break;
    case GgmlType::Q5_0:
      for (auto* b = reinterpret_cast<BlockQ5_0*>(dst); b < reinterpret_cast<BlockQ5_0*>(dst + n_bytes); ++b)
        b->d = half(stddev / 9.2f);  // (q - 16) for uniform q in 0..31 has stddev ~9.2
      break;
    case GgmlType::Q8_0:
      for (auto* b = reinterpret_cast<BlockQ8_0*>(dst); b < reinterpret_cast<BlockQ8_0*>(dst + n_bytes); ++b) {
        b->d = half(stddev / 73.0f);
        for (auto& q : b->qs) if (q == -128) q = -127;
      }
      break;
    case GgmlType::Q4_K:
      for (auto* b = reinterpret_cast<BlockQ4_K*>(dst); b < reinterpret_cast<BlockQ4_K*>(dst + n_bytes); ++b) {
        // 6-bit scales and mins are random in 0..63 (mean ~32): x = d*sc*q - dmin*m.
        b->d = half(stddev / (32.0f * 4.6f));
        b->dmin = fp32_to_fp16(fp16_to_fp32(b->d) * 7.5f);
      }
      break;
    case GgmlType::Q6_K:
      for (auto* b = reinterpret_cast<BlockQ6_K*>(dst); b < reinterpret_cast<BlockQ6_K*>(dst + n_bytes); ++b) {
        b->d = half(stddev / (64.0f * 18.5f));  // int8 scales ~uniform magnitude 64, (q-32) sd ~18.5
      }
      break;
    default: {
      // Float types: gaussian-ish values via the sum of uniforms.
      size_t n = n_bytes / (type == GgmlType::F32 ? 4 : 2);
      for (size_t i = 0; i < n; ++i) {
        float x = (rng.uniform() + rng.uniform() + rng.uniform() - 1.5f) * 2.0f * stddev;
        if (type == GgmlType::F32) std::memcpy(dst + 4 * i, &x, 4);
        else { uint16_t h = type == GgmlType::F16 ? fp32_to_fp16(x) : fp32_to_bf16(x); std::memcpy(dst + 2 * i, &h, 2); }
      }
    }
  }
}

// RMSNorm weights: 1 + small noise.
void fill_norm(uint8_t* dst, size_t n_bytes, uint64_t seed) {
  Rng rng{seed};
  for (size_t i = 0; i < n_bytes / 4; ++i) {
    float x = 1.0f + 0.1f * (rng.uniform() - 0.5f);
    std::memcpy(dst + 4 * i, &x, 4);
  }
}

// GPT-2 byte-to-unicode: printable bytes map to themselves, the rest to U+0100 onwards.
std::string byte_token(int b) {
  bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!printable) {
    int k = 0;
    for (int x = 0; x < b; ++x) {
      bool px = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
      if (!px) ++k;
    }
    cp = 256 + k;
  }
  std::string s;
  if (cp < 0x80) s.push_back(static_cast<char>(cp));
  else { s.push_back(static_cast<char>(0xC0 | (cp >> 6))); s.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
  return s;
}

}  // namespace

const std::vector<SynthShape>& synth_shapes() {
  static const std::vector<SynthShape> shapes = {
      {"llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, false},
      {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false},
      {"llama3-1b", 2048, 16, 32, 8, 8192, 128256, 8192, 500000.0f, true},
      {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, true},
  };
  return shapes;
}

Result<uint64_t> write_synthetic_model(const SynthOptions& opts, const std::string& path) {
  if (opts.arch != "llama") return invalid_argument("--arch {}: only 'llama' can be synthesized", opts.arch);
  const SynthShape* shape = nullptr;
  std::string names;
  for (const auto& s : synth_shapes()) {
    if (s.name == opts.shape) shape = &s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  if (!shape) return invalid_argument("--shape {}: unknown (known: {})", opts.shape, names);
  static const std::map<std::string, uint32_t> kFileTypes = {
      {"q4_0", 2}, {"q8_0", 7}, {"q4_k", 15}, {"f16", 1}, {"bf16", 32}};  // llama_ftype values
  auto ft = kFileTypes.find(opts.quant);
  if (ft == kFileTypes.end())
    return invalid_argument("--quant {}: unknown (known: q4_0, q4_k, q8_0, f16, bf16)", opts.quant);
  const SynthShape& S = *shape;
  const int64_t hd = S.n_embd / S.n_head;

  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", fmt::format("loom-synth {} {}", S.name, opts.quant));
  w.set_u32("general.file_type", ft->second);
  w.set_u32("llama.context_length", static_cast<uint32_t>(S.n_ctx));
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(S.n_embd));
  w.set_u32("llama.block_count", static_cast<uint32_t>(S.n_layer));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(S.n_ff));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(S.n_head));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(S.n_head_kv));
  w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(hd));
  w.set_f32("llama.rope.freq_base", S.rope_base);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(S.n_vocab));
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(S.n_vocab);
  for (int b = 0; b < 256; ++b) { tokens.push_back(byte_token(b)); types.push_back(1); }
  tokens.push_back("<|begin_of_text|>"); types.push_back(3);
  tokens.push_back("<|end_of_text|>"); types.push_back(3);
  // One merge ("a" + "b" -> "ab"): a gpt2 vocabulary needs a merge list, and this one makes the
  // BPE path run too.
  tokens.push_back(byte_token('a') + byte_token('b')); types.push_back(1);
  while (static_cast<int64_t>(tokens.size()) < S.n_vocab) {
    tokens.push_back(fmt::format("<|synth_{}|>", tokens.size()));
    types.push_back(4);  // user-defined: never produced by plain text
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", {byte_token('a') + " " + byte_token('b')});
  w.set_u32("tokenizer.ggml.bos_token_id", 256);
  w.set_u32("tokenizer.ggml.eos_token_id", 257);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  // A plain role-prefixed template, so that chat and the server's /v1/chat/completions work on
  // synthetic models too (their replies are random bytes: they exist to be timed).
  w.set_string("tokenizer.chat_template",
               "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
               "{% if add_generation_prompt %}assistant: {% endif %}");

  uint64_t seed = opts.seed * 1000003ull;
  auto weight_type = [&](const std::string& name, int64_t layer) {
    if (opts.quant == "q4_0") return name == "output" ? GgmlType::Q6_K : GgmlType::Q4_0;
    if (opts.quant == "q8_0") return GgmlType::Q8_0;
    if (opts.quant == "f16") return GgmlType::F16;
    if (opts.quant == "bf16") return GgmlType::BF16;
    // Q4_K_M-like: output in Q6_K; attn_v and ffn_down in Q6_K on the layers llama.cpp's
    // "use more bits" rule picks (first and last eighth, and every third in between).
    if (name == "output") return GgmlType::Q6_K;
    bool more = layer >= 0 && (layer < S.n_layer / 8 || layer >= 7 * S.n_layer / 8 || (layer - S.n_layer / 8) % 3 == 2);
    if ((name == "attn_v" || name == "ffn_down") && more) return GgmlType::Q6_K;
    return GgmlType::Q4_K;
  };
  auto add_weight = [&](const std::string& full, const std::string& kind, int64_t layer, int64_t n_in, int64_t n_out,
                        float stddev) -> Status {
    GgmlType t = weight_type(kind, layer);
    // Rows that are not a multiple of 256 cannot hold K-quants: fall back as llama.cpp does.
    if (n_in % 256 != 0 && t == GgmlType::Q4_K) t = GgmlType::Q5_0;
    if (n_in % 256 != 0 && t == GgmlType::Q6_K) t = GgmlType::Q8_0;
    uint64_t s = ++seed;
    return w.add_tensor(full, t, {n_in, n_out}, [t, stddev, s](uint8_t* dst, size_t n) { fill_blocks(t, dst, n, stddev, s); });
  };
  auto add_norm = [&](const std::string& full) -> Status {
    uint64_t s = ++seed;
    return w.add_tensor(full, GgmlType::F32, {S.n_embd}, [s](uint8_t* dst, size_t n) { fill_norm(dst, n, s); });
  };
  float in_sd = 1.0f / std::sqrt(static_cast<float>(S.n_embd));
  float ff_sd = 1.0f / std::sqrt(static_cast<float>(S.n_ff));
  LOOM_RETURN_IF_ERROR(add_weight("token_embd.weight", "token_embd", -1, S.n_embd, S.n_vocab, 1.0f));
  for (int64_t l = 0; l < S.n_layer; ++l) {
    std::string p = fmt::format("blk.{}.", l);
    LOOM_RETURN_IF_ERROR(add_norm(p + "attn_norm.weight"));
    LOOM_RETURN_IF_ERROR(add_weight(p + "attn_q.weight", "attn_q", l, S.n_embd, S.n_head * hd, in_sd));
    LOOM_RETURN_IF_ERROR(add_weight(p + "attn_k.weight", "attn_k", l, S.n_embd, S.n_head_kv * hd, in_sd));
    LOOM_RETURN_IF_ERROR(add_weight(p + "attn_v.weight", "attn_v", l, S.n_embd, S.n_head_kv * hd, in_sd));
    LOOM_RETURN_IF_ERROR(add_weight(p + "attn_output.weight", "attn_output", l, S.n_head * hd, S.n_embd, in_sd));
    LOOM_RETURN_IF_ERROR(add_norm(p + "ffn_norm.weight"));
    LOOM_RETURN_IF_ERROR(add_weight(p + "ffn_gate.weight", "ffn_gate", l, S.n_embd, S.n_ff, in_sd));
    LOOM_RETURN_IF_ERROR(add_weight(p + "ffn_up.weight", "ffn_up", l, S.n_embd, S.n_ff, in_sd));
    LOOM_RETURN_IF_ERROR(add_weight(p + "ffn_down.weight", "ffn_down", l, S.n_ff, S.n_embd, ff_sd));
  }
  LOOM_RETURN_IF_ERROR(add_norm("output_norm.weight"));
  if (!S.tied_output) LOOM_RETURN_IF_ERROR(add_weight("output.weight", "output", -1, S.n_embd, S.n_vocab, in_sd));
  Progress progress(fmt::format("writing {}", path), static_cast<double>(w.data_bytes()) / (1 << 20), "MiB");
  LOOM_RETURN_IF_ERROR(w.write(path, [&](uint64_t done, uint64_t) { progress.update(static_cast<double>(done) / (1 << 20)); }));
  progress.finish();
  auto map = MappedFile::open(path);
  if (!map.ok()) return map.status();
  return static_cast<uint64_t>(map->size());
}

}  // namespace loom::llm
