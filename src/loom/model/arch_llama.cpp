// The Llama family (Llama 2/3, SmolLM2, TinyLlama, Mistral 7B): RMSNorm, RoPE on adjacent
// pairs, grouped-query attention, SwiGLU FFN, tied or separate output matrix.
#include <cmath>

#include "loom/model/arch_util.h"
#include "loom/model/model.h"

namespace loom::llm {

Status load_llama(Model& m) {
  ModelConfig& c = m.mutable_config();
  const GgufFile& g = m.gguf();
  const std::string a = c.arch_name;
  c.rope_mode = ref::RopeMode::kNormal;
  LOOM_ASSIGN_OR_RETURN(double attn_scale, g.get_f64_or(a + ".attention.scale", 0.0));
  c.attn_scale = static_cast<float>(attn_scale);
  if (g.has(a + ".expert_count")) {
    LOOM_ASSIGN_OR_RETURN(uint64_t n_expert, g.get_u64(a + ".expert_count"));
    if (n_expert > 0) return unimplemented("mixture-of-experts models ({} experts) are not supported yet", n_expert);
  }
  if (c.head_dim_k != c.n_rot || c.head_dim_k != c.head_dim_v)
    return unimplemented("llama: head size {}/{} with {} rotated dims is not supported", c.head_dim_k, c.head_dim_v, c.n_rot);
  LOOM_RETURN_IF_ERROR(bind_globals_checked(m));
  if (const GgufTensor* rf = g.tensor("rope_freqs.weight")) {
    LOOM_ASSIGN_OR_RETURN(int32_t id, m.bind_vector("rope_freqs.weight", c.n_rot / 2));
    (void)rf;
    m.set_rope_freqs(m.weight(id).f32());
  }
  const int64_t nq = static_cast<int64_t>(c.n_head) * c.head_dim_k;
  const int64_t nk = static_cast<int64_t>(c.n_head_kv) * c.head_dim_k;
  const int64_t nv = static_cast<int64_t>(c.n_head_kv) * c.head_dim_v;
  auto& layers = m.mutable_layers();
  layers.resize(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "attn_qkv.weight"})
      if (g.tensor(p + bias)) return unimplemented("tensor '{}{}' (biases / fused QKV) is not supported for llama yet", p, bias);
    LayerWeights& L = layers[static_cast<size_t>(il)];
    LOOM_ASSIGN_OR_RETURN(L.attn_norm, m.bind_vector(p + "attn_norm.weight", c.n_embd));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_q.weight", c.n_embd, nq, &L.wq));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_k.weight", c.n_embd, nk, &L.wk));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_v.weight", c.n_embd, nv, &L.wv));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_output.weight", static_cast<int64_t>(c.n_head) * c.head_dim_v, c.n_embd, &L.wo));
    LOOM_ASSIGN_OR_RETURN(L.ffn_norm, m.bind_vector(p + "ffn_norm.weight", c.n_embd));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_gate.weight", c.n_embd, c.n_ff, &L.ffn_gate));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_up.weight", c.n_embd, c.n_ff, &L.ffn_up));
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
  ref::AttentionParams attn;
  attn.n_head = c.n_head;
  attn.n_head_kv = c.n_head_kv;
  attn.head_dim_k = c.head_dim_k;
  attn.head_dim_v = c.head_dim_v;
  attn.scale = c.attn_scale != 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  attn.softcap = c.attn_softcap;

  int32_t x = r.get_rows(m.tok_embd());
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = m.layers()[static_cast<size_t>(il)];
    int32_t h = r.rms_norm(x, L.attn_norm, c.norm_eps, layer_name("attn_norm", il));
    int32_t q = r.matmul(L.wq, h, layer_name("Qcur", il));
    int32_t k = r.matmul(L.wk, h, layer_name("Kcur", il));
    int32_t v = r.matmul(L.wv, h, layer_name("Vcur", il));
    r.rope_kv(q, k, v, il, c.n_head, c.n_head_kv, c.head_dim_k, rope);
    int32_t a = r.attention(q, il, attn, layer_name("kqv_out", il));
    int32_t o = r.matmul(L.wo, a, layer_name("attn_out", il));
    if (il == c.n_layer - 1 && n_outputs < n_tokens) {
      // Only the rows whose logits are wanted go on (as llama.cpp does in its last layer).
      o = r.gather_outputs(o, "attn_out_sel");
      x = r.gather_outputs(x, "inp_sel");
    }
    int32_t ffn_in = r.add(o, x, layer_name("ffn_inp", il));
    h = r.rms_norm(ffn_in, L.ffn_norm, c.norm_eps, layer_name("ffn_norm", il));
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
