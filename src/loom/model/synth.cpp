// Synthetic GGUF generation: each architecture's real tensor names, shapes and metadata (as
// llama.cpp's converters write them), random block contents.
#include "loom/model/synth.h"

#include <cmath>
#include <map>

#include "loom/base/file.h"
#include "loom/base/log.h"
#include "loom/gguf/gguf_writer.h"
#include "loom/model/synth_fill.h"

namespace loom::llm {
namespace {

// What differs between the architectures' files.
struct ArchLayout {
  const char* name;       // --arch
  const char* gguf_arch;  // general.architecture written (Mistral 7B is stored as "llama")
  bool qkv_bias = false;  // attn_q/k/v.bias (Qwen 2)
  bool qk_norm = false;   // attn_q_norm / attn_k_norm per head (Qwen 3, Gemma 3)
  bool fused = false;     // attn_qkv and a gate|up ffn_up of 2 * n_ff rows (Phi-3)
  bool gemma = false;     // post-attention / post-FFN norms, output tied to the embeddings
  bool windows = false;   // the recipe applies a sliding window (a shape's window is written)
  int64_t swa_default = 0;  // the architecture's window when the shape gives none
  bool moe = false;       // routed experts in place of the dense FFN (Qwen 3 MoE)
};

constexpr ArchLayout kLayouts[] = {
    {"llama", "llama", false, false, false, false, true},
    {"mistral", "llama", false, false, false, false, true},
    {"qwen2", "qwen2", true},
    {"qwen3", "qwen3", false, true},
    {"qwen3moe", "qwen3moe", false, true, false, false, false, 0, true},
    {"phi3", "phi3", false, false, true},
    {"gemma2", "gemma2", false, false, false, true, true, 4096},
    {"gemma3", "gemma3", false, true, false, true, true, 512},
};

const ArchLayout* find_layout(const std::string& arch) {
  for (const auto& l : kLayouts)
    if (arch == l.name) return &l;
  return nullptr;
}

bool llama_like(const std::string& a) { return a == "llama" || a == "mistral"; }

struct Plan {
  const SynthShape* shape;
  const ArchLayout* layout;
  std::string quant;
  int64_t head_dim, n_rot, n_swa;
  bool tied;
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // moe layouts
};

void write_metadata(GgufWriter& w, const Plan& p, uint32_t file_type) {
  const SynthShape& S = *p.shape;
  const std::string a = p.layout->gguf_arch;
  auto key = [&](const char* k) { return a + "." + k; };
  w.set_string("general.architecture", a);
  // No architecture in the name: llama.cpp gives every model whose name contains "phi3" Phi-3's
  // token attributes, which need Phi-3's own special tokens (the synthetic vocabulary has none).
  w.set_string("general.name", fmt::format("loom-synth {} {}", S.name, p.quant));
  w.set_u32("general.file_type", file_type);
  w.set_u32(key("context_length"), static_cast<uint32_t>(S.n_ctx));
  w.set_u32(key("embedding_length"), static_cast<uint32_t>(S.n_embd));
  w.set_u32(key("block_count"), static_cast<uint32_t>(S.n_layer));
  w.set_u32(key("feed_forward_length"), static_cast<uint32_t>(S.n_ff));
  w.set_u32(key("attention.head_count"), static_cast<uint32_t>(S.n_head));
  w.set_u32(key("attention.head_count_kv"), static_cast<uint32_t>(S.n_head_kv));
  w.set_u32(key("attention.key_length"), static_cast<uint32_t>(p.head_dim));
  w.set_u32(key("attention.value_length"), static_cast<uint32_t>(p.head_dim));
  w.set_u32(key("rope.dimension_count"), static_cast<uint32_t>(p.n_rot));
  w.set_f32(key("rope.freq_base"), S.rope_base);
  w.set_f32(key("attention.layer_norm_rms_epsilon"), S.norm_eps);
  w.set_u32(key("vocab_size"), static_cast<uint32_t>(S.n_vocab));
  if (p.n_swa > 0) w.set_u32(key("attention.sliding_window"), static_cast<uint32_t>(p.n_swa));
  if (std::string(p.layout->name) == "gemma2") {
    w.set_f32(key("attn_logit_softcapping"), 50.0f);
    w.set_f32(key("final_logit_softcapping"), 30.0f);
  }
  if (std::string(p.layout->name) == "gemma3") w.set_f32(key("rope.freq_base_swa"), 10000.0f);
  if (p.layout->moe) {
    w.set_u32(key("expert_count"), static_cast<uint32_t>(p.n_expert));
    w.set_u32(key("expert_used_count"), static_cast<uint32_t>(p.n_expert_used));
    w.set_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(p.n_ff_exp));
  }
}

void write_tokenizer(GgufWriter& w, int64_t n_vocab) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(static_cast<size_t>(n_vocab));
  for (int b = 0; b < 256; ++b) { tokens.push_back(synth::byte_token(b)); types.push_back(1); }
  tokens.push_back("<|begin_of_text|>"); types.push_back(3);
  tokens.push_back("<|end_of_text|>"); types.push_back(3);
  // One merge ("a" + "b" -> "ab"): a gpt2 vocabulary needs a merge list, and this one makes the
  // BPE path run too.
  tokens.push_back(synth::byte_token('a') + synth::byte_token('b')); types.push_back(1);
  while (static_cast<int64_t>(tokens.size()) < n_vocab) {
    tokens.push_back(fmt::format("<|synth_{}|>", tokens.size()));
    types.push_back(4);  // user-defined: never produced by plain text
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", {synth::byte_token('a') + " " + synth::byte_token('b')});
  w.set_u32("tokenizer.ggml.bos_token_id", 256);
  w.set_u32("tokenizer.ggml.eos_token_id", 257);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  // A plain role-prefixed template, so that chat and the server's /v1/chat/completions work on
  // synthetic models too (their replies are random bytes: they exist to be timed).
  w.set_string("tokenizer.chat_template",
               "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
               "{% if add_generation_prompt %}assistant: {% endif %}");
}

// The block type of a matrix: `kind` is its name without "blk.N." and ".weight".
GgmlType weight_type(const Plan& p, const std::string& kind, int64_t layer, int64_t n_in) {
  const std::string& q = p.quant;
  const int64_t L = p.shape->n_layer;
  GgmlType t;
  if (q == "q4_0") t = kind == "output" ? GgmlType::Q6_K : GgmlType::Q4_0;
  else if (q == "q5_0") t = kind == "output" ? GgmlType::Q6_K : GgmlType::Q5_0;
  else if (q == "q5_1") t = kind == "output" ? GgmlType::Q6_K : GgmlType::Q5_1;
  else if (q == "q2_k") t = kind == "output" ? GgmlType::Q6_K : GgmlType::Q2_K;
  else if (q == "q3_k") t = kind == "output" ? GgmlType::Q6_K : GgmlType::Q3_K;
  else if (q == "iq4_nl") t = kind == "output" ? GgmlType::Q6_K : GgmlType::IQ4_NL;
  else if (q == "iq4_xs") t = kind == "output" ? GgmlType::Q6_K : GgmlType::IQ4_XS;
  else if (q == "q8_0") t = GgmlType::Q8_0;
  else if (q == "f16") t = GgmlType::F16;
  else if (q == "bf16") t = GgmlType::BF16;
  else if (kind == "output") t = GgmlType::Q6_K;
  else {
    // Q4_K_M-like: attn_v (a fused attn_qkv likewise) and ffn_down in Q6_K on the layers
    // llama.cpp's "use more bits" rule picks (first and last eighth, every third in between).
    const bool more = layer >= 0 && (layer < L / 8 || layer >= 7 * L / 8 || (layer - L / 8) % 3 == 2);
    const bool sensitive = kind == "attn_v" || kind == "attn_qkv" || kind == "ffn_down" || kind == "ffn_down_exps";
    t = sensitive && more ? GgmlType::Q6_K : GgmlType::Q4_K;
  }
  // Rows that are not a multiple of 256 cannot hold K-quants: fall back as llama.cpp does.
  if (n_in % 256 != 0 && t == GgmlType::Q4_K) t = GgmlType::Q5_0;
  if (n_in % 256 != 0 && t == GgmlType::Q6_K) t = GgmlType::Q8_0;
  if (n_in % 256 != 0 && (t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::IQ4_XS)) t = GgmlType::IQ4_NL;
  return t;
}

class TensorWriter {
 public:
  TensorWriter(GgufWriter& w, const Plan& p, uint64_t seed) : w_(w), p_(p), seed_(seed * 1000003ull) {}

