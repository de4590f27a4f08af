// Reference quantized dot products: activation quantization as llama.cpp's x86 CPU path does it,
// then integer products per block and float accumulation, one function per weight format.
#include <cmath>
#include <cstring>

#include "loom/gguf/quant.h"
#include "loom/gguf/quant_blocks.h"
#include "loom/gguf/quant_rows.h"
#include "loom/ref/ops_ref.h"
#include "loom/ref/ops_ref_dot_impl.h"
#include "loom/ref/ops_ref_util.h"

namespace loom::llm::ref {
namespace {

// Q8_0 / Q8_1 as ggml's AVX path quantizes activations: d = amax / 127 kept in fp16, the
// multiplier is 127 / amax (not 1 / d) and rounding is to nearest even. The reference
// quantizer (roundf, 1/d) differs by one step on some elements; token-exactness needs this one.
template <typename Block>
void quantize_q8_x86(const float* x, Block* y, int64_t nb, bool with_sum) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK32;
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK32; ++j) {
      int q = static_cast<int>(std::nearbyint(xb[j] * id));  // default FE_TONEAREST: ties to even
      y[i].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    if constexpr (requires { y[i].s; }) {
      if (with_sum) y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
    }
  }
}

}  // namespace

namespace scalar {
namespace {
// The dot products reproduce the arithmetic of llama.cpp's x86 AVX2 kernels operation for
// operation: integer products are summed exactly in eight 32-bit lanes (lane l takes elements
// 4l..4l+3 of each 32-element group, as maddubs+madd do), each lane accumulates its blocks with
// one fused multiply-add per block, and the lanes are reduced in the kernels' fixed order.
// Float results are then bit-identical to llama.cpp's, which matters because activations are
// re-quantized with fp16 scales at every matmul: a one-ulp difference upstream can flip an fp16
// rounding and move the logits far more than the ulp itself.
struct Lanes8 {
  float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  // acc[l] = fma(d, x[l], acc[l])
  void fma_add(float d, const int32_t* x) {
    for (int l = 0; l < 8; ++l) v[l] = std::fma(d, static_cast<float>(x[l]), v[l]);
  }
  // hsum_float_8: (hi + lo) pairwise, then (0+2) + (1+3).
  float hsum() const {
    float r[4];
    for (int i = 0; i < 4; ++i) r[i] = v[i + 4] + v[i];
    return (r[0] + r[2]) + (r[1] + r[3]);
  }
};

// lanes[l] = sum of a[k]*b[k] for k in 4l..4l+3 (exact integers).
inline void lane_dot32(const int8_t* a, const int8_t* b, int32_t* lanes) {
  for (int l = 0; l < 8; ++l) {
    int32_t s = 0;
    for (int k = 4 * l; k < 4 * l + 4; ++k) s += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
    lanes[l] = s;
  }
}

// Nibbles of a 32-element block in element order: qs[j] low = element j, high = element j+16.
inline void unpack_nibbles32(const uint8_t* qs, int8_t* out, int offset) {
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>((qs[j] & 0x0F) - offset);
    out[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}
inline void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int8_t* out, int offset) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    int hi0 = ((qh >> j) << 4) & 0x10;
    int hi1 = (qh >> (j + 12)) & 0x10;
    out[j] = static_cast<int8_t>(((qs[j] & 0x0F) | hi0) - offset);
    out[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | hi1) - offset);
  }
}

}  // namespace

float dot_q4_0(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  Lanes8 acc;
  int8_t q[32];
  int32_t lanes[8];
  for (int64_t i = 0; i < n / kQK32; ++i) {
    unpack_nibbles32(w[i].qs, q, 8);
    lane_dot32(q, x[i].qs, lanes);
    acc.fma_add(half_to_float(w[i].d) * half_to_float(x[i].d), lanes);
  }
  return acc.hsum();
}

