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
constexpr int kTileA = 0, kTileB = 1, kTileC = 2;

// Where a format keeps a group's quants and scales.
struct AmxFormat {
  int groups_per_block;  // 1, or the K-quants' sub-blocks per 256-value block (8; Q6_K 16)
  bool has_min;          // Q4_1 (m x s), Q4_K/Q5_K (dmin x mins x sub-block sums)
  int group = 32;        // values per group (one tile product): 32, Q6_K's 16
};

bool amx_format(GgmlType wt, AmxFormat* out) {
  switch (wt) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: *out = {1, false}; return true;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: *out = {1, true}; return true;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: *out = {8, true}; return true;
    case GgmlType::Q6_K: *out = {16, false, 16}; return true;
    default: return false;
  }
}


}  // namespace

bool matmul_amx_takes(const Shape& s) {
  AmxFormat f;
  for (const char* d : {"wtype", "n_tokens", "n_in", "n_out"})
    if (!s.dims.count(d)) return false;
  if (!amx_format(static_cast<GgmlType>(s.at("wtype")), &f)) return false;
  const int64_t per_block = static_cast<int64_t>(f.groups_per_block) * f.group;
  return s.at("n_tokens") >= kToks && s.at("n_out") % kRows == 0 && s.at("n_in") % per_block == 0 &&
         codegen::cpu_amx_usable();
}

