// Random contents for synthetic models (synth.cpp): quantized blocks whose values have a chosen
// spread, RMSNorm weights near 1, and the byte-level vocabulary's token texts. Internal to the
// model library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/gguf/ggml_types.h"

namespace loom::llm::synth {

// Random blocks of `type` whose dequantized values have a standard deviation near `stddev`
// (float types: values of that spread). Deterministic in `seed`.
void fill_blocks(GgmlType type, uint8_t* dst, size_t n_bytes, float stddev, uint64_t seed);

// f32 values uniform in [center - spread/2, center + spread/2): norm weights (1 +- 0.05) and
// biases (0 +- ...).
void fill_uniform(uint8_t* dst, size_t n_bytes, float center, float spread, uint64_t seed);

// GPT-2's byte-to-unicode text of byte b (printable bytes map to themselves, the rest to U+0100
// onwards), UTF-8 encoded.
std::string byte_token(int b);

}  // namespace loom::llm::synth
