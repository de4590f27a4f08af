// Register-blocked AVX2 matmul for several tokens at once: each weight block is unpacked once
// and used for a tile of tokens (and each activation block for a pair of rows), while every
// output element goes through exactly the integer lanes, fused multiply-adds and reduction of
// its single-token dot product (ops_ref_dot_avx2.cpp), so results stay bit-identical.
#include "loom/ref/ops_ref_dot_impl.h"

#if LOOM_REF_DOT_AVX2

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "loom/gguf/quant_blocks.h"
#include "loom/ref/ops_ref_util.h"

namespace loom::llm::ref::avx2 {
namespace {

// Same reductions as ops_ref_dot_avx2.cpp (kept identical: the order is part of the numerics).
inline float reduce8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline __m256i lanes_us(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(raw, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

inline __m256i bit4_from_bits32(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i word = _mm256_set1_epi32(static_cast<int>(bits));
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,
                                       1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const __m256i sel = _mm256_and_si256(_mm256_shuffle_epi8(word, pick), bit);
  const __m256i set = _mm256_cmpeq_epi8(sel, bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// ---- 32-element block formats -----------------------------------------------------------------
// A format says how to turn one weight block into bytes for maddubs. Signed formats keep |q| and
// q (the activation takes q's sign per token, as lanes_ss does); unsigned ones keep q alone.
// kMin: the format has a min term (summs = fma(m_w, s_x, summs), added after the reduction).

struct WQ {
  __m256i u;  // unsigned factor for maddubs (|q| or q)
  __m256i s;  // sign source (signed formats)
};

struct FmtQ4_0 {
  using W = BlockQ4_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static WQ load(const W& b) {
    const __m256i q = _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8));
    return {_mm256_sign_epi8(q, q), q};
  }
};
struct FmtQ5_0 {
  using W = BlockQ5_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static WQ load(const W& b) {
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles32(b.qs), bit4_from_bits32(b.qh)), _mm256_set1_epi8(16));
    return {_mm256_sign_epi8(q, q), q};
  }
};
struct FmtQ8_0 {
  using W = BlockQ8_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static WQ load(const W& b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    return {_mm256_sign_epi8(q, q), q};
  }
};
struct FmtQ4_1 {
  using W = BlockQ4_1;
  using X = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static WQ load(const W& b) { return {nibbles32(b.qs), _mm256_setzero_si256()}; }
};
struct FmtQ5_1 {
  using W = BlockQ5_1;
  using X = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static WQ load(const W& b) { return {_mm256_or_si256(nibbles32(b.qs), bit4_from_bits32(b.qh)), _mm256_setzero_si256()}; }
};

// R rows x T tokens over nb blocks. acc[r][t] follows dot_<fmt>(row r, token t) operation for
// operation: one fma per block with (d_w * d_x), then reduce8, then + summs.
template <class F, int R, int T>
void tile32(const uint8_t* const* wrow, const uint8_t* const* xrow, const GemmScales& xs, int64_t t0, int64_t nb,
            float* const* yrow) {
  using W = typename F::W;
  using X = typename F::X;
  __m256 acc[R][T];
  __m256 summs[R];  // lane t: token t's summs chain (T <= 8)
  for (int r = 0; r < R; ++r) {
    summs[r] = _mm256_setzero_ps();
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    const float* xd = xs.d.data() + i * xs.ld + t0;
    __m256i y[T];
    for (int t = 0; t < T; ++t)
      y[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const X*>(xrow[t])[i].qs));
    for (int r = 0; r < R; ++r) {
      const W& wb = reinterpret_cast<const W*>(wrow[r])[i];
      const WQ q = F::load(wb);
      const __m256 wd = _mm256_set1_ps(half_to_float(wb.d));
      if constexpr (F::kMin) {
        // Eight tokens' fma(m_w, s_x, summs) in one instruction (the lanes past T are unused;
        // the scale rows are padded to a multiple of eight tokens).
        const __m256 xsum = _mm256_loadu_ps(xs.s.data() + i * xs.ld + t0);
        summs[r] = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(wb.m)), xsum, summs[r]);
      }
      for (int t = 0; t < T; ++t) {
        const __m256i lanes = F::kSigned ? lanes_us(q.u, _mm256_sign_epi8(y[t], q.s)) : lanes_us(q.u, y[t]);
        const __m256 d = _mm256_mul_ps(wd, _mm256_broadcast_ss(xd + t));
        acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float sm[8];
    _mm256_store_ps(sm, summs[r]);
    for (int t = 0; t < T; ++t) {
      const float v = reduce8(acc[r][t]);
      yrow[t][r] = F::kMin ? v + sm[t] : v;
    }
  }
}

// ---- K-quants -------------------------------------------------------------------------------
// One row x T tokens per super-block: the row's quants, scales and mins are unpacked once and
// used by every token of the tile. Per token the integer lanes, the fma by d (and the mins'
// fmas) are those of dot_q4_K / dot_q5_K / dot_q6_K.

template <bool kQ5, int T>
void tile_k4(const uint8_t* wrow, const uint8_t* const* xrow, int64_t nb, float* const* yrow, int64_t r) {
  using W = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const auto* w = reinterpret_cast<const W*>(wrow);
  __m256 acc[T];
  __m128 acc_m[T];  // Q4_K: the four min chains as lanes; Q5_K: lane 0 is summs
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    acc_m[t] = _mm_setzero_ps();
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
    const float wd = half_to_float(w[i].d);
    const float wdmin = half_to_float(w[i].dmin);
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)));
    __m256i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (kQ5) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh));
    for (int g = 0; g < 4; ++g) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs + 32 * g));
      __m256i lo = _mm256_and_si256(bits, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      if constexpr (kQ5) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * g), one);
        const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * g + 1), one);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
      }
      const __m256i s0 = _mm256_set1_epi16(sc[2 * g]);
      const __m256i s1 = _mm256_set1_epi16(sc[2 * g + 1]);
      for (int t = 0; t < T; ++t) {
        const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(xrow[t])[i].qs;
        const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * g));
        const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * g + 32));
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
      }
    }
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& x = reinterpret_cast<const BlockQ8_K*>(xrow[t])[i];
      const float d = x.d * wd;
      const float dmin = -x.d * wdmin;
      const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums));
      const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums + 8));
      if constexpr (kQ5) {
        // msum = sum_j mn[j] * (bsums[2j] + bsums[2j+1]), then one scalar fma.
        const __m128i prod = _mm_madd_epi16(_mm_hadd_epi16(b0, b1), mins16);
        __m128i s = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        const float msum = static_cast<float>(_mm_cvtsi128_si32(s));
        acc_m[t] = _mm_set_ss(std::fma(dmin, msum, _mm_cvtss_f32(acc_m[t])));
      } else {
        // Lane m: mn[2m] * (bsums[4m] + bsums[4m+1]) + mn[2m+1] * (bsums[4m+2] + bsums[4m+3]).
        const __m128i prod = _mm_madd_epi16(_mm_hadd_epi16(b0, b1), mins16);
        acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[t]);
      }
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    float m;
    if constexpr (kQ5) {
      m = _mm_cvtss_f32(acc_m[t]);
    } else {
      alignas(16) float a[4];
      _mm_store_ps(a, acc_m[t]);
      m = (a[0] + a[2]) + (a[1] + a[3]);
    }
    yrow[t][r] = reduce8(acc[t]) + m;
  }
}

