// Block dot products as Loom IR (see mat_dot.h). Integer lanes come from lane-wise `dot4` on
// i32x8: a 32-byte group viewed as i32x8 already holds elements 4l..4l+3 in lane l, so one dot4
// gives the reference's eight lane sums. Weight quants are kept unsigned where the format allows
// (nibbles, 5- and 6-bit values: bytes <= 127, which the cpp target turns into vpmaddubsw +
// vpmaddwd); the -8/-16 offsets of Q4_0/Q5_0 come back through the activation's lane sums
// (computed once per activation block). Integer sums are exact, so any exact order gives the
// reference's lanes.
#include "loom/kernels/mat_dot.h"

#include <bit>

#include "loom/gguf/quant_blocks.h"

namespace loom::kernels {
namespace {

using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;

const Type kI32x8 = Type::vector(Scalar::kI32, 8);
const Type kU32x8 = Type::vector(Scalar::kU32, 8);
const Type kU32x4 = Type::vector(Scalar::kU32, 4);
const Type kF32x8 = Type::vector(Scalar::kF32, 8);
const Type kF32x4 = Type::vector(Scalar::kF32, 4);

// Lane sums of a 32-element group: w (i32x8 or u32x8 packed bytes) times x (i32x8 signed bytes).
Value* dot32(Emit& b, Value* w32, Value* x32) {
  if (w32->type != kI32x8) w32 = b.bitcast(w32, kI32x8);
  return b.dot4(w32, x32, b.c(kI32x8, 0));
}


// Eight bf16 values at a byte offset as f32x8 (exact: the 16 bits become the high half).
Value* bf16x8_at(Emit& b, Value* base, Value* off) {
  Value* h = b.convert(b.load_at(base, off, Type::vector(Scalar::kU16, 8), 2), kU32x8);
  return b.bitcast(b.shlc(h, 16), kF32x8);
}

Value* fma_lanes(Emit& b, Value* d, Value* lanes, Value* acc) {
  return b.fma(b.splat(d, 8), b.convert(lanes, kF32x8), acc);
}

// hsum_float_8: (hi + lo) lane pairs, then (0+2) + (1+3).
Value* hsum8(Emit& b, Value* v) {
  Value* r[4];
  for (int i = 0; i < 4; ++i) r[i] = b.add(b.extract(v, i + 4), b.extract(v, i));
  return b.add(b.add(r[0], r[2]), b.add(r[1], r[3]));
}

// 16 bytes of nibbles (qs[j]: element j low, j+16 high) as the 32 elements packed in u32x8.
Value* nibbles32(Emit& b, Value* w, Value* off, int align) {
  Value* q = b.load_at(w, off, kU32x4, align);
  // cpu: the 16 bytes twice, the upper copy shifted by 4, one mask (vperm2i128 + vpsrlvd + vpand
  // on AVX2, where two masks and a shift joined by vinserti128 took seven instructions).
  if (b.cpu) return b.andc(b.shr(b.concat(q, q), b.lanes(Scalar::kU32, {0, 0, 0, 0, 4, 4, 4, 4})), 0x0F0F0F0F);
  return b.concat(b.andc(q, 0x0F0F0F0F), b.andc(b.shrc(q, 4), 0x0F0F0F0F));
}

// Bit 4 of element j is bit j of the 32-bit qh: spread lane l's four bits into its bytes.
Value* q5_high_bits(Emit& b, Value* w, Value* off) {
  Value* qh = b.load_at(w, off, ty::u32, 2);
  Value* h = b.andc(b.shr(b.splat(qh, 8), b.lanes(Scalar::kU32, {0, 4, 8, 12, 16, 20, 24, 28})), 0xF);
  return b.shlc(b.andc(b.mulc(h, 0x00204081), 0x01010101), 4);
}

Value* load_u8_i32(Emit& b, Value* w, Value* off) { return b.convert(b.load_at(w, off, ty::s(Scalar::kU8), 1), ty::i32); }

// Scales and mins (6-bit) of the 8 sub-blocks of a Q4_K/Q5_K block (12 packed bytes at off).
void unpack_k4_scales(Emit& b, Value* w, Value* off, Value* sc[8], Value* mn[8]) {
  Value* q[12];
  for (int i = 0; i < 12; ++i) q[i] = load_u8_i32(b, w, b.addc(off, i));
  k4_scales_mins(b, q, sc, mn);
}

// Lane sums of the 32 activation bytes y (i32x8): dot4 with bytes of 1.
Value* lane_sums(Emit& b, Value* y) { return b.dot4(b.c(kI32x8, 0x01010101), y, b.c(kI32x8, 0)); }

// Lane sums of kIq4nlValues[q] * y for 32 nibble indices q (u32x8, one per byte) and activation
// bytes y, with ysum = lane_sums(y). The codebook as a function of q's four bits is a multilinear
// polynomial with integer coefficients c_S (S a subset of the bits, c_S the Moebius transform of
// the table): value(q) = sum over S of c_S * prod_{i in S} bit_i(q). So the lanes are
// sum_S c_S * dot4(mask_S, y), mask_S holding 1 in a byte where all of S's bits are set: exact
// integers, equal to the table's products in any order, with no table lookups.
Value* iq4nl_lanes(Emit& b, Value* q, Value* y, Value* ysum) {
  Value* lanes = b.mul(ysum, b.c(kI32x8, llm::kIq4nlValues[0]));
  Value* bits[4];
  for (int i = 0; i < 4; ++i) bits[i] = i ? b.shrc(q, i) : q;
  for (int set = 1; set < 16; ++set) {
    int64_t c = 0;  // c_S = sum over T in S of (-1)^{|S|-|T|} value(T)
    for (int t = set;; t = (t - 1) & set) {
      c += ((std::popcount(static_cast<unsigned>(set ^ t)) & 1) ? -1 : 1) * llm::kIq4nlValues[t];
      if (t == 0) break;
    }
    if (c == 0) continue;
    Value* m = nullptr;
    for (int i = 0; i < 4; ++i)
      if (set & (1 << i)) m = m ? b.bit_and(m, bits[i]) : bits[i];
    m = b.andc(m, 0x01010101);
    lanes = b.add(lanes, b.mul(dot32(b, m, y), b.c(kI32x8, c)));
  }
  return lanes;
}

}  // namespace

// An f16 at a byte offset as f32 (convert is exact; on the cpp target it is vcvtph2ps).
Value* f16_at(Emit& b, Value* base, Value* off) {
  Value* bits = b.load_at(base, off, ty::s(Scalar::kU16), 2);
  return b.convert(b.bitcast(bits, ty::s(Scalar::kF16)), ty::f32);
}

void k4_scales_mins(Emit& b, Value* const q[12], Value* sc[8], Value* mn[8]) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = b.andc(q[j], 63);
      mn[j] = b.andc(q[j + 4], 63);
    } else {
      sc[j] = b.bit_or(b.andc(q[j + 4], 0xF), b.shlc(b.shrc(q[j - 4], 6), 4));
      mn[j] = b.bit_or(b.shrc(q[j + 4], 4), b.shlc(b.shrc(q[j], 6), 4));
    }
  }
}

