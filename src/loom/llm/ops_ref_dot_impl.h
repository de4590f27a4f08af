// Internal: the per-format dot products behind ref::vec_dot, in two bit-identical versions: the
// scalar definitions (ref::scalar) and AVX2 ones (ref::avx2, compiled when the target has
// AVX2+FMA+F16C). Tests compare the two on random blocks.
#pragma once

#include <cstdint>

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
  float dot_f16(const uint16_t* x, const uint16_t* y, int64_t n);

namespace scalar {
LOOM_REF_DOT_DECLS
}
#if LOOM_REF_DOT_AVX2
namespace avx2 {
LOOM_REF_DOT_DECLS
}
#endif
#undef LOOM_REF_DOT_DECLS

// The fastest bit-identical version available in this build.
float dot_f16_fast(const uint16_t* x, const uint16_t* y, int64_t n);

}  // namespace loom::llm::ref
