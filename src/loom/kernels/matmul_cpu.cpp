// The cpp target's prompt matmul in register tiles (see matmul_cpu.h). Per block step the tile
// prepares each token's activation block once (shared by the tile's rows) and runs the block
// dot of each (row, token) pair; the pairs of one row read the same weight bytes with the same
// unpacking, which the host compiler computes once per row and step (no store sits between
// them), so a weight block is unpacked once and used for every token of the tile. Q4_1/Q5_1 keep
// a row's min terms as one vector over the tile's tokens.
#include "loom/kernels/matmul_cpu.h"

#include <algorithm>
#include <array>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "loom/base/options.h"
#include "loom/kernels/mat_dot.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels {

using ir::Mode;
using ir::Scalar;
using ir::Value;
using llm::GgmlType;

namespace {
// An f16 at a byte offset as f32 (as mat_dot's loads read a block's scales).
Value* f16_value_at(Emit& b, Value* base, Value* off) {
  Value* bits = b.load_at(base, off, ty::s(Scalar::kU16), 2);
  return b.convert(b.bitcast(bits, ty::s(Scalar::kF16)), ty::f32);
}

// Q4_K/Q5_K in tiles. A row's scales, mins and quants and a token's activation bytes and
// sub-block sums are prepared once per block (not per pair, as mat_dot's step would). A pair's
// lanes are the reference's: each sub-block's dot4 times its 6-bit scale, added in 32 bits (the
// cpp emitter makes each mul + add of a dot4 by a 16-bit scale one vpmaddubsw + vpdpwssd). The
// minimums are one f32x8 product of the row's mins and the token's sub-block sums instead of
// eight scalar multiplies per pair: each product is an integer below 63 * 4096 and a pair of
// them below 2^24, so the f32 arithmetic is exact and equals the reference's 32-bit sums; Q4_K's
// four chains (sub-blocks 2c and 2c+1 each) are the product's halves with the lanes ordered
// 0,2,4,6,1,3,5,7. Bit-identical to mat_dot's step.
struct KTok {
  Value* xd;      // Q8_K d
  Value* y[8];    // sub-block bytes (i32x8)
  Value* bsp;     // sub-block sums (two bsums each) as f32x8 (in kQ4kOrder for Q4_K)
};
constexpr int kQ4kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

KTok k_tok(Emit& b, bool q5, Value* x, Value* xoff) {
  const ir::Type f32x8 = ir::Type::vector(Scalar::kF32, 8);
  // The Q8_K block as mat_dot prepares it: [0] d, [1 + c] chunk c's bytes, [9 + g] bsum g.
  const DotX p = dot_prep_x(b, dot_format(q5 ? GgmlType::Q5_K : GgmlType::Q4_K), x, xoff);
  KTok t;
  t.xd = p.v[0];
  for (int c = 0; c < 8; ++c) t.y[c] = p.v[1 + c];
  Value* const* bs = &p.v[9];
  std::vector<Value*> sums;
  for (int s = 0; s < 8; ++s) {
    const int k = q5 ? s : kQ4kOrder[s];
    sums.push_back(b.add(bs[2 * k], bs[2 * k + 1]));
  }
  t.bsp = b.convert(b.build(sums), f32x8);
  return t;
}

// One (row, token) pair's block step: acc[0] f32x8 lanes, acc[1] Q4_K's f32x4 min chains or
// Q5_K's f32 min sum (mat_dot's accumulators for these types).
std::vector<Value*> k_pair(Emit& b, bool q5, const KRow& r, const KTok& t, std::span<Value* const> acc) {
  const ir::Type i32x8 = ir::Type::vector(Scalar::kI32, 8), f32x8 = ir::Type::vector(Scalar::kF32, 8);
  Value* li = nullptr;
  for (int s = 0; s < 8; ++s) {
    Value* l = b.mul(b.dot4(r.v[s], t.y[s], b.c(i32x8, 0)), b.splat(r.sc[s], 8));
    li = li ? b.add(li, l) : l;
  }
  Value* lanes = b.convert(li, f32x8);
  Value* d = b.mul(t.xd, r.dw);
  Value* dmin = b.mul(b.neg(t.xd), r.dm);
  Value* p = b.mul(r.mn, t.bsp);
  Value* lo = b.build({b.extract(p, 0), b.extract(p, 1), b.extract(p, 2), b.extract(p, 3)});
  Value* hi = b.build({b.extract(p, 4), b.extract(p, 5), b.extract(p, 6), b.extract(p, 7)});
  Value* m4 = b.add(lo, hi);
  Value* min;
  if (q5) {
    Value* tot = b.add(b.add(b.extract(m4, 0), b.extract(m4, 2)), b.add(b.extract(m4, 1), b.extract(m4, 3)));
    min = b.fma(dmin, tot, acc[1]);
  } else {
    min = b.fma(b.splat(dmin, 4), m4, acc[1]);
  }
  return {b.fma(b.splat(d, 8), lanes, acc[0]), min};
}

// A work item's rows [r0, r0 + rows_per_block) below n_out: full tiles of rt rows, then single
// rows (n_out need not be a multiple of the tile); tile(r, rows) emits one.
void for_row_tiles(Emit& b, Value* r0, int64_t rpb, int64_t n_out, int64_t rt,
                   const std::function<void(Value*, int64_t)>& tile) {
  Value* rend = b.min(b.add(r0, b.i32(static_cast<int32_t>(rpb))), b.i32(static_cast<int32_t>(n_out)));
  Value* full_end = b.sub(rend, b.rem(b.sub(rend, r0), b.i32(static_cast<int32_t>(rt))));
  b.for_loop(r0, full_end, b.i32(static_cast<int32_t>(rt)), {}, [&](Value* r, std::span<Value* const>) {
    tile(r, rt);
    return std::vector<Value*>{};
  });
  if (rt > 1)
    b.for_loop(full_end, rend, b.i32(1), {}, [&](Value* r, std::span<Value* const>) {
      tile(r, 1);
      return std::vector<Value*>{};
    });
}

// The sizes both kernels start from, and their kernel (matmul's arguments w, xq, y).
struct MatKernel {
  GgmlType wt;
  DotFormat f;
  int64_t n_in, n_out, nt, nb, w_row, x_row, rpb, rt;
  Generated g;
  ir::Kernel* k = nullptr;
  KernelLaunch launch(uint32_t grid) const {
    KernelLaunch l;
    l.kernel = k->name;
    l.args = {0, 1, 2};
    l.grid = {grid, 1, 1};
    l.block = {1, 1, 1};
    return l;
  }
};
MatKernel mat_kernel(const Shape& s, const Schedule& sch, const std::string& kname_fmt, std::string_view op_name) {
  MatKernel m;
  m.wt = static_cast<GgmlType>(s.at("wtype"));
  m.f = dot_format(m.wt);
  m.n_in = s.at("n_in");
  m.n_out = s.at("n_out");
  m.nt = s.at("n_tokens");
  m.nb = m.n_in / m.f.block_elems;
  m.w_row = m.nb * m.f.w_bytes;
  m.x_row = m.nb * m.f.x_bytes;
  m.rpb = sch.at("rows_per_block");
  m.rt = std::min(sch.at("row_tile"), m.rpb);
  m.k = m.g.module.add_kernel(fmt::format(fmt::runtime(kname_fmt), op_name, llm::ggml_type_name(m.wt)));
  return m;
}

// matmul's arguments w, xq, y as the kernel's parameters.
std::array<Value*, 3> mat_params(Emit& b) {
  return {b.param(ty::gptr(Scalar::kU8), "w"), b.param(ty::gptr(Scalar::kU8), "xq"), b.param(ty::gptr(Scalar::kF32), "y")};
}

}  // namespace