DotFormat dot_format(GgmlType w) {
  switch (w) {
    case GgmlType::Q4_0: return {w, GgmlType::Q8_0, 32, 18, 34};
    case GgmlType::Q4_1: return {w, GgmlType::Q8_1, 32, 20, 36};
    case GgmlType::Q5_0: return {w, GgmlType::Q8_0, 32, 22, 34};
    case GgmlType::Q5_1: return {w, GgmlType::Q8_1, 32, 24, 36};
    case GgmlType::Q8_0: return {w, GgmlType::Q8_0, 32, 34, 34};
    case GgmlType::IQ4_NL: return {w, GgmlType::Q8_0, 64, 36, 68};  // two blocks a step (see dot_step)
    case GgmlType::Q2_K: return {w, GgmlType::Q8_K, 256, 84, 292};
    case GgmlType::Q3_K: return {w, GgmlType::Q8_K, 256, 110, 292};
    case GgmlType::IQ4_XS: return {w, GgmlType::Q8_K, 256, 136, 292};
    case GgmlType::Q4_K: return {w, GgmlType::Q8_K, 256, 144, 292};
    case GgmlType::Q5_K: return {w, GgmlType::Q8_K, 256, 176, 292};
    case GgmlType::Q6_K: return {w, GgmlType::Q8_K, 256, 210, 292};
    case GgmlType::F16: return {w, GgmlType::F16, 32, 64, 64};
    case GgmlType::BF16: return {w, GgmlType::BF16, 32, 64, 64};
    case GgmlType::F32: return {w, GgmlType::F32, 32, 128, 128};
    default: return {w, w, 0, 0, 0};
  }
}

