// Reference K-quant formats (Q2_K ... Q6_K, super-blocks of 256) and the Q8_K activation format:
// decoders, and encoders following ggml's reference search (weighted least squares over a few
// candidate scales per sub-block, then 6- or 8-bit quantized sub-block scales).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/gguf/quant.h"
#include "loom/gguf/quant_blocks.h"
#include "loom/gguf/quant_rows.h"

// Same reason as in quant.cpp: no fused multiply-add, every operation rounds on its own.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace loom::llm {

// ---------------------------------------------------------------- decoders

void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    int sub = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[i].qs + 32 * h;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++sub) {  // two sub-blocks of 16 per shift
          const uint8_t sc = x[i].scales[sub];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

namespace {
// The 16 signed 6-bit scales of a Q3_K block (stored offset by 32).
void unpack_q3_scales(const uint8_t* packed, int* out) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = (lo | (hi << 4)) - 32;
  }
}
}  // namespace

void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    int scales[16];
    unpack_q3_scales(x[i].scales, scales);
    int sub = 0;
    uint8_t hbit = 1;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[i].qs + 32 * h;
      for (int shift = 0; shift < 8; shift += 2, hbit = static_cast<uint8_t>(hbit << 1)) {
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d * static_cast<float>(scales[sub]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((x[i].hmask[l] & hbit) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int g = 0; g < 4; ++g, q += 32) {
      uint8_t sc, m;
      unpack_scale_min_k4(2 * g, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      unpack_scale_min_k4(2 * g + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int g = 0; g < 4; ++g, q += 32) {
      uint8_t sc, m;
      unpack_scale_min_k4(2 * g, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      unpack_scale_min_k4(2 * g + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * g)), bit_hi = static_cast<uint8_t>(2u << (2 * g));
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((q[l] & 0xF) + ((x[i].qh[l] & bit_lo) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((q[l] >> 4) + ((x[i].qh[l] & bit_hi) ? 16 : 0)) - m2;
    }
  }
}

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      const int8_t* sc = x[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[s]) * static_cast<float>(q0);
        y[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q1);
        y[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q2);
        y[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q3);
      }
    }
  }
}

void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQKK; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
}

// ---------------------------------------------------------------- scale search

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this a group counts as all zeros

int clampi(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Asymmetric quantization of n values to 0..nmax as x ~ scale * L - min_out. Starts from the
// min/max grid, then tries nstep+1 slightly different grids, each refined by a weighted least
// squares fit of scale and offset; keeps the one with the least weighted error (squared, or
// absolute with use_mad). Returns the scale; *min_out receives the (non-negative) offset.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                    float rmin, float rdelta, int nstep, bool use_mad) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, uint8_t{0});
    *min_out = -lo;
    return 0.f;
  }
  auto error_of = [&](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + lo - x[i];
    best_error += w[i] * error_of(diff);
  }
  uint8_t trial[kQK32];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {  // the offset may only shift down: refit the scale alone
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(trial[i]) + this_min - x[i];
        err += w[i] * error_of(diff);
      }
      if (err < best_error) {
        std::copy(trial, trial + n, L);
        best_error = err;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *min_out = -lo;
  return scale;
}

