// Reference quantization: fp16/bf16 conversions, the 32-element block formats (Q4_0 ... Q8_1) and
// the type dispatch of quant.h. The K formats live in quant_k.cpp.
#include "loom/gguf/quant.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "loom/gguf/quant_blocks.h"
#include "loom/gguf/quant_rows.h"

// Bit-exactness with ggml and numpy needs every product and sum rounded on its own: forbid the
// compiler from fusing a*b+c into one FMA (GCC fuses by default in C++ when -march has FMA).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace loom::llm {

// ---------------------------------------------------------------- fp16 / bf16

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    float mag = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -mag : mag;
  }
  uint32_t bits;
  if (exp == 31)
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN keeping its payload
  else
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  return std::bit_cast<float>(bits);
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u)  // NaN: quiet it and keep the top payload bits, as x86's F16C does
    return static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF));
  if (a >= 0x477FF000u)  // >= 65520 rounds (ties to even) past 65504: infinity
    return static_cast<uint16_t>(sign | 0x7C00);
  if (a < 0x38800000u) {
    // Below 2^-14 the result is subnormal (step 2^-24). Adding 0.5 (whose ulp is 2^-24) makes
    // the float adder round to that step with ties to even; the low bits are the result.
    const float sum = std::bit_cast<float>(a) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(sum) - 0x3F000000u));
  }
  // Normal: rebias the exponent and round the 13 dropped bits to nearest even; a carry out of
  // the mantissa correctly bumps the exponent.
  const uint32_t odd = (a >> 13) & 1;
  const uint32_t r = a - ((127u - 15u) << 23) + 0xFFFu + odd;
  return static_cast<uint16_t>(sign | (r >> 13));
}

float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: truncate and force the quiet bit (as ggml)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((static_cast<uint64_t>(u) + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// ---------------------------------------------------------------- 32-element formats

namespace {

constexpr int kHalf = kQK32 / 2;

// The value of largest magnitude (first one on ties), with its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo;
  *mx = hi;
}

// C's float-to-integer truncation, with NaN and out-of-range values (possible only for
// degenerate scales) sent to 0 instead of undefined behaviour.
int trunc_int(float v) { return (v > -1e9f && v < 1e9f) ? static_cast<int>(v) : 0; }

// ggml stores (int8_t)(v) and then clamps; int8 wrap-around never happens for finite inputs.
uint8_t trunc_clamp(float v, int hi) {
  const int t = static_cast<int8_t>(trunc_int(v));
  return static_cast<uint8_t>(std::min(hi, t));
}

int8_t round_i8(float v) { return static_cast<int8_t>(trunc_int(std::round(v))); }

}  // namespace

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0xF) - 8) * d;
      y[j + kHalf] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
      y[j + kHalf] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

namespace {
uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;  // little-endian hosts only (as GGUF itself)
}
}  // namespace

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + kHalf] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + kHalf] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK32; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_row_q8_1(const BlockQ8_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK32; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] & 0xF]);
      y[j + kHalf] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int s = 0; s < kQKK / kQK32; ++s, y += kQK32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(x[i], s));
      const uint8_t* qs = x[i].qs + 16 * s;
      for (int j = 0; j < kHalf; ++j) {
        y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xF]);
        y[j + kHalf] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK32) {
    const float d = signed_absmax(x, kQK32) / -8;  // the extreme value maps to q = 0
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      const uint8_t lo = trunc_clamp(x[j] * id + 8.5f, 15);
      const uint8_t hi = trunc_clamp(x[j + kHalf] * id + 8.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK32) {
    float mn, mx;
    min_max(x, kQK32, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(mn);
    for (int j = 0; j < kHalf; ++j) {
      const uint8_t lo = trunc_clamp((x[j] - mn) * id + 0.5f, 15);
      const uint8_t hi = trunc_clamp((x[j + kHalf] - mn) * id + 0.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK32) {
    const float d = signed_absmax(x, kQK32) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const uint8_t lo = trunc_clamp(x[j] * id + 16.5f, 31);
      const uint8_t hi = trunc_clamp(x[j + kHalf] * id + 16.5f, 31);
      y[i].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kHalf);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK32) {
    float mn, mx;
    min_max(x, kQK32, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      // ggml converts straight to uint8 here (no clamp): values stay within 0..31.
      const uint8_t lo = static_cast<uint8_t>(trunc_int((x[j] - mn) * id + 0.5f));
      const uint8_t hi = static_cast<uint8_t>(trunc_int((x[j + kHalf] - mn) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kHalf);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK32) {
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK32; ++j) y[i].qs[j] = round_i8(x[j] * id);  // half away from zero
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK32) {
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK32; ++j) {
      y[i].qs[j] = round_i8(x[j] * id);
      sum += y[i].qs[j];
    }
    // s uses the unrounded float d, as ggml does (not the stored fp16 d).
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

// ---------------------------------------------------------------- dispatch

namespace {

using DequantFn = void (*)(const void*, float*, int64_t nb);
using QuantFn = void (*)(const float*, void*, int64_t nb);

template <typename Block, void (*F)(const Block*, float*, int64_t)>
void dequant_thunk(const void* src, float* dst, int64_t nb) {
  F(static_cast<const Block*>(src), dst, nb);
}
template <typename Block, void (*F)(const float*, Block*, int64_t)>
void quant_thunk(const float* src, void* dst, int64_t nb) {
  F(src, static_cast<Block*>(dst), nb);
}

void dequant_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void dequant_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    dst[i] = fp16_to_fp32(h);
  }
}
void dequant_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}
void quant_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void quant_f16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}
void quant_bf16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}