bool dot_supported(GgmlType w) { return dot_format(w).block_elems != 0; }

std::vector<Value*> dot_init(Emit& b, const DotFormat& f) {
  switch (f.wtype) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q5_K:
      return {b.cf(kF32x8, 0), b.f32(0)};
    case GgmlType::Q4_K: return {b.cf(kF32x8, 0), b.cf(kF32x4, 0)};
    case GgmlType::IQ4_NL: return {b.cf(kF32x8, 0), b.cf(kF32x8, 0)};
    case GgmlType::F16:
    case GgmlType::BF16: return {b.cf(kF32x8, 0), b.cf(kF32x8, 0), b.cf(kF32x8, 0), b.cf(kF32x8, 0)};
    case GgmlType::F32: return {b.cf(ty::s(Scalar::kF64), 0)};
    default: return {b.cf(kF32x8, 0)};
  }
}

Value* q8_bytes_no_min(Emit& b, Value* y) {
  if (!b.cpu) return y;
  const Type i8x32 = Type::vector(Scalar::kI8, 32);
  return b.bitcast(b.max(b.bitcast(y, i8x32), b.c(i8x32, -127)), y->type);
}

DotX dot_prep_x(Emit& b, const DotFormat& f, Value* x, Value* xoff) {
  DotX r;
  if (f.wtype == GgmlType::IQ4_NL) {  // per block k of the pair: [3k] d, [3k+1] bytes, [3k+2] lane sums
    for (int k = 0; k < 2; ++k) {
      Value* y = b.load_at(x, b.addc(xoff, 34 * k + 2), kI32x8, 2);
      r.v.push_back(f16_at(b, x, b.addc(xoff, 34 * k)));
      r.v.push_back(y);
      r.v.push_back(lane_sums(b, y));
    }
    return r;
  }
  switch (f.xtype) {
    case GgmlType::Q8_0:
    case GgmlType::Q8_1: {  // [0] d, [1] the 32 bytes, [2] -o x their lane sums (Q4_0/Q5_0), [3] s (Q8_1)
      const bool q81 = f.xtype == GgmlType::Q8_1;
      Value* y = b.load_at(x, b.addc(xoff, q81 ? 4 : 2), kI32x8, q81 ? 4 : 2);
      if (f.wtype == GgmlType::Q8_0) y = q8_bytes_no_min(b, y);  // signed weights: the sign trick
      // (q - o) . y = q . y - o * (lane sums of y), o = 8 (Q4_0) or 16 (Q5_0): the second term,
      // once per activation block, starts every row's dot4 (one vpdpbusd then does both).
      Value* neg_offset = nullptr;
      if (f.wtype == GgmlType::Q4_0 || f.wtype == GgmlType::Q5_0)
        neg_offset = b.sub(b.c(kI32x8, 0), b.shlc(b.dot4(b.c(kI32x8, 0x01010101), y, b.c(kI32x8, 0)),
                                                  f.wtype == GgmlType::Q5_0 ? 4 : 3));
      r.v = {f16_at(b, x, xoff), y, neg_offset};
      if (q81) r.v.push_back(f16_at(b, x, b.addc(xoff, 2)));
      return r;
    }
    case GgmlType::Q8_K: {
      r.v.push_back(b.load_at(x, xoff, ty::f32, 4));  // [0] d
      for (int c = 0; c < 8; ++c)                     // [1 + c]: chunk c bytes
        r.v.push_back(b.load_at(x, b.addc(xoff, 4 + 32 * c), kI32x8, 4));
      for (int g = 0; g < 16; ++g)  // [9 + g]: bsums
        r.v.push_back(b.convert(b.load_at(x, b.addc(xoff, 260 + 2 * g), ty::s(Scalar::kI16), 2), ty::i32));
      // [25 + c]: lane sums of chunk c (the formats whose quants carry an offset or a codebook).
      if (f.wtype == GgmlType::Q3_K || f.wtype == GgmlType::IQ4_XS)
        for (int c = 0; c < 8; ++c) r.v.push_back(lane_sums(b, r.v[1 + c]));
      return r;
    }
    case GgmlType::F16:
      for (int j = 0; j < 4; ++j)
        r.v.push_back(b.convert(b.load_at(x, b.addc(xoff, 16 * j), Type::vector(Scalar::kF16, 8), 2), kF32x8));
      return r;
    case GgmlType::BF16:
      for (int j = 0; j < 4; ++j) r.v.push_back(bf16x8_at(b, x, b.addc(xoff, 16 * j)));
      return r;
    default:  // F32: the step reads x itself (sequential double sum)
      r.v.push_back(xoff);
      r.v.push_back(x);
      return r;
  }
}