KRow k_row(Emit& b, bool q5, Value* w, Value* woff) {
  const ir::Type u32x8 = ir::Type::vector(Scalar::kU32, 8), f32x8 = ir::Type::vector(Scalar::kF32, 8);
  KRow r;
  r.dw = f16_value_at(b, w, woff);
  r.dm = f16_value_at(b, w, b.addc(woff, 2));
  Value* q[12];
  for (int i = 0; i < 12; ++i) q[i] = b.convert(b.load_at(w, b.addc(woff, 4 + i), ty::s(Scalar::kU8), 1), ty::i32);
  Value* sc[8];
  Value* mn[8];
  k4_scales_mins(b, q, sc, mn);
  std::vector<Value*> m;
  for (int s = 0; s < 8; ++s) {
    r.sc[s] = sc[s];
    r.mi[s] = mn[s];
    m.push_back(mn[q5 ? s : kQ4kOrder[s]]);
  }
  r.mn = b.convert(b.build(m), f32x8);
  const int qs_off = q5 ? 48 : 16;
  Value* qh = q5 ? b.load_at(w, b.addc(woff, 16), u32x8, 4) : nullptr;
  for (int g = 0; g < 4; ++g) {
    Value* qq = b.load_at(w, b.addc(woff, qs_off + 32 * g), u32x8, 4);
    for (int h = 0; h < 2; ++h) {
      Value* v = b.andc(h ? b.shrc(qq, 4) : qq, 0x0F0F0F0F);
      if (q5) v = b.bit_or(v, b.shlc(b.andc(b.shrc(qh, 2 * g + h), 0x01010101), 4));
      r.v[2 * g + h] = b.bitcast(v, ir::Type::vector(Scalar::kI32, 8));
    }
  }
  return r;
}

