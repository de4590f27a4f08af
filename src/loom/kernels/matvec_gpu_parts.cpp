// matvec_gpu's weight and activation access primitives (matvec_gpu_parts.h): the unit plans, the
// activation staging, and the per-format block dot products.
#include "loom/kernels/matvec_gpu_parts.h"

#include <algorithm>

#include "loom/kernels/mat_dot.h"

namespace loom::kernels::matvec_gpu_detail {

namespace {

int pow2_align(int64_t bytes) {
  for (int a : {16, 8, 4, 2})
    if (bytes % a == 0) return a;
  return 1;
}

UnitPlan unit_plan(const WFormat& f, int64_t nb) {
  const int64_t row_bytes = nb * f.block_bytes;
  UnitPlan best;
  best.align = 0;
  // The widest loads first, then the fewest blocks per unit (more lanes share a row).
  for (int u : {1, 2, 4, 8}) {
    if (nb % u) continue;
    const int a = std::min(pow2_align(u * f.block_bytes), pow2_align(row_bytes));
    if (a > best.align) best = {u, a};
  }
  return best;
}

Value* i32_of(Emit& b, Value* u) { return b.bitcast(u, kI32); }

Value* nib_lo(Emit& b, Value* w) { return i32_of(b, b.andc(w, 0x0F0F0F0F)); }
Value* nib_hi(Emit& b, Value* w) { return i32_of(b, b.andc(b.shrc(w, 4), 0x0F0F0F0F)); }

}  // namespace

bool w_format(GgmlType t, WFormat* f) {
  switch (t) {
    case GgmlType::Q4_0: *f = {t, GgmlType::Q8_0, 32, 18}; return true;
    case GgmlType::Q4_1: *f = {t, GgmlType::Q8_1, 32, 20}; return true;
    case GgmlType::Q8_0: *f = {t, GgmlType::Q8_0, 32, 34}; return true;
    case GgmlType::Q4_K: *f = {t, GgmlType::Q8_K, 256, 144}; return true;
    case GgmlType::Q6_K: *f = {t, GgmlType::Q8_K, 256, 210}; return true;
    default: return false;
  }
}

bool planar_of(const Shape& s) {
  auto it = s.dims.find("planar");
  return it != s.dims.end() && it->second != 0;
}

UnitPlan plan_of(const WFormat& f, int64_t nb, bool planar) { return planar ? UnitPlan{1, 16} : unit_plan(f, nb); }

int64_t staged_bytes(GgmlType xt, int64_t nxb, int64_t unit_blocks, bool planar) {
  const int64_t pad = planar ? 24 : (nxb / unit_blocks + 1) * 24;
  if (xt == GgmlType::Q8_K) return nxb * (256 + 4 + 64) + pad;
  return nxb * (32 + 4 + 4) + pad;
}

StagedX alloc_x(Emit& b, GgmlType xt, int64_t blocks, int unit_blocks, bool planar) {
  StagedX sx;
  const bool qk = xt == GgmlType::Q8_K;
  sx.words_per_block = qk ? 64 : 8;
  sx.sums_per_block = qk ? 16 : 1;
  if (planar) {
    sx.planar = blocks;
    sx.q = b.alloc_shared(Scalar::kI32, blocks * sx.words_per_block);
    sx.d = b.alloc_shared(Scalar::kF32, blocks);
    sx.s = b.alloc_shared(Scalar::kI32, blocks * sx.sums_per_block);
    return sx;
  }
  while ((1 << sx.unit_shift) < unit_blocks) ++sx.unit_shift;
  const int64_t units = blocks / unit_blocks + 1;
  sx.q = b.alloc_shared(Scalar::kI32, blocks * sx.words_per_block + 4 * units);
  sx.d = b.alloc_shared(Scalar::kF32, blocks + units);
  sx.s = b.alloc_shared(Scalar::kI32, blocks * sx.sums_per_block + units);
  return sx;
}

void stage_x(Emit& b, const StagedX& sx, GgmlType xt, Value* xq, int64_t nxb, int64_t xrow, int64_t t0, int64_t count,
             Value* tid, Value* nthreads) {
  const bool qk = xt == GgmlType::Q8_K;
  const int xbytes = qk ? 292 : xt == GgmlType::Q8_1 ? 36 : 34;
  Value* nxbv = b.i32(static_cast<int32_t>(nxb));
  b.for_loop(tid, b.i32(static_cast<int32_t>(count * nxb)), nthreads, {}, [&](Value* xb, std::span<Value* const>) {
    Value* tok = b.div(xb, nxbv);
    Value* off = b.add(b.mul(b.addc(tok, t0), b.i32(static_cast<int32_t>(xrow))),
                       b.mul(b.sub(xb, b.mul(tok, nxbv)), b.i32(xbytes)));
    if (qk) {
      b.store(sx.d, sx.di(b, xb), b.load_at(xq, off, kF32, 4));
      if (sx.planar) {
        for (int c = 0; c < 16; ++c)
          b.store(sx.q, sx.qc(b, xb, c), b.load_at(xq, b.addc(off, 4 + 16 * c), Type::vector(Scalar::kI32, 4), 4), 16);
      } else {
        for (int j = 0; j < 4; ++j) {
          Value* q = b.load_at(xq, b.addc(off, 4 + 64 * j), Type::vector(Scalar::kI32, 16), 4);
          b.store(sx.q, b.addc(sx.qi(b, xb), 16 * j), q, 16);
        }
      }
      Value* bs = b.convert(b.load_at(xq, b.addc(off, 260), Type::vector(Scalar::kI16, 16), 2),
                            Type::vector(Scalar::kI32, 16));
      if (sx.planar) {
        for (int k = 0; k < 16; ++k) b.store(sx.s, sx.si(b, xb, k), b.extract(bs, k));
      } else {
        b.store(sx.s, sx.si(b, xb, 0), bs, 4);
      }
    } else {
      const bool q81 = xt == GgmlType::Q8_1;
      b.store(sx.d, sx.di(b, xb), b.load_f16(xq, off));
      std::vector<Value*> qw;  // the 8 quant words
      if (sx.planar) {
        for (int c = 0; c < 2; ++c) {
          Value* q = b.load_at(xq, b.addc(off, (q81 ? 4 : 2) + 16 * c), Type::vector(Scalar::kI32, 4), q81 ? 4 : 2);
          b.store(sx.q, sx.qc(b, xb, c), q, 16);
          for (int i = 0; i < 4; ++i) qw.push_back(b.extract(q, i));
        }
      } else {
        Value* q = b.load_at(xq, b.addc(off, q81 ? 4 : 2), Type::vector(Scalar::kI32, 8), q81 ? 4 : 2);
        b.store(sx.q, sx.qi(b, xb), q, 16);
        for (int i = 0; i < 8; ++i) qw.push_back(b.extract(q, i));
      }
      if (q81) {
        b.store(sx.s, sx.si(b, xb, 0), b.bitcast(b.load_f16(xq, b.addc(off, 2)), kI32));
      } else {
        Value* ones = b.i32(0x01010101);
        Value* sum = b.i32(0);
        for (int i = 0; i < 8; ++i) sum = b.dot4(qw[static_cast<size_t>(i)], ones, sum);
        b.store(sx.s, sx.si(b, xb, 0), sum);
      }
    }
    return std::vector<Value*>{};
  });
}

std::vector<Value*> x_words(Emit& b, const StagedX& sx, Value* xb, int first, int count) {
  std::vector<Value*> out;
  Value* base = sx.planar ? nullptr : sx.qi(b, xb);
  for (int i = first; i < first + count; i += 4) {
    Value* v = b.load(sx.q, sx.planar ? sx.qc(b, xb, i / 4) : b.addc(base, i), Type::vector(Scalar::kI32, 4), 16);
    for (int l = 0; l < 4; ++l) out.push_back(b.extract(v, l));
  }
  return out;
}

Value* block_dot(Emit& b, const WFormat& f, Window& win, int o, const StagedX& sx, Value* xb,
                 const std::vector<Value*>& xw, Value* acc) {
  switch (f.wtype) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const bool q41 = f.wtype == GgmlType::Q4_1;
      const int qs = q41 ? 4 : 2;
      Value* isum = b.i32(0);
      for (int i = 0; i < 4; ++i) {
        Value* w = win.word(o + qs + 4 * i);
        isum = b.dot4(nib_lo(b, w), xw[static_cast<size_t>(i)], isum);
        isum = b.dot4(nib_hi(b, w), xw[static_cast<size_t>(4 + i)], isum);
      }
      Value* dx = b.load(sx.d, sx.di(b, xb));
      Value* d = b.mul(win.f16(o), dx);
      if (!q41) {
        isum = b.sub(isum, b.mulc(b.load(sx.s, sx.si(b, xb, 0)), 8));
        return b.fma(d, b.convert(isum, kF32), acc);
      }
      Value* s = b.bitcast(b.load(sx.s, sx.si(b, xb, 0)), kF32);
      acc = b.fma(win.f16(o + 2), s, acc);
      return b.fma(d, b.convert(isum, kF32), acc);
    }
    case GgmlType::Q8_0: {
      Value* isum = b.i32(0);
      for (int i = 0; i < 8; ++i) isum = b.dot4(i32_of(b, win.word(o + 2 + 4 * i)), xw[static_cast<size_t>(i)], isum);
      Value* d = b.mul(win.f16(o), b.load(sx.d, sx.di(b, xb)));
      return b.fma(d, b.convert(isum, kF32), acc);
    }
    case GgmlType::Q4_K: {
      Value* dx = b.load(sx.d, sx.di(b, xb));
      Value* d = b.mul(dx, win.f16(o));
      Value* dmin = b.mul(b.neg(dx), win.f16(o + 2));
      Value* q[12];
      for (int i = 0; i < 12; ++i) {
        Value* wd = win.word(o + 4 + 4 * (i / 4));
        q[i] = i32_of(b, b.andc(b.shrc(wd, 8 * (i % 4)), 0xFF));
      }
      Value* sc[8];
      Value* mn[8];
      k4_scales_mins(b, q, sc, mn);
      Value* isum = b.i32(0);
      for (int j = 0; j < 4; ++j) {  // 64-element chunks: low nibbles = sub-block 2j, high = 2j+1
        Value* dlo = b.i32(0);
        Value* dhi = b.i32(0);
        for (int k = 0; k < 8; ++k) {
          Value* w = win.word(o + 16 + 32 * j + 4 * k);
          dlo = b.dot4(nib_lo(b, w), xw[static_cast<size_t>(16 * j + k)], dlo);
          dhi = b.dot4(nib_hi(b, w), xw[static_cast<size_t>(16 * j + 8 + k)], dhi);
        }
        isum = b.add(isum, b.add(b.mul(sc[2 * j], dlo), b.mul(sc[2 * j + 1], dhi)));
      }
      Value* bsb = sx.planar ? nullptr : sx.si(b, xb, 0);
      auto bsum = [&](int k) { return b.load(sx.s, sx.planar ? sx.si(b, xb, k) : b.addc(bsb, k)); };
      Value* msum = b.i32(0);
      for (int s = 0; s < 8; ++s) {
        Value* bs = b.add(bsum(2 * s), bsum(2 * s + 1));
        msum = b.add(msum, b.mul(mn[s], bs));
      }
      acc = b.fma(d, b.convert(isum, kF32), acc);
      return b.fma(dmin, b.convert(msum, kF32), acc);
    }
    case GgmlType::Q6_K: {
      Value* dot[16];
      for (int g = 0; g < 16; ++g) dot[g] = b.i32(0);
      for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 8; ++w) {
          Value* qa = win.word(o + 64 * h + 4 * w);
          Value* qb = win.word(o + 64 * h + 32 + 4 * w);
          Value* qh = win.word(o + 128 + 32 * h + 4 * w);
          auto hi2 = [&](int sh) { return b.shlc(b.andc(sh ? b.shrc(qh, sh) : qh, 0x03030303), 4); };
          Value* q1 = i32_of(b, b.bit_or(b.andc(qa, 0x0F0F0F0F), hi2(0)));
          Value* q2 = i32_of(b, b.bit_or(b.andc(qb, 0x0F0F0F0F), hi2(2)));
          Value* q3 = i32_of(b, b.bit_or(b.andc(b.shrc(qa, 4), 0x0F0F0F0F), hi2(4)));
          Value* q4 = i32_of(b, b.bit_or(b.andc(b.shrc(qb, 4), 0x0F0F0F0F), hi2(6)));
          const int g = 8 * h + w / 4;
          dot[g] = b.dot4(q1, xw[static_cast<size_t>(32 * h + w)], dot[g]);
          dot[g + 2] = b.dot4(q2, xw[static_cast<size_t>(32 * h + 8 + w)], dot[g + 2]);
          dot[g + 4] = b.dot4(q3, xw[static_cast<size_t>(32 * h + 16 + w)], dot[g + 4]);
          dot[g + 6] = b.dot4(q4, xw[static_cast<size_t>(32 * h + 24 + w)], dot[g + 6]);
        }
      Value* bsb = sx.planar ? nullptr : sx.si(b, xb, 0);
      Value* isum = b.i32(0);
      for (int g = 0; g < 16; ++g) {
        Value* sw = i32_of(b, win.word(o + 192 + 4 * (g / 4)));
        Value* sc = b.shrc(b.shlc(sw, 24 - 8 * (g % 4)), 24);  // signed byte g % 4
        Value* corr = b.mulc(b.load(sx.s, sx.planar ? sx.si(b, xb, g) : b.addc(bsb, g)), 32);
        isum = b.add(isum, b.mul(sc, b.sub(dot[g], corr)));
      }
      Value* d = b.mul(b.load(sx.d, sx.di(b, xb)), win.f16(o + 208));
      return b.fma(d, b.convert(isum, kF32), acc);
    }
    default:
      return acc;
  }
}

}  // namespace loom::kernels::matvec_gpu_detail
