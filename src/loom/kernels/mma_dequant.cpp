// Weight-tile dequantization of matmul_mma (mma_dequant.h): block addresses in both layouts and
// the per-format unpacking to f16-rounded values.
#include "loom/kernels/mma_dequant.h"

#include "loom/gguf/quant_blocks.h"

namespace loom::kernels::mma {
namespace {

using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;

// Byte address (i64) of GGUF in-block offset `off` (i64) of block `blk` (i64) of row `r` (i32).
// `header`: off lies in the block's planar header (else in its body); only planar cares.
Value* block_byte(Emit& b, const WLayout& L, Value* r, Value* blk, Value* off, bool header) {
  const Type i64 = Type::scalar(Scalar::kI64);
  if (!L.planar) return b.add(b.add(b.mul(b.convert(r, i64), b.i64(L.nb * L.block_bytes)), b.mul(blk, b.i64(L.block_bytes))), off);
  Value* g = b.add(b.mul(b.convert(r, i64), b.i64(L.nb)), blk);
  const int64_t nblk = L.rows * L.nb;
  if (header)
    return b.add(b.i64(16 * L.pg.pieces * nblk),
                 b.add(b.mul(g, b.i64(L.pg.header_bytes)), b.sub(off, b.i64(L.pg.header_offset))));
  Value* bo = b.sub(off, b.i64(L.pg.body_offset()));
  Value* piece = b.div(bo, b.i64(16));
  return b.add(b.add(b.mul(piece, b.i64(16 * nblk)), b.mul(g, b.i64(16))), b.sub(bo, b.mul(piece, b.i64(16))));
}

}  // namespace

bool m_format(GgmlType t, MFormat* f) {
  switch (t) {
    case GgmlType::Q4_0: *f = {32, 18}; return true;
    case GgmlType::Q8_0: *f = {32, 34}; return true;
    case GgmlType::Q4_K: *f = {256, 144}; return true;
    case GgmlType::Q6_K: *f = {256, 210}; return true;
    case GgmlType::Q2_K: *f = {256, 84}; return true;
    case GgmlType::Q3_K: *f = {256, 110}; return true;
    case GgmlType::IQ4_NL: *f = {32, 18}; return true;
    case GgmlType::IQ4_XS: *f = {256, 136}; return true;
    default: return false;
  }
}

WLayout layout_of(const Shape& s, GgmlType wt, int64_t n_in, int64_t n_out, int block_elems, int block_bytes) {
  WLayout L;
  L.planar = s.dims.count("planar") && s.at("planar") == 1;
  L.nb = n_in / block_elems;
  L.rows = n_out;
  L.block_bytes = block_bytes;
  if (L.planar) llm::planar_geometry(wt, &L.pg);
  return L;
}

// Loads first, arithmetic in the returned function (see the header).
Unpack16 dequant16_split(Emit& b, GgmlType t, Value* w, const WLayout& L, Value* r, Value* k0, bool f16_out) {
  // Offsets are the GGUF block's (i64); hdr/body give their addresses in either layout.
  Value* blk = nullptr;
  auto hdr = [&b, &L, r, &blk](Value* off) { return block_byte(b, L, r, blk, off, true); };
  auto body = [&b, &L, r, &blk](Value* off) { return block_byte(b, L, r, blk, off, false); };
  auto at = [&b](Value* off, int o) { return b.add(off, b.i64(o)); };
  // The 8 u16 at body offsets off, off + 2, .. off + 14 (zero-extended): planar, one 16-byte load
  // of the piece (off is a piece's start); GGUF rows, 8 two-byte loads (blocks are 2-aligned).
  // Loads now, unpacking when the returned function runs.
  auto halves8 = [&](Value* off) -> std::function<std::vector<Value*>()> {
    if (!L.planar) {
      std::vector<Value*> h;
      for (int i = 0; i < 8; ++i) h.push_back(b.load_at(w, body(at(off, 2 * i)), ty::u16, 2));
      return [&b, h] {
        std::vector<Value*> u;
        for (Value* v : h) u.push_back(b.convert(v, ty::u32));
        return u;
      };
    }
    Value* v = b.load_at(w, body(off), Type::vector(Scalar::kU32, 4), 16);
    return [&b, v] {
      std::vector<Value*> h;
      for (int i = 0; i < 8; ++i) {
        Value* wd = b.extract(v, i / 2);
        h.push_back(i % 2 ? b.shrc(wd, 16) : b.andc(wd, 0xFFFF));
      }
      return h;
    };
  };
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0: {
      const bool q8 = t == GgmlType::Q8_0;
      blk = b.convert(b.div(k0, b.i32(32)), ty::i64);
      Value* half = b.rem(b.div(k0, b.i32(16)), b.i32(2));
      Value* dh = b.load_at(w, hdr(b.i64(0)), ty::u16, 2);
      if (q8) {
        auto hs = halves8(at(b.mul(b.convert(half, ty::i64), b.i64(16)), 2));
        return [&b, dh, hs] {
          std::vector<Value*> out;
          Value* d = b.convert(b.bitcast(dh, ty::f16), ty::f32);
          const std::vector<Value*> h8 = hs();
          for (Value* h : h8)
            for (int j = 0; j < 2; ++j) {
              Value* q = b.shrc(b.shlc(b.bitcast(h, ty::i32), 24 - 8 * j), 24);
              out.push_back(b.mul(d, b.convert(q, ty::f32)));
            }
          return out;
        };
      }
      if (f16_out && L.planar) {
        // Packed f16: a nibble q OR 0x6400 is the half 1024 + q; minus 1032 is q - 8 exactly, and
        // times d rounds once, as the f32 form's d * (q - 8) rounded to f16 does.
        Value* v = b.load_at(w, body(b.i64(2)), Type::vector(Scalar::kU32, 4), 16);
        return [&b, dh, v, half] {
          const Type h2 = Type::vector(Scalar::kF16, 2);
          Value* d = b.bitcast(dh, ty::f16);
          Value* d2 = b.build({d, d});
          Value* bias = b.const_float(h2, 1032.0);
          Value* sh = b.convert(b.mulc(half, 4), ty::u32);
          std::vector<Value*> out;
          for (int m = 0; m < 4; ++m) {
            Value* wd = b.shr(b.extract(v, m), sh);
            // bytes 0 and 2 (elements 4m, 4m + 2), then bytes 1 and 3 (4m + 1, 4m + 3)
            Value* a = b.bitcast(b.bit_or(b.andc(wd, 0x000F000F), b.c(ty::u32, 0x64006400)), h2);
            Value* c = b.bitcast(b.bit_or(b.andc(b.shrc(wd, 8), 0x000F000F), b.c(ty::u32, 0x64006400)), h2);
            a = b.mul(b.sub(a, bias), d2);
            c = b.mul(b.sub(c, bias), d2);
            out.push_back(b.extract(a, 0));
            out.push_back(b.extract(c, 0));
            out.push_back(b.extract(a, 1));
            out.push_back(b.extract(c, 1));
          }
          return out;
        };
      }
      auto hs = halves8(b.i64(2));
      return [&b, dh, hs, half] {
        std::vector<Value*> out;
        Value* d = b.convert(b.bitcast(dh, ty::f16), ty::f32);
        Value* sh = b.convert(b.mulc(half, 4), ty::u32);
        for (Value* h : hs())
          for (int j = 0; j < 2; ++j) {
            Value* q = b.andc(b.shr(b.shrc(h, 8 * j), sh), 0xF);
            out.push_back(b.mul(d, b.convert(b.addc(b.bitcast(q, ty::i32), -8), ty::f32)));
          }
        return out;
      };
    }
    case GgmlType::Q4_K: {
      blk = b.convert(b.div(k0, b.i32(256)), ty::i64);
      Value* sub = b.rem(b.div(k0, b.i32(32)), b.i32(8));   // sub-block j
      Value* half = b.rem(b.div(k0, b.i32(16)), b.i32(2));  // which 16 of its 32
      Value* dh = b.load_at(w, hdr(b.i64(0)), ty::u16, 2);
      Value* dminh = b.load_at(w, hdr(b.i64(2)), ty::u16, 2);
      // get_scale_min_k4: j < 4: sc = q[j] & 63, m = q[j+4] & 63; else from the high bits.
      Value* jlo = b.rem(sub, b.i32(4));
      Value* sbase = b.i64(4);
      auto u8 = [&](Value* off) { return b.load_at(w, off, Type::scalar(Scalar::kU8), 1); };
      Value* qa = u8(hdr(b.add(sbase, b.convert(jlo, ty::i64))));                   // q[j % 4]
      Value* qb = u8(hdr(b.add(sbase, b.convert(b.addc(jlo, 4), ty::i64))));        // q[j % 4 + 4]
      Value* qc = u8(hdr(b.add(sbase, b.convert(b.addc(jlo, 8), ty::i64))));        // q[j % 4 + 8]
      // qs chunk sub/2 (32 bytes at 16 + 32 * (sub/2)); low nibbles for even sub, high for odd.
      Value* qoff = b.add(b.i64(16), b.convert(b.add(b.mulc(b.div(sub, b.i32(2)), 32), b.mulc(half, 16)), ty::i64));
      // The scale and offset of the sub-block, ds = d * sc and dm = dmin * m (exact in f32).
      auto scales = [&b, dh, dminh, qa, qb, qc, sub] {
        Value* d = b.convert(b.bitcast(dh, ty::f16), ty::f32);
        Value* dmin = b.convert(b.bitcast(dminh, ty::f16), ty::f32);
        Value* a = b.convert(qa, ty::i32), *bb = b.convert(qb, ty::i32), *c = b.convert(qc, ty::i32);
        Value* lo = b.cmp(Mode::kLt, sub, b.i32(4));
        Value* sc = b.select(lo, b.andc(a, 63), b.bit_or(b.andc(c, 0xF), b.shlc(b.shrc(a, 6), 4)));
        Value* mn = b.select(lo, b.andc(bb, 63), b.bit_or(b.shrc(c, 4), b.shlc(b.shrc(bb, 6), 4)));
        return std::pair<Value*, Value*>{b.mul(d, b.convert(sc, ty::f32)), b.mul(dmin, b.convert(mn, ty::f32))};
      };
      if (f16_out && L.planar) {
        // Packed f16: nibble q OR 0x6400 is 1024 + q; minus 1024 is q exactly; then q * ds - dm
        // with ds and dm rounded to f16 (two more roundings than the f32 form, well inside the
        // op's tolerance: the weights themselves are rounded to f16 for the tensor cores).
        Value* v = b.load_at(w, body(qoff), Type::vector(Scalar::kU32, 4), 16);
        return [&b, v, sub, scales] {
          const Type h2 = Type::vector(Scalar::kF16, 2);
          auto [ds, dm] = scales();
          Value* dsh = b.convert(ds, ty::f16), *dmh = b.convert(dm, ty::f16);
          Value* ds2 = b.build({dsh, dsh}), *dm2 = b.build({dmh, dmh});
          Value* base = b.const_float(h2, 1024.0);
          Value* sh = b.convert(b.mulc(b.rem(sub, b.i32(2)), 4), ty::u32);
          std::vector<Value*> out;
          for (int m = 0; m < 4; ++m) {
            Value* wd = b.shr(b.extract(v, m), sh);
            Value* a = b.bitcast(b.bit_or(b.andc(wd, 0x000F000F), b.c(ty::u32, 0x64006400)), h2);
            Value* c = b.bitcast(b.bit_or(b.andc(b.shrc(wd, 8), 0x000F000F), b.c(ty::u32, 0x64006400)), h2);
            a = b.sub(b.mul(b.sub(a, base), ds2), dm2);
            c = b.sub(b.mul(b.sub(c, base), ds2), dm2);
            out.push_back(b.extract(a, 0));
            out.push_back(b.extract(c, 0));
            out.push_back(b.extract(a, 1));
            out.push_back(b.extract(c, 1));
          }
          return out;
        };
      }
      auto hs = halves8(qoff);
      return [&b, sub, hs, scales] {
        auto [ds, dm] = scales();
        Value* sh = b.convert(b.mulc(b.rem(sub, b.i32(2)), 4), ty::u32);
        std::vector<Value*> out;
        for (Value* h : hs())
          for (int j = 0; j < 2; ++j) {
            Value* q = b.andc(b.shr(b.shrc(h, 8 * j), sh), 0xF);
            out.push_back(b.sub(b.mul(ds, b.convert(b.bitcast(q, ty::i32), ty::f32)), dm));
          }
        return out;
      };
    }
    case GgmlType::Q6_K: {
      blk = b.convert(b.div(k0, b.i32(256)), ty::i64);
      Value* e0 = b.rem(k0, b.i32(256));                 // first element: 128 n + 32 c + l0
      Value* n = b.div(e0, b.i32(128));
      Value* c = b.rem(b.div(e0, b.i32(32)), b.i32(4));
      Value* l0 = b.rem(e0, b.i32(32));                  // 0 or 16
      Value* dh = b.load_at(w, hdr(b.i64(208)), ty::u16, 2);
      Value* scq = b.load_at(w, body(b.add(b.i64(192), b.convert(b.add(b.add(b.mulc(n, 8), b.div(l0, b.i32(16))),
                                                                         b.mulc(c, 2)), ty::i64))),
                             Type::scalar(Scalar::kI8), 1);
      Value* qloff = b.convert(b.add(b.add(b.mulc(n, 64), l0), b.mulc(b.rem(c, b.i32(2)), 32)), ty::i64);
      Value* qhoff = b.add(b.i64(128), b.convert(b.add(b.mulc(n, 32), l0), ty::i64));
      auto hls = halves8(qloff), hhs = halves8(qhoff);
      return [&b, dh, scq, c, hls, hhs] {
        Value* d = b.convert(b.bitcast(dh, ty::f16), ty::f32);
        Value* ds = b.mul(d, b.convert(b.convert(scq, ty::i32), ty::f32));
        Value* lsh = b.convert(b.mulc(b.div(c, b.i32(2)), 4), ty::u32);
        Value* hsh = b.convert(b.mulc(c, 2), ty::u32);
        const std::vector<Value*> hl8 = hls(), hh8 = hhs();
        std::vector<Value*> out;
        for (int i = 0; i < 8; ++i) {
          Value* hl = hl8[static_cast<size_t>(i)];
          Value* hh = hh8[static_cast<size_t>(i)];
          for (int j = 0; j < 2; ++j) {
            Value* ql = b.andc(b.shr(b.shrc(hl, 8 * j), lsh), 0xF);
            Value* qh = b.andc(b.shr(b.shrc(hh, 8 * j), hsh), 3);
            Value* q = b.addc(b.bitcast(b.bit_or(ql, b.shlc(qh, 4)), ty::i32), -32);
            out.push_back(b.mul(ds, b.convert(q, ty::f32)));
          }
        }
        return out;
      };
    }
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: {
      // 16 quants = one nibble half of 16 bytes; x = d (IQ4_XS: d * (scale - 32)) * value[q].
      const bool xs = t == GgmlType::IQ4_XS;
      blk = b.convert(b.div(k0, b.i32(xs ? 256 : 32)), ty::i64);
      Value* sb = xs ? b.rem(b.div(k0, b.i32(32)), b.i32(8)) : nullptr;  // IQ4_XS sub-block
      Value* half = b.rem(b.div(k0, b.i32(16)), b.i32(2));
      Value* dh = b.load_at(w, hdr(b.i64(0)), ty::u16, 2);
      Value* shh = xs ? b.load_at(w, hdr(b.i64(2)), ty::u16, 2) : nullptr;
      Value* slb = xs ? b.load_at(w, hdr(b.add(b.i64(4), b.convert(b.div(sb, b.i32(2)), ty::i64))),
                                  Type::scalar(Scalar::kU8), 1)
                      : nullptr;
      auto hs = halves8(xs ? b.add(b.i64(8), b.convert(b.mulc(sb, 16), ty::i64)) : b.i64(2));
      return [&b, dh, shh, slb, sb, half, hs, xs] {
        Value* d = b.convert(b.bitcast(dh, ty::f16), ty::f32);
        if (xs) {
          Value* lo = b.andc(b.shr(b.convert(slb, ty::i32), b.mulc(b.rem(sb, b.i32(2)), 4)), 0xF);
          Value* hi = b.andc(b.shr(b.convert(shh, ty::i32), b.mulc(sb, 2)), 3);
          d = b.mul(d, b.convert(b.addc(b.bit_or(lo, b.shlc(hi, 4)), -32), ty::f32));
        }
        Value* sh = b.convert(b.mulc(half, 4), ty::u32);
        std::vector<Value*> out;
        for (Value* h : hs())
          for (int j = 0; j < 2; ++j) {
            Value* q = b.bitcast(b.andc(b.shr(b.shrc(h, 8 * j), sh), 0xF), ty::i32);
            // value[q] by a select tree on q's bits
            std::vector<Value*> level;
            for (int v : llm::kIq4nlValues) level.push_back(b.f32(static_cast<float>(v)));
            for (int bit = 0; bit < 4; ++bit) {
              Value* set = b.cmp(Mode::kNe, b.andc(q, 1 << bit), b.i32(0));
              std::vector<Value*> next;
              for (size_t i = 0; i < level.size(); i += 2) next.push_back(b.select(set, level[i + 1], level[i]));
              level = std::move(next);
            }
            out.push_back(b.mul(d, level[0]));
          }
        return out;
      };
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      // Elements 128 h + 32 k + l0 .. + 15 (l0 0 or 16): 2-bit quants at bits 2k of qs[32 h + l],
      // sub-block 8 h + 2 k + l0 / 16. Q2_K: x = d (sc & 15) q - dmin (sc >> 4); Q3_K: x =
      // d (scale - 32) (q - 4 unless bit 4h + k of hmask[l] is set).
      const bool q3 = t == GgmlType::Q3_K;
      blk = b.convert(b.div(k0, b.i32(256)), ty::i64);
      Value* e0 = b.rem(k0, b.i32(256));
      Value* h = b.div(e0, b.i32(128));
      Value* k = b.rem(b.div(e0, b.i32(32)), b.i32(4));
      Value* l0 = b.rem(e0, b.i32(32));
      Value* sub = b.add(b.add(b.mulc(h, 8), b.mulc(k, 2)), b.div(l0, b.i32(16)));
      auto u8 = [&](Value* off) { return b.load_at(w, body(off), Type::scalar(Scalar::kU8), 1); };
      auto i64 = [&](Value* v) { return b.convert(v, ty::i64); };
      Value* dh = b.load_at(w, body(b.i64(q3 ? 108 : 80)), ty::u16, 2);
      Value* dminh = q3 ? nullptr : b.load_at(w, body(b.i64(82)), ty::u16, 2);
      Value* sc0 = q3 ? u8(b.add(b.i64(96), i64(b.rem(sub, b.i32(8))))) : u8(i64(sub));
      Value* sc1 = q3 ? u8(b.add(b.i64(104), i64(b.rem(sub, b.i32(4))))) : nullptr;
      auto qs = halves8(b.add(b.i64(q3 ? 32 : 16), i64(b.add(b.mulc(h, 32), l0))));
      std::function<std::vector<Value*>()> hm;
      if (q3) hm = halves8(i64(l0));
      return [&b, q3, dh, dminh, sc0, sc1, sub, h, k, qs, hm] {
        Value* d = b.convert(b.bitcast(dh, ty::f16), ty::f32);
        Value* a = b.convert(sc0, ty::i32);
        Value* dl;
        Value* ml = nullptr;
        if (q3) {
          Value* lo = b.select(b.cmp(Mode::kLt, sub, b.i32(8)), b.andc(a, 0xF), b.shrc(a, 4));
          Value* hi = b.andc(b.shr(b.convert(sc1, ty::i32), b.mulc(b.div(sub, b.i32(4)), 2)), 3);
          dl = b.mul(d, b.convert(b.addc(b.bit_or(lo, b.shlc(hi, 4)), -32), ty::f32));
        } else {
          dl = b.mul(d, b.convert(b.andc(a, 0xF), ty::f32));
          ml = b.mul(b.convert(b.bitcast(dminh, ty::f16), ty::f32), b.convert(b.shrc(a, 4), ty::f32));
        }
        Value* sh = b.convert(b.mulc(k, 2), ty::u32);
        Value* hb = b.convert(b.add(b.mulc(h, 4), k), ty::u32);
        const std::vector<Value*> q8 = qs();
        const std::vector<Value*> h8 = q3 ? hm() : std::vector<Value*>{};
        std::vector<Value*> out;
        for (int i = 0; i < 8; ++i)
          for (int j = 0; j < 2; ++j) {
            Value* q = b.bitcast(b.andc(b.shr(b.shrc(q8[static_cast<size_t>(i)], 8 * j), sh), 3), ty::i32);
            if (q3) {
              Value* set = b.andc(b.shr(b.shrc(h8[static_cast<size_t>(i)], 8 * j), hb), 1);
              q = b.sub(q, b.select(b.cmp(Mode::kNe, set, b.c(ty::u32, 0)), b.i32(0), b.i32(4)));
              out.push_back(b.mul(dl, b.convert(q, ty::f32)));
            } else {
              out.push_back(b.sub(b.mul(dl, b.convert(q, ty::f32)), ml));
            }
          }
        return out;
      };
    }
    default: return [] { return std::vector<Value*>{}; };
  }
}