template <int T>
void tile_q6_k(const uint8_t* wrow, const uint8_t* const* xrow, int64_t nb, float* const* yrow, int64_t r) {
  const auto* w = reinterpret_cast<const BlockQ6_K*>(wrow);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  for (int64_t i = 0; i < nb; ++i) {
    const float wd = half_to_float(w[i].d);
    __m256i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh + 32 * h));
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
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(w[i].scales[2 * c + 1]), _mm_set1_epi16(w[i].scales[2 * c]));
        for (int t = 0; t < T; ++t) {
          const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(xrow[t])[i].qs;
          const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * c));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], y), scale));
        }
      }
    }
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& x = reinterpret_cast<const BlockQ8_K*>(xrow[t])[i];
      const float d = x.d * wd;
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
      const __m256i s = _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) yrow[t][r] = reduce8(acc[t]);
}

// ---- Drivers --------------------------------------------------------------------------------

#ifndef LOOM_GEMM_ROWS32
#define LOOM_GEMM_ROWS32 2
#endif
#ifndef LOOM_GEMM_TOK32
#define LOOM_GEMM_TOK32 8
#endif
#ifndef LOOM_GEMM_TOKK
#define LOOM_GEMM_TOKK 4
#endif
constexpr int kTokTile = LOOM_GEMM_TOKK;   // tokens per register tile of the K-quants (<= 8)
constexpr int kTok32 = LOOM_GEMM_TOK32;   // tokens per register tile of the 32-element formats (<= 8)
constexpr int kRows32 = LOOM_GEMM_ROWS32;  // rows per register tile of the 32-element formats
constexpr int64_t kRowTile = 16;  // rows that stay in L1 while every token tile passes

