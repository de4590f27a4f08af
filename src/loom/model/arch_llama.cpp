// The Llama-like decoders: Llama 2/3 (SmolLM2, TinyLlama, Mistral 7B), Qwen 2/2.5, Qwen 3 (dense
// and mixture of experts) and Phi-3/Phi-4. RMSNorm, RoPE, grouped-query attention (with Mistral's sliding window where the
// file asks for one), SwiGLU FFN, tied or separate output matrix. Per architecture: Qwen 2's q/k/v biases, Qwen 3's per-head q/k RMSNorm, Phi-3's fused
// QKV and gate|up tensors (bound as row views, so every later stage sees plain matrices) and its
// queries scaled before attention; Qwen 3 MoE's routed experts in place of the dense FFN;
// NeoX RoPE for Qwen and Phi, adjacent pairs for Llama. Each
// computes what llama.cpp's graph for the architecture computes, op for op.
#include <cmath>

#include "loom/model/arch_util.h"
#include "loom/model/model.h"

namespace loom::llm {
namespace {

// The q, k, v projections: three tensors, or the row ranges q | k | v of a fused attn_qkv.
Status bind_qkv(Model& m, const std::string& p, int64_t nq, int64_t nk, int64_t nv, LayerWeights& L) {
  const ModelConfig& c = m.config();
  const GgufFile& g = m.gguf();
  const std::string fused = p + "attn_qkv.weight";
  if (!g.tensor(fused)) {
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_q.weight", c.n_embd, nq, &L.wq));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_k.weight", c.n_embd, nk, &L.wk));
    return bind_matrix_checked(m, p + "attn_v.weight", c.n_embd, nv, &L.wv);
  }
  if (g.tensor(p + "attn_q.weight"))
    return data_loss("layer '{}' has both a fused attn_qkv.weight and attn_q.weight", p);
  if (g.tensor(p + "attn_qkv.bias")) return unimplemented("tensor '{}attn_qkv.bias' (a fused QKV bias) is not supported", p);
  const int64_t total = nq + nk + nv;
  LOOM_RETURN_IF_ERROR(bind_rows_checked(m, fused, c.n_embd, total, 0, nq, &L.wq));
  LOOM_RETURN_IF_ERROR(bind_rows_checked(m, fused, c.n_embd, total, nq, nk, &L.wk));
  return bind_rows_checked(m, fused, c.n_embd, total, nq + nk, nv, &L.wv);
}

// gate and up: two tensors, or (Phi-3) one ffn_up of 2 * n_ff rows, gate first (ggml_swiglu of
// the fused product applies SiLU to its first half).
Status bind_gate_up(Model& m, const std::string& p, LayerWeights& L) {
  const ModelConfig& c = m.config();
  if (c.arch == Arch::kPhi3 && !m.gguf().tensor(p + "ffn_gate.weight")) {
    const std::string up = p + "ffn_up.weight";
    LOOM_RETURN_IF_ERROR(bind_rows_checked(m, up, c.n_embd, 2 * c.n_ff, 0, c.n_ff, &L.ffn_gate));
    return bind_rows_checked(m, up, c.n_embd, 2 * c.n_ff, c.n_ff, c.n_ff, &L.ffn_up);
  }
  LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_gate.weight", c.n_embd, c.n_ff, &L.ffn_gate));
  return bind_matrix_checked(m, p + "ffn_up.weight", c.n_embd, c.n_ff, &L.ffn_up);
}

Status check_architecture(const Model& m) {
  const ModelConfig& c = m.config();
  const GgufFile& g = m.gguf();
  const std::string& a = c.arch_name;
  if (c.arch != Arch::kQwen3Moe && g.has(a + ".expert_count")) {
    LOOM_ASSIGN_OR_RETURN(uint64_t n_expert, g.get_u64(a + ".expert_count"));
    if (n_expert > 0)
      return unimplemented("{}: mixture-of-experts models ({} experts) are supported as qwen3moe only", a, n_expert);
  }
  if (c.head_dim_k != c.head_dim_v)
    return unimplemented("{}: key and value heads of {} and {} values are not supported", a, c.head_dim_k, c.head_dim_v);
  // Phi-3 may rotate part of each head (Phi-4-mini); the others rotate all of it, as llama.cpp
  // requires for them.
  if (c.arch != Arch::kPhi3 && c.n_rot != c.head_dim_k)
    return unimplemented("{}: head size {} with {} rotated dims is not supported", a, c.head_dim_k, c.n_rot);
  for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"})
    if (g.tensor(t)) return unimplemented("tensor '{}': long-context RoPE factors (LongRoPE) are not supported yet", t);
  return Status();
}

