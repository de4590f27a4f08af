// Inline fp16 <-> fp32 conversions for the reference ops' inner loops (F16C when the compiler
// targets it, else the portable converters of quant.h; both are exact / round-to-nearest-even).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "loom/gguf/quant.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace loom::llm::ref {

inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32(h);
#endif
}

inline uint16_t float_to_half(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  return fp32_to_fp16(f);
#endif
}

// Dot product of two fp16 vectors with ggml_vec_dot_f16's x86 arithmetic: four accumulators of
// eight lanes over 32-element steps (one fma per element), reduced 0+2, 1+3, 0+1, then the two
// 4-lane halves and two pairwise steps; elements past the last full step are added in double.
// The four 8-lane accumulators of ggml's 16-bit float dot products over the first np elements
// (np a multiple of 32): element 8j + l of each 32-element step goes to accumulator j, lane l.
template <float (*ToFloat)(uint16_t)>
inline void accumulate_4x8(const uint16_t* x, const uint16_t* y, int64_t np, float acc[4][8]) {
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) {
        const int64_t k = i + 8 * j + l;
        acc[j][l] = std::fma(ToFloat(x[k]), ToFloat(y[k]), acc[j][l]);
      }
}

inline float dot_f16_ggml(const uint16_t* x, const uint16_t* y, int64_t n) {
  float acc[4][8] = {};
  const int64_t np = n & ~int64_t{31};
  accumulate_4x8<half_to_float>(x, y, np, acc);
  float t[4];
  for (int l = 0; l < 8; ++l) {
    acc[0][l] = acc[0][l] + acc[2][l];
    acc[1][l] = acc[1][l] + acc[3][l];
    acc[0][l] = acc[0][l] + acc[1][l];
  }
  for (int l = 0; l < 4; ++l) t[l] = acc[0][l] + acc[0][l + 4];
  double sum = static_cast<double>((t[0] + t[1]) + (t[2] + t[3]));
  for (int64_t k = np; k < n; ++k) sum += static_cast<double>(half_to_float(x[k]) * half_to_float(y[k]));
  return static_cast<float>(sum);
}

// Dot product of two bf16 vectors with ggml_vec_dot_bf16's AVX2 arithmetic: four accumulators
// of eight lanes over 32-element steps (one fma per element; bf16 -> f32 is exact), combined as
// (0+2) + (1+3), then lane l + lane l+4, then (0+2) + (1+3) of those four; the leftovers past the
// last full step are added in double.
inline float dot_bf16_ggml(const uint16_t* x, const uint16_t* y, int64_t n) {
  float acc[4][8] = {};
  const int64_t np = n & ~int64_t{31};
  accumulate_4x8<bf16_to_fp32>(x, y, np, acc);
  float a[8];
  for (int l = 0; l < 8; ++l) a[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = a[l + 4] + a[l];
  double sum = static_cast<double>((t[0] + t[2]) + (t[1] + t[3]));
  for (int64_t k = np; k < n; ++k) sum += static_cast<double>(bf16_to_fp32(x[k]) * bf16_to_fp32(y[k]));
  return static_cast<float>(sum);
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// exp(x) with ggml's vectorized x86 algorithm (a polynomial after range reduction by ln 2,
// adapted by ggml from Arm's optimized-routines), lane for lane; max error ~1.5 ulp. llama.cpp
// uses it in softmax and SiLU, so the reference does too.
inline float expf_ggml(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = float_bits(z) << 23;
  const float k = bits_float(e + float_bits(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = bits_float(g + 0x7f000000u);
  const float s2 = bits_float(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// SiLU as ggml's vectorized path computes it: x / (1 + exp(0 - x)).
inline float silu_ggml(float x) { return x / (1.0f + expf_ggml(0.0f - x)); }

}  // namespace loom::llm::ref
