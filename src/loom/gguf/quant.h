// Reference (plain, scalar) quantization formats: the definitions every faster kernel is checked
// against. Layouts follow ggml's block formats bit for bit. All functions work on whole rows:
// n must be a multiple of the type's block size. Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/base/status.h"
#include "loom/gguf/ggml_types.h"

namespace loom::llm {

// Bytes taken by n elements of `type` (n a multiple of its block size).
size_t row_bytes(GgmlType type, int64_t n);

// Decodes n elements from `src` (blocks of `type`) into dst. Supported: F32, F16, BF16, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, and the activation
// formats Q8_1, Q8_K.
// Unsupported type: kUnimplemented; n negative or not a multiple of the block: kInvalidArgument.
Status dequantize(GgmlType type, const void* src, float* dst, int64_t n);

// Encodes n floats as `type` into dst (row_bytes(type, n) bytes), with the same rounding as
// ggml's reference quantizers (quantize_row_*_ref), so results are bit-identical to them.
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// Q8_K (not IQ4_NL / IQ4_XS: kUnimplemented). Block formats refuse non-finite input (kInvalidArgument); F16/BF16 carry inf and NaN.
// Typed per-format row functions (no checks) are in quant_rows.h, block layouts in quant_blocks.h.
bool can_quantize(GgmlType type);
Status quantize(GgmlType type, const float* src, void* dst, int64_t n);

// IEEE half and bfloat16 conversions (round to nearest even, as ggml does).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace loom::llm