  Status matrix(const std::string& name, const std::string& kind, int64_t layer, int64_t n_in, int64_t n_out,
                float stddev) {
    const GgmlType t = weight_type(p_, kind, layer, n_in);
    const uint64_t s = ++seed_;
    return w_.add_tensor(name, t, {n_in, n_out},
                         [t, stddev, s](uint8_t* dst, size_t n) { synth::fill_blocks(t, dst, n, stddev, s); });
  }
  // n_expert stacked matrices [n_in, n_out, n_expert], in one block type.
  Status experts(const std::string& name, const std::string& kind, int64_t layer, int64_t n_in, int64_t n_out,
                 int64_t n_expert, float stddev) {
    const GgmlType t = weight_type(p_, kind, layer, n_in);
    const uint64_t s = ++seed_;
    return w_.add_tensor(name, t, {n_in, n_out, n_expert},
                         [t, stddev, s](uint8_t* dst, size_t n) { synth::fill_blocks(t, dst, n, stddev, s); });
  }
  // An f32 matrix (a router: converters and quantizers keep it in f32).
  Status f32_matrix(const std::string& name, int64_t n_in, int64_t n_out, float stddev) {
    const uint64_t s = ++seed_;
    return w_.add_tensor(name, GgmlType::F32, {n_in, n_out},
                         [stddev, s](uint8_t* dst, size_t n) { synth::fill_blocks(GgmlType::F32, dst, n, stddev, s); });
  }
  // f32 vector of values center +- spread/2: norm weights (near 1) and biases (near 0).
  Status vector(const std::string& name, int64_t n, float center, float spread) {
    const uint64_t s = ++seed_;
    return w_.add_tensor(name, GgmlType::F32, {n},
                         [center, spread, s](uint8_t* dst, size_t nb) { synth::fill_uniform(dst, nb, center, spread, s); });
  }
  Status norm(const std::string& name, int64_t n) { return vector(name, n, 1.0f, 0.1f); }