std::vector<Value*> dequant16(Emit& b, GgmlType t, Value* w, const WLayout& L, Value* r, Value* k0) {
  return dequant16_split(b, t, w, L, r, k0)();
}

// The f32 scale d * sc and min dmin * m of both units of a Q4_K pair from its super-block header
// (get_scale_min_k4 for sub-blocks j = 2 pp and 2 pp + 1: bytes j % 4 of the scale words 0, 1, 2).
std::array<std::pair<Value*, Value*>, 2> q4k_pair_scales(Emit& b, Value* hdr, Value* pp) {
  auto f16_bits_to_f32 = [](Emit& e, Value* h) { return e.convert(e.bitcast(h, ty::f16), ty::f32); };
  Value* dd = b.extract(hdr, 0);
  Value* d = f16_bits_to_f32(b, b.convert(b.andc(dd, 0xFFFF), ty::u16));
  Value* dmin = f16_bits_to_f32(b, b.convert(b.shrc(dd, 16), ty::u16));
  Value* lo = b.cmp(Mode::kLt, pp, b.i32(2));
  std::array<std::pair<Value*, Value*>, 2> out;
  for (int h = 0; h < 2; ++h) {
    Value* sh = b.convert(b.addc(b.mulc(b.rem(pp, b.i32(2)), 16), 8 * h), ty::u32);  // 8 (j % 4)
    Value* a = b.shr(b.extract(hdr, 1), sh);
    Value* bb = b.shr(b.extract(hdr, 2), sh);
    Value* c = b.shr(b.extract(hdr, 3), sh);
    Value* sc = b.select(lo, b.andc(a, 63), b.bit_or(b.andc(c, 0xF), b.shlc(b.andc(b.shrc(a, 6), 3), 4)));
    Value* mn = b.select(lo, b.andc(bb, 63), b.bit_or(b.andc(b.shrc(c, 4), 0xF), b.shlc(b.andc(b.shrc(bb, 6), 3), 4)));
    out[static_cast<size_t>(h)] = {b.mul(d, b.convert(sc, ty::f32)), b.mul(dmin, b.convert(mn, ty::f32))};
  }
  return out;
}

}  // namespace loom::kernels::mma
