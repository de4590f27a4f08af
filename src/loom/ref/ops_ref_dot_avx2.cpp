// AVX2 versions of the reference dot products (ops_ref_dot.cpp). They perform exactly the same
// integer lane sums, fused multiply-adds and reduction order as the scalar definitions, so their
// results are bit-identical (tests/llm/test_ops_ref.cpp checks it); they only exist so that the
// reference engine is fast enough to test against llama.cpp in CI.
#include "loom/ref/ops_ref_dot_impl.h"

#if LOOM_REF_DOT_AVX2

#include <immintrin.h>

#include <cstring>

#include "loom/gguf/quant_blocks.h"
#include "loom/ref/ops_ref_util.h"

namespace loom::llm::ref::avx2 {
namespace {

// hi + lo halves, then (0 + 2) + (1 + 3).
inline float reduce8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// Eight int32 lanes, lane l = sum of u[k] * s[k] for k in 4l..4l+3 (u unsigned, s signed bytes;
// the pair sums stay far from int16 saturation for every format here).
inline __m256i lanes_us(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// Same for two signed byte vectors: |a| times b with a's sign.
inline __m256i lanes_ss(__m256i a, __m256i b) {
  return lanes_us(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15), then high (16..31).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(raw, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

// Byte j = 0x10 if bit j of the 32-bit word is set, else 0.
inline __m256i bit4_from_bits32(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i word = _mm256_set1_epi32(static_cast<int>(bits));
  // Byte j takes byte j / 8 of the word, then tests bit j % 8.
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,
                                       1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const __m256i sel = _mm256_and_si256(_mm256_shuffle_epi8(word, pick), bit);
  const __m256i set = _mm256_cmpeq_epi8(sel, bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline __m256 fma_lanes(float d, __m256i lanes, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
}

}  // namespace

float dot_q4_0(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  __m256 acc = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256i q = _mm256_sub_epi8(nibbles32(w[i].qs), eight);
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    acc = fma_lanes(half_to_float(w[i].d) * half_to_float(x[i].d), lanes_ss(q, y), acc);
  }
  return reduce8(acc);
}

float dot_q4_1(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    summs = std::fma(half_to_float(w[i].m), half_to_float(x[i].s), summs);
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    acc = fma_lanes(half_to_float(w[i].d) * half_to_float(x[i].d), lanes_us(nibbles32(w[i].qs), y), acc);
  }
  return reduce8(acc) + summs;
}

float dot_q5_0(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  __m256 acc = _mm256_setzero_ps();
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles32(w[i].qs), bit4_from_bits32(w[i].qh)), sixteen);
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    acc = fma_lanes(half_to_float(w[i].d) * half_to_float(x[i].d), lanes_ss(q, y), acc);
  }
  return reduce8(acc);
}

float dot_q5_1(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    summs = std::fma(half_to_float(w[i].m), half_to_float(x[i].s), summs);
    const __m256i q = _mm256_or_si256(nibbles32(w[i].qs), bit4_from_bits32(w[i].qh));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    acc = fma_lanes(half_to_float(w[i].d) * half_to_float(x[i].d), lanes_us(q, y), acc);
  }
  return reduce8(acc) + summs;
}

float dot_q8_0(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    acc = fma_lanes(half_to_float(w[i].d) * half_to_float(x[i].d), lanes_ss(q, y), acc);
  }
  return reduce8(acc);
}

namespace {
// Sum over the four 64-element groups of scale[2g] * lanes(low nibbles) + scale[2g+1] *
// lanes(high nibbles); `hi_bits` adds the fifth bit for Q5_K (null for Q4_K).
inline __m256i k4_sumi(const uint8_t* qs, const uint8_t* qh, const int8_t* q8, const uint8_t* sc) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i sumi = _mm256_setzero_si256();
  __m256i hbits = qh ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)) : _mm256_setzero_si256();
  for (int g = 0; g < 4; ++g) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
    __m256i lo = _mm256_and_si256(bits, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    if (qh) {
      const __m256i one = _mm256_set1_epi8(1);
      const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * g), one);
      const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * g + 1), one);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
    }
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * g));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * g + 32));
    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * g]));
    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * g + 1]));
    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
  }
  return sumi;
}
}  // namespace

float dot_q4_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  __m256 acc = _mm256_setzero_ps();
  float acc_m[4] = {0, 0, 0, 0};
  uint8_t sc[8], mn[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = x[i].d * half_to_float(w[i].d);
    const float dmin = -x[i].d * half_to_float(w[i].dmin);
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
    for (int m = 0; m < 4; ++m) {
      const int32_t s0 = x[i].bsums[4 * m] + x[i].bsums[4 * m + 1];
      const int32_t s1 = x[i].bsums[4 * m + 2] + x[i].bsums[4 * m + 3];
      acc_m[m] = std::fma(dmin, static_cast<float>(mn[2 * m] * s0 + mn[2 * m + 1] * s1), acc_m[m]);
    }
    acc = fma_lanes(d, k4_sumi(w[i].qs, nullptr, x[i].qs, sc), acc);
  }
  return reduce8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
}

float dot_q5_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  uint8_t sc[8], mn[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = x[i].d * half_to_float(w[i].d);
    const float dmin = -x[i].d * half_to_float(w[i].dmin);
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) msum += mn[j] * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    summs = std::fma(dmin, static_cast<float>(msum), summs);
    acc = fma_lanes(d, k4_sumi(w[i].qs, w[i].qh, x[i].qs, sc), acc);
  }
  return reduce8(acc) + summs;
}

float dot_q6_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ6_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  __m256 acc = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = x[i].d * half_to_float(w[i].d);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh + 32 * h));
      // Chunks of 32 elements: low/high nibbles of ql0/ql1 with two bits of qh each.
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
      for (int k = 0; k < 4; ++k) {
        const int c = 4 * h + k;
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * c));
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(w[i].scales[2 * c + 1]), _mm_set1_epi16(w[i].scales[2 * c]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], y), scale));
      }
    }
    // The -32 offset of every quant, through the 16-element activation sums.
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].bsums));
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5));
    acc = fma_lanes(d, sumi, acc);
  }
  return reduce8(acc);
}

float dot_f16(const uint16_t* x, const uint16_t* y, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8 * j)));
      const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8 * j)));
      acc[j] = _mm256_fmadd_ps(a, b, acc[j]);
    }
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  t = _mm_hadd_ps(t, t);
  t = _mm_hadd_ps(t, t);
  double sum = static_cast<double>(_mm_cvtss_f32(t));
  for (int64_t k = np; k < n; ++k) sum += static_cast<double>(half_to_float(x[k]) * half_to_float(y[k]));
  return static_cast<float>(sum);
}

// Eight bf16 values widened to f32 (exact: the bits move to the high half).
static inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

float dot_bf16(const uint16_t* x, const uint16_t* y, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(load_bf16x8(x + i + 8 * j), load_bf16x8(y + i + 8 * j), acc[j]);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  __m128 t = _mm_add_ps(_mm256_extractf128_ps(s, 1), _mm256_castps256_ps128(s));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));         // (t0 + t2), (t1 + t3)
  t = _mm_add_ss(t, _mm_movehdup_ps(t));          // (t0 + t2) + (t1 + t3)
  double sum = static_cast<double>(_mm_cvtss_f32(t));
  for (int64_t k = np; k < n; ++k) sum += static_cast<double>(bf16_to_fp32(x[k]) * bf16_to_fp32(y[k]));
  return static_cast<float>(sum);
}

}  // namespace loom::llm::ref::avx2

#endif  // LOOM_REF_DOT_AVX2