// Table layout: block k's lane sums (i32x8) at 32 k, its scale (f32) at 32 nb + 4 k.
int64_t x_table_bytes(const DotFormat& f, int64_t nb) {
  const bool offset = f.xtype == GgmlType::Q8_0 && (f.wtype == GgmlType::Q4_0 || f.wtype == GgmlType::Q5_0);
  return offset ? 36 * nb : 0;
}

void fill_x_table(Emit& b, const DotFormat& f, Value* x, int64_t nb, Value* table) {
  b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(nb)), b.i32(1), {}, [&](Value* blk, std::span<Value* const>) {
    DotX p = dot_prep_x(b, f, x, b.mul(blk, b.i32(f.x_bytes)));
    b.store_at(table, b.mul(blk, b.i32(32)), p.v[2], 16);
    b.store_at(table, b.addc(b.mul(blk, b.i32(4)), 32 * nb), p.v[0], 4);
    return std::vector<Value*>{};
  });
}

DotX dot_prep_x_table(Emit& b, const DotFormat& f, Value* x, Value* blk, int64_t nb, Value* table) {
  Value* y = b.load_at(x, b.addc(b.mul(blk, b.i32(f.x_bytes)), 2), kI32x8, 2);
  Value* d = b.load_at(table, b.addc(b.mul(blk, b.i32(4)), 32 * nb), ty::f32, 4);
  return DotX{{d, y, b.load_at(table, b.mul(blk, b.i32(32)), kI32x8, 16)}};
}

Value* dot_quants(Emit& b, const DotFormat& f, Value* w, Value* woff) {
  if (f.wtype == GgmlType::Q8_0) return b.load_at(w, b.addc(woff, 2), kI32x8, 2);
  const bool has_m = f.wtype == GgmlType::Q4_1 || f.wtype == GgmlType::Q5_1;
  const bool q5 = f.wtype == GgmlType::Q5_0 || f.wtype == GgmlType::Q5_1;
  const int qh_off = has_m ? 4 : 2;
  const int qs_off = (has_m ? 4 : 2) + (q5 ? 4 : 0);
  Value* q = nibbles32(b, w, b.addc(woff, qs_off), has_m ? 4 : 2);
  if (q5) q = b.bit_or(q, q5_high_bits(b, w, b.addc(woff, qh_off)));
  return b.bitcast(q, kI32x8);
}