 private:
  GgufWriter& w_;
  const Plan& p_;
  uint64_t seed_;
};

Status write_layer(TensorWriter& t, const Plan& p, int64_t l) {
  const SynthShape& S = *p.shape;
  const ArchLayout& A = *p.layout;
  const std::string b = fmt::format("blk.{}.", l);
  const int64_t nq = S.n_head * p.head_dim, nkv = S.n_head_kv * p.head_dim;
  const float in_sd = 1.0f / std::sqrt(static_cast<float>(S.n_embd));
  const float ff_sd = 1.0f / std::sqrt(static_cast<float>(S.n_ff));
  LOOM_RETURN_IF_ERROR(t.norm(b + "attn_norm.weight", S.n_embd));
  if (A.fused) {
    LOOM_RETURN_IF_ERROR(t.matrix(b + "attn_qkv.weight", "attn_qkv", l, S.n_embd, nq + 2 * nkv, in_sd));
  } else {
    LOOM_RETURN_IF_ERROR(t.matrix(b + "attn_q.weight", "attn_q", l, S.n_embd, nq, in_sd));
    LOOM_RETURN_IF_ERROR(t.matrix(b + "attn_k.weight", "attn_k", l, S.n_embd, nkv, in_sd));
    LOOM_RETURN_IF_ERROR(t.matrix(b + "attn_v.weight", "attn_v", l, S.n_embd, nkv, in_sd));
  }
  if (A.qkv_bias) {
    LOOM_RETURN_IF_ERROR(t.vector(b + "attn_q.bias", nq, 0.0f, 0.2f));
    LOOM_RETURN_IF_ERROR(t.vector(b + "attn_k.bias", nkv, 0.0f, 0.2f));
    LOOM_RETURN_IF_ERROR(t.vector(b + "attn_v.bias", nkv, 0.0f, 0.2f));
  }
  if (A.qk_norm) {
    LOOM_RETURN_IF_ERROR(t.norm(b + "attn_q_norm.weight", p.head_dim));
    LOOM_RETURN_IF_ERROR(t.norm(b + "attn_k_norm.weight", p.head_dim));
  }
  LOOM_RETURN_IF_ERROR(t.matrix(b + "attn_output.weight", "attn_output", l, nq, S.n_embd, in_sd));
  if (A.gemma) LOOM_RETURN_IF_ERROR(t.norm(b + "post_attention_norm.weight", S.n_embd));
  LOOM_RETURN_IF_ERROR(t.norm(b + "ffn_norm.weight", S.n_embd));
  if (A.moe) {
    const float exp_sd = 1.0f / std::sqrt(static_cast<float>(p.n_ff_exp));
    LOOM_RETURN_IF_ERROR(t.f32_matrix(b + "ffn_gate_inp.weight", S.n_embd, p.n_expert, in_sd));
    LOOM_RETURN_IF_ERROR(t.experts(b + "ffn_gate_exps.weight", "ffn_gate_exps", l, S.n_embd, p.n_ff_exp, p.n_expert, in_sd));
    LOOM_RETURN_IF_ERROR(t.experts(b + "ffn_up_exps.weight", "ffn_up_exps", l, S.n_embd, p.n_ff_exp, p.n_expert, in_sd));
    return t.experts(b + "ffn_down_exps.weight", "ffn_down_exps", l, p.n_ff_exp, S.n_embd, p.n_expert, exp_sd);
  }
  if (A.fused) {
    LOOM_RETURN_IF_ERROR(t.matrix(b + "ffn_up.weight", "ffn_up", l, S.n_embd, 2 * S.n_ff, in_sd));
  } else {
    LOOM_RETURN_IF_ERROR(t.matrix(b + "ffn_gate.weight", "ffn_gate", l, S.n_embd, S.n_ff, in_sd));
    LOOM_RETURN_IF_ERROR(t.matrix(b + "ffn_up.weight", "ffn_up", l, S.n_embd, S.n_ff, in_sd));
  }
  LOOM_RETURN_IF_ERROR(t.matrix(b + "ffn_down.weight", "ffn_down", l, S.n_ff, S.n_embd, ff_sd));
  if (A.gemma) LOOM_RETURN_IF_ERROR(t.norm(b + "post_ffw_norm.weight", S.n_embd));
  return Status();
}

Status write_tensors(GgufWriter& w, const Plan& p, uint64_t seed) {
  const SynthShape& S = *p.shape;
  TensorWriter t(w, p, seed);
  const float in_sd = 1.0f / std::sqrt(static_cast<float>(S.n_embd));
  LOOM_RETURN_IF_ERROR(t.matrix("token_embd.weight", "token_embd", -1, S.n_embd, S.n_vocab, 1.0f));
  for (int64_t l = 0; l < S.n_layer; ++l) LOOM_RETURN_IF_ERROR(write_layer(t, p, l));
  LOOM_RETURN_IF_ERROR(t.norm("output_norm.weight", S.n_embd));
  if (!p.tied) LOOM_RETURN_IF_ERROR(t.matrix("output.weight", "output", -1, S.n_embd, S.n_vocab, in_sd));
  return Status();
}

// Checks the combination and derives what the shape leaves to the architecture.
Result<Plan> make_plan(const SynthOptions& opts, const SynthShape& S) {
  const std::string arch = opts.arch.empty() ? (S.arch.empty() ? "llama" : S.arch) : opts.arch;
  const ArchLayout* A = find_layout(arch);
  if (!A) {
    std::string names;
    for (const auto& a : synth_architectures()) names += (names.empty() ? "" : ", ") + a;
    return invalid_argument("--arch {}: cannot be synthesized (known: {})", arch, names);
  }
  if (!S.arch.empty() && S.arch != arch && !(llama_like(S.arch) && llama_like(arch)))
    return invalid_argument("--shape {} is a {} model; it cannot be written as --arch {}", S.name, S.arch, arch);
  const int64_t head_dim = S.head_dim > 0 ? S.head_dim : S.n_embd / S.n_head;
  const int64_t n_rot = S.n_rot > 0 ? S.n_rot : head_dim;
  if (n_rot != head_dim && arch != "phi3")
    return invalid_argument("--shape {}: partial rotation ({} of {} dims) is only written for phi3", S.name, n_rot,
                            head_dim);
  if (A->fused && S.n_head * head_dim != S.n_embd)
    return invalid_argument("--shape {}: phi3 needs n_head * head_dim == n_embd", S.name);
  // Qwen and Phi-3 files get no window: llama.cpp and Loom ignore theirs.
  const int64_t n_swa = !A->windows ? 0 : S.n_swa > 0 ? S.n_swa : A->swa_default;
  Plan plan{&S, A, opts.quant, head_dim, n_rot, n_swa, S.tied_output || A->gemma};
  if (A->moe) {
    plan.n_expert = S.n_expert > 0 ? S.n_expert : 8;
    plan.n_expert_used = S.n_expert_used > 0 ? S.n_expert_used : 2;
    plan.n_ff_exp = S.n_ff_exp > 0 ? S.n_ff_exp : 256;
  } else if (S.n_expert > 0) {
    return invalid_argument("--shape {} is a mixture of experts; --arch {} has none", S.name, arch);
  }
  return plan;
}

}  // namespace