float dot_q4_1(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  Lanes8 acc;
  float summs = 0.0f;
  int8_t q[32];
  int32_t lanes[8];
  for (int64_t i = 0; i < n / kQK32; ++i) {
    summs = std::fma(half_to_float(w[i].m), half_to_float(x[i].s), summs);
    unpack_nibbles32(w[i].qs, q, 0);
    lane_dot32(q, x[i].qs, lanes);
    acc.fma_add(half_to_float(w[i].d) * half_to_float(x[i].d), lanes);
  }
  return acc.hsum() + summs;
}

float dot_q5_0(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  Lanes8 acc;
  int8_t q[32];
  int32_t lanes[8];
  for (int64_t i = 0; i < n / kQK32; ++i) {
    unpack_q5(w[i].qs, w[i].qh, q, 16);
    lane_dot32(q, x[i].qs, lanes);
    acc.fma_add(half_to_float(w[i].d) * half_to_float(x[i].d), lanes);
  }
  return acc.hsum();
}

float dot_q5_1(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  Lanes8 acc;
  float summs = 0.0f;
  int8_t q[32];
  int32_t lanes[8];
  for (int64_t i = 0; i < n / kQK32; ++i) {
    summs = std::fma(half_to_float(w[i].m), half_to_float(x[i].s), summs);
    unpack_q5(w[i].qs, w[i].qh, q, 0);
    lane_dot32(q, x[i].qs, lanes);
    // This kernel multiplies lanes by (dx * dy) with the lanes as the first factor.
    acc.fma_add(half_to_float(w[i].d) * half_to_float(x[i].d), lanes);
  }
  return acc.hsum() + summs;
}

float dot_q8_0(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  Lanes8 acc;
  int32_t lanes[8];
  for (int64_t i = 0; i < n / kQK32; ++i) {
    lane_dot32(w[i].qs, x[i].qs, lanes);
    acc.fma_add(half_to_float(w[i].d) * half_to_float(x[i].d), lanes);
  }
  return acc.hsum();
}

// Q4_K / Q5_K: in 64-element group g, lane l sums scale[2g] * (products of elements 64g+4l..+3)
// and scale[2g+1] * (products of 64g+32+4l..+3); one fma per super-block per lane with d. The
// mins go through four lanes (pairs of sub-blocks) with their own fma by -dmin.
inline void k4_lanes(const int8_t* q, const int8_t* q8, const uint8_t* sc, int32_t* lanes) {
  for (int l = 0; l < 8; ++l) lanes[l] = 0;
  for (int g = 0; g < 4; ++g) {
    for (int h = 0; h < 2; ++h) {
      const int8_t* a = q + 64 * g + 32 * h;
      const int8_t* b = q8 + 64 * g + 32 * h;
      for (int l = 0; l < 8; ++l) {
        int32_t s = 0;
        for (int k = 4 * l; k < 4 * l + 4; ++k) s += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
        lanes[l] += sc[2 * g + h] * s;
      }
    }
  }
}

float dot_q4_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  Lanes8 acc;
  float acc_m[4] = {0, 0, 0, 0};
  int8_t q[kQKK];
  int32_t lanes[8];
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
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        q[64 * g + l] = static_cast<int8_t>(w[i].qs[32 * g + l] & 0x0F);
        q[64 * g + 32 + l] = static_cast<int8_t>(w[i].qs[32 * g + l] >> 4);
      }
    }
    k4_lanes(q, x[i].qs, sc, lanes);
    acc.fma_add(d, lanes);
  }
  return acc.hsum() + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
}