std::vector<Value*> dot_step(Emit& b, const DotFormat& f, Value* w, Value* woff, const DotX& x,
                             std::span<Value* const> acc) {
  std::vector<Value*> out(acc.begin(), acc.end());
  switch (f.wtype) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0: {
      const bool has_m = f.wtype == GgmlType::Q4_1 || f.wtype == GgmlType::Q5_1;
      const bool q5 = f.wtype == GgmlType::Q5_0 || f.wtype == GgmlType::Q5_1;
      Value* d = b.mul(f16_at(b, w, woff), x.v[0]);
      if (has_m) out[1] = b.fma(f16_at(b, w, b.addc(woff, 2)), x.v[3], acc[1]);
      Value* lanes;
      if (f.wtype == GgmlType::Q8_0) {
        lanes = dot32(b, b.load_at(w, b.addc(woff, 2), kI32x8, 2), x.v[1]);
      } else {
        const int qh_off = has_m ? 4 : 2;
        const int qs_off = (has_m ? 4 : 2) + (q5 ? 4 : 0);
        Value* q = nibbles32(b, w, b.addc(woff, qs_off), has_m ? 4 : 2);
        if (q5) q = b.bit_or(q, q5_high_bits(b, w, b.addc(woff, qh_off)));
        if (q->type != kI32x8) q = b.bitcast(q, kI32x8);
        lanes = has_m ? dot32(b, q, x.v[1]) : b.dot4(q, x.v[1], x.v[2]);  // x.v[2]: -o x lane sums
      }
      out[0] = fma_lanes(b, d, lanes, acc[0]);
      return out;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = f.wtype == GgmlType::Q5_K;
      Value* xd = x.v[0];
      Value* d = b.mul(xd, f16_at(b, w, woff));
      Value* dmin = b.mul(b.neg(xd), f16_at(b, w, b.addc(woff, 2)));
      Value* sc[8];
      Value* mn[8];
      unpack_k4_scales(b, w, b.addc(woff, 4), sc, mn);
      auto bs = [&](int g) { return x.v[9 + g]; };
      if (!q5) {
        std::vector<Value*> m;
        for (int i = 0; i < 4; ++i) {
          Value* s0 = b.add(bs(4 * i), bs(4 * i + 1));
          Value* s1 = b.add(bs(4 * i + 2), bs(4 * i + 3));
          m.push_back(b.add(b.mul(mn[2 * i], s0), b.mul(mn[2 * i + 1], s1)));
        }
        out[1] = b.fma(b.splat(dmin, 4), b.convert(b.build(m), kF32x4), acc[1]);
      } else {
        Value* msum = b.i32(0);
        for (int j = 0; j < 8; ++j) msum = b.add(msum, b.mul(mn[j], b.add(bs(2 * j), bs(2 * j + 1))));
        out[1] = b.fma(dmin, b.convert(msum, ty::f32), acc[1]);
      }
      const int qs_off = q5 ? 48 : 16;
      Value* qh = q5 ? b.load_at(w, b.addc(woff, 16), kU32x8, 4) : nullptr;
      Value* lanes = nullptr;
      for (int g = 0; g < 4; ++g) {
        Value* q = b.load_at(w, b.addc(woff, qs_off + 32 * g), kU32x8, 4);
        for (int h = 0; h < 2; ++h) {
          Value* v = b.andc(h ? b.shrc(q, 4) : q, 0x0F0F0F0F);
          if (q5) v = b.bit_or(v, b.shlc(b.andc(b.shrc(qh, 2 * g + h), 0x01010101), 4));
          Value* s = b.mul(dot32(b, v, x.v[1 + 2 * g + h]), b.splat(sc[2 * g + h], 8));
          lanes = lanes ? b.add(lanes, s) : s;
        }
      }
      out[0] = fma_lanes(b, d, lanes, acc[0]);
      return out;
    }
    case GgmlType::IQ4_NL: {
      // Blocks 2i and 2i+1 go to accumulators 0 and 1, as the reference alternates them.
      for (int k = 0; k < 2; ++k) {
        Value* bo = b.addc(woff, 18 * k);
        Value* d = b.mul(x.v[3 * k], f16_at(b, w, bo));
        Value* q = nibbles32(b, w, b.addc(bo, 2), 2);
        out[k] = fma_lanes(b, d, iq4nl_lanes(b, q, x.v[3 * k + 1], x.v[3 * k + 2]), acc[k]);
      }
      return out;
    }
    case GgmlType::IQ4_XS: {
      // scales_h at 2, scales_l at 4, qs at 8; sub-block s: scale s, quants qs[16s..], chunk s.
      Value* d = b.mul(f16_at(b, w, woff), x.v[0]);
      Value* sh = b.convert(b.load_at(w, b.addc(woff, 2), ty::u16, 2), ty::i32);
      Value* lanes = nullptr;
      for (int sb = 0; sb < 8; ++sb) {
        Value* lo = b.andc(b.shrc(load_u8_i32(b, w, b.addc(woff, 4 + sb / 2)), 4 * (sb % 2)), 0xF);
        Value* sc = b.addc(b.bit_or(lo, b.shlc(b.andc(b.shrc(sh, 2 * sb), 3), 4)), -32);
        Value* q = nibbles32(b, w, b.addc(woff, 8 + 16 * sb), 4);
        Value* v = b.mul(iq4nl_lanes(b, q, x.v[1 + sb], x.v[25 + sb]), b.splat(sc, 8));
        lanes = lanes ? b.add(lanes, v) : v;
      }
      out[0] = fma_lanes(b, d, lanes, acc[0]);
      return out;
    }
    case GgmlType::Q2_K: {
      // scales at 0 (low nibble scale, high nibble min), qs at 16, d at 80, dmin at 82.
      Value* xd = x.v[0];
      Value* d = b.mul(xd, f16_at(b, w, b.addc(woff, 80)));
      Value* dmin = b.mul(b.neg(xd), f16_at(b, w, b.addc(woff, 82)));
      Value* sc[16];
      for (int i = 0; i < 16; ++i) sc[i] = load_u8_i32(b, w, b.addc(woff, i));
      std::vector<Value*> mins;
      for (int l = 0; l < 8; ++l)
        mins.push_back(b.add(b.mul(b.shrc(sc[2 * l], 4), x.v[9 + 2 * l]), b.mul(b.shrc(sc[2 * l + 1], 4), x.v[9 + 2 * l + 1])));
      Value* a = fma_lanes(b, dmin, b.build(mins), acc[0]);
      Value* lanes = nullptr;
      for (int h = 0; h < 2; ++h) {
        Value* q = b.load_at(w, b.addc(woff, 16 + 32 * h), kU32x8, 4);
        for (int k = 0; k < 4; ++k) {
          Value* v = b.andc(k ? b.shrc(q, 2 * k) : q, 0x03030303);
          const int s0 = 8 * h + 2 * k;
          std::vector<Value*> scl;
          for (int l = 0; l < 8; ++l) scl.push_back(b.andc(sc[s0 + (l >= 4 ? 1 : 0)], 0xF));
          Value* p = b.mul(dot32(b, v, x.v[1 + 4 * h + k]), b.build(scl));
          lanes = lanes ? b.add(lanes, p) : p;
        }
      }
      out[0] = fma_lanes(b, d, lanes, a);
      return out;
    }
    case GgmlType::Q3_K: {
      // hmask at 0, qs at 32, scales at 96, d at 108. q = low | third << 2 in 0..7; the -4
      // offset comes back through the chunk's lane sums.
      Value* d = b.mul(x.v[0], f16_at(b, w, b.addc(woff, 108)));
      Value* sb[12];
      for (int i = 0; i < 12; ++i) sb[i] = load_u8_i32(b, w, b.addc(woff, 96 + i));
      Value* sc[16];
      for (int j = 0; j < 16; ++j) {
        Value* lo = j < 8 ? b.andc(sb[j], 0xF) : b.shrc(sb[j - 8], 4);
        Value* hi = b.andc(b.shrc(sb[8 + j % 4], 2 * (j / 4)), 3);
        sc[j] = b.addc(b.bit_or(lo, b.shlc(hi, 4)), -32);
      }
      Value* hm = b.load_at(w, woff, kU32x8, 2);
      Value* lanes = nullptr;
      for (int h = 0; h < 2; ++h) {
        Value* q = b.load_at(w, b.addc(woff, 32 + 32 * h), kU32x8, 2);
        for (int k = 0; k < 4; ++k) {
          const int bit = 4 * h + k;
          Value* v = b.andc(k ? b.shrc(q, 2 * k) : q, 0x03030303);
          v = b.bit_or(v, b.shlc(b.andc(bit ? b.shrc(hm, bit) : hm, 0x01010101), 2));
          const int c = 4 * h + k;
          Value* p = b.sub(dot32(b, v, x.v[1 + c]), b.shlc(x.v[25 + c], 2));
          const int s0 = 8 * h + 2 * k;
          std::vector<Value*> scl;
          for (int l = 0; l < 8; ++l) scl.push_back(sc[s0 + (l >= 4 ? 1 : 0)]);
          p = b.mul(p, b.build(scl));
          lanes = lanes ? b.add(lanes, p) : p;
        }
      }
      out[0] = fma_lanes(b, d, lanes, acc[0]);
      return out;
    }
    case GgmlType::Q6_K: {
      Value* d = b.mul(x.v[0], f16_at(b, w, b.addc(woff, 208)));
      Value* sc[16];
      for (int i = 0; i < 16; ++i)
        sc[i] = b.convert(b.load_at(w, b.addc(woff, 192 + i), ty::s(Scalar::kI8), 1), ty::i32);
      Value* lanes = nullptr;
      for (int h = 0; h < 2; ++h) {
        Value* ql0 = b.load_at(w, b.addc(woff, 64 * h), kU32x8, 2);
        Value* ql1 = b.load_at(w, b.addc(woff, 64 * h + 32), kU32x8, 2);
        Value* qh = b.load_at(w, b.addc(woff, 128 + 32 * h), kU32x8, 2);
        for (int c = 0; c < 4; ++c) {
          Value* ql = c % 2 ? ql1 : ql0;
          Value* v = b.andc(c >= 2 ? b.shrc(ql, 4) : ql, 0x0F0F0F0F);
          Value* hb = b.andc(c ? b.shrc(qh, 2 * c) : qh, 0x03030303);
          v = b.bit_or(v, b.shlc(hb, 4));
          const int ch = 4 * h + c;
          Value* s = dot32(b, v, x.v[1 + ch]);
          std::vector<Value*> scl;
          for (int l = 0; l < 8; ++l) scl.push_back(sc[2 * ch + (l >= 4 ? 1 : 0)]);
          s = b.mul(s, b.build(scl));
          lanes = lanes ? b.add(lanes, s) : s;
        }
      }
      std::vector<Value*> corr;
      for (int l = 0; l < 8; ++l)
        corr.push_back(b.mulc(b.add(b.mul(x.v[9 + 2 * l], sc[2 * l]), b.mul(x.v[9 + 2 * l + 1], sc[2 * l + 1])), 32));
      lanes = b.sub(lanes, b.build(corr));
      out[0] = fma_lanes(b, d, lanes, acc[0]);
      return out;
    }
    case GgmlType::F16:
      for (int j = 0; j < 4; ++j) {
        Value* wv = b.convert(b.load_at(w, b.addc(woff, 16 * j), Type::vector(Scalar::kF16, 8), 2), kF32x8);
        out[j] = b.fma(wv, x.v[j], acc[j]);
      }
      return out;
    case GgmlType::BF16:
      for (int j = 0; j < 4; ++j) out[j] = b.fma(bf16x8_at(b, w, b.addc(woff, 16 * j)), x.v[j], acc[j]);
      return out;
    case GgmlType::F32: {
      Value* s = acc[0];
      const ir::Type d64 = ty::s(Scalar::kF64);
      for (int k = 0; k < 32; ++k) {
        Value* wk = b.load_at(w, b.addc(woff, 4 * k), ty::f32, 4);
        Value* xk = b.load_at(x.v[1], b.addc(x.v[0], 4 * k), ty::f32, 4);
        s = b.add(s, b.mul(b.convert(wk, d64), b.convert(xk, d64)));
      }
      out[0] = s;
      return out;
    }
    default:
      return out;
  }
}