// Llama and Mistral: a sliding window where the file has one (Mistral 7B v0.1 was trained with a
// window of 4096 on every layer). `attention.sliding_window` > 0 turns it on, on every layer unless
// `attention.sliding_window_pattern` names the layers (read as for Gemma, with "every layer" as
// the default). llama.cpp's llama graph ignores both keys (its converters never write them for
// this architecture), so the two agree wherever the window covers the whole context. A pattern
// without a window, or a RoPE base of its own for windowed layers, is refused rather than
// guessed at.
Status read_llama_window(const GgufFile& g, ModelConfig* c) {
  const std::string window_key = c->arch_name + ".attention.sliding_window";
  const std::string pattern_key = c->arch_name + ".attention.sliding_window_pattern";
  const std::string base_key = c->arch_name + ".rope.freq_base_swa";
  // A window that is not an integer is a bad file (data loss), not a bad argument.
  Result<uint64_t> window = g.get_u64_or(window_key, 0);
  if (!window.ok()) return data_loss("metadata key '{}': {}", window_key, window.status().message());
  const uint64_t n_swa = *window;
  if (n_swa == 0) {
    if (g.has(pattern_key))
      return data_loss("metadata key '{}' needs a sliding window, but '{}' is {}", pattern_key, window_key,
                       g.has(window_key) ? "0" : "missing");
    return Status();
  }
  if (n_swa > (uint64_t{1} << 30)) return data_loss("metadata key '{}' = {} is implausible", window_key, n_swa);
  c->n_swa = static_cast<int>(n_swa);
  LOOM_RETURN_IF_ERROR(read_swa_layers(g, 0, c));
  if (g.has(base_key)) {
    LOOM_ASSIGN_OR_RETURN(double base_swa, g.get_f64(base_key));
    if (static_cast<float>(base_swa) != c->rope_freq_base)
      return unimplemented("metadata key '{}' = {} differs from rope.freq_base = {}: a RoPE base of its own for "
                           "sliding-window layers is not supported for {}", base_key, base_swa, c->rope_freq_base,
                           c->arch_name);
  }
  return Status();
}

// Qwen 3 MoE: every layer's FFN is n_expert experts of n_ff_exp, n_expert_used of them per token.
// llama.cpp's qwen3moe graph always renormalizes the chosen experts' weights and gates with a
// softmax; a file that says otherwise is refused rather than run differently.
Status read_moe(const GgufFile& g, ModelConfig* c) {
  const std::string& a = c->arch_name;
  auto need = [&](const char* k) -> Result<uint64_t> {
    const std::string key = a + "." + k;
    if (!g.has(key)) return data_loss("metadata key '{}' is missing", key);
    return g.get_u64(key).with_context("metadata key '" + key + "'");
  };
  LOOM_ASSIGN_OR_RETURN(uint64_t n_expert, need("expert_count"));
  LOOM_ASSIGN_OR_RETURN(uint64_t n_used, need("expert_used_count"));
  if (n_expert == 0 || n_expert > 4096)
    return data_loss("metadata key '{}.expert_count' = {} is out of range (1..4096)", a, n_expert);
  if (n_used == 0 || n_used > n_expert)
    return data_loss("metadata key '{}.expert_used_count' = {} must be in 1..{}.expert_count ({})", a, n_used, a,
                     n_expert);
  uint64_t n_ff_exp = 0;
  if (g.has(a + ".expert_feed_forward_length")) {
    LOOM_ASSIGN_OR_RETURN(n_ff_exp, need("expert_feed_forward_length"));
  } else {
    n_ff_exp = static_cast<uint64_t>(c->n_ff) / n_used;  // llama.cpp's default
  }
  if (n_ff_exp == 0 || n_ff_exp > (1u << 20))
    return data_loss("metadata key '{}.expert_feed_forward_length' = {} is out of range", a, n_ff_exp);
  LOOM_ASSIGN_OR_RETURN(bool norm, g.get_bool_or(a + ".expert_weights_norm", true));
  if (!norm)
    return unimplemented("metadata key '{}.expert_weights_norm' = false: qwen3moe renormalizes the chosen experts' "
                         "weights (llama.cpp's graph always does)", a);
  LOOM_ASSIGN_OR_RETURN(uint64_t gating, g.get_u64_or(a + ".expert_gating_func", 1));
  if (gating != 1)
    return unimplemented("metadata key '{}.expert_gating_func' = {}: qwen3moe's router is a softmax (1)", a, gating);
  for (const char* k : {"expert_shared_count", "expert_shared_feed_forward_length"})
    if (g.has(a + "." + k)) {
      LOOM_ASSIGN_OR_RETURN(uint64_t v, g.get_u64(a + "." + k));
      if (v > 0) return unimplemented("metadata key '{}.{}' = {}: shared experts are not supported", a, k, v);
    }
  c->n_expert = static_cast<int64_t>(n_expert);
  c->n_expert_used = static_cast<int64_t>(n_used);
  c->n_ff_exp = static_cast<int64_t>(n_ff_exp);
  c->expert_weights_norm = norm;
  return Status();
}