float dot_q5_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  Lanes8 acc;
  float summs = 0.0f;
  int8_t q[kQKK];
  int32_t lanes[8];
  uint8_t sc[8], mn[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = x[i].d * half_to_float(w[i].d);
    const float dmin = -x[i].d * half_to_float(w[i].dmin);
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) msum += mn[j] * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    summs = std::fma(dmin, static_cast<float>(msum), summs);
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        int h0 = (w[i].qh[l] >> (2 * g)) & 1;
        int h1 = (w[i].qh[l] >> (2 * g + 1)) & 1;
        q[64 * g + l] = static_cast<int8_t>((w[i].qs[32 * g + l] & 0x0F) | (h0 << 4));
        q[64 * g + 32 + l] = static_cast<int8_t>((w[i].qs[32 * g + l] >> 4) | (h1 << 4));
      }
    }
    k4_lanes(q, x[i].qs, sc, lanes);
    acc.fma_add(d, lanes);
  }
  return acc.hsum() + summs;
}

// Q6_K: quants stay unsigned (0..63); the -32 offset comes back through the 16-element sums.
// In each 128-element half, chunk c (elements 32c..32c+31) uses scales 2(4h+c) for its first 16
// elements (lanes 0-3) and 2(4h+c)+1 for the rest (lanes 4-7).
float dot_q6_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ6_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  Lanes8 acc;
  int8_t q[kQKK];
  int32_t lanes[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = x[i].d * half_to_float(w[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[i].ql + 64 * h;
      const uint8_t* qh = w[i].qh + 32 * h;
      int8_t* o = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o[l] = static_cast<int8_t>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4));
        o[l + 32] = static_cast<int8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
        o[l + 64] = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        o[l + 96] = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    for (int l = 0; l < 8; ++l) lanes[l] = 0;
    for (int c = 0; c < 8; ++c) {  // 32-element chunks in order; sub-blocks 2c, 2c+1
      const int8_t* a = q + 32 * c;
      const int8_t* b = x[i].qs + 32 * c;
      for (int l = 0; l < 8; ++l) {
        int32_t s = 0;
        for (int k = 4 * l; k < 4 * l + 4; ++k) s += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
        lanes[l] += w[i].scales[2 * c + (l >= 4 ? 1 : 0)] * s;
      }
    }
    for (int l = 0; l < 8; ++l)
      lanes[l] -= 32 * (x[i].bsums[2 * l] * w[i].scales[2 * l] + x[i].bsums[2 * l + 1] * w[i].scales[2 * l + 1]);
    acc.fma_add(d, lanes);
  }
  return acc.hsum();
}

// Q2_K: per super-block one fma of the mins (lane l: mins of sub-blocks 2l and 2l+1 times their
// activation sums) by -dmin, then one of the scaled quant products by d, into the same lanes.
// Chunk (h, k) (elements 128h + 32k ..) uses sub-block 8h + 2k for lanes 0-3 and 8h + 2k + 1 for
// lanes 4-7.
float dot_q2_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ2_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  Lanes8 acc;
  int8_t q[32];
  int32_t lanes[8], sums[8], mins[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = x[i].d * half_to_float(w[i].d);
    const float dmin = -x[i].d * half_to_float(w[i].dmin);
    for (int l = 0; l < 8; ++l)
      mins[l] = (w[i].scales[2 * l] >> 4) * x[i].bsums[2 * l] + (w[i].scales[2 * l + 1] >> 4) * x[i].bsums[2 * l + 1];
    acc.fma_add(dmin, mins);
    for (int l = 0; l < 8; ++l) sums[l] = 0;
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>((w[i].qs[32 * h + j] >> (2 * k)) & 3);
        lane_dot32(q, x[i].qs + 128 * h + 32 * k, lanes);
        for (int l = 0; l < 8; ++l) sums[l] += (w[i].scales[8 * h + 2 * k + (l >= 4 ? 1 : 0)] & 0xF) * lanes[l];
      }
    }
    acc.fma_add(d, sums);
  }
  return acc.hsum();
}

