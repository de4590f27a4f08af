// Gemma 2 and Gemma 3: embeddings scaled by sqrt(n_embd), RMSNorm before and after attention and
// FFN, NeoX RoPE, alternating sliding-window and global layers, queries scaled before attention,
// GELU-gated FFN. Gemma 3 adds q/k RMSNorm per head and its own RoPE base on sliding-window
// layers; Gemma 2 soft-caps the attention scores and the final logits instead.
#include <cmath>

#include "loom/model/arch_util.h"
#include "loom/model/model.h"

namespace loom::llm {
namespace {

Status bind_gemma_layers(Model& m, bool qk_norm) {
  const ModelConfig& c = m.config();
  const int64_t nq = static_cast<int64_t>(c.n_head) * c.head_dim_k;
  const int64_t nk = static_cast<int64_t>(c.n_head_kv) * c.head_dim_k;
  const int64_t nv = static_cast<int64_t>(c.n_head_kv) * c.head_dim_v;
  auto& layers = m.mutable_layers();
  layers.resize(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& L = layers[static_cast<size_t>(il)];
    LOOM_ASSIGN_OR_RETURN(L.attn_norm, m.bind_vector(p + "attn_norm.weight", c.n_embd));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_q.weight", c.n_embd, nq, &L.wq));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_k.weight", c.n_embd, nk, &L.wk));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_v.weight", c.n_embd, nv, &L.wv));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "attn_output.weight", static_cast<int64_t>(c.n_head) * c.head_dim_v, c.n_embd, &L.wo));
    if (qk_norm) {
      LOOM_ASSIGN_OR_RETURN(L.q_norm, m.bind_vector(p + "attn_q_norm.weight", c.head_dim_k));
      LOOM_ASSIGN_OR_RETURN(L.k_norm, m.bind_vector(p + "attn_k_norm.weight", c.head_dim_k));
    }
    LOOM_ASSIGN_OR_RETURN(L.attn_post_norm, m.bind_vector(p + "post_attention_norm.weight", c.n_embd));
    LOOM_ASSIGN_OR_RETURN(L.ffn_norm, m.bind_vector(p + "ffn_norm.weight", c.n_embd));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_gate.weight", c.n_embd, c.n_ff, &L.ffn_gate));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_up.weight", c.n_embd, c.n_ff, &L.ffn_up));
    LOOM_RETURN_IF_ERROR(bind_matrix_checked(m, p + "ffn_down.weight", c.n_ff, c.n_embd, &L.ffn_down));
    LOOM_ASSIGN_OR_RETURN(L.ffn_post_norm, m.bind_vector(p + "post_ffw_norm.weight", c.n_embd));
  }
  return Status();
}

// Queries are scaled by 1/sqrt(n_embd / n_head) in the 27B models (Gemma 2: 46 layers, Gemma 3:
// 62), by 1/sqrt(head size) in the others, as Google's reference configs and llama.cpp do.
float query_scale(const ModelConfig& c, int64_t layers_27b) {
  return c.n_layer == layers_27b ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                                 : 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
}

}  // namespace

// Gemma 2: every other layer (the even ones) has a window of 4096 unless the metadata says
// otherwise; RoPE is the same on every layer; scores capped at 50 and logits at 30 where the
// metadata has no caps (llama.cpp's defaults, from Google's configs). The output matrix is the
// embedding table, whatever else the file holds.
Status load_gemma2(Model& m) {
  ModelConfig& c = m.mutable_config();
  const GgufFile& g = m.gguf();
  const std::string& a = c.arch_name;
  c.rope_mode = ref::RopeMode::kNeox;
  LOOM_ASSIGN_OR_RETURN(uint64_t n_swa, g.get_u64_or(a + ".attention.sliding_window", 4096));
  c.n_swa = static_cast<int>(n_swa);
  if (c.n_swa > 0) LOOM_RETURN_IF_ERROR(read_swa_layers(g, 2, &c));
  LOOM_ASSIGN_OR_RETURN(double base_swa, g.get_f64_or(a + ".rope.freq_base_swa", c.rope_freq_base));
  c.rope_freq_base_swa = static_cast<float>(base_swa);
  c.rope_freq_scale_swa = c.rope_freq_scale;
  if (!g.has(a + ".attn_logit_softcapping")) c.attn_softcap = 50.0f;
  if (!g.has(a + ".final_logit_softcapping")) c.final_softcap = 30.0f;
  c.attn_scale = query_scale(c, 46);
  if (c.n_rot != c.head_dim_k) return unimplemented("gemma2: partial rotary embedding is not supported");
  if (c.head_dim_k != c.head_dim_v) return unimplemented("gemma2: key and value heads of different sizes are not supported");
  LOOM_RETURN_IF_ERROR(bind_globals_checked(m));
  m.set_globals(m.tok_embd(), m.output_norm(), m.tok_embd());
  return bind_gemma_layers(m, /*qk_norm=*/false);
}