const std::vector<SynthShape>& synth_shapes() {
  // Values from each model's public config.json. phi4-mini leaves out its LongRoPE factors
  // (Loom refuses them; speed does not depend on them).
  static const std::vector<SynthShape> shapes = {
      {"llama3-8b", "llama", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, false},
      {"llama2-7b", "llama", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false},
      {"llama3-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 8192, 500000.0f, true},
      {"smollm2-135m", "llama", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, true},
      {"mistral-7b", "mistral", 4096, 32, 32, 8, 14336, 32768, 32768, 1000000.0f, false},
      {"qwen3-8b", "qwen3", 4096, 36, 32, 8, 12288, 151936, 40960, 1000000.0f, false, 128, 0, 0, 1e-6f},
      // Qwen3-30B-A3B: 128 experts of 768, 8 per token, on every layer (its feed_forward_length,
      // 6144, is the dense width its converter also writes).
      {"qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 6144, 151936, 40960, 1000000.0f, false, 128, 0, 0, 1e-6f, 128, 8,
       768},
      {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 1000000.0f, true, 128, 0, 0, 1e-6f},
      {"qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, 1000000.0f, false, 0, 0, 0, 1e-6f},
      {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1000000.0f, true, 0, 0, 0, 1e-6f},
      {"phi4-mini", "phi3", 3072, 32, 24, 8, 8192, 200064, 131072, 10000.0f, true, 128, 96},
      {"gemma2-2b", "gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, 10000.0f, true, 256, 0, 4096, 1e-6f},
      {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, 1000000.0f, true, 256, 0, 512, 1e-6f},
      // Small shapes for tests, written as any architecture.
      {"tiny", "", 256, 2, 4, 2, 512, 512, 4096, 10000.0f, false, 64},
      {"tiny-swa", "", 256, 3, 4, 2, 512, 512, 4096, 10000.0f, false, 64, 0, 8},
  };
  return shapes;
}

const std::vector<std::string>& synth_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& l : kLayouts) v.emplace_back(l.name);
    return v;
  }();
  return names;
}

