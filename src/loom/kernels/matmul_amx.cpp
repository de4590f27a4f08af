// The cpp target's prompt matmul on Intel AMX tiles (see matmul_cpu.h). A work item owns 16
// weight rows. It first unpacks its rows' quants, 32 values (a group) at a time, into a scratch
// in the layout AMX's B operand reads (tile row j, column r: quants 4j..4j+3 of row r as one
// i32), with each group's f32 scale (and min) per row. Then per tile of 16 tokens and per group,
// one tile product of the tokens' 32 activation bytes (read in place from the quantized
// activations, one token per tile row) by the rows' 32 quants gives the 16 x 16 exact integer dots,
// and AVX-512 adds them to 16 f32 accumulators (one per token, 16 rows as lanes) times the row
// scales and the token's scale. Rows longer than the scratch holds go in chunks of groups, the
// accumulators kept in the output between chunks.
//
// The integer dots are exact; the float sums are taken per group rather than in the reference's
// lanes, so the results are not bit-identical to llm::ref::matmul (within matmul's tolerance).
#include <algorithm>
#include <string>
#include <vector>

#include "loom/codegen/cpp/host_compiler.h"
#include "loom/kernels/mat_dot.h"
#include "loom/kernels/matmul_cpu.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels {

using ir::Mode;
using ir::Op;
using ir::Scalar;
using ir::Value;
using llm::GgmlType;

namespace {

constexpr int kRows = 16;    // weight rows per work item (the B tile's 16 columns)
constexpr int kToks = 16;    // tokens per tile (the A and C tiles' 16 rows)
constexpr int kGroup = 32;   // values per tile product (the A tile's 32 bytes per row)
constexpr int kBBytes = 512; // one group's B tile: 8 rows of 64 bytes
constexpr int kTileA = 0, kTileB = 1, kTileC = 2;

// Where a format keeps a group's quants and scales.
struct AmxFormat {
  int groups_per_block;  // 1, or 8 for the K-quants' 256-value blocks
  bool has_min;          // Q4_1 (m x s), Q4_K/Q5_K (dmin x mins x sub-block sums)
};

bool amx_format(GgmlType wt, AmxFormat* out) {
  switch (wt) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0: *out = {1, false}; return true;
    case GgmlType::Q4_1: *out = {1, true}; return true;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: *out = {8, true}; return true;
    default: return false;
  }
}

Value* f16_at(Emit& b, Value* base, Value* off) {
  return b.convert(b.bitcast(b.load_at(base, off, ty::s(Scalar::kU16), 2), ty::s(Scalar::kF16)), ty::f32);
}

}  // namespace

bool matmul_amx_takes(const Shape& s) {
  AmxFormat f;
  for (const char* d : {"wtype", "n_tokens", "n_in", "n_out"})
    if (!s.dims.count(d)) return false;
  if (!amx_format(static_cast<GgmlType>(s.at("wtype")), &f)) return false;
  const int64_t per_block = static_cast<int64_t>(f.groups_per_block) * kGroup;
  return s.at("n_tokens") >= kToks && s.at("n_out") % kRows == 0 && s.at("n_in") % per_block == 0 &&
         codegen::cpu_amx_usable();
}

