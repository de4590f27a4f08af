// Typed per-format row codecs behind quant.h's dequantize/quantize, for code that already knows
// the format (CPU engine, tests). No validation here: nb is a block count the caller checked,
// inputs to quantizers are finite. Rounding matches ggml's reference code exactly.
#pragma once

#include <cstdint>
#include <cstring>

#include "loom/gguf/quant_blocks.h"

namespace loom::llm {

// Rounds to nearest, ties to even, for |v| < 2^22, by adding 1.5 * 2^23 so that the float
// adder does the rounding; ggml's K-quant code rounds exactly this way, so we must too.
inline int nearest_int(float v) {
  float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t nb);
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t nb);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t nb);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t nb);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t nb);
void dequantize_row_q8_1(const BlockQ8_1* x, float* y, int64_t nb);
void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t nb);
void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t nb);
void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t nb);
void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t nb);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t nb);
void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t nb);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb);
void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb);

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t nb);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t nb);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t nb);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t nb);
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t nb);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t nb);
void quantize_row_q2_K(const float* x, BlockQ2_K* y, int64_t nb);
void quantize_row_q3_K(const float* x, BlockQ3_K* y, int64_t nb);
void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t nb);
void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t nb);
void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t nb);
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t nb);

}  // namespace loom::llm