Result<Generated> generate_matmul_cpu_tiles(const Shape& s, const Schedule& sch, std::string_view op_name) {
  MatKernel m = mat_kernel(s, sch, "{}_{}_tiles", op_name);
  const GgmlType wt = m.wt;
  const DotFormat f = m.f;
  const int64_t nt = m.nt, nb = m.nb, w_row = m.w_row, x_row = m.x_row, rpb = m.rpb, rt = m.rt, n_out = m.n_out;
  const int64_t tt = std::min(sch.at("tok_tile"), nt);
  Emit b(*m.k);
  b.cpu = true;
  auto [w, xq, y] = mat_params(b);
  auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };

  // Q4_1/Q5_1: each pair's min term fma(m_w, s_x, summs) is its own chain, added after the lane
  // reduction; a row keeps its tokens' chains as the lanes of one vector (the tokens' s_x built
  // into a vector once per block), one vector fma per row and block instead of one scalar fma per
  // pair. Lane j is token j's chain, rounded exactly as the scalar one.
  const bool vec_min = (wt == GgmlType::Q4_1 || wt == GgmlType::Q5_1) && tt <= 8;
  const bool q5k = wt == GgmlType::Q5_K, kq = wt == GgmlType::Q4_K || q5k;  // k_row / k_tok / k_pair
  const int min_lanes = tt <= 4 ? 4 : 8;
  const ir::Type min_ty = ir::Type::vector(Scalar::kF32, min_lanes);

  // `rows` rows from r times the tt tokens from t0: rows x tt accumulator sets in the loop.
  auto emit_tile = [&](Value* r, int64_t rows, Value* t0) {
    std::vector<Value*> wr, xr, init;
    for (int64_t i = 0; i < rows; ++i)
      wr.push_back(b.offset(w, b.mul(b.convert(b.add(r, i32c(i)), ty::s(Scalar::kI64)), b.i64(w_row))));
    for (int64_t j = 0; j < tt; ++j) {
      Value* tok = b.add(t0, i32c(j));
      xr.push_back(b.offset(xq, b.mul(b.convert(tok, ty::s(Scalar::kI64)), b.i64(x_row))));
    }
    // Per pair its carried accumulators (vec_min: the lane vector only), then per row the min
    // vector (vec_min).
    size_t per = 0;
    for (int64_t p = 0; p < rows * tt; ++p) {
      std::vector<Value*> z = dot_init(b, f);
      if (vec_min) z.resize(1);
      per = z.size();
      init.insert(init.end(), z.begin(), z.end());
    }
    const size_t mins_at = init.size();
    if (vec_min)
      for (int64_t i = 0; i < rows; ++i) init.push_back(b.cf(min_ty, 0));
    auto acc = b.for_loop(i32c(0), i32c(nb), i32c(1), init, [&](Value* blk, std::span<Value* const> it) {
      Value* xoff = b.mul(blk, i32c(f.x_bytes));
      Value* woff = b.mul(blk, i32c(f.w_bytes));
      if (kq) {
        std::vector<KTok> ts;
        for (int64_t j = 0; j < tt; ++j) ts.push_back(k_tok(b, q5k, xr[static_cast<size_t>(j)], xoff));
        std::vector<Value*> next;
        for (int64_t i = 0; i < rows; ++i) {
          const KRow kr = k_row(b, q5k, wr[static_cast<size_t>(i)], woff);
          for (int64_t j = 0; j < tt; ++j) {
            auto part = k_pair(b, q5k, kr, ts[static_cast<size_t>(j)], it.subspan(static_cast<size_t>(i * tt + j) * per, per));
            next.insert(next.end(), part.begin(), part.end());
          }
        }
        return next;
      }
      std::vector<DotX> xs;
      for (int64_t j = 0; j < tt; ++j) xs.push_back(dot_prep_x(b, f, xr[static_cast<size_t>(j)], xoff));
      Value* svec = nullptr;
      if (vec_min) {
        // Q8_1's s of each token (DotX v[3]), zero in the lanes past the tile.
        std::vector<Value*> sl;
        for (int64_t j = 0; j < min_lanes; ++j) sl.push_back(j < tt ? xs[static_cast<size_t>(j)].v[3] : b.f32(0));
        svec = b.build(sl);
      }
      std::vector<Value*> next;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < tt; ++j) {
          const size_t p = static_cast<size_t>(i * tt + j);
          if (vec_min) {
            // The lanes' step; the scalar min chain it also returns is left unused.
            const std::vector<Value*> a = {it[p], b.f32(0)};
            next.push_back(dot_step(b, f, wr[static_cast<size_t>(i)], woff, xs[static_cast<size_t>(j)], a)[0]);
          } else {
            auto part =
                dot_step(b, f, wr[static_cast<size_t>(i)], woff, xs[static_cast<size_t>(j)], it.subspan(p * per, per));
            next.insert(next.end(), part.begin(), part.end());
          }
        }
      if (vec_min)
        for (int64_t i = 0; i < rows; ++i) {
          Value* m = f16_value_at(b, wr[static_cast<size_t>(i)], b.add(woff, i32c(2)));
          next.push_back(b.fma(b.splat(m, min_lanes), svec, it[mins_at + static_cast<size_t>(i)]));
        }
      return next;
    });
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < tt; ++j) {
        const size_t p = static_cast<size_t>(i * tt + j);
        Value* v;
        if (vec_min) {
          const std::vector<Value*> a = {acc[p], b.extract(acc[mins_at + static_cast<size_t>(i)], static_cast<int>(j))};
          v = dot_finish(b, f, a);
        } else {
          v = dot_finish(b, f, std::span<Value* const>(acc).subspan(p * per, per));
        }
        Value* yrow = b.offset(y, b.mul(b.add(t0, i32c(j)), i32c(n_out)));
        b.store(yrow, b.add(r, i32c(i)), v);
      }
  };

  Value* r0 = b.mul(b.block_id(Mode::kX), i32c(rpb));
  // Token tiles; the last one moves back to end at the last token (it recomputes a few outputs
  // of the tile before it, in this thread, with the same result).
  b.for_loop(i32c(0), i32c(nt), i32c(tt), {}, [&](Value* tok, std::span<Value* const>) {
    Value* t0 = b.min(tok, i32c(nt - tt));
    for_row_tiles(b, r0, rpb, n_out, rt, [&](Value* r, int64_t rows) { emit_tile(r, rows, t0); });
    return std::vector<Value*>{};
  });
  m.g.launches.push_back(m.launch(static_cast<uint32_t>((n_out + rpb - 1) / rpb)));
  return std::move(m.g);
}