// The router and the three stacked expert tensors of one layer.
Status bind_moe(Model& m, const std::string& p, LayerWeights& L) {
  const ModelConfig& c = m.config();
  for (const char* dense : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"})
    if (m.gguf().tensor(p + dense))
      return data_loss("layer '{}' of a mixture-of-experts model has a dense {}", p, dense);
  LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_gate_inp.weight", c.n_embd, c.n_expert, &L.ffn_gate_inp));
  auto experts = [&](const char* name, int64_t n_in, int64_t n_out, int32_t* id) -> Status {
    LOOM_ASSIGN_OR_RETURN(*id, m.bind_experts(p + name, n_in, n_out, c.n_expert));
    return ref::vec_dot_type(m.weight(*id).view.type).status().with_context("tensor '" + p + name + "'");
  };
  LOOM_RETURN_IF_ERROR(experts("ffn_gate_exps.weight", c.n_embd, c.n_ff_exp, &L.ffn_gate_exps));
  LOOM_RETURN_IF_ERROR(experts("ffn_up_exps.weight", c.n_embd, c.n_ff_exp, &L.ffn_up_exps));
  return experts("ffn_down_exps.weight", c.n_ff_exp, c.n_embd, &L.ffn_down_exps);
}

}  // namespace

Status load_llama(Model& m) {
  ModelConfig& c = m.mutable_config();
  const GgufFile& g = m.gguf();
  const std::string a = c.arch_name;
  c.rope_mode = c.arch == Arch::kLlama ? ref::RopeMode::kNormal : ref::RopeMode::kNeox;
  if (c.arch == Arch::kLlama) {
    // Only Llama's recipe reads attention.scale (llama.cpp's Qwen and Phi graphs ignore it).
    LOOM_ASSIGN_OR_RETURN(double attn_scale, g.get_f64_or(a + ".attention.scale", 0.0));
    c.attn_scale = static_cast<float>(attn_scale);
    LOOM_RETURN_IF_ERROR(read_llama_window(g, &c));
  }
  // The sliding window of Qwen 2/3 and Phi-3 files is ignored, as llama.cpp ignores it: Phi-3's
  // converters write the window without the per-layer pattern the checkpoints use, and the
  // outputs should agree.
  LOOM_RETURN_IF_ERROR(check_architecture(m));
  const bool moe = c.arch == Arch::kQwen3Moe;
  if (moe) LOOM_RETURN_IF_ERROR(read_moe(g, &c));
  LOOM_RETURN_IF_ERROR(bind_globals_checked(m));
  if (g.tensor("rope_freqs.weight")) {
    // Llama 3.1+ "llama3" RoPE scaling: the converter stores the per-frequency divisors.
    LOOM_ASSIGN_OR_RETURN(int32_t id, m.bind_vector("rope_freqs.weight", c.n_rot / 2));
    m.set_rope_freqs(m.weight(id).f32());
  }
  const int64_t nq = static_cast<int64_t>(c.n_head) * c.head_dim_k;
  const int64_t nk = static_cast<int64_t>(c.n_head_kv) * c.head_dim_k;
  const int64_t nv = static_cast<int64_t>(c.n_head_kv) * c.head_dim_v;
  const bool qkv_bias_required = c.arch == Arch::kQwen2;
  auto& layers = m.mutable_layers();
  layers.resize(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    for (const char* bias : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"})
      if (g.tensor(p + bias)) return unimplemented("tensor '{}{}' (FFN biases) is not supported", p, bias);
    LayerWeights& L = layers[static_cast<size_t>(il)];
    LOOM_ASSIGN_OR_RETURN(L.attn_norm, m.bind_vector(p + "attn_norm.weight", c.n_embd));
    LOOM_RETURN_IF_ERROR(bind_qkv(m, p, nq, nk, nv, L));
    LOOM_ASSIGN_OR_RETURN(L.bq, m.bind_vector(p + "attn_q.bias", nq, qkv_bias_required));
    LOOM_ASSIGN_OR_RETURN(L.bk, m.bind_vector(p + "attn_k.bias", nk, qkv_bias_required));
    LOOM_ASSIGN_OR_RETURN(L.bv, m.bind_vector(p + "attn_v.bias", nv, qkv_bias_required));
    if (c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe) {
      LOOM_ASSIGN_OR_RETURN(L.q_norm, m.bind_vector(p + "attn_q_norm.weight", c.head_dim_k));
      LOOM_ASSIGN_OR_RETURN(L.k_norm, m.bind_vector(p + "attn_k_norm.weight", c.head_dim_k));
    }
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_output.weight", nq, c.n_embd, &L.wo));
    LOOM_ASSIGN_OR_RETURN(L.bo, m.bind_vector(p + "attn_output.bias", c.n_embd, /*required=*/false));
    LOOM_ASSIGN_OR_RETURN(L.ffn_norm, m.bind_vector(p + "ffn_norm.weight", c.n_embd));
    if (moe) {
      LOOM_RETURN_IF_ERROR(bind_moe(m, p, L));
      continue;
    }
    LOOM_RETURN_IF_ERROR(bind_gate_up(m, p, L));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_down.weight", c.n_ff, c.n_embd, &L.ffn_down));
  }
  return Status();
}

Program build_llama(const Model& m, int64_t n_tokens, int64_t n_outputs) {
  const ModelConfig& c = m.config();
  Recipe r(m, n_tokens, n_outputs);
  ref::RopeParams rope;
  rope.mode = c.rope_mode;
  rope.n_dims = c.n_rot;
  rope.freq_base = c.rope_freq_base;
  rope.freq_scale = c.rope_freq_scale;
  rope.ext_factor = c.yarn_ext_factor;
  rope.attn_factor = c.yarn_attn_factor;
  rope.beta_fast = c.yarn_beta_fast;
  rope.beta_slow = c.yarn_beta_slow;
  rope.n_ctx_orig = static_cast<int>(c.rope_n_ctx_orig);
  rope.freq_factors = m.rope_freqs();
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  // Phi-3 scales the rotated queries and attends with scale 1 (llama.cpp's phi3 graph), which
  // rounds differently from scaling the scores.
  const bool scale_q = c.arch == Arch::kPhi3;
  ref::AttentionParams attn;
  attn.n_head = c.n_head;
  attn.n_head_kv = c.n_head_kv;
  attn.head_dim_k = c.head_dim_k;
  attn.head_dim_v = c.head_dim_v;
  attn.scale = scale_q ? 1.0f : c.attn_scale != 0.0f ? c.attn_scale : head_scale;
  attn.softcap = c.attn_softcap;
  auto attention_of = [&](int il) {
    ref::AttentionParams a = attn;
    a.n_swa = c.layer_swa[static_cast<size_t>(il)] ? c.n_swa : 0;
    return a;
  };

  // A projection, plus its bias where the layer has one.
  auto project = [&](int32_t w, int32_t bias, int32_t x, const char* name, int il) {
    if (bias < 0) return r.matmul(w, x, layer_name(name, il));
    return r.matmul(w, x, layer_name(name, il) + ".nobias");
  };
  auto add_bias = [&](int32_t x, int32_t bias, const char* name, int il) {
    return bias < 0 ? x : r.add_bias(x, bias, layer_name(name, il));
  };

  int32_t x = r.get_rows(m.tok_embd());
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = m.layers()[static_cast<size_t>(il)];
    int32_t h = r.rms_norm(x, L.attn_norm, c.norm_eps, layer_name("attn_norm", il));
    // The three matmuls first, so a backend can run them as one launch of h.
    int32_t q = project(L.wq, L.bq, h, "Qcur", il);
    int32_t k = project(L.wk, L.bk, h, "Kcur", il);
    int32_t v = project(L.wv, L.bv, h, "Vcur", il);
    q = add_bias(q, L.bq, "Qcur", il);
    k = add_bias(k, L.bk, "Kcur", il);
    v = add_bias(v, L.bv, "Vcur", il);
    if (L.q_norm >= 0) q = r.rms_norm(q, L.q_norm, c.norm_eps, layer_name("Qcur_normed", il), c.head_dim_k);
    if (L.k_norm >= 0) k = r.rms_norm(k, L.k_norm, c.norm_eps, layer_name("Kcur_normed", il), c.head_dim_k);
    r.rope_kv(q, k, v, il, c.n_head, c.n_head_kv, c.head_dim_k, rope);
    if (scale_q) q = r.scale(q, head_scale, layer_name("Qcur_scaled", il));
    int32_t a = r.attention(q, il, attention_of(il), layer_name("kqv_out", il));
    int32_t o = project(L.wo, L.bo, a, "attn_out", il);
    o = add_bias(o, L.bo, "attn_out", il);
    if (il == c.n_layer - 1 && n_outputs < n_tokens) {
      // Only the rows whose logits are wanted go on (as llama.cpp does in its last layer).
      o = r.gather_outputs(o, "attn_out_sel");
      x = r.gather_outputs(x, "inp_sel");
    }
    int32_t ffn_in = r.add(o, x, layer_name("ffn_inp", il));
    h = r.rms_norm(ffn_in, L.ffn_norm, c.norm_eps, layer_name("ffn_norm", il));
    if (L.ffn_gate_inp >= 0) {
      // llama.cpp's build_moe_ffn: router softmax and top-k, the chosen experts' gate and up,
      // SwiGLU, down, each weighted and summed in slot order.
      int32_t logits = r.matmul(L.ffn_gate_inp, h, layer_name("ffn_moe_logits", il));
      auto [weights, ids] = r.moe_route(logits, c.n_expert_used, c.expert_weights_norm, layer_name("ffn_moe_weights", il),
                                        layer_name("ffn_moe_topk", il));
      int32_t gate = r.matmul_id(L.ffn_gate_exps, h, ids, layer_name("ffn_moe_gate", il));
      int32_t up = r.matmul_id(L.ffn_up_exps, h, ids, layer_name("ffn_moe_up", il));
      int32_t act = r.binary(OpCode::kSwiGlu, gate, up, layer_name("ffn_moe_swiglu", il));
      int32_t down = r.matmul_id(L.ffn_down_exps, act, ids, layer_name("ffn_moe_down", il));
      int32_t moe_out = r.moe_sum(down, weights, layer_name("ffn_moe_out", il));
      x = r.add(moe_out, ffn_in, layer_name("l_out", il));
      continue;
    }
    int32_t gate = r.matmul(L.ffn_gate, h, layer_name("ffn_gate", il));
    int32_t up = r.matmul(L.ffn_up, h, layer_name("ffn_up", il));
    int32_t act = r.binary(OpCode::kSwiGlu, gate, up, layer_name("ffn_swiglu", il));
    int32_t down = r.matmul(L.ffn_down, act, layer_name("ffn_out", il));
    x = r.add(down, ffn_in, layer_name("l_out", il));
  }
  x = r.rms_norm(x, m.output_norm(), c.norm_eps, "result_norm");
  int32_t logits = r.matmul(m.output(), x, "result_output");
  if (c.final_softcap > 0.0f) logits = r.unary(OpCode::kSoftcap, logits, c.final_softcap, "result_softcap");
  return r.finish(logits);
}

}  // namespace loom::llm