// Q3_K: the signed quants (q - 4) times the signed scales, summed exactly per lane (sub-blocks as
// Q2_K); one fma per super-block by d.
float dot_q3_K(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockQ3_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  Lanes8 acc;
  int8_t q[32];
  int32_t lanes[8], sums[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = x[i].d * half_to_float(w[i].d);
    int sc[16];
    for (int j = 0; j < 16; ++j) {
      const int lo = j < 8 ? (w[i].scales[j] & 0xF) : (w[i].scales[j - 8] >> 4);
      const int hi = (w[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      sc[j] = (lo | (hi << 4)) - 32;
    }
    for (int l = 0; l < 8; ++l) sums[l] = 0;
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        const int bit = 4 * h + k;
        for (int j = 0; j < 32; ++j)
          q[j] = static_cast<int8_t>(((w[i].qs[32 * h + j] >> (2 * k)) & 3) - (((w[i].hmask[j] >> bit) & 1) ? 0 : 4));
        lane_dot32(q, x[i].qs + 128 * h + 32 * k, lanes);
        for (int l = 0; l < 8; ++l) sums[l] += sc[8 * h + 2 * k + (l >= 4 ? 1 : 0)] * lanes[l];
      }
    }
    acc.fma_add(d, sums);
  }
  return acc.hsum();
}

// IQ4_NL: codebook values times Q8_0 quants; blocks alternate between two sets of lanes (even
// blocks, odd blocks), added before the reduction; an odd last block is added after it.
float dot_iq4_nl(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockIQ4_NL*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  Lanes8 acc[2];
  int8_t q[32];
  int32_t lanes[8];
  const int64_t nb = n / kQK32;
  auto unpack = [&](const BlockIQ4_NL& b) {
    for (int j = 0; j < 16; ++j) {
      q[j] = kIq4nlValues[b.qs[j] & 0xF];
      q[j + 16] = kIq4nlValues[b.qs[j] >> 4];
    }
  };
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    for (int k = 0; k < 2; ++k) {
      unpack(w[i + k]);
      lane_dot32(q, x[i + k].qs, lanes);
      acc[k].fma_add(half_to_float(x[i + k].d) * half_to_float(w[i + k].d), lanes);
    }
  }
  Lanes8 sum;
  for (int l = 0; l < 8; ++l) sum.v[l] = acc[0].v[l] + acc[1].v[l];
  float r = sum.hsum();
  for (; i < nb; ++i) {
    unpack(w[i]);
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += q[j] * x[i].qs[j];
    const float d = half_to_float(x[i].d) * half_to_float(w[i].d);
    const float p = d * static_cast<float>(s);
    r = r + p;
  }
  return r;
}

// IQ4_XS: codebook values times Q8_K quants, scaled per 32-element sub-block and summed exactly
// per lane; one fma per super-block by d.
float dot_iq4_xs(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const BlockIQ4_XS*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  Lanes8 acc;
  int8_t q[32];
  int32_t lanes[8], sums[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int l = 0; l < 8; ++l) sums[l] = 0;
    for (int s = 0; s < 8; ++s) {
      const uint8_t* qs = w[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        q[j] = kIq4nlValues[qs[j] & 0xF];
        q[j + 16] = kIq4nlValues[qs[j] >> 4];
      }
      lane_dot32(q, x[i].qs + 32 * s, lanes);
      const int sc = iq4_xs_scale(w[i], s);
      for (int l = 0; l < 8; ++l) sums[l] += sc * lanes[l];
    }
    acc.fma_add(half_to_float(w[i].d) * x[i].d, sums);
  }
  return acc.hsum();
}

// F16 (also the attention's q·k and p·v): four accumulators of eight lanes over 32-element
// steps, fma per element, reduced (0+2, 1+3, then 0+1, then hi+lo halves, pairwise); leftovers
// are added in double, as ggml_vec_dot_f16 does.
float dot_f16(const uint16_t* x, const uint16_t* y, int64_t n) { return dot_f16_ggml(x, y, n); }
float dot_bf16(const uint16_t* x, const uint16_t* y, int64_t n) { return dot_bf16_ggml(x, y, n); }

}  // namespace scalar