struct Args {
  const uint8_t* w;
  size_t w_stride;
  int64_t nb;
  const uint8_t* xq;
  size_t xq_row;
  int64_t n_tok;
  float* y;
  int64_t ldy;
};

template <class F, int R>
void tile32_any(const uint8_t* const* wrow, const uint8_t* const* xrow, const GemmScales& xs, int64_t t0, int64_t nb,
                float* const* yrow, int nt) {
  switch (nt) {
    case 8: tile32<F, R, 8>(wrow, xrow, xs, t0, nb, yrow); break;
    case 7: tile32<F, R, 7>(wrow, xrow, xs, t0, nb, yrow); break;
    case 6: tile32<F, R, 6>(wrow, xrow, xs, t0, nb, yrow); break;
    case 5: tile32<F, R, 5>(wrow, xrow, xs, t0, nb, yrow); break;
    case 4: tile32<F, R, 4>(wrow, xrow, xs, t0, nb, yrow); break;
    case 3: tile32<F, R, 3>(wrow, xrow, xs, t0, nb, yrow); break;
    case 2: tile32<F, R, 2>(wrow, xrow, xs, t0, nb, yrow); break;
    default: tile32<F, R, 1>(wrow, xrow, xs, t0, nb, yrow); break;
  }
}

template <class F>
void run32(const Args& a, int64_t r0, int64_t r1, const GemmScales& xs) {
  const uint8_t* xrow[kTok32];
  float* yrow[kTok32];
  for (int64_t rt = r0; rt < r1; rt += kRowTile) {
    const int64_t re = std::min(r1, rt + kRowTile);
    for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTok32) {
      const int nt = static_cast<int>(std::min<int64_t>(kTok32, a.n_tok - t0));
      for (int t = 0; t < nt; ++t) xrow[t] = a.xq + (t0 + t) * a.xq_row;
      for (int64_t r = rt; r < re;) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows32, re - r));
        const uint8_t* wrow[kRows32];
        for (int k = 0; k < kRows32; ++k) wrow[k] = a.w + (r + std::min(k, nr - 1)) * a.w_stride;
        for (int t = 0; t < nt; ++t) yrow[t] = a.y + (t0 + t) * a.ldy + r;
        if (nr == kRows32) {
          tile32_any<F, kRows32>(wrow, xrow, xs, t0, a.nb, yrow, nt);
          r += kRows32;
        } else {
          tile32_any<F, 1>(wrow, xrow, xs, t0, a.nb, yrow, nt);
          r += 1;
        }
      }
    }
  }
}

template <class Tile>
void run_k(const Args& a, int64_t r0, int64_t r1, Tile tile) {
  const uint8_t* xrow[kTokTile];
  float* yrow[kTokTile];
  for (int64_t rt = r0; rt < r1; rt += kRowTile) {
    const int64_t re = std::min(r1, rt + kRowTile);
    for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokTile) {
      const int nt = static_cast<int>(std::min<int64_t>(kTokTile, a.n_tok - t0));
      for (int t = 0; t < nt; ++t) {
        xrow[t] = a.xq + (t0 + t) * a.xq_row;
        yrow[t] = a.y + (t0 + t) * a.ldy;
      }
      for (int64_t r = rt; r < re; ++r) tile(a.w + r * a.w_stride, xrow, a.nb, yrow, r, nt);
    }
  }
}

