// Byte layouts of ggml's quantized blocks, shared by the reference quantizers, the CPU engine's
// dot products and the kernel generators. Every struct matches ggml's block bit for bit.
#pragma once

#include <cstdint>

namespace loom::llm {

// Half-precision scales are kept as raw IEEE binary16 bits; use fp16_to_fp32 (quant.h).
using Fp16Bits = uint16_t;

constexpr int kQK32 = 32;   // elements per block of the "legacy" formats (Q4_0 ... Q8_1)
constexpr int kQKK = 256;   // elements per super-block of the K formats
constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of Q4_K / Q5_K

// x = d * (q - 8), q in 0..15. qs[j] holds element j (low nibble) and j + 16 (high nibble).
struct BlockQ4_0 {
  Fp16Bits d;
  uint8_t qs[kQK32 / 2];
};
// x = d * q + m, q in 0..15; nibble order as Q4_0.
struct BlockQ4_1 {
  Fp16Bits d;
  Fp16Bits m;
  uint8_t qs[kQK32 / 2];
};
// x = d * (q - 16), q in 0..31: low nibbles as Q4_0, bit 4 of element j is bit j of qh
// (little-endian 32-bit word).
struct BlockQ5_0 {
  Fp16Bits d;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
// x = d * q + m, q in 0..31; bits as Q5_0.
struct BlockQ5_1 {
  Fp16Bits d;
  Fp16Bits m;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
// x = d * q, q in -127..127.
struct BlockQ8_0 {
  Fp16Bits d;
  int8_t qs[kQK32];
};
// Activation format for Q4_1/Q5_1 dot products: x = d * q; s = fp16(d * sum(q)) with d the
// unrounded float scale.
struct BlockQ8_1 {
  Fp16Bits d;
  Fp16Bits s;
  int8_t qs[kQK32];
};

// 16 sub-blocks of 16. Element 128*h + 32*k + l (h in 0..1, k in 0..3, l in 0..31) is bits
// 2k..2k+1 of qs[32*h + l]; its sub-block is 8*h + 2*k + l/16. scales[s]: low nibble scale,
// high nibble min. x = d * (scales & 15) * q - dmin * (scales >> 4).
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  Fp16Bits d;
  Fp16Bits dmin;
};
// 16 sub-blocks of 16 with 6-bit scales stored offset by 32: the low nibble of scale j is in
// scales[j % 8] (j < 8: low nibble, else high), its top two bits are bits 2*(j/4) of
// scales[8 + j % 4]. Low two quant bits as Q2_K; the third bit of element i is bit i/32 of
// hmask[i % 32]. x = d * (scale - 32) * (q - 4), q = low | third << 2.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  Fp16Bits d;
};
// 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes (see unpack_scale_min_k4).
// Element 64*g + l (l < 32) is the low nibble of qs[32*g + l], 64*g + 32 + l the high nibble.
// x = d * scale * q - dmin * min.
struct BlockQ4_K {
  Fp16Bits d;
  Fp16Bits dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
// As Q4_K plus a fifth bit: element 64*g + l has its bit 4 in bit 2g of qh[l], element
// 64*g + 32 + l in bit 2g + 1.
struct BlockQ5_K {
  Fp16Bits d;
  Fp16Bits dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 sub-blocks of 16 with int8 scales; q in 0..63, x = d * scales[i / 16] * (q - 32). In half h
// (elements 128h + 0..127), for l < 32: ql[64h + l] holds the low 4 bits of elements +l (low
// nibble) and +64+l (high), ql[64h + 32 + l] those of +32+l and +96+l; qh[32h + l] holds the top
// 2 bits of +l, +32+l, +64+l, +96+l in bits 0-1, 2-3, 4-5, 6-7.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  Fp16Bits d;
};
// Activation format for K-quant dot products: x = d * q with a float scale, plus the sums of
// each group of 16 quants (bsums) that the dot products use to apply the mins.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// The non-linear 4-bit codebook of IQ4_NL / IQ4_XS: a 4-bit index q stands for kIq4nlValues[q].
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// x = d * kIq4nlValues[q]; nibble order as Q4_0 (qs[j]: element j low, j + 16 high).
struct BlockIQ4_NL {
  Fp16Bits d;
  uint8_t qs[kQK32 / 2];
};
// 8 sub-blocks of 32 with 6-bit scales stored offset by 32: the low nibble of sub-block s's scale
// is nibble s % 2 of scales_l[s / 2], its top two bits are bits 2s..2s+1 of scales_h. Sub-block
// s's 32 quants are qs[16s .. 16s + 15] in IQ4_NL's nibble order. x = d * (scale - 32) * value.
struct BlockIQ4_XS {
  Fp16Bits d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);

// The signed scale (-32..31) of sub-block s (0..7) of an IQ4_XS block.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int s) {
  const int lo = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF;
  const int hi = (b.scales_h >> (2 * s)) & 3;
  return (lo | (hi << 4)) - 32;
}

// Scale and min (6 bits each) of sub-block j (0..7) from the 12 packed bytes of Q4_K / Q5_K:
// sub-blocks 0..3 keep theirs in the low 6 bits of bytes j and j+4; sub-blocks 4..7 split
// theirs between a nibble of byte j+4 and the top two bits of bytes j-4 and j.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace loom::llm