Status load_gemma3(Model& m) {
  ModelConfig& c = m.mutable_config();
  const GgufFile& g = m.gguf();
  c.rope_mode = ref::RopeMode::kNeox;
  LOOM_ASSIGN_OR_RETURN(uint64_t n_swa, g.get_u64_or("gemma3.attention.sliding_window", 0));
  c.n_swa = static_cast<int>(n_swa);
  if (c.n_swa > 0) {
    LOOM_RETURN_IF_ERROR(read_swa_layers(g, 6, &c));
    LOOM_ASSIGN_OR_RETURN(double base_swa, g.get_f64_or("gemma3.rope.freq_base_swa", 10000.0));
    c.rope_freq_base_swa = static_cast<float>(base_swa);
    c.rope_freq_scale_swa = 1.0f;
  }
  c.attn_scale = query_scale(c, 62);
  if (c.n_rot != c.head_dim_k) return unimplemented("gemma3: partial rotary embedding is not supported");
  LOOM_RETURN_IF_ERROR(bind_globals_checked(m));
  return bind_gemma_layers(m, /*qk_norm=*/true);
}

Program build_gemma(const Model& m, int64_t n_tokens, int64_t n_outputs) {
  const ModelConfig& c = m.config();
  Recipe r(m, n_tokens, n_outputs);

  int32_t x = r.get_rows(m.tok_embd());
  x = r.scale(x, std::sqrt(static_cast<float>(c.n_embd)), "inp_scaled");
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = m.layers()[static_cast<size_t>(il)];
    const bool swa = c.layer_swa[static_cast<size_t>(il)];
    ref::RopeParams rope;
    rope.mode = c.rope_mode;
    rope.n_dims = c.n_rot;
    rope.freq_base = swa ? c.rope_freq_base_swa : c.rope_freq_base;
    rope.freq_scale = swa ? c.rope_freq_scale_swa : c.rope_freq_scale;
    rope.ext_factor = c.yarn_ext_factor;
    rope.attn_factor = c.yarn_attn_factor;
    rope.beta_fast = c.yarn_beta_fast;
    rope.beta_slow = c.yarn_beta_slow;
    rope.n_ctx_orig = static_cast<int>(c.rope_n_ctx_orig);
    ref::AttentionParams attn;
    attn.n_head = c.n_head;
    attn.n_head_kv = c.n_head_kv;
    attn.head_dim_k = c.head_dim_k;
    attn.head_dim_v = c.head_dim_v;
    attn.scale = 1.0f;  // the queries were scaled already
    attn.softcap = c.attn_softcap;
    attn.n_swa = swa ? c.n_swa : 0;

    int32_t h = r.rms_norm(x, L.attn_norm, c.norm_eps, layer_name("attn_norm", il));
    int32_t q = r.matmul(L.wq, h, layer_name("Qcur", il));
    int32_t k = r.matmul(L.wk, h, layer_name("Kcur", il));
    int32_t v = r.matmul(L.wv, h, layer_name("Vcur", il));
    if (L.q_norm >= 0) q = r.rms_norm(q, L.q_norm, c.norm_eps, layer_name("Qcur_normed", il), c.head_dim_k);
    if (L.k_norm >= 0) k = r.rms_norm(k, L.k_norm, c.norm_eps, layer_name("Kcur_normed", il), c.head_dim_k);
    r.rope_kv(q, k, v, il, c.n_head, c.n_head_kv, c.head_dim_k, rope);
    q = r.scale(q, c.attn_scale, layer_name("Qcur_scaled", il));
    int32_t a = r.attention(q, il, attn, layer_name("kqv_out", il));
    int32_t o = r.matmul(L.wo, a, layer_name("attn_out", il));
    if (il == c.n_layer - 1 && n_outputs < n_tokens) {
      o = r.gather_outputs(o, "attn_out_sel");
      x = r.gather_outputs(x, "inp_sel");
    }
    o = r.rms_norm(o, L.attn_post_norm, c.norm_eps, layer_name("attn_post_norm", il));
    int32_t sa = r.add(o, x, layer_name("sa_out", il));
    h = r.rms_norm(sa, L.ffn_norm, c.norm_eps, layer_name("ffn_norm", il));
    int32_t gate = r.matmul(L.ffn_gate, h, layer_name("ffn_gate", il));
    int32_t up = r.matmul(L.ffn_up, h, layer_name("ffn_up", il));
    int32_t act = r.binary(OpCode::kGeGlu, gate, up, layer_name("ffn_geglu", il));
    int32_t down = r.matmul(L.ffn_down, act, layer_name("ffn_out", il));
    down = r.rms_norm(down, L.ffn_post_norm, c.norm_eps, layer_name("ffn_post_norm", il));
    x = r.add(down, sa, layer_name("l_out", il));
  }
  x = r.rms_norm(x, m.output_norm(), c.norm_eps, "result_norm");
  int32_t logits = r.matmul(m.output(), x, "result_output");
  if (c.final_softcap > 0.0f) logits = r.unary(OpCode::kSoftcap, logits, c.final_softcap, "result_softcap");
  return r.finish(logits);
}

}  // namespace loom::llm