struct Codec {
  GgmlType type;
  DequantFn dequant;  // count argument: blocks (elements for the 1-element float types)
  QuantFn quant;
};

#define LOOM_CODEC(T, name, B) \
  Codec { GgmlType::T, &dequant_thunk<B, &dequantize_row_##name>, &quant_thunk<B, &quantize_row_##name> }

constexpr Codec kCodecs[] = {
    {GgmlType::F32, &dequant_f32, &quant_f32},
    {GgmlType::F16, &dequant_f16, &quant_f16},
    {GgmlType::BF16, &dequant_bf16, &quant_bf16},
    LOOM_CODEC(Q4_0, q4_0, BlockQ4_0),
    LOOM_CODEC(Q4_1, q4_1, BlockQ4_1),
    LOOM_CODEC(Q5_0, q5_0, BlockQ5_0),
    LOOM_CODEC(Q5_1, q5_1, BlockQ5_1),
    LOOM_CODEC(Q8_0, q8_0, BlockQ8_0),
    LOOM_CODEC(Q8_1, q8_1, BlockQ8_1),
    LOOM_CODEC(Q2_K, q2_K, BlockQ2_K),
    LOOM_CODEC(Q3_K, q3_K, BlockQ3_K),
    LOOM_CODEC(Q4_K, q4_K, BlockQ4_K),
    LOOM_CODEC(Q5_K, q5_K, BlockQ5_K),
    LOOM_CODEC(Q6_K, q6_K, BlockQ6_K),
    LOOM_CODEC(Q8_K, q8_K, BlockQ8_K),
    // Dequantization only: the codebook formats come from files (llama.cpp's quantizers).
    Codec{GgmlType::IQ4_NL, &dequant_thunk<BlockIQ4_NL, &dequantize_row_iq4_nl>, nullptr},
    Codec{GgmlType::IQ4_XS, &dequant_thunk<BlockIQ4_XS, &dequantize_row_iq4_xs>, nullptr},
};
#undef LOOM_CODEC

const Codec* find_codec(GgmlType type) {
  for (const auto& c : kCodecs)
    if (c.type == type) return &c;
  return nullptr;
}

// Checks n against the type's block size; returns the count the codec takes.
Result<int64_t> codec_count(GgmlType type, int64_t n) {
  auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info) return invalid_argument("unknown ggml type {}", static_cast<uint32_t>(type));
  if (n < 0) return invalid_argument("negative element count {}", n);
  if (n % info->block_elems != 0)
    return invalid_argument("{} elements are not a whole number of {} blocks ({} elements each)", n,
                            info->name, info->block_elems);
  return n / info->block_elems;
}

}  // namespace

size_t row_bytes(GgmlType type, int64_t n) {
  auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info || n <= 0) return 0;
  return static_cast<size_t>(n / info->block_elems) * info->block_bytes;
}

Status dequantize(GgmlType type, const void* src, float* dst, int64_t n) {
  const Codec* codec = find_codec(type);
  if (!codec) return unimplemented("no reference dequantizer for type {}", ggml_type_name(type));
  LOOM_ASSIGN_OR_RETURN(int64_t count, codec_count(type, n));
  codec->dequant(src, dst, count);
  return Status();
}

bool can_quantize(GgmlType type) {
  const Codec* codec = find_codec(type);
  return codec && codec->quant;
}

Status quantize(GgmlType type, const float* src, void* dst, int64_t n) {
  const Codec* codec = find_codec(type);
  if (!codec || !codec->quant) return unimplemented("no reference quantizer for type {}", ggml_type_name(type));
  LOOM_ASSIGN_OR_RETURN(int64_t count, codec_count(type, n));
  const bool is_block = type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
  if (is_block) {
    // Scales computed from inf/NaN are meaningless; ggml would silently write garbage.
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(src[i]))
        return invalid_argument("cannot quantize a non-finite value ({}) at element {} to {}",
                                src[i], i, ggml_type_name(type));
  }
  codec->quant(src, dst, count);
  return Status();
}

}  // namespace loom::llm