bool cpu_matmul_summed(GgmlType wt) {
  const std::string mode = opt::get_string(opt::Opt::kCpuMatmul);
  return mode == "summed" || (mode == "auto" && wt == GgmlType::Q4_0);
}

bool cpu_matmul_amx() { return opt::get_string(opt::Opt::kCpuMatmul) == "auto"; }

int64_t token_lane_scratch_per_block(GgmlType wt, bool exact) {
  const bool offset = wt == GgmlType::Q4_0 || wt == GgmlType::Q5_0;
  return (offset && exact ? 18 : 10) * 32;
}

// Token lanes (see matmul_cpu.h). Scratch per block and group of 8 tokens, 32 bytes a vector:
// [0..7] chunk c of the 8 tokens (lane l = token l's bytes 4c..4c+3), [8] the tokens' d as
// f32x8, [9] Q4_1/Q5_1: the tokens' s (f32x8); Q4_0/Q5_0: [9] -o x the tokens' byte sums
// (whole-block sums), or [10 + c] -o x their chunk c's byte sums (exact: the reference's lanes).
Result<Generated> generate_matmul_cpu_tokens(const Shape& s, const Schedule& sch, std::string_view op_name) {
  const bool exact = sch.at("tok_lanes") == 1;
  MatKernel m = mat_kernel(s, sch, exact ? "{}_{}_tokens" : "{}_{}_tokens_sum", op_name);
  const GgmlType wt = m.wt;
  const DotFormat f = m.f;
  const int64_t n_in = m.n_in, n_out = m.n_out, nt = m.nt, nb = m.nb, w_row = m.w_row, x_row = m.x_row;
  const int64_t rpb = m.rpb, rt = m.rt;
  if (nt < 8) return invalid_argument("matmul token lanes: n_tokens={} below 8", nt);
  const bool has_m = wt == GgmlType::Q4_1 || wt == GgmlType::Q5_1;
  const bool q5 = wt == GgmlType::Q5_0 || wt == GgmlType::Q5_1;
  const bool offset = wt == GgmlType::Q4_0 || wt == GgmlType::Q5_0;
  const int64_t kVec = 32, kPer = token_lane_scratch_per_block(wt, exact);  // scratch bytes per (block, group)
  // Per row and group of 8 tokens (lane l: token t0 + 8 g + l) one f32x8 accumulator
  // (whole-block sums), or (exact) the reference's eight lane accumulators, one per chunk, and for
  // Q4_1/Q5_1 its separate min chain.
  const size_t per = exact ? (has_m ? 9 : 8) : 1;
  // Groups of 8 tokens: as many as tok_tile asks for and the scratch holds. Rows longer than the
  // scratch holds for one group go in K-chunks of kb blocks: each chunk's activations are
  // transposed in turn, and the rows' accumulators wait in a second scratch between chunks
  // (stored and loaded unchanged, so the arithmetic is the same).
  int64_t groups = std::max<int64_t>(1, std::min(sch.at("tok_tile"), nt) / 8);
  while (groups > 1 && nb * groups * kPer > kTokenLaneScratch) --groups;
  const bool chunked = nb * groups * kPer > kTokenLaneScratch;
  const int64_t acc_bytes = chunked ? rpb * static_cast<int64_t>(per) * kVec : 0;
  const int64_t kb = chunked ? (kTokenLaneScratch - acc_bytes) / kPer : nb;
  if (kb < 1)
    return invalid_argument("matmul token lanes: rows_per_block={} leaves no scratch for n_in={}", rpb, n_in);
  const int64_t n_kc = (nb + kb - 1) / kb;
  const int64_t tt = 8 * groups;
  const int64_t n_tc = (nt + tt - 1) / tt;
  const int64_t n_rc = (n_out + rpb - 1) / rpb;
  Emit b(*m.k);
  b.cpu = true;
  auto [w, xq, y] = mat_params(b);
  auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
  const ir::Type i32x8 = ir::Type::vector(Scalar::kI32, 8), f32x8 = ir::Type::vector(Scalar::kF32, 8);
  Value* scr = b.alloc_shared(Scalar::kU8, kb * groups * kPer);
  Value* acs = chunked ? b.alloc_shared(Scalar::kU8, acc_bytes) : nullptr;
  const int o_shift = q5 ? 4 : 3;  // -o = -8 (Q4_0) or -16 (Q5_0)

  // Work item: rows_per_block rows times tok_tile tokens, the token chunks of a row chunk in
  // consecutive items (a thread's items reuse the chunk's weights from cache).
  Value* bid = b.block_id(Mode::kX);
  Value* rc = b.div(bid, i32c(n_tc));
  Value* t0 = b.min(b.mul(b.rem(bid, i32c(n_tc)), i32c(tt)), i32c(nt - tt));
  const int xq_off = f.xtype == GgmlType::Q8_1 ? 4 : 2;

  // The tokens' activation blocks kbeg..kend, transposed into the scratch (block blk at blk - kbeg).
  auto transpose = [&](Value* kbeg, Value* kend) {
  b.for_loop(kbeg, kend, i32c(1), {}, [&](Value* blk, std::span<Value* const>) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      std::vector<Value*> xo;
      for (int l = 0; l < 8; ++l) {
        Value* tok = b.add(t0, i32c(8 * gi + l));
        xo.push_back(b.add(b.mul(tok, i32c(x_row)), b.mul(blk, i32c(f.x_bytes))));
      }
      Value* sb = b.mul(b.add(b.mul(b.sub(blk, kbeg), i32c(groups)), i32c(gi)), i32c(kPer));
      Value* bsum = nullptr;
      for (int c = 0; c < 8; ++c) {
        std::vector<Value*> ws;
        for (int l = 0; l < 8; ++l) ws.push_back(b.load_at(xq, b.addc(xo[l], xq_off + 4 * c), ty::i32, 2));
        Value* xc = b.build(ws);
        b.store_at(scr, b.addc(sb, kVec * c), xc, 16);
        if (offset && exact) {
          Value* cs = b.dot4(b.c(i32x8, 0x01010101), xc, b.c(i32x8, 0));
          b.store_at(scr, b.addc(sb, kVec * (10 + c)), b.sub(b.c(i32x8, 0), b.shlc(cs, o_shift)), 16);
        } else if (offset) {
          bsum = b.dot4(b.c(i32x8, 0x01010101), xc, bsum ? bsum : b.c(i32x8, 0));
        }
      }
      std::vector<Value*> ds, ss;
      for (int l = 0; l < 8; ++l) {
        ds.push_back(f16_value_at(b, xq, xo[l]));
        if (has_m) ss.push_back(f16_value_at(b, xq, b.addc(xo[l], 2)));
      }
      b.store_at(scr, b.addc(sb, 8 * kVec), b.build(ds), 16);
      if (offset && !exact) b.store_at(scr, b.addc(sb, 9 * kVec), b.sub(b.c(i32x8, 0), b.shlc(bsum, o_shift)), 16);
      if (has_m) b.store_at(scr, b.addc(sb, 9 * kVec), b.build(ss), 16);
    }
    return std::vector<Value*>{};
  });
  };

  // Per (row, group) its accumulators finished (exact: dot_finish per lane, hsum_float_8's order
  // over the eight lane accumulators, then the min chain) and stored as the tokens' outputs.
  auto finish = [&](Value* row, int64_t gi, std::span<Value* const> a) {
    Value* v = a[0];
    if (exact) {
      Value* h[4];
      for (int c = 0; c < 4; ++c) h[c] = b.add(a[4 + static_cast<size_t>(c)], a[static_cast<size_t>(c)]);
      v = b.add(b.add(h[0], h[2]), b.add(h[1], h[3]));
      if (has_m) v = b.add(v, a[8]);
    }
    for (int l = 0; l < 8; ++l) {
      Value* yrow = b.offset(y, b.mul(b.add(t0, i32c(8 * gi + l)), i32c(n_out)));
      b.store(yrow, row, b.extract(v, l));
    }
  };
  // Byte offset of accumulator j of row r in the accumulator scratch (chunked: one group).
  Value* r0 = b.mul(rc, i32c(rpb));
  auto acc_off = [&](Value* r, size_t j) {
    return b.mul(b.add(b.mul(b.sub(r, r0), i32c(static_cast<int64_t>(per))), i32c(static_cast<int64_t>(j))), i32c(kVec));
  };

  // `rows` rows from r over blocks kbeg..kend: rows x groups x per accumulators, from zero (or,
  // chunked, from the accumulator scratch, and back there after).
  auto emit_tile = [&](Value* r, int64_t rows, Value* kbeg, Value* kend) {
    std::vector<Value*> wr, init;
    for (int64_t i = 0; i < rows; ++i)
      wr.push_back(b.offset(w, b.mul(b.convert(b.add(r, i32c(i)), ty::s(Scalar::kI64)), b.i64(w_row))));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t p = 0; p < groups * static_cast<int64_t>(per); ++p)
        init.push_back(chunked ? b.load_at(acs, acc_off(b.add(r, i32c(i)), static_cast<size_t>(p)), f32x8, 16)
                               : b.cf(f32x8, 0));
    auto acc = b.for_loop(kbeg, kend, i32c(1), init, [&](Value* blk, std::span<Value* const> it) {
      Value* woff = b.mul(blk, i32c(f.w_bytes));
      // Per row: the block's quants with lane c = chunk c (as dot_step reads them), d and m.
      std::vector<Value*> q, dw, mw;
      for (int64_t i = 0; i < rows; ++i) {
        Value* wi = wr[static_cast<size_t>(i)];
        dw.push_back(f16_value_at(b, wi, woff));
        if (has_m) mw.push_back(f16_value_at(b, wi, b.addc(woff, 2)));
        q.push_back(dot_quants(b, f, wi, woff));
      }
      std::vector<Value*> next(it.begin(), it.end());
      for (int64_t gi = 0; gi < groups; ++gi) {
        Value* sb = b.mul(b.add(b.mul(b.sub(blk, kbeg), i32c(groups)), i32c(gi)), i32c(kPer));
        Value* xc[8];
        Value* neg[8] = {};
        for (int c = 0; c < 8; ++c) {
          xc[c] = b.load_at(scr, b.addc(sb, kVec * c), i32x8, 16);
          if (offset && exact) neg[c] = b.load_at(scr, b.addc(sb, kVec * (10 + c)), i32x8, 16);
        }
        Value* xd = b.load_at(scr, b.addc(sb, 8 * kVec), f32x8, 16);
        Value* x9 = offset && !exact ? b.load_at(scr, b.addc(sb, 9 * kVec), i32x8, 16)
                   : has_m ? b.load_at(scr, b.addc(sb, 9 * kVec), f32x8, 16) : nullptr;
        // Q8_0's signed weights: the activation bytes without -128 where a row uses them (the
        // sign trick; clamped at the use, the host compiler keeps the row's accumulators in
        // registers rather than eight clamped chunks).
        auto xv = [&](int c) { return wt == GgmlType::Q8_0 ? q8_bytes_no_min(b, xc[c]) : xc[c]; };
        for (int64_t i = 0; i < rows; ++i) {
          Value* qi = q[static_cast<size_t>(i)];
          const size_t p = static_cast<size_t>(i * groups + gi) * per;
          // d_w * d_x per token, the product the reference's step forms.
          Value* dd = b.mul(b.splat(dw[static_cast<size_t>(i)], 8), xd);
          if (exact) {
            for (int c = 0; c < 8; ++c) {
              Value* lane = b.dot4(b.splat(b.extract(qi, c), 8), xv(c), offset ? neg[c] : b.c(i32x8, 0));
              next[p + static_cast<size_t>(c)] = b.fma(dd, b.convert(lane, f32x8), next[p + static_cast<size_t>(c)]);
            }
            if (has_m) next[p + 8] = b.fma(b.splat(mw[static_cast<size_t>(i)], 8), x9, next[p + 8]);
            continue;
          }
          Value* sum = offset ? x9 : b.c(i32x8, 0);
          for (int c = 0; c < 8; ++c) sum = b.dot4(b.splat(b.extract(qi, c), 8), xv(c), sum);
          Value* a = b.fma(dd, b.convert(sum, f32x8), next[p]);
          if (has_m) a = b.fma(b.splat(mw[static_cast<size_t>(i)], 8), x9, a);
          next[p] = a;
        }
      }
      return next;
    });
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t gi = 0; gi < groups; ++gi) {
        const size_t p = static_cast<size_t>(i * groups + gi) * per;
        if (!chunked) {
          finish(b.add(r, i32c(i)), gi, std::span<Value* const>(acc).subspan(p, per));
          continue;
        }
        for (size_t j = 0; j < per; ++j) b.store_at(acs, acc_off(b.add(r, i32c(i)), j), acc[p + j], 16);
      }
  };

  if (!chunked) {
    transpose(i32c(0), i32c(nb));
    for_row_tiles(b, r0, rpb, n_out, rt, [&](Value* r, int64_t rows) { emit_tile(r, rows, i32c(0), i32c(nb)); });
  } else {
    Value* rend = b.min(b.add(r0, i32c(rpb)), i32c(n_out));
    b.for_loop(r0, rend, i32c(1), {}, [&](Value* r, std::span<Value* const>) {
      for (size_t j = 0; j < per; ++j) b.store_at(acs, acc_off(r, j), b.cf(f32x8, 0), 16);
      return std::vector<Value*>{};
    });
    b.for_loop(i32c(0), i32c(n_kc), i32c(1), {}, [&](Value* kc, std::span<Value* const>) {
      Value* kbeg = b.mul(kc, i32c(kb));
      Value* kend = b.min(b.add(kbeg, i32c(kb)), i32c(nb));
      transpose(kbeg, kend);
      for_row_tiles(b, r0, rpb, n_out, rt, [&](Value* r, int64_t rows) { emit_tile(r, rows, kbeg, kend); });
      return std::vector<Value*>{};
    });
    b.for_loop(r0, rend, i32c(1), {}, [&](Value* r, std::span<Value* const>) {
      std::vector<Value*> a;
      for (size_t j = 0; j < per; ++j) a.push_back(b.load_at(acs, acc_off(r, j), f32x8, 16));
      finish(r, 0, a);
      return std::vector<Value*>{};
    });
  }
  m.g.launches.push_back(m.launch(static_cast<uint32_t>(n_rc * n_tc)));
  return std::move(m.g);
}

}  // namespace loom::kernels