Result<uint64_t> write_synthetic_model(const SynthOptions& opts, const std::string& path) {
  const SynthShape* shape = nullptr;
  std::string names;
  for (const auto& s : synth_shapes()) {
    if (s.name == opts.shape) shape = &s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  if (!shape) return invalid_argument("--shape {}: unknown (known: {})", opts.shape, names);
  static const std::map<std::string, uint32_t> kFileTypes = {
      {"q4_0", 2}, {"q5_0", 8}, {"q5_1", 9}, {"q8_0", 7}, {"q4_k", 15}, {"f16", 1}, {"bf16", 32},
      {"q2_k", 10}, {"q3_k", 12}, {"iq4_nl", 25}, {"iq4_xs", 30}};  // llama_ftype
  auto ft = kFileTypes.find(opts.quant);
  if (ft == kFileTypes.end())
    return invalid_argument("--quant {}: unknown (known: q4_0, q4_k, q5_0, q5_1, q8_0, q2_k, q3_k, iq4_nl, iq4_xs, f16, bf16)", opts.quant);
  LOOM_ASSIGN_OR_RETURN(Plan plan, make_plan(opts, *shape));

  GgufWriter w;
  write_metadata(w, plan, ft->second);
  write_tokenizer(w, shape->n_vocab);
  LOOM_RETURN_IF_ERROR(write_tensors(w, plan, opts.seed));
  Progress progress(fmt::format("writing {}", path), static_cast<double>(w.data_bytes()) / (1 << 20), "MiB");
  LOOM_RETURN_IF_ERROR(w.write(path, [&](uint64_t done, uint64_t) { progress.update(static_cast<double>(done) / (1 << 20)); }));
  progress.finish();
  auto map = MappedFile::open(path);
  if (!map.ok()) return map.status();
  return static_cast<uint64_t>(map->size());
}

}  // namespace loom::llm