template <bool kQ5>
void k4_any(const uint8_t* w, const uint8_t* const* x, int64_t nb, float* const* y, int64_t r, int nt) {
  switch (nt) {
    case 8: tile_k4<kQ5, 8>(w, x, nb, y, r); break;
    case 7: tile_k4<kQ5, 7>(w, x, nb, y, r); break;
    case 6: tile_k4<kQ5, 6>(w, x, nb, y, r); break;
    case 5: tile_k4<kQ5, 5>(w, x, nb, y, r); break;
    case 4: tile_k4<kQ5, 4>(w, x, nb, y, r); break;
    case 3: tile_k4<kQ5, 3>(w, x, nb, y, r); break;
    case 2: tile_k4<kQ5, 2>(w, x, nb, y, r); break;
    default: tile_k4<kQ5, 1>(w, x, nb, y, r); break;
  }
}
void q6_k_any(const uint8_t* w, const uint8_t* const* x, int64_t nb, float* const* y, int64_t r, int nt) {
  switch (nt) {
    case 8: tile_q6_k<8>(w, x, nb, y, r); break;
    case 7: tile_q6_k<7>(w, x, nb, y, r); break;
    case 6: tile_q6_k<6>(w, x, nb, y, r); break;
    case 5: tile_q6_k<5>(w, x, nb, y, r); break;
    case 4: tile_q6_k<4>(w, x, nb, y, r); break;
    case 3: tile_q6_k<3>(w, x, nb, y, r); break;
    case 2: tile_q6_k<2>(w, x, nb, y, r); break;
    default: tile_q6_k<1>(w, x, nb, y, r); break;
  }
}

template <class X>
void fill_scales(const uint8_t* xq, size_t xq_row, int64_t n_tok, int64_t nb, GemmScales* xs) {
  xs->ld = (n_tok + 7) & ~int64_t{7};  // whole groups of eight tokens (zero padding)
  xs->d.assign(static_cast<size_t>(nb * xs->ld), 0.0f);
  if constexpr (requires(X x) { x.s; }) xs->s.assign(static_cast<size_t>(nb * xs->ld), 0.0f);
  for (int64_t t = 0; t < n_tok; ++t) {
    const X* x = reinterpret_cast<const X*>(xq + t * xq_row);
    for (int64_t i = 0; i < nb; ++i) {
      xs->d[static_cast<size_t>(i * xs->ld + t)] = half_to_float(x[i].d);
      if constexpr (requires(X v) { v.s; }) xs->s[static_cast<size_t>(i * xs->ld + t)] = half_to_float(x[i].s);
    }
  }
}

}  // namespace

bool gemm_supported(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void gemm_prepare(GgmlType type, const uint8_t* xq, size_t xq_row, int64_t n_tok, int64_t n_in, GemmScales* xs) {
  const int64_t nb = n_in / kQK32;
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0:
      fill_scales<BlockQ8_0>(xq, xq_row, n_tok, nb, xs);
      break;
    case GgmlType::Q4_1: case GgmlType::Q5_1:
      fill_scales<BlockQ8_1>(xq, xq_row, n_tok, nb, xs);
      break;
    default:
      break;
  }
}

void gemm_rows(GgmlType type, const uint8_t* w, size_t w_stride, int64_t n_in, int64_t r0, int64_t r1,
               const uint8_t* xq, size_t xq_row, int64_t n_tok, const GemmScales& xs, float* y, int64_t ldy) {
  Args a{w, w_stride, 0, xq, xq_row, n_tok, y, ldy};
  switch (type) {
    case GgmlType::Q4_0: a.nb = n_in / kQK32; run32<FmtQ4_0>(a, r0, r1, xs); break;
    case GgmlType::Q4_1: a.nb = n_in / kQK32; run32<FmtQ4_1>(a, r0, r1, xs); break;
    case GgmlType::Q5_0: a.nb = n_in / kQK32; run32<FmtQ5_0>(a, r0, r1, xs); break;
    case GgmlType::Q5_1: a.nb = n_in / kQK32; run32<FmtQ5_1>(a, r0, r1, xs); break;
    case GgmlType::Q8_0: a.nb = n_in / kQK32; run32<FmtQ8_0>(a, r0, r1, xs); break;
    case GgmlType::Q4_K: a.nb = n_in / kQKK; run_k(a, r0, r1, k4_any<false>); break;
    case GgmlType::Q5_K: a.nb = n_in / kQKK; run_k(a, r0, r1, k4_any<true>); break;
    case GgmlType::Q6_K: a.nb = n_in / kQKK; run_k(a, r0, r1, q6_k_any); break;
    default: break;
  }
}

}  // namespace loom::llm::ref::avx2

#endif  // LOOM_REF_DOT_AVX2