Result<Generated> generate_matmul_cpu_amx(const Shape& s, const Schedule& sch, std::string_view op_name) {
  (void)sch;
  const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
  AmxFormat af;
  if (!amx_format(wt, &af) || !matmul_amx_takes(s))
    return invalid_argument("matmul: tok_lanes=3 (AMX) takes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K with n_tokens >= 16 and n_out a multiple "
                            "of 16, on a CPU whose AMX this process may use (codegen::cpu_amx_usable)");
  const DotFormat f = dot_format(wt);
  const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
  const int64_t nb = n_in / f.block_elems;              // format blocks per row
  const int kGroup = af.group;                          // values per group
  const int64_t kBBytes = kGroup / 4 * 64;              // one group's B tile: group / 4 rows of 64 bytes
  const int64_t ng = n_in / kGroup;                     // groups per row
  const int64_t w_row = nb * f.w_bytes, x_row = nb * f.x_bytes;
  const bool kq = af.groups_per_block > 1;   // Q8_K activations: d per block, sums per 16 values
  const bool kmin = kq && af.has_min;        // Q4_K/Q5_K's min tiles
  const int gpb_shift = af.groups_per_block == 16 ? 4 : 3;
  // Groups go in steps of `step` (the K-quants' 8 sub-blocks of a block; else the most of 8, 6,
  // 4, 3, 2 that divides the row): per step the tile products land in a scratch, one 1 KiB C tile
  // per group (and the K-quants' min tile), and the epilogue reads them token by token.
  int64_t step = kq ? af.groups_per_block : 1;
  for (int64_t c : {8, 6, 4, 3, 2})
    if (!kq && ng % c == 0) {
      step = c;
      break;
    }
  const int64_t cs_bytes = (step + (kmin ? 1 : 0)) * kToks * 64;
  // Scratch per group: its B tile, 16 row scales, and 16 row mins (Q4_1, f32) or the K-quants'
  // min B-tile row (16 x 4 bytes, each row's 6-bit min in all four bytes); per K-quant block the
  // rows' dmin (f32).
  const int64_t per_group = kBBytes + 64 + (af.has_min ? 64 : 0) + (kmin ? 8 : 0);
  int64_t chunk = std::min<int64_t>(ng, (kTokenLaneScratch - cs_bytes) / per_group);
  chunk -= chunk % step;
  if (chunk < step) return invalid_argument("matmul amx: no scratch for a step of {} groups", step);
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
  const int64_t ws_base = chunk * kBBytes, wm_base = ws_base + chunk * 64, dm_base = wm_base + chunk * 64;

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
        if (af.groups_per_block == 1) {
          // Q4_0/Q4_1/Q5_0/Q5_1: the 32 unsigned quants as mat_dot reads them (Q5's fifth bits
          // spread in), Q4_0/Q5_0 less their offset 8 or 16 in each byte without borrows
          // (((q | 0x80) - o) ^ 0x80); Q8_0's signed bytes as they are.
          Value* q = b.bitcast(dot_quants(b, f, wr, woff), u32x8);
          const int64_t o = wt == GgmlType::Q4_0 ? 0x08080808 : wt == GgmlType::Q5_0 ? 0x10101010 : 0;
          if (o) q = b.bit_xor(b.sub(b.bit_or(q, b.c(u32x8, 0x80808080)), b.c(u32x8, o)), b.c(u32x8, 0x80808080));
          put_words(gi, i, q, 8);
          put_scale(gi, i, f16_at(b, wr, woff), af.has_min ? f16_at(b, wr, b.addc(woff, 2)) : nullptr);
        } else if (wt == GgmlType::Q6_K) {
          // 16 sub-blocks of 16 with int8 scales; values (4 low bits | 2 high bits << 4) - 32. Half n
          // (128 values) from ql[64n..], qh[32n..]: chunk c (32 values, sub-blocks 8n + 2c, +1) takes
          // the low (c even) or high (c odd) nibbles of ql[64n + 32 (c % 2)..] and bits 2c, 2c+1 of qh.
          Value* d = f16_at(b, wr, b.addc(woff, 208));
          for (int n = 0; n < 2; ++n) {
            const ir::Type u8x32 = ir::Type::vector(Scalar::kU8, 32);
            Value* qh = b.bitcast(b.load_at(wr, b.addc(woff, 128 + 32 * n), u8x32, 1), u32x8);
            for (int c = 0; c < 4; ++c) {
              Value* ql = b.bitcast(b.load_at(wr, b.addc(woff, 64 * n + 32 * (c % 2)), u8x32, 1), u32x8);
              Value* v = b.bit_or(b.andc(c >= 2 ? b.shrc(ql, 4) : ql, 0x0F0F0F0F), b.shlc(b.andc(b.shrc(qh, 2 * c), 0x03030303), 4));
              v = b.bit_xor(b.sub(b.bit_or(v, b.c(u32x8, 0x80808080)), b.c(u32x8, 0x20202020)), b.c(u32x8, 0x80808080));
              for (int h = 0; h < 2; ++h) {
                const int sb = 8 * n + 2 * c + h;
                Value* gs = b.addc(gi, sb);
                Value* half = b.build({b.extract(v, 4 * h), b.extract(v, 4 * h + 1), b.extract(v, 4 * h + 2), b.extract(v, 4 * h + 3)});
                put_words(gs, i, half, 4);
                Value* sc = b.convert(b.load_at(wr, b.addc(woff, 192 + sb), ty::s(Scalar::kI8), 1), ty::f32);
                put_scale(gs, i, b.mul(d, sc), nullptr);
              }
            }
          }
        } else {  // Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scales and mins
          const KRow r = k_row(b, wt == GgmlType::Q5_K, wr, woff);
          b.store_at(bs, b.add(b.addc(b.mul(b.div(gi, i32c(8)), i32c(64)), dm_base), b.mul(i, i32c(4))), b.neg(r.dm), 4);
          for (int sb = 0; sb < 8; ++sb) {
            Value* gs = b.addc(gi, sb);
            put_words(gs, i, b.bitcast(r.v[sb], u32x8), 8);
            put_scale(gs, i, b.mul(r.dw, b.convert(r.sc[sb], ty::f32)), nullptr);
            // The min as a B-tile row: the same byte for all four k of the row's column.
            b.store_at(bs, b.add(b.addc(b.mul(gs, i32c(64)), wm_base), b.mul(i, i32c(4))), b.mulc(r.mi[sb], 0x01010101), 4);
          }
        }
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
  };

  // Tiles: A (tokens x 32 bytes) 0/6, B (8 x 64) 1/7, C (16 x 16 i32) 2/5 alternating between
  // groups, so one group's products need not wait for the previous group's store; the K-quants'
  // min B row (8 x 64 at stride 0) 3 and min sums 4.
  const int kA[2] = {0, 6}, kB[2] = {1, 7}, kC[2] = {2, 5};
  constexpr int kBmin = 3, kCmin = 4;

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
        if (n_chunks == 1) {  // one chunk: nothing to carry over
          init.push_back(b.cf(f32x16, 0));
          continue;
        }
        Value* yo = b.add(b.mul(b.addc(t0, j), i32c(n_out)), r0);
        Value* prev = b.load(y, yo, f32x16, 4);
        init.push_back(b.select(first, b.cf(f32x16, 0), prev));
      }
      Value* xt = b.mul(t0, i32c(x_row));
      auto acc = b.for_loop(gbeg, gend, i32c(step), init, [&](Value* g0, std::span<Value* const> it) {
        Value* gi0 = b.sub(g0, gbeg);
        if (kmin) b.amx_zero(kCmin, kToks, 64);
        std::vector<Value*> ws, wm;
        for (int64_t s = 0; s < step; ++s) {
          const int p = static_cast<int>(s % 2);
          Value* gq = b.addc(g0, s);
          Value* gi = b.addc(gi0, s);
          // The tokens' activation bytes of group gq.
          Value* xqoff = kq ? b.add(b.add(xt, b.mul(b.shrc(gq, gpb_shift), i32c(f.x_bytes))),
                                    b.addc(b.mul(b.andc(gq, af.groups_per_block - 1), i32c(kGroup)), 4))
                            : b.add(xt, b.addc(b.mul(gq, i32c(f.x_bytes)), f.xtype == GgmlType::Q8_1 ? 4 : 2));
          b.amx_load(kA[p], kToks, kGroup, xq, xqoff, i32c(x_row));
          b.amx_load(kB[p], kGroup / 4, 64, bs, b.mul(gi, i32c(kBBytes)), i32c(64));
          b.amx_zero(kC[p], kToks, 64);
          b.amx_dp(Op::kAmxDpI8, kC[p], kA[p], kB[p]);
          if (kmin) {
            b.amx_load(kBmin, kGroup / 4, 64, bs, b.addc(b.mul(gi, i32c(64)), wm_base), i32c(0));
            b.amx_dp(Op::kAmxDpI8, kCmin, kA[p], kBmin);
          }
          b.amx_store(kC[p], kToks, 64, cs, i32c(s * kToks * 64), i32c(64));
          ws.push_back(b.load_at(bs, b.addc(b.mul(gi, i32c(64)), ws_base), f32x16, 4));
          if (af.has_min && !kq) wm.push_back(b.load_at(bs, b.addc(b.mul(gi, i32c(64)), wm_base), f32x16, 4));
        }
        Value* ndm = nullptr;
        if (kmin) {
          b.amx_store(kCmin, kToks, 64, cs, i32c(step * kToks * 64), i32c(64));
          ndm = b.load_at(bs, b.addc(b.mul(b.shrc(gi0, 3), i32c(64)), dm_base), f32x16, 4);
        }
        std::vector<Value*> next;
        for (int j = 0; j < kToks; ++j) {
          auto dot = [&](int64_t s) { return b.convert(b.load_at(cs, i32c((s * kToks + j) * 64), i32x16, 64), f32x16); };
          Value* xtok = b.addc(xt, j * x_row);
          Value* a = it[static_cast<size_t>(j)];
          if (kq) {
            // One Q8_K block: d_x (d_w sc_j dot_j - dmin_w min_j . sums_j) over its sub-blocks.
            Value* sum = kmin ? b.mul(dot(step), ndm) : nullptr;
            for (int64_t s = 0; s < step; ++s)
              sum = sum ? b.fma(dot(s), ws[static_cast<size_t>(s)], sum) : b.mul(dot(s), ws[static_cast<size_t>(s)]);
            Value* dx = b.load_at(xq, b.add(xtok, b.mul(b.shrc(g0, gpb_shift), i32c(f.x_bytes))), ty::f32, 4);
            a = b.fma(sum, b.splat(dx, 16), a);
          } else {
            for (int64_t s = 0; s < step; ++s) {
              Value* xo = b.add(xtok, b.mul(b.addc(g0, s), i32c(f.x_bytes)));
              a = b.fma(b.mul(dot(s), ws[static_cast<size_t>(s)]), b.splat(f16_at(b, xq, xo), 16), a);
              if (af.has_min) a = b.fma(wm[static_cast<size_t>(s)], b.splat(f16_at(b, xq, b.addc(xo, 2)), 16), a);  // Q8_1's s
            }
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
