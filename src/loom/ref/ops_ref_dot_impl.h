// Internal: the per-format dot products behind ref::vec_dot, in two bit-identical versions: the
// scalar definitions (ref::scalar) and AVX2 ones (ref::avx2, compiled when the target has
// AVX2+FMA+F16C). Tests compare the two on random blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/gguf/ggml_types.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LOOM_REF_DOT_AVX2 1
#else
#define LOOM_REF_DOT_AVX2 0
#endif

namespace loom::llm::ref {

#define LOOM_REF_DOT_DECLS                                   \
  float dot_q4_0(const void* w, const void* x, int64_t n);   \
  float dot_q4_1(const void* w, const void* x, int64_t n);   \
  float dot_q5_0(const void* w, const void* x, int64_t n);   \
  float dot_q5_1(const void* w, const void* x, int64_t n);   \
  float dot_q8_0(const void* w, const void* x, int64_t n);   \
  float dot_q4_K(const void* w, const void* x, int64_t n);   \
  float dot_q5_K(const void* w, const void* x, int64_t n);   \
  float dot_q6_K(const void* w, const void* x, int64_t n);   \
  float dot_f16(const uint16_t* x, const uint16_t* y, int64_t n);   \
  float dot_bf16(const uint16_t* x, const uint16_t* y, int64_t n);

namespace scalar {
LOOM_REF_DOT_DECLS
// Formats with the scalar version only (vec_dot uses it in every build).
float dot_q2_K(const void* w, const void* x, int64_t n);
float dot_q3_K(const void* w, const void* x, int64_t n);
float dot_iq4_nl(const void* w, const void* x, int64_t n);
float dot_iq4_xs(const void* w, const void* x, int64_t n);
}
#if LOOM_REF_DOT_AVX2
namespace avx2 {
LOOM_REF_DOT_DECLS

// Several tokens at once (ops_ref_gemm_avx2.cpp): y[t * ldy + r] = dot_<type>(W row r, token t)
// for rows [r0, r1) and tokens [0, n_tok), every element bit-identical to the single-token dot
// product; weights are unpacked once per tile of tokens. xq holds n_tok quantized activation rows
// of xq_row bytes. Thread-safe for disjoint row ranges.
bool gemm_supported(GgmlType type);
// Per-token activation scales as floats, token-minor (d[b * ld + t]), filled once per matmul.
struct GemmScales {
  std::vector<float> d, s;
  int64_t ld = 0;
};
void gemm_prepare(GgmlType type, const uint8_t* xq, size_t xq_row, int64_t n_tok, int64_t n_in, GemmScales* xs);
void gemm_rows(GgmlType type, const uint8_t* w, size_t w_stride, int64_t n_in, int64_t r0, int64_t r1,
               const uint8_t* xq, size_t xq_row, int64_t n_tok, const GemmScales& xs, float* y, int64_t ldy);
}  // namespace avx2
#endif
#undef LOOM_REF_DOT_DECLS

// The fastest bit-identical version available in this build.
float dot_f16_fast(const uint16_t* x, const uint16_t* y, int64_t n);

}  // namespace loom::llm::ref