namespace {
float dot_f32(const void* vw, const void* vx, int64_t n) {
  const auto* w = static_cast<const float*>(vw);
  const auto* x = static_cast<const float*>(vx);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * x[i];
  return static_cast<float>(sum);
}

}  // namespace

Result<GgmlType> vec_dot_type(GgmlType weight) {
  switch (weight) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return GgmlType::Q8_0;
    case GgmlType::Q4_1: case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::IQ4_NL: return GgmlType::Q8_0;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      return GgmlType::Q8_K;
    case GgmlType::F16: return GgmlType::F16;
    case GgmlType::BF16: return GgmlType::BF16;
    case GgmlType::F32: return GgmlType::F32;
    default:
      return unimplemented("matmul with {} weights is not supported by the CPU reference backend "
                           "(supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, "
                           "iq4_nl, iq4_xs)",
                           ggml_type_name(weight));
  }
}

bool weight_type_supported(GgmlType weight) { return vec_dot_type(weight).ok(); }

size_t quantized_row_bytes(GgmlType dot_type, int64_t n) { return row_bytes(dot_type, n); }

void quantize_activation(GgmlType dot_type, const float* x, void* dst, int64_t n) {
  switch (dot_type) {
    case GgmlType::Q8_0:
      quantize_q8_x86(x, static_cast<BlockQ8_0*>(dst), n / kQK32, false);
      break;
    case GgmlType::Q8_1:
      quantize_q8_x86(x, static_cast<BlockQ8_1*>(dst), n / kQK32, true);
      break;
    case GgmlType::Q8_K:
      quantize_row_q8_K(x, static_cast<BlockQ8_K*>(dst), n / kQKK);
      break;
    case GgmlType::F16:
      to_fp16(x, static_cast<uint16_t*>(dst), n);
      break;
    case GgmlType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(x[i]);
      break;
    }
    default:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      break;
  }
}

float dot_f16_fast(const uint16_t* x, const uint16_t* y, int64_t n) {
#if LOOM_REF_DOT_AVX2
  return avx2::dot_f16(x, y, n);
#else
  return scalar::dot_f16(x, y, n);
#endif
}

float vec_dot(GgmlType weight_type, const void* w_row, const void* x_q, int64_t n) {
#if LOOM_REF_DOT_AVX2
  namespace impl = avx2;
#else
  namespace impl = scalar;
#endif
  switch (weight_type) {
    case GgmlType::Q4_0: return impl::dot_q4_0(w_row, x_q, n);
    case GgmlType::Q4_1: return impl::dot_q4_1(w_row, x_q, n);
    case GgmlType::Q5_0: return impl::dot_q5_0(w_row, x_q, n);
    case GgmlType::Q5_1: return impl::dot_q5_1(w_row, x_q, n);
    case GgmlType::Q8_0: return impl::dot_q8_0(w_row, x_q, n);
    case GgmlType::Q4_K: return impl::dot_q4_K(w_row, x_q, n);
    case GgmlType::Q5_K: return impl::dot_q5_K(w_row, x_q, n);
    case GgmlType::Q6_K: return impl::dot_q6_K(w_row, x_q, n);
    case GgmlType::Q2_K: return scalar::dot_q2_K(w_row, x_q, n);
    case GgmlType::Q3_K: return scalar::dot_q3_K(w_row, x_q, n);
    case GgmlType::IQ4_NL: return scalar::dot_iq4_nl(w_row, x_q, n);
    case GgmlType::IQ4_XS: return scalar::dot_iq4_xs(w_row, x_q, n);
    case GgmlType::F16:
      return impl::dot_f16(static_cast<const uint16_t*>(w_row), static_cast<const uint16_t*>(x_q), n);
    case GgmlType::BF16:
      return impl::dot_bf16(static_cast<const uint16_t*>(w_row), static_cast<const uint16_t*>(x_q), n);
    case GgmlType::F32: return dot_f32(w_row, x_q, n);
    default: return NAN;
  }
}

}  // namespace loom::llm::ref
