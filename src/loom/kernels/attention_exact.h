// The cpu target's exact attention: llm::ref::attention's arithmetic step for step (fp16 query,
// ggml's f16 dot lanes, two-pass softmax with ggml's exp and grouped sums, probabilities rounded
// to fp16, 32 lane accumulators), so that the engine on HRX's cpu driver gives the reference's
// (and llama.cpp's) logits bit for bit.
#pragma once

#include <vector>

#include "loom/base/status.h"
#include "loom/kernels/op_spec.h"

namespace loom::kernels {

// Whether the exact kernel can run this shape (head_dim a multiple of 32; the per-thread score
// and accumulator arrays within a 1 MiB budget).
bool attention_exact_fits(const Shape& s);
// One thread per (head, token): grid (n_head, n_tokens). `args` is the op's argument list.
Result<Generated> attention_exact_cpu(const Shape& s, const std::vector<ArgSpec>& args);

}  // namespace loom::kernels