Value* dot_finish(Emit& b, const DotFormat& f, std::span<Value* const> acc) {
  switch (f.wtype) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q5_K:
      return b.add(hsum8(b, acc[0]), acc[1]);
    case GgmlType::Q4_K: {
      Value* m = acc[1];
      Value* ms = b.add(b.add(b.extract(m, 0), b.extract(m, 2)), b.add(b.extract(m, 1), b.extract(m, 3)));
      return b.add(hsum8(b, acc[0]), ms);
    }
    case GgmlType::F16: {
      Value* a0 = b.add(acc[0], acc[2]);
      Value* a1 = b.add(acc[1], acc[3]);
      a0 = b.add(a0, a1);
      Value* t[4];
      for (int l = 0; l < 4; ++l) t[l] = b.add(b.extract(a0, l), b.extract(a0, l + 4));
      return b.add(b.add(t[0], t[1]), b.add(t[2], t[3]));
    }
    case GgmlType::IQ4_NL:  // the even and odd blocks' lanes added, then hsum_float_8
      return hsum8(b, b.add(acc[0], acc[1]));
    case GgmlType::BF16:  // ggml_vec_dot_bf16: (0+2) + (1+3), then hsum_float_8
      return hsum8(b, b.add(b.add(acc[0], acc[2]), b.add(acc[1], acc[3])));
    case GgmlType::F32: return b.convert(acc[0], ty::f32);
    default: return hsum8(b, acc[0]);
  }
}

}  // namespace loom::kernels