Result<Generated> generate_matmul_cpu_amx(const Shape& s, const Schedule& sch, std::string_view op_name) {
  (void)sch;
  const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
  AmxFormat af;
  if (!amx_format(wt, &af) || !matmul_amx_takes(s))
    return invalid_argument("matmul: amx=1 takes Q4_0, Q4_1, Q8_0, Q4_K or Q5_K with n_tokens >= 16 and n_out a multiple "
                            "of 16, on a CPU whose AMX this process may use (codegen::cpu_amx_usable)");
  const DotFormat f = dot_format(wt);
  const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
  const int64_t nb = n_in / f.block_elems;              // format blocks per row
  const int64_t ng = n_in / kGroup;                     // groups per row
  const int64_t w_row = nb * f.w_bytes, x_row = nb * f.x_bytes;
  const bool kq = af.groups_per_block == 8;
  // Scratch per group: its B tile, 16 row scales and (with mins) 16 row mins.
  const int64_t per_group = kBBytes + 64 + (af.has_min ? 64 : 0);
  const int64_t cs_bytes = kToks * 64;
  int64_t chunk = std::min<int64_t>(ng, (kTokenLaneScratch - cs_bytes) / per_group);
  chunk -= chunk % af.groups_per_block;
  const int64_t n_chunks = (ng + chunk - 1) / chunk;
  const int64_t n_tt = (nt + kToks - 1) / kToks;

  Generated g;
  ir::Kernel* k = g.module.add_kernel(fmt::format("{}_{}_amx", op_name, llm::ggml_type_name(wt)));
  Emit b(*k);
  b.cpu = true;
  Value* w = b.param(ty::gptr(Scalar::kU8), "w");
  Value* xq = b.param(ty::gptr(Scalar::kU8), "xq");
  Value* y = b.param(ty::gptr(Scalar::kF32), "y");
  auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
  const ir::Type i32x16 = ir::Type::vector(Scalar::kI32, 16), f32x16 = ir::Type::vector(Scalar::kF32, 16);
  const ir::Type u32x4 = ir::Type::vector(Scalar::kU32, 4), u32x8 = ir::Type::vector(Scalar::kU32, 8);
  Value* bs = b.alloc_shared(Scalar::kU8, chunk * per_group);
  Value* cs = b.alloc_shared(Scalar::kU8, cs_bytes);
  const int64_t ws_base = chunk * kBBytes, wm_base = ws_base + chunk * 64;

  Value* r0 = b.mul(b.block_id(Mode::kX), i32c(kRows));

  // Group gi's (relative to the chunk) words for row i: word j of the group at byte
  // gi * 512 + j * 64 + i * 4; its scale and min at the row's lane of the group's vectors.
  auto put_words = [&](Value* gi, Value* i, Value* words, int n) {
    Value* base = b.add(b.mul(gi, i32c(kBBytes)), b.mul(i, i32c(4)));
    for (int j = 0; j < n; ++j)
      b.store_at(bs, b.addc(base, 64 * j), b.bitcast(b.extract(words, j), ty::i32), 4);
  };
  auto put_scale = [&](Value* gi, Value* i, Value* scale, Value* min) {
    Value* off = b.add(b.mul(gi, i32c(64)), b.mul(i, i32c(4)));
    b.store_at(bs, b.addc(off, ws_base), scale, 4);
    if (min) b.store_at(bs, b.addc(off, wm_base), min, 4);
  };

  // Unpacks the rows' blocks [bbeg, bend) into the scratch (group indices relative to gbeg).
  auto unpack = [&](Value* bbeg, Value* bend, Value* gbeg) {
    b.for_loop(i32c(0), i32c(kRows), i32c(1), {}, [&](Value* i, std::span<Value* const>) {
      Value* wr = b.offset(w, b.mul(b.convert(b.add(r0, i), ty::s(Scalar::kI64)), b.i64(w_row)));
      b.for_loop(bbeg, bend, i32c(1), {}, [&](Value* blk, std::span<Value* const>) {
        Value* woff = b.mul(blk, i32c(f.w_bytes));
        Value* gi = b.sub(b.mul(blk, i32c(af.groups_per_block)), gbeg);
        if (wt == GgmlType::Q8_0) {
          Value* q = b.bitcast(b.load_at(wr, b.addc(woff, 2), ir::Type::vector(Scalar::kU8, 32), 1), u32x8);
          put_words(gi, i, q, 8);
          put_scale(gi, i, f16_at(b, wr, woff), nullptr);
        } else if (wt == GgmlType::Q4_0 || wt == GgmlType::Q4_1) {
          const int qoff = wt == GgmlType::Q4_0 ? 2 : 4;
          Value* q = b.bitcast(b.load_at(wr, b.addc(woff, qoff), ir::Type::vector(Scalar::kU8, 16), 1), u32x4);
          Value* lo = b.andc(q, 0x0F0F0F0F);
          Value* hi = b.andc(b.shrc(q, 4), 0x0F0F0F0F);
          if (wt == GgmlType::Q4_0) {  // n - 8 in each byte, without borrows: ((n | 0x80) - 8) ^ 0x80
            auto off8 = [&](Value* v) { return b.bit_xor(b.sub(b.bit_or(v, b.c(u32x4, 0x80808080)), b.c(u32x4, 0x08080808)), b.c(u32x4, 0x80808080)); };
            lo = off8(lo);
            hi = off8(hi);
          }
          put_words(gi, i, b.concat(lo, hi), 8);
          put_scale(gi, i, f16_at(b, wr, woff), wt == GgmlType::Q4_1 ? f16_at(b, wr, b.addc(woff, 2)) : nullptr);
        } else {  // Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scales and mins
          const bool q5 = wt == GgmlType::Q5_K;
          Value* d = f16_at(b, wr, woff);
          Value* dmin = f16_at(b, wr, b.addc(woff, 2));
          Value* q[12];
          for (int j = 0; j < 12; ++j) q[j] = b.convert(b.load_at(wr, b.addc(woff, 4 + j), ty::s(Scalar::kU8), 1), ty::i32);
          Value* sc[8];
          Value* mn[8];
          k4_scales_mins(b, q, sc, mn);
          const int qs_off = q5 ? 48 : 16;
          Value* qh = q5 ? b.load_at(wr, b.addc(woff, 16), u32x8, 4) : nullptr;
          for (int c = 0; c < 4; ++c) {
            Value* qq = b.load_at(wr, b.addc(woff, qs_off + 32 * c), u32x8, 4);
            for (int h = 0; h < 2; ++h) {
              Value* v = b.andc(h ? b.shrc(qq, 4) : qq, 0x0F0F0F0F);
              if (q5) v = b.bit_or(v, b.shlc(b.andc(b.shrc(qh, 2 * c + h), 0x01010101), 4));
              const int sb = 2 * c + h;
              Value* gs = b.addc(gi, sb);
              put_words(gs, i, v, 8);
              put_scale(gs, i, b.mul(d, b.convert(sc[sb], ty::f32)), b.mul(dmin, b.convert(mn[sb], ty::f32)));
            }
          }
        }
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
  };

  // The token tiles over groups [gbeg, gend): accumulators from zero (first chunk) or from the
  // output, and back to the output. The last tile ends at the last token; it stores only the
  // tokens the tile before it does not own.
  auto tiles = [&](Value* gbeg, Value* gend, Value* first) {
    b.for_loop(i32c(0), i32c(n_tt), i32c(1), {}, [&](Value* tt, std::span<Value* const>) {
      Value* tstart = b.mul(tt, i32c(kToks));
      Value* t0 = b.min(tstart, i32c(nt - kToks));
      Value* own = b.sub(tstart, t0);  // tokens below this are the previous tile's
      std::vector<Value*> init;
      for (int j = 0; j < kToks; ++j) {
        Value* yo = b.add(b.mul(b.addc(t0, j), i32c(n_out)), r0);
        Value* prev = b.load(y, yo, f32x16, 4);
        init.push_back(b.select(first, b.cf(f32x16, 0), prev));
      }
      Value* xt = b.mul(t0, i32c(x_row));
      auto acc = b.for_loop(gbeg, gend, i32c(1), init, [&](Value* gq, std::span<Value* const> it) {
        // The activation bytes of group gq and their scales, per format.
        Value* blk = kq ? b.shrc(gq, 3) : gq;
        Value* xb = b.add(xt, b.mul(blk, i32c(f.x_bytes)));
        Value* xqoff = kq ? b.add(b.addc(xb, 4), b.shlc(b.andc(gq, 7), 5))
                          : b.addc(xb, f.xtype == GgmlType::Q8_1 ? 4 : 2);
        b.amx_load(kTileA, kToks, kGroup, xq, xqoff, i32c(x_row));
        Value* gi = b.sub(gq, gbeg);
        b.amx_load(kTileB, kGroup / 4, 64, bs, b.mul(gi, i32c(kBBytes)), i32c(64));
        b.amx_zero(kTileC, kToks, 64);
        b.amx_dp(Op::kAmxDpI8, kTileC, kTileA, kTileB);
        b.amx_store(kTileC, kToks, 64, cs, i32c(0), i32c(64));
        Value* ws = b.load_at(bs, b.addc(b.mul(gi, i32c(64)), ws_base), f32x16, 4);
        Value* wm = af.has_min ? b.load_at(bs, b.addc(b.mul(gi, i32c(64)), wm_base), f32x16, 4) : nullptr;
        std::vector<Value*> next;
        for (int j = 0; j < kToks; ++j) {
          Value* xo = b.addc(xb, j * x_row);
          Value* dot = b.convert(b.load_at(cs, i32c(64 * j), i32x16, 64), f32x16);
          Value* a = it[static_cast<size_t>(j)];
          if (kq) {
            // Q8_K: d (f32) per 256 values; the sub-block's sum from its two 16-value bsums.
            Value* dx = b.load_at(xq, xo, ty::f32, 4);
            Value* bo = b.add(b.addc(xo, 260), b.shlc(b.andc(gq, 7), 2));
            Value* bsum = b.add(b.convert(b.load_at(xq, bo, ty::s(Scalar::kI16), 2), ty::i32),
                                b.convert(b.load_at(xq, b.addc(bo, 2), ty::s(Scalar::kI16), 2), ty::i32));
            a = b.fma(dot, b.mul(ws, b.splat(dx, 16)), a);
            a = b.fma(wm, b.splat(b.neg(b.mul(dx, b.convert(bsum, ty::f32))), 16), a);
          } else {
            Value* dx = f16_at(b, xq, xo);
            a = b.fma(dot, b.mul(ws, b.splat(dx, 16)), a);
            if (af.has_min) a = b.fma(wm, b.splat(f16_at(b, xq, b.addc(xo, 2)), 16), a);  // Q8_1's s = d * sum
          }
          next.push_back(a);
        }
        return next;
      });
      for (int j = 0; j < kToks; ++j) {
        b.when(b.cmp(Mode::kGe, i32c(j), own), [&] {
          b.store(y, b.add(b.mul(b.addc(t0, j), i32c(n_out)), r0), acc[static_cast<size_t>(j)], 4);
        });
      }
      return std::vector<Value*>{};
    });
  };

  const int64_t gpb = af.groups_per_block;
  b.for_loop(i32c(0), i32c(n_chunks), i32c(1), {}, [&](Value* kc, std::span<Value* const>) {
    Value* gbeg = b.mul(kc, i32c(chunk));
    Value* gend = b.min(b.addc(gbeg, chunk), i32c(ng));
    unpack(b.div(gbeg, i32c(gpb)), b.div(gend, i32c(gpb)), gbeg);
    tiles(gbeg, gend, b.cmp(Mode::kEq, kc, i32c(0)));
    return std::vector<Value*>{};
  });

  KernelLaunch l;
  l.kernel = k->name;
  l.args = {0, 1, 2};
  l.grid = {static_cast<uint32_t>(n_out / kRows), 1, 1};
  l.block = {1, 1, 1};
  g.launches.push_back(l);
  return g;
}

}  // namespace loom::kernels
