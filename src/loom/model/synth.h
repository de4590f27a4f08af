// Synthetic models: GGUF files with random weights in the real shapes of known models, for
// benchmarks and GPU-vs-CPU checks on machines without the real files (speed does not depend
// on weight values). Weights are random quantized blocks with scales chosen so activations stay
// in a realistic range; the vocabulary is byte-level (256 byte tokens + fillers). Every
// architecture the engine loads can be written, in the tensor layout and metadata llama.cpp's
// converters write for it, so llama.cpp loads the same files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm {

// A model's hyper-parameters (the values of its public config.json).
struct SynthShape {
  std::string name;  // "llama3-8b"
  std::string arch;  // the architecture it belongs to ("llama", "qwen3", ...); "": any
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_base;
  bool tied_output;
  int64_t head_dim = 0;   // per head; 0: n_embd / n_head
  int64_t n_rot = 0;      // rotated dims per head; 0: all of them
  int64_t n_swa = 0;      // sliding window; 0: the architecture's default (Gemma) or none.
                          // Written for llama, mistral and Gemma only (the recipes that apply it)
  float norm_eps = 1e-5f;
  // Mixture of experts (qwen3moe): experts, experts per token, each expert's FFN width. 0: the
  // architecture's test default (8 experts, 2 per token, width 256) where it has experts.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
};

const std::vector<SynthShape>& synth_shapes();

// The architectures `write_synthetic_model` writes: llama, mistral, qwen2, qwen3, qwen3moe, phi3,
// gemma2, gemma3.
const std::vector<std::string>& synth_architectures();

struct SynthOptions {
  // "" takes the shape's own architecture. A shape of one architecture cannot be written as
  // another, except that llama and mistral shapes are interchangeable (one layout); shapes with
  // an empty arch (the small test shapes) fit every architecture.
  std::string arch;
  std::string shape = "smollm2-135m";
  std::string quant = "q4_0";  // q4_0 | q4_k (Q4_K_M-like mix) | q5_0 | q5_1 | q8_0 | q2_k | q3_k | iq4_nl | iq4_xs | f16 | bf16
  uint64_t seed = 1;
};

// Writes the file; reports progress on stderr. Returns the number of bytes written. Unknown
// architectures, shapes and quant names, and a shape that does not fit the architecture, are
// kInvalidArgument.
Result<uint64_t> write_synthetic_model(const SynthOptions& opts, const std::string& path);

}  // namespace loom::llm
