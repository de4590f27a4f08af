// Model: a GGUF file opened for inference: hyper-parameters from metadata, weights kept in their
// quantized layout inside the memory map (zero copy), and the architecture recipe that turns
// one step into a Program.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/gguf/gguf.h"
#include "loom/model/program.h"
#include "loom/ref/ops_ref.h"

namespace loom::llm {

// Recipes: kLlama, kQwen2, kQwen3, kQwen3Moe and kPhi3 share build_llama (its variants: biases,
// q/k norms, fused tensors bound as row views, a mixture-of-experts FFN), kGemma2 and kGemma3
// share build_gemma.
enum class Arch { kLlama, kQwen2, kQwen3, kQwen3Moe, kPhi3, kGemma2, kGemma3 };

// Hyper-parameters, all from GGUF metadata (defaults as llama.cpp applies them).
struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;      // general.architecture
  std::string name;           // general.name, for messages
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_ff = 0;
  int n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
  int64_t n_ctx_train = 0;
  float norm_eps = 1e-5f;

  // RoPE. Layers with sliding-window attention may use their own base/scale.
  ref::RopeMode rope_mode = ref::RopeMode::kNormal;
  int n_rot = 0;
  float rope_freq_base = 10000.0f, rope_freq_scale = 1.0f;
  float rope_freq_base_swa = 10000.0f, rope_freq_scale_swa = 1.0f;
  float yarn_ext_factor = 0.0f, yarn_attn_factor = 1.0f, yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  int64_t rope_n_ctx_orig = 0;

  // Attention.
  float attn_scale = 0.0f;          // 0: 1/sqrt(head_dim_k)
  float attn_softcap = 0.0f;        // 0: none
  int n_swa = 0;                    // sliding window (0: none)
  std::vector<bool> layer_swa;      // per layer: uses the sliding window
  float final_softcap = 0.0f;       // 0: none

  // Mixture of experts (0 experts: a dense FFN of n_ff). Each token's router picks n_expert_used
  // of n_expert experts (FFNs of n_ff_exp); their outputs are summed with the router's
  // probabilities, renormalized over the chosen ones when expert_weights_norm.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool expert_weights_norm = true;
};

// A tensor of the model, in place in the mapping.
struct Weight {
  std::string name;
  ref::WeightView view;           // 2-D view (1-D tensors: n_out = 1)
  std::vector<int64_t> shape;     // ggml order
  // Stacked expert matrices ([n_in, n_out, n_expert] tensors): n_expert > 0 and the view holds
  // all of them as n_expert * n_out rows, expert e's rows at [e * n_out, (e + 1) * n_out).
  int64_t n_expert = 0;
  int64_t expert_rows() const { return n_expert > 0 ? view.n_out / n_expert : view.n_out; }
  const float* f32() const { return reinterpret_cast<const float*>(view.data); }
};

// Weight ids per layer (-1: absent).
struct LayerWeights {
  int32_t attn_norm = -1, wq = -1, wk = -1, wv = -1, wo = -1;
  int32_t bq = -1, bk = -1, bv = -1, bo = -1;  // projection biases (f32 vectors)
  int32_t q_norm = -1, k_norm = -1, attn_post_norm = -1;
  int32_t ffn_norm = -1, ffn_gate = -1, ffn_up = -1, ffn_down = -1, ffn_post_norm = -1;
  // Mixture of experts: the router ([n_embd] -> n_expert logits) and the stacked experts.
  int32_t ffn_gate_inp = -1, ffn_gate_exps = -1, ffn_up_exps = -1, ffn_down_exps = -1;
};

class Model {
 public:
  // Opens and validates a model. Progress is shown while the weights are paged in.
  // Unsupported architectures are refused with the list of supported ones.
  static Result<std::unique_ptr<Model>> load(const std::string& path, bool show_progress = true);

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return *gguf_; }
  const std::vector<Weight>& weights() const { return weights_; }
  const Weight& weight(int32_t id) const { return weights_[static_cast<size_t>(id)]; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  int32_t tok_embd() const { return tok_embd_; }
  int32_t output_norm() const { return output_norm_; }
  int32_t output() const { return output_; }  // == tok_embd() when tied
  const float* rope_freqs() const { return rope_freqs_; }
  std::vector<std::string> weight_names() const;
  uint64_t weight_bytes() const;

  // The architecture recipe: the launches of one step of n_tokens tokens that produces logits
  // for n_outputs of them (StepInputs::output_rows says which).
  Program build_program(int64_t n_tokens, int64_t n_outputs) const;

  // Names accepted in general.architecture, for messages.
  static std::string supported_architectures();

  // Used by the architecture files while loading.
  Result<int32_t> bind(const std::string& name, int64_t n_in, int64_t n_out, bool required = true);
  Result<int32_t> bind_vector(const std::string& name, int64_t n, bool required = true);
  // The 3-D tensor `name` of shape [n_in, n_out, n_expert] (n_expert stacked matrices) as one
  // weight of n_expert * n_out rows (Weight::n_expert, Weight::expert_rows).
  Result<int32_t> bind_experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert);
  // Rows [row0, row0 + n_rows) of the 2-D tensor `name` of shape [n_in, n_total] as a matrix of
  // its own (a view into the mapping, no copy): the parts of a fused tensor (Phi-3's attn_qkv,
  // its gate|up ffn_up). The weight is named "name[row0:row_end]".
  Result<int32_t> bind_rows(const std::string& name, int64_t n_in, int64_t n_total, int64_t row0, int64_t n_rows);
  ModelConfig& mutable_config() { return config_; }
  std::vector<LayerWeights>& mutable_layers() { return layers_; }
  void set_globals(int32_t tok_embd, int32_t output_norm, int32_t output) {
    tok_embd_ = tok_embd; output_norm_ = output_norm; output_ = output;
  }
  void set_rope_freqs(const float* f) { rope_freqs_ = f; }

 private:
  Model() = default;
  std::unique_ptr<GgufFile> gguf_;
  ModelConfig config_;
  std::vector<Weight> weights_;
  std::vector<LayerWeights> layers_;
  int32_t tok_embd_ = -1, output_norm_ = -1, output_ = -1;
  const float* rope_freqs_ = nullptr;
};

// Per-architecture entry points (arch_*.cpp).
Status load_llama(Model& model);   // llama, mistral, qwen2, qwen3, qwen3moe, phi3
Status load_gemma2(Model& model);
Status load_gemma3(Model& model);
Program build_llama(const Model& model, int64_t n_tokens, int64_t n_outputs);
Program build_gemma(const Model& model, int64_t n_tokens, int64_t n_outputs);  // gemma2, gemma3

// Helpers shared by the architecture files (model.cpp).
Status read_common_hparams(const GgufFile& gguf, const std::string& arch, ModelConfig* c);
// Which layers use the sliding window (c->layer_swa), as llama.cpp reads
// `<arch>.attention.sliding_window_pattern`: a per-layer bool array (one entry per layer), or a
// number n (every n-th layer global, the others windowed; 0: every layer windowed), or, when the
// key is absent, `default_pattern` read as that number.
Status read_swa_layers(const GgufFile& gguf, uint64_t default_pattern, ModelConfig* c);

// The float hyper-parameters every backend trusts (norm epsilon, RoPE bases, attention scale,
// soft-caps): NaN, infinities and values <= 0 (< 0 where 0 means "none") are kDataLoss,
// naming the metadata key and the value. Model::load runs it once, after the architecture
// loader, so no device (the reference backend included) sees such a model.
Status validate_hparams(const ModelConfig& c);

}  // namespace loom::llm