// Symmetric quantization of n values to -nmax..nmax-1 (stored in L offset by nmax), weighting
// each value by x^2. Tries 19 grids around nmax/max and keeps the best least-squares scale.
float fit_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.f;
  }
  const float fnmax = static_cast<float>(nmax);
  auto sums = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  auto fill = [&](float iscale) {
    for (int i = 0; i < n; ++i)
      L[i] = static_cast<int8_t>(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = -fnmax / max;
  float sumlx, suml2;
  sums(iscale, &sumlx, &suml2);
  fill(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(fnmax + 0.1f * static_cast<float>(step)) / max;
    sums(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      fill(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric 3-bit-style fit used by Q3_K: a starting grid, then up to 5 rounds of moving single
// values to the level that most improves the (x^2-weighted) least-squares fit. L in -nmax..nmax-1
// on return offset by nmax.
float fit_scale_q3(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.f;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        const int nl = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (nl != L[i]) {
          const float fnl = static_cast<float>(nl);
          slx += w * x[i] * fnl;
          sl2 += w * fnl * fnl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Q4_K / Q5_K: fits the 8 sub-blocks of 32, quantizes their scales and mins to 6 bits against
// the block maxima, then requantizes every value with the scales as the decoder will see them.
// Leaves the levels (0..nmax) in L.
void quantize_k_scales_mins(const float* x, int nmax, float rmin, int nstep, Fp16Bits* d_out,
                            Fp16Bits* dmin_out, uint8_t* packed, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(packed, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    // ggml narrows to uint8 before clamping; the values never exceed 255 for finite input.
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  const float d_all = fp16_to_fp32(*d_out), dmin_all = fp16_to_fp32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, packed, &sc, &m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0.0f) continue;  // keep the levels of the fit
    const float dm = dmin_all * static_cast<float>(m);
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(clampi(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
  }
}

}  // namespace

// ---------------------------------------------------------------- encoders

void quantize_row_q2_K(const float* x, BlockQ2_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float scales[16], mins[16], weights[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    // 4-bit scales and mins against the block maxima.
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = fp32_to_fp16(max_scale / 15.f);
    } else {
      std::memset(y[i].scales, 0, sizeof(y[i].scales));
      y[i].d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; ++j)
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (nearest_int(iscale * mins[j]) << 4));
      y[i].dmin = fp32_to_fp16(max_min / 15.f);
    } else {
      y[i].dmin = fp32_to_fp16(0.f);
    }
    const float d_all = fp16_to_fp32(y[i].d), dmin_all = fp16_to_fp32(y[i].dmin);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = dmin_all * static_cast<float>(y[i].scales[j] >> 4);
      for (int l = 0; l < 16; ++l)
        L[16 * j + l] = static_cast<uint8_t>(clampi(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
    }
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* q = L + 128 * h + l;
        y[i].qs[32 * h + l] = static_cast<uint8_t>(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
      }
  }
}

void quantize_row_q3_K(const float* x, BlockQ3_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        // ggml narrows to int8 before clamping; finite input keeps it in range.
        const int8_t l0 = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        const int l = clampi(l0, -32, 31) + 32;
        if (j < 8)
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        else
          y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        y[i].scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      y[i].d = fp32_to_fp16(1 / iscale);
    } else {
      y[i].d = fp32_to_fp16(0.f);
    }
    int sc[16];
    unpack_q3_scales(y[i].scales, sc);
    const float d_all = fp16_to_fp32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(sc[j]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * j + l] = static_cast<int8_t>(clampi(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
    }
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int j = 0; j < kQKK; ++j) {
      if (L[j] > 3) {
        y[i].hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const int8_t* q = L + 128 * h + l;
        y[i].qs[32 * h + l] = static_cast<uint8_t>(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
      }
  }
}

void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    quantize_k_scales_mins(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l)
        y[i].qs[32 * g + l] = static_cast<uint8_t>(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
  }
}

void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    quantize_k_scales_mins(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
        if (lo > 15) y[i].qh[l] |= static_cast<uint8_t>(1u << (2 * g));
        if (hi > 15) y[i].qh[l] |= static_cast<uint8_t>(2u << (2 * g));
        y[i].qs[32 * g + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      }
  }
}

void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_scale_symmetric(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int j = 0; j < 16; ++j)
      y[i].scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
    const float d_all = fp16_to_fp32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * j + l] = static_cast<int8_t>(clampi(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* q = L + 128 * h;
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) |
                                     ((q[l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(y[i]));  // ggml leaves bsums unset here; zeros are their value
      continue;
    }
    // -127 (not -128) so that the extreme value maps to exactly -127 and q stays symmetric.
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace loom::llm
