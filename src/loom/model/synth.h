// Synthetic models: GGUF files with random weights in the real shapes of known models, for
// benchmarks and GPU-vs-CPU checks on machines without the real files (speed does not depend
// on weight values). Weights are random quantized blocks with scales chosen so activations stay
// in a realistic range; the vocabulary is byte-level (256 byte tokens + fillers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm {

struct SynthShape {
  std::string name;  // "llama3-8b"
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_base;
  bool tied_output;
};

const std::vector<SynthShape>& synth_shapes();

struct SynthOptions {
  std::string arch = "llama";
  std::string shape = "smollm2-135m";
  std::string quant = "q4_0";  // q4_0 | q4_k (Q4_K_M-like mix) | q8_0
  uint64_t seed = 1;
};

// Writes the file; reports progress on stderr. Returns the number of bytes written.
Result<uint64_t> write_synthetic_model(const SynthOptions& opts, const std::string& path);

}  // namespace loom::llm
