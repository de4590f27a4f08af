// matmul_mmq: y = x W^T for prompts on the tensor cores in integers: the activations come
// quantized once per step (Q8_1 blocks from quantize_act: an f16 scale, an f16 sum and 32 signed
// bytes per 32 values), the Q4_0 / Q8_0 / Q4_K weights stay in their blocks, and every 32 values
// are one exact integer product sum (mma m16n8k32 s8 -> s32) scaled by the two block scales and
// summed in f32 (Q4_K: minus its sub-block's min times the activation block's sum, the form
// llama.cpp's CUDA MMQ uses). Q4_0 / Q8_0 give llama.cpp's CPU dot products' terms exactly.
//
// Against matmul_mma (f16 tiles): the weight tile is staged as the raw block bytes (4 words of
// nibbles per Q4_0 block instead of 32 halves), the activation tile as bytes, so a k step moves
// a quarter (weights) and half (activations) of the shared-memory bytes and needs no
// dequantization before the barrier; the nibbles become signed bytes (q - 8) in the registers
// of each mma fragment. The block sums leave the integer unit through the float adder (the mma
// adds 1.5 * 2^23 to i; read as a float, minus 1.5 * 2^23, that is i exactly for |i| < 2^22)
// instead of the quarter-rate int-to-float conversion.
//
// On the cpu target (mma is PTX-only) the op generates one thread per output with the same
// integer block sums (dot4), so the cpu tests check the numerics, not the tiling.
#include <cmath>
#include <cstring>

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>

#include "loom/base/thread_pool.h"
#include "loom/gguf/planar.h"
#include "loom/gguf/quant.h"
#include "loom/kernels/mma_dequant.h"
#include "loom/kernels/mma_tile.h"
#include "loom/kernels/moe_groups.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::AddrSpace;
using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;

constexpr int kXBlockBytes = 36;  // Q8_1: f16 d, f16 s, 32 signed bytes

// Weight formats. The kernel walks k in units of 32 values: a Q4_0 / Q8_0 block, one of the
// eight sub-blocks of a Q4_K super-block (own 6-bit scale and min; its nibbles are the low or
// high halves of the 32 bytes it shares with its neighbour), or 32 values of a Q6_K super-block
// (two 16-value sub-blocks with their own int8 scales: two mma sums, one per half).
struct QFormat {
  int words;        // quant words per 32-value unit as staged: 4 (Q4_0 nibbles), 8 (signed bytes)
  int block_bytes;  // GGUF block
  int block_elems;  // 32, or 256 for Q4_K
};
bool q_format(GgmlType t, QFormat* f) {
  if (t == GgmlType::Q4_0) *f = {4, 18, 32};
  else if (t == GgmlType::Q8_0) *f = {8, 34, 32};
  else if (t == GgmlType::Q4_K) *f = {8, 144, 256};
  else if (t == GgmlType::Q6_K) *f = {8, 210, 256};
  else return false;
  return true;
}

bool is_planar(const Shape& s) { return s.dims.count("planar") && s.at("planar") == 1; }

Value* f16_bits_to_f32(Emit& b, Value* h) { return b.convert(b.bitcast(h, ty::f16), ty::f32); }

// Unit `unit` (i64, 0 .. n_in / 32) of row `r` (i32), its loads issued now. words() gives its
// quant words as staged (Q4_0: the 4 nibble words; Q8_0: 8 signed-byte words; Q4_K: the unit's
// nibbles as 8 byte words, 0..15; Q6_K: q - 32 as 8 signed-byte words), scales() its f32 scale d
// (Q4_K: d * sc; Q6_K: d * sc of values 0..15, then of 16..31 as the second) and, for Q4_K, the
// min dmin * m (else null). Planar layout (gguf/planar.h): quants in 16-byte pieces at
// (piece * rows * nb + g) * 16, headers after all pieces; GGUF rows: the block as stored.
struct UnitLoad {
  std::function<std::vector<Value*>()> words;
  std::function<std::pair<Value*, Value*>()> scales;
};
UnitLoad load_unit(Emit& b, GgmlType wt, Value* w, bool planar, int64_t rows, int64_t n_in, Value* r, Value* unit) {
  QFormat f{};
  q_format(wt, &f);
  const int64_t nb = n_in / f.block_elems, nblk = rows * nb;
  UnitLoad out;
  if (wt == GgmlType::Q6_K) {  // GGUF rows only: ql [128], qh [64], int8 scales [16], f16 d
    Value* g = b.add(b.mul(b.convert(r, ty::i64), b.i64(nb)), b.div(unit, b.i64(8)));
    Value* j = b.convert(b.rem(unit, b.i64(8)), ty::i32);
    Value* n = b.div(j, b.i32(4));
    Value* q = b.rem(j, b.i32(4));
    Value* base = b.mul(g, b.i64(210));
    Value* ql = b.add(base, b.convert(b.add(b.mulc(n, 64), b.mulc(b.rem(q, b.i32(2)), 32)), ty::i64));
    Value* qh = b.add(base, b.convert(b.addc(b.mulc(n, 32), 128), ty::i64));
    std::vector<Value*> lo, hi;  // u16 halves (blocks are 2-byte aligned)
    for (int i = 0; i < 16; ++i) {
      lo.push_back(b.load_at(w, b.add(ql, b.i64(2 * i)), ty::u16, 2));
      hi.push_back(b.load_at(w, b.add(qh, b.i64(2 * i)), ty::u16, 2));
    }
    Value* sc_at = b.add(base, b.convert(b.add(b.addc(b.mulc(n, 8), 192), b.mulc(q, 2)), ty::i64));
    Value* s0 = b.load_at(w, sc_at, Type::scalar(Scalar::kU8), 1);
    Value* s1 = b.load_at(w, b.add(sc_at, b.i64(1)), Type::scalar(Scalar::kU8), 1);
    Value* d = b.load_at(w, b.add(base, b.i64(208)), ty::u16, 2);
    out.words = [&b, lo, hi, q] {
      Value* shl_ = b.convert(b.mulc(b.div(q, b.i32(2)), 4), ty::u32);
      Value* shh = b.convert(b.mulc(q, 2), ty::u32);
      std::vector<Value*> ws;
      for (size_t i = 0; i < lo.size(); i += 2) {
        Value* l32 = b.bit_or(b.convert(lo[i], ty::u32), b.shlc(b.convert(lo[i + 1], ty::u32), 16));
        Value* h32 = b.bit_or(b.convert(hi[i], ty::u32), b.shlc(b.convert(hi[i + 1], ty::u32), 16));
        Value* v = b.bit_or(b.andc(b.shr(l32, shl_), 0x0F0F0F0F), b.shlc(b.andc(b.shr(h32, shh), 0x03030303), 4));
        // q - 32 per byte without borrows: (q | 0x80) - 0x20 >= 0x60, bit 7 flipped back.
        ws.push_back(b.bitcast(b.bit_xor(b.sub(b.bit_or(v, b.c(ty::u32, 0x80808080)), b.c(ty::u32, 0x20202020)),
                                         b.c(ty::u32, 0x80808080)), ty::i32));
      }
      return ws;
    };
    out.scales = [&b, s0, s1, d] {
      Value* df = f16_bits_to_f32(b, d);
      auto sc = [&](Value* u) { return b.convert(b.sub(b.bit_xor(b.convert(u, ty::i32), b.i32(0x80)), b.i32(0x80)), ty::f32); };
      return std::pair<Value*, Value*>{b.mul(df, sc(s0)), b.mul(df, sc(s1))};
    };
    return out;
  }
  if (wt == GgmlType::Q4_K) {
    Value* sb = b.div(unit, b.i64(8));
    Value* sub = b.convert(b.rem(unit, b.i64(8)), ty::i32);
    Value* g = b.add(b.mul(b.convert(r, ty::i64), b.i64(nb)), sb);
    Value* pp = b.convert(b.div(sub, b.i32(2)), ty::i64);
    std::vector<Value*> v;
    for (int h = 0; h < 2; ++h) {  // qs bytes 32 pp + 16 h .. +15
      Value* at = planar ? b.mul(b.add(b.mul(b.add(b.mulc(pp, 2), b.i64(h)), b.i64(nblk)), g), b.i64(16))
                         : b.add(b.mul(g, b.i64(144)), b.add(b.i64(16 + 16 * h), b.mulc(pp, 32)));
      v.push_back(b.load_at(w, at, Type::vector(Scalar::kU32, 4), 16));
    }
    Value* hdr = planar ? b.add(b.i64(8 * 16 * nblk), b.mul(g, b.i64(16))) : b.mul(g, b.i64(144));
    Value* dd = b.load_at(w, hdr, ty::u32, 4);  // d | dmin << 16
    // get_scale_min_k4 reads scale bytes j % 4, j % 4 + 4 and j % 4 + 8.
    Value* j4 = b.convert(b.rem(sub, b.i32(4)), ty::i64);
    std::vector<Value*> q;
    for (int o : {4, 8, 12}) q.push_back(b.load_at(w, b.add(hdr, b.add(j4, b.i64(o))), Type::scalar(Scalar::kU8), 1));
    out.words = [&b, v, sub] {
      Value* sh = b.convert(b.mulc(b.rem(sub, b.i32(2)), 4), ty::u32);
      std::vector<Value*> ws;
      for (Value* p : v)
        for (int i = 0; i < 4; ++i) ws.push_back(b.bitcast(b.andc(b.shr(b.extract(p, i), sh), 0x0F0F0F0F), ty::i32));
      return ws;
    };
    out.scales = [&b, dd, q, sub] {
      Value* d = f16_bits_to_f32(b, b.convert(b.andc(dd, 0xFFFF), ty::u16));
      Value* dmin = f16_bits_to_f32(b, b.convert(b.shrc(dd, 16), ty::u16));
      Value* a = b.convert(q[0], ty::i32), *bb = b.convert(q[1], ty::i32), *c = b.convert(q[2], ty::i32);
      Value* lo = b.cmp(Mode::kLt, sub, b.i32(4));
      Value* sc = b.select(lo, b.andc(a, 63), b.bit_or(b.andc(c, 0xF), b.shlc(b.shrc(a, 6), 4)));
      Value* mn = b.select(lo, b.andc(bb, 63), b.bit_or(b.shrc(c, 4), b.shlc(b.shrc(bb, 6), 4)));
      return std::pair<Value*, Value*>{b.mul(d, b.convert(sc, ty::f32)), b.mul(dmin, b.convert(mn, ty::f32))};
    };
    return out;
  }
  Value* g = b.add(b.mul(b.convert(r, ty::i64), b.i64(nb)), unit);
  Value* d;
  if (planar) {
    const int pieces = f.words / 4;
    std::vector<Value*> v;
    for (int p = 0; p < pieces; ++p)
      v.push_back(b.load_at(w, b.add(b.i64(16 * p * nblk), b.mul(g, b.i64(16))), Type::vector(Scalar::kU32, 4), 16));
    d = b.load_at(w, b.add(b.i64(16 * pieces * nblk), b.mul(g, b.i64(2))), ty::u16, 2);
    out.words = [&b, v] {
      std::vector<Value*> ws;
      for (Value* p : v)
        for (int i = 0; i < 4; ++i) ws.push_back(b.bitcast(b.extract(p, i), ty::i32));
      return ws;
    };
  } else {
    Value* base = b.mul(g, b.i64(f.block_bytes));
    d = b.load_at(w, base, ty::u16, 2);
    std::vector<Value*> h;
    for (int i = 0; i < 2 * f.words; ++i) h.push_back(b.load_at(w, b.add(base, b.i64(2 + 2 * i)), ty::u16, 2));
    out.words = [&b, h] {
      std::vector<Value*> ws;
      for (size_t i = 0; i < h.size(); i += 2)
        ws.push_back(b.bitcast(b.bit_or(b.convert(h[i], ty::u32), b.shlc(b.convert(h[i + 1], ty::u32), 16)), ty::i32));
      return ws;
    };
  }
  out.scales = [&b, d] { return std::pair<Value*, Value*>{f16_bits_to_f32(b, d), nullptr}; };
  return out;
}

// Four nibbles (bytes 0..15 of u32 `u`) as the signed bytes q - 8: per byte (q | 0x80) - 8
// borrows nothing from its neighbour, and flipping bit 7 back gives q - 8 in two's complement.
Value* nibbles_to_s8(Emit& b, Value* u) {
  return b.bitcast(b.bit_xor(b.sub(b.bit_or(u, b.c(ty::u32, 0x80808080)), b.c(ty::u32, 0x08080808)), b.c(ty::u32, 0x80808080)), ty::i32);
}
// The low (elements 4q..4q+3 of a Q4_0 block) and high (16+4q..) nibbles of quant word `w`.
Value* lo_s8(Emit& b, Value* w) { return nibbles_to_s8(b, b.andc(b.bitcast(w, ty::u32), 0x0F0F0F0F)); }
Value* hi_s8(Emit& b, Value* w) { return nibbles_to_s8(b, b.andc(b.shrc(b.bitcast(w, ty::u32), 4), 0x0F0F0F0F)); }

// A pair of Q4_K units 2p, 2p + 1 (unit0 = 2p, i32) of row r, loads issued now: {the 32 quant
// bytes as two u32x4 (the pair's units in their low and high nibbles), the 16-byte super-block
// header as u32x4 (d | dmin << 16, then the 12 bytes of 6-bit scales and mins), the pair's
// index 0..3 within its super-block (i32)}.
std::vector<Value*> load_pair_q4k(Emit& b, Value* w, bool planar, int64_t rows, int64_t n_in, Value* r, Value* unit0) {
  const int64_t nb = n_in / 256, nblk = rows * nb;
  const Type u32x4 = Type::vector(Scalar::kU32, 4);
  Value* g = b.add(b.mul(b.convert(r, ty::i64), b.i64(nb)), b.convert(b.div(unit0, b.i32(8)), ty::i64));
  Value* pp = b.div(b.rem(unit0, b.i32(8)), b.i32(2));
  Value* pp64 = b.convert(pp, ty::i64);
  std::vector<Value*> out;
  for (int h = 0; h < 2; ++h) {  // qs bytes 32 pp + 16 h .. +15
    Value* at = planar ? b.mul(b.add(b.mul(b.add(b.mulc(pp64, 2), b.i64(h)), b.i64(nblk)), g), b.i64(16))
                       : b.add(b.mul(g, b.i64(144)), b.add(b.i64(16 + 16 * h), b.mulc(pp64, 32)));
    out.push_back(b.load_at(w, at, u32x4, 16));
  }
  Value* hdr = planar ? b.add(b.i64(8 * 16 * nblk), b.mul(g, b.i64(16))) : b.mul(g, b.i64(144));
  out.push_back(b.load_at(w, hdr, u32x4, 16));
  out.push_back(pp);
  return out;
}

// matmul_mmq_id: the mixture-of-experts form (prompts). w holds n_expert matrices of n_out rows;
// ids [n_tokens][n_used] names each token's experts; pair p = t * n_used + j multiplies expert
// ids[p] with activation row t (x_per_slot 0) or p (x_per_slot 1) into y [p]. A first kernel lists
// the pairs per expert (moe_groups.h); the matmul's grid has one z layer per expert, whose CTAs
// take the expert's listed pairs as their tokens (CTAs past the expert's count do nothing), so
// each chosen expert's weights stream once per step on the tensor cores.
class MatmulMmqOp final : public OpSpec {
 public:
  explicit MatmulMmqOp(bool id) : id_(id) {}
  std::string_view name() const override { return id_ ? "matmul_mmq_id" : "matmul_mmq"; }
  std::string_view description() const override {
    return id_ ? "mixture-of-experts matmul for prompts on tensor cores in integers: each expert's Q4_0/Q8_0/Q4_K/Q6_K rows "
                 "times the Q8_1 activations of the (token, slot) pairs that chose it"
               : "y = x W^T for prompts on tensor cores in integers (mma m16n8k32 s8): Q4_0/Q8_0/Q4_K/Q6_K weight blocks times "
                 "Q8_1 activation blocks, exact 32-value sums scaled in f32";
  }

  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(GgmlType wt, shape_type(s, "wtype"));
    QFormat f{};
    if (!q_format(wt, &f))
      return invalid_argument("matmul_mmq: weight type {} is not supported (Q4_0, Q8_0, Q4_K, Q6_K)", llm::ggml_type_name(wt));
    if (wt == GgmlType::Q6_K && s.dims.count("planar") && s.at("planar") != 0)
      return invalid_argument("matmul_mmq: Q6_K weights in GGUF rows only (planar=0)");
    LOOM_ASSIGN_OR_RETURN(int64_t n_in, s.get("n_in"));
    LOOM_ASSIGN_OR_RETURN(int64_t n_out, s.get("n_out"));
    LOOM_ASSIGN_OR_RETURN(int64_t nt, s.get("n_tokens"));
    if (n_in <= 0 || n_in % f.block_elems != 0)
      return invalid_argument("matmul_mmq: n_in={} must be a positive multiple of {}", n_in, f.block_elems);
    if (n_out <= 0 || n_out > (1 << 24)) return invalid_argument("matmul_mmq: n_out={} out of range", n_out);
    if (nt < 1 || nt > 65535) return invalid_argument("matmul_mmq: n_tokens={} out of range 1..65535", nt);
    if (id_) {
      LOOM_ASSIGN_OR_RETURN(int64_t ne, s.get("n_expert"));
      LOOM_ASSIGN_OR_RETURN(int64_t nu, s.get("n_used"));
      LOOM_ASSIGN_OR_RETURN(int64_t ps, s.get("x_per_slot"));
      if (ne < 1 || ne > 65535) return invalid_argument("matmul_mmq_id: n_expert={} out of range 1..65535", ne);
      if (nu < 1 || nu > ne) return invalid_argument("matmul_mmq_id: n_used={} out of range 1..n_expert", nu);
      if (ps != 0 && ps != 1) return invalid_argument("matmul_mmq_id: x_per_slot={} (0|1)", ps);
      if (nt * nu * n_out > (int64_t{1} << 31) || ne * n_out * (n_in / f.block_elems) * f.block_bytes > (int64_t{1} << 40) ||
          moe_groups_words(ne, nt * nu) > (int64_t{1} << 29))
        return invalid_argument("matmul_mmq_id: shape too large");
      if (s.dims.count("planar") && s.at("planar") != 0) return invalid_argument("matmul_mmq_id: expert weights are GGUF rows (planar=0)");
    }
    if (x_rows(s) * (n_in / 32) * kXBlockBytes > (int64_t{1} << 31)) return invalid_argument("matmul_mmq: activations too large");
    if (s.dims.count("planar") && s.at("planar") != 0 && s.at("planar") != 1)
      return invalid_argument("matmul_mmq: planar={} (0: GGUF rows, 1: matvec_gpu's planar layout)", s.at("planar"));
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& s) const override {
    QFormat f{};
    q_format(static_cast<GgmlType>(s.at("wtype")), &f);
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens"), nb = n_in / 32;
    const int64_t wbytes = n_out * (n_in / f.block_elems) * f.block_bytes;
    if (id_) {
      const int64_t ne = s.at("n_expert"), np = nt * s.at("n_used");
      return {{"w", ArgKind::kBuffer, ArgRole::kInput, ne * wbytes, Scalar::kU8},
              {"xq", ArgKind::kBuffer, ArgRole::kInput, x_rows(s) * nb * kXBlockBytes, Scalar::kU8},
              {"ids", ArgKind::kBuffer, ArgRole::kInput, np * 4, Scalar::kI32},
              {"y", ArgKind::kBuffer, ArgRole::kOutput, np * n_out * 4, Scalar::kF32},
              {"groups", ArgKind::kBuffer, ArgRole::kScratch, moe_groups_words(ne, np) * 4, Scalar::kI32}};
    }
    return {{"w", ArgKind::kBuffer, ArgRole::kInput, wbytes, Scalar::kU8},
            {"xq", ArgKind::kBuffer, ArgRole::kInput, nt * nb * kXBlockBytes, Scalar::kU8},
            {"y", ArgKind::kBuffer, ArgRole::kOutput, nt * n_out * 4, Scalar::kF32}};
  }

  // matmul_mmq_id counts the weights of the experts that can be chosen (at most one per pair).
  Cost cost(const Shape& s) const override {
    auto a = args(s);
    const double rows = static_cast<double>(id_ ? pairs(s) : s.at("n_tokens"));
    double w = static_cast<double>(a[0].bytes);
    if (id_) w *= static_cast<double>(std::min(pairs(s), s.at("n_expert"))) / static_cast<double>(s.at("n_expert"));
    return {w + static_cast<double>(a[1].bytes) + static_cast<double>(id_ ? a[2].bytes + a[3].bytes : a[2].bytes),
            2.0 * static_cast<double>(s.at("n_in")) * static_cast<double>(s.at("n_out")) * rows};
  }

  // Block sums are exact; each block's dw dx i rounds twice and the f32 sum over n_in / 32
  // blocks adds about sqrt(blocks) ulps of the result's magnitude. A wrong block is off by
  // its whole product sum.
  Tolerance tolerance(const Shape& s) const override {
    return {2e-6 * std::sqrt(static_cast<double>(s.at("n_in"))), 1e-5, false};
  }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    if (t != ir::TargetKind::kPtx) return {{"threads", {32, 64, 128}}};
    std::vector<int64_t> kbs;  // Q4_K: pairs of units (the two share their 32 quant bytes)
    const bool pairs = static_cast<GgmlType>(s.at("wtype")) == GgmlType::Q4_K;
    for (int64_t kb : {1, 2, 4, 8})
      if ((s.at("n_in") / 32) % kb == 0 && (pairs ? kb >= 2 : kb <= 4)) kbs.push_back(kb);
    return {{"warps_m", {1, 2, 4}}, {"warps_n", {1, 2, 4}}, {"k_blocks", kbs}, {"warp_m_tiles", {1, 2, 4}},
            {"warp_n_tiles", {2, 4, 8}}, {"ctas", {0, 1, 2}}};
  }
  // 128 x 64 CTA tiles of 8 warps (32 rows x 32 tokens each), 128 values per k step, registers
  // capped for two CTAs per SM: the best of the H200 sweeps of the 8B Q4_0 model's pp512
  // (bench/results/2026-12-03-h200-mmq.json): 9112 tok/s; 32 x 64 warp tiles 7763, 64 values
  // per step 7052, one CTA per SM 8933, 64 x 128 CTA tiles 7784, 32 x 16 warp tiles 6886.
  // ctas: the CTAs per SM the registers must leave room for (0: as many as ptxas gives). Q4_K
  // (8B Q4_K_M-like pp512, 2026-12-03-h200-mmq-q4k.json): the same tiles without the register
  // cap, 6436 tok/s; capped for two CTAs 6215, one 6037, 256 values per step 6436.
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    if (t != ir::TargetKind::kPtx) return {{"threads", 64}};
    // matmul_mmq_id: an expert's tokens are its pairs (on average pairs / n_expert).
    const int64_t nt = id_ ? pairs(s) / s.at("n_expert") : s.at("n_tokens"), nb = s.at("n_in") / 32;
    const bool q4k = static_cast<GgmlType>(s.at("wtype")) == GgmlType::Q4_K || static_cast<GgmlType>(s.at("wtype")) == GgmlType::Q6_K;
    return {{"warps_m", 4}, {"warps_n", nt > 64 ? 2 : 1}, {"k_blocks", nb % 4 == 0 ? 4 : nb % 2 == 0 ? 2 : 1},
            {"warp_m_tiles", 2}, {"warp_n_tiles", 4}, {"ctas", q4k ? 0 : 2}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    if (target == ir::TargetKind::kPtx) return generate_mma(s, sch);
    return generate_scalar(s, sch, target);
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = x_rows(s);
    auto specs = args(s);
    a[0].bytes.resize(static_cast<size_t>(specs[0].bytes));
    random_rows(rng, wt, id_ ? s.at("n_expert") * n_out : n_out, n_in, 0.1f, a[0].bytes.data());
    if (id_) {
      // Each token's n_used distinct experts in a random order (the router's form); the first
      // expert is left out of every list, so one layer of the grid has no pairs.
      const int64_t ne = s.at("n_expert"), nu = s.at("n_used"), tokens = s.at("n_tokens");
      a[2].bytes.resize(static_cast<size_t>(specs[2].bytes));
      a[4].bytes.assign(static_cast<size_t>(specs[4].bytes), 0);  // scratch
      int32_t* ids = reinterpret_cast<int32_t*>(a[2].bytes.data());
      std::vector<int32_t> perm;
      for (int64_t e = ne > nu ? 1 : 0; e < ne; ++e) perm.push_back(static_cast<int32_t>(e));
      for (int64_t t = 0; t < tokens; ++t) {
        std::shuffle(perm.begin(), perm.end(), rng);
        std::copy(perm.begin(), perm.begin() + nu, ids + t * nu);
      }
    }
    if (is_planar(s)) {  // as the engine repacks its weights
      std::vector<uint8_t> gguf = a[0].bytes;
      Status st = llm::to_planar(wt, n_out, n_in, gguf.data(), a[0].bytes.data());
      (void)st;
    }
    std::vector<float> x = random_floats(rng, static_cast<size_t>(nt * n_in), -1.0f, 1.0f);
    a[1].bytes.resize(static_cast<size_t>(specs[1].bytes));
    const int64_t row = n_in / 32 * kXBlockBytes;
    for (int64_t t = 0; t < nt; ++t)
      llm::ref::quantize_activation(GgmlType::Q8_1, x.data() + t * n_in, a[1].bytes.data() + t * row, n_in);
  }

  // llm::ref::matmul_q8_1 (the definition: per 32 values the exact integer sum scaled by the
  // block scales, Q4_K minus its min times the activation block's sum; summed in double).
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    QFormat f{};
    q_format(wt, &f);
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    const size_t row = static_cast<size_t>(n_in / f.block_elems * f.block_bytes);
    if (id_) {  // per pair: its expert's matrix times its activation row
      const int64_t ne = s.at("n_expert"), nu = s.at("n_used"), ps = s.at("x_per_slot");
      const int32_t* ids = reinterpret_cast<const int32_t*>(a[2].bytes.data());
      a[3].bytes.resize(static_cast<size_t>(pairs(s) * n_out * 4));
      float* y = reinterpret_cast<float*>(a[3].bytes.data());
      const int64_t xrow = n_in / 32 * kXBlockBytes;
      for (int64_t pr = 0; pr < pairs(s); ++pr) {
        const int64_t e = ids[pr] >= 0 && ids[pr] < ne ? ids[pr] : 0;
        const llm::ref::WeightView wv{wt, a[0].bytes.data() + static_cast<size_t>(e * n_out) * row, n_in, n_out, row};
        LOOM_RETURN_IF_ERROR(llm::ref::matmul_q8_1(wv, a[1].bytes.data() + (ps ? pr : pr / nu) * xrow, 1, y + pr * n_out, nullptr));
      }
      return Status();
    }
    const uint8_t* wb = a[0].bytes.data();
    std::vector<uint8_t> gguf;
    if (is_planar(s)) {
      gguf.resize(a[0].bytes.size());
      LOOM_RETURN_IF_ERROR(llm::from_planar(wt, n_out, n_in, wb, gguf.data()));
      wb = gguf.data();
    }
    a[2].bytes.resize(static_cast<size_t>(nt * n_out * 4));
    const llm::ref::WeightView wv{wt, wb, n_in, n_out, row};
    ThreadPool pool(default_thread_count());  // $LOOM_THREADS: an 8B model's matrices are 10^10 products
    return llm::ref::matmul_q8_1(wv, a[1].bytes.data(), nt, reinterpret_cast<float*>(a[2].bytes.data()), &pool);
  }

  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    if (id_) {
      // Experts with more pairs than a CTA's tokens (4 experts, 150 tokens, 2 each), ragged
      // rows, the per-slot down input, Qwen3-30B-A3B's rows (2048 -> 768, 768 -> 2048).
      auto add_id = [&](GgmlType t, int64_t n_in, int64_t n_out, int64_t ne, int64_t nu, int64_t nt, int64_t ps) {
        out.push_back({{{"n_in", n_in}, {"n_out", n_out}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)},
                        {"n_expert", ne}, {"n_used", nu}, {"x_per_slot", ps}}});
      };
      add_id(GgmlType::Q4_0, 128, 37, 4, 2, 150, 0);
      add_id(GgmlType::Q8_0, 96, 70, 8, 3, 41, 1);
      add_id(GgmlType::Q4_K, 512, 200, 16, 4, 77, 0);
      add_id(GgmlType::Q4_K, 2048, 768, 16, 8, 20, 0);
      add_id(GgmlType::Q4_K, 768, 2048, 16, 8, 9, 1);
      add_id(GgmlType::Q6_K, 768, 300, 16, 8, 20, 1);  // the Q4_K_M mix's down experts
      return out;
    }
    auto add = [&](int64_t n_in, int64_t n_out, int64_t nt, GgmlType t, int planar) {
      out.push_back({{{"n_in", n_in}, {"n_out", n_out}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)},
                      {"planar", planar}}});
    };
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0}) {
      add(64, 37, 5, t, 0);      // one k step, ragged rows and tokens
      add(576, 200, 70, t, 0);   // 18 blocks: odd k steps of 2
      add(576, 200, 100, t, 1);  // the engine's planar layout
      add(1024, 1030, 137, t, 1);
      add(96, 19, 17, t, 1);     // 3 blocks: k steps of 1
    }
    add(256, 37, 5, GgmlType::Q4_K, 0);
    add(512, 200, 70, GgmlType::Q4_K, 0);
    add(768, 200, 100, GgmlType::Q4_K, 1);  // 3 super-blocks
    add(1024, 1030, 137, GgmlType::Q4_K, 1);
    add(256, 37, 5, GgmlType::Q6_K, 0);
    add(768, 200, 70, GgmlType::Q6_K, 0);
    return out;
  }

 private:
  bool id_;
  int64_t pairs(const Shape& s) const { return id_ ? s.at("n_tokens") * s.at("n_used") : s.at("n_tokens"); }
  // Activation rows: a token's, or (x_per_slot) a pair's.
  int64_t x_rows(const Shape& s) const {
    return id_ && s.dims.count("x_per_slot") && s.at("x_per_slot") == 1 ? pairs(s) : s.at("n_tokens");
  }

  // cpu (and any non-PTX target): one thread per (row, token), the same integer block sums.
  Result<Generated> generate_scalar(const Shape& s, const Schedule& sch, ir::TargetKind target) const {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens"), nb = n_in / 32;
    const std::string kname = fmt::format("{}_scalar_{}", name(), llm::ggml_type_name(wt));
    auto dot = [&](Emit& b, Value* w, Value* xq, Value* r, Value* t) {
          auto acc = b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(nb)), b.i32(1), {b.f32(0)},
                                [&](Value* blk, std::span<Value* const> it) {
            UnitLoad wl = load_unit(b, wt, w, is_planar(s), n_out, n_in, r, b.convert(blk, ty::i64));
            std::vector<Value*> ww = wl.words();
            Value* xb = b.mul(b.convert(b.add(b.mul(t, b.i32(static_cast<int32_t>(nb))), blk), ty::i64), b.i64(kXBlockBytes));
            Value* x0 = b.bitcast(b.load_at(xq, xb, ty::i32, 4), ty::u32);
            Value* dx = f16_bits_to_f32(b, b.convert(b.andc(x0, 0xFFFF), ty::u16));
            Value* isum[2] = {b.i32(0), b.i32(0)};  // Q6_K: values 0..15 and 16..31 apart
            const bool halves = wt == GgmlType::Q6_K;
            for (int i = 0; i < 8; ++i) {
              Value* xw = b.load_at(xq, b.add(xb, b.i64(4 + 4 * i)), ty::i32, 4);
              Value* wv = wt == GgmlType::Q4_0 ? (i < 4 ? lo_s8(b, ww[static_cast<size_t>(i)]) : hi_s8(b, ww[static_cast<size_t>(i - 4)]))
                                               : ww[static_cast<size_t>(i)];
              Value*& sum = isum[halves && i >= 4 ? 1 : 0];
              sum = b.dot4(wv, xw, sum);
            }
            auto [dw, dm] = wl.scales();
            Value* a = b.fma(b.mul(dw, dx), b.convert(isum[0], ty::f32), it[0]);
            if (halves) a = b.fma(b.mul(dm, dx), b.convert(isum[1], ty::f32), a);
            else if (dm) a = b.sub(a, b.mul(dm, f16_bits_to_f32(b, b.convert(b.shrc(x0, 16), ty::u16))));
            return std::vector<Value*>{a};
          });
          return acc[0];
    };
    if (!id_) return mma::per_output_kernel(kname, target, Scalar::kU8, "xq", n_out, nt, sch.at("threads"), dot);
    // matmul_mmq_id: one thread per (row = global x, pair = block y), the pair's expert's row.
    Generated g;
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    b.cpu = target == ir::TargetKind::kCpp;
    Value* w = b.param(ty::gptr(Scalar::kU8), "w");
    Value* xq = b.param(ty::gptr(Scalar::kU8), "xq");
    Value* ids = b.param(ty::gptr(Scalar::kI32), "ids");
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    const int32_t ne = static_cast<int32_t>(s.at("n_expert")), nu = static_cast<int32_t>(s.at("n_used"));
    Value* r = b.global_x();
    Value* pr = b.block_id(Mode::kY);
    b.when(b.cmp(Mode::kLt, r, b.i32(static_cast<int32_t>(n_out))), [&] {
      Value* e = b.convert(clamp_expert(b, b.load(ids, pr), ne), ty::i64);
      QFormat f{};
      q_format(wt, &f);
      Value* we = b.offset(w, b.mul(e, b.i64(n_out * (n_in / f.block_elems) * f.block_bytes)));
      Value* xr = s.at("x_per_slot") ? pr : b.div(pr, b.i32(nu));
      b.store(y, b.add(b.mul(pr, b.i32(static_cast<int32_t>(n_out))), r), dot(b, we, xq, r, xr));
    });
    KernelLaunch l;
    l.kernel = kname;
    l.args = {0, 1, 2, 3};
    const int64_t threads = sch.at("threads");
    l.grid = {static_cast<uint32_t>((n_out + threads - 1) / threads), static_cast<uint32_t>(pairs(s)), 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    g.launches.push_back(l);
    return g;
  }

  // PTX: a CTA computes 16 warp_m_tiles warps_m weight rows x 8 warp_n_tiles warps_n tokens.
  // Per k step of k_blocks 32-value units, shared memory holds
  //   wq  [bm rows][k_blocks * words + pad] the units' quant words as stored (Q4_0: 4 nibble words;
  //                                          Q8_0: 8 signed-byte words; Q4_K: a pair of units'
  //                                          32 shared bytes, the first unit's nibbles low),
  //   wd  [k_blocks][bm]                    their scales (f32; Q4_K: d * sc),
  //   wm  [k_blocks][bm]                    Q4_K only: their mins (dmin * m),
  //   xs  [bn tokens][8 k_blocks + 4]       the activation bytes, words (q, q + 4) adjacent,
  //   xd  [k_blocks][bn]                    their scales (f32),
  //   xm  [k_blocks][bn]                    Q4_K only: the Q8_1 blocks' sums d sum(q).
  // Row strides are odd multiples of 4 words, so a fragment's 8 rows x 4 lanes hit 32 banks. The
  // next step's global loads are issued before the current step's mma work and stored after it
  // (two barriers per step, one buffer).
  Result<Generated> generate_mma(const Shape& s, const Schedule& sch) const {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    QFormat f{};
    q_format(wt, &f);
    const bool q4 = wt == GgmlType::Q4_0, mins = wt == GgmlType::Q4_K;
    // Q6_K: the unit's two 16-value halves are two mma sums (the A fragment's registers 0, 1
    // hold k 0..15, registers 2, 3 k 16..31; the other pair zeroed), each with its own scale
    // (wd: values 0..15, wmn: 16..31).
    const bool halves = wt == GgmlType::Q6_K;
    // Q4_K is staged a pair of units at a time: the 32 quant bytes the two share (one unit in the
    // low nibbles, the next in the high ones) and the super-block's 16-byte header, one 16-byte
    // load each, the two units' scales and mins decoded from it.
    const int64_t upi = mins ? 2 : 1;  // units per weight item
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens"), nb = n_in / 32;
    const int64_t wm = sch.at("warps_m"), wn = sch.at("warps_n"), threads = 32 * wm * wn;
    int64_t mtiles = sch.at("warp_m_tiles"), ntiles = sch.at("warp_n_tiles"), kb = sch.at("k_blocks");
    // Warp tiles whose accumulators would not fit the 64 K registers of an SM for one CTA (about
    // 1.5 per accumulator plus 48) are narrowed, so every schedule of the space launches.
    while ((6 * mtiles * ntiles + 48) * threads > 65536 && ntiles > 2) ntiles /= 2;
    while ((6 * mtiles * ntiles + 48) * threads > 65536 && mtiles > 1) mtiles /= 2;
    const int64_t bm = 16 * mtiles * wm, bn = 8 * ntiles * wn;
    const int64_t nw = mins ? 4 : f.words, nsc = mins || halves ? 2 : 1;
    // Row strides in words: odd multiples of 4. The tiles must fit 48 KiB of static shared memory.
    auto strides = [&](int64_t kbv) { return std::pair<int64_t, int64_t>{kbv * nw + ((kbv * nw / 4) % 2 ? 0 : 4), 8 * kbv + 4}; };
    auto smem = [&](int64_t kbv) {
      return 4 * (bm * strides(kbv).first + bn * strides(kbv).second + nsc * kbv * (bm + bn));
    };
    while (kb > upi && smem(kb) > 48 * 1024) kb /= 2;
    const int64_t sw = strides(kb).first, sx = strides(kb).second;
    Generated g;
    const std::string kname = fmt::format("{}_{}", name(), llm::ggml_type_name(wt));
    const int64_t ne = id_ ? s.at("n_expert") : 1, np = pairs(s);
    if (id_) add_moe_groups_kernel(g, kname + "_groups", ne, np, false, 2, 4);
    ir::Kernel* k = g.module.add_kernel(kname);
    // Two CTAs per SM where the registers allow it (ptxas caps them at 128 for 256 threads), so
    // that one CTA's mma work covers the other's wait at a barrier or for its loads.
    k->max_threads = static_cast<int>(threads);
    k->min_blocks = sch.count("ctas") ? static_cast<int>(sch.at("ctas")) : 0;
    Emit b(*k);
    Value* w = b.param(Type::pointer(AddrSpace::kConstant, Scalar::kU8), "w");
    Value* xq = b.param(Type::pointer(AddrSpace::kConstant, Scalar::kU8), "xq");
    Value* groups = id_ ? b.param(ty::gptr(Scalar::kI32), "groups") : nullptr;
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    Value* wq = b.alloc_shared(Scalar::kI32, bm * sw);
    Value* wd = b.alloc_shared(Scalar::kF32, kb * bm);
    Value* wmn = mins || halves ? b.alloc_shared(Scalar::kF32, kb * bm) : nullptr;
    Value* xs = b.alloc_shared(Scalar::kI32, bn * sx);
    Value* xd = b.alloc_shared(Scalar::kF32, kb * bn);
    Value* xm = mins ? b.alloc_shared(Scalar::kF32, kb * bn) : nullptr;
    auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
    const mma::MmaTile tile0 = mma::mma_tile(b, wm, wn, mtiles, ntiles);
    // matmul_mmq_id: this z layer's expert, its pair count and list, its matrix.
    Value *cnt = nullptr, *list = nullptr;
    if (id_) {
      Value* e = b.block_id(Mode::kZ);
      cnt = b.load(groups, e);
      list = b.offset(groups, b.add(i32c(ne), b.mul(e, i32c(np))));
      const int64_t wmat = n_out * (n_in / f.block_elems) * f.block_bytes;
      w = b.offset(w, b.mul(b.convert(e, ty::i64), b.i64(wmat)));
    }
    // The tile's body for the CTA's first token n0 (matmul_mmq_id: the n0-th of the expert's pairs).
    auto tile_body = [&](const mma::MmaTile& tile) {
    Value *tid = tile.tid, *gq = tile.gq, *qq = tile.qq, *m0 = tile.m0, *n0 = tile.n0, *wm0 = tile.wm0, *wn0 = tile.wn0;
    // Tile items: weight (row, unit) and activation (token, unit) pairs, spread over the
    // threads; unrolled (every item's loads in flight together), guarded where they do not
    // divide evenly.
    const int64_t n_witems = bm * kb / upi, n_xitems = bn * kb;
    const int64_t wper = (n_witems + threads - 1) / threads, xper = (n_xitems + threads - 1) / threads;
    struct Staged {
      std::vector<std::function<void()>> stores;
    };
    auto guarded = [&b](Value* valid, const std::function<void()>& body) {
      if (!valid) return body();
      b.if_then_else(valid, {}, [&] {
        body();
        return std::vector<Value*>{};
      });
    };
    // This thread's j-th of n tile items: (row or token in the tile, unit in the step, and the
    // guard when the items do not divide evenly: null when every thread has one).
    auto item_of = [&](int64_t j, int64_t n, int64_t per_row) {
      Value* item = b.addc(tid, j * threads);
      Value* valid = (j + 1) * threads <= n ? nullptr : b.cmp(Mode::kLt, item, i32c(n));
      Value* it = valid ? b.min(item, i32c(n - 1)) : item;
      return std::tuple<Value*, Value*, Value*>{b.div(it, i32c(per_row)), b.rem(it, i32c(per_row)), valid};
    };
    // The activation items of this thread (the same in every k step) and their rows: token
    // n0 + lt, or the pair listed there (its token's row, or with x_per_slot its own). Rows past
    // the end repeat the last one (their results are not stored).
    std::vector<std::tuple<Value*, Value*, Value*>> xitems;
    std::vector<Value*> xrows;
    for (int64_t j = 0; j < xper; ++j) {
      xitems.push_back(item_of(j, n_xitems, kb));
      Value* lt = std::get<0>(xitems.back());
      if (!id_) {
        xrows.push_back(b.min(b.add(n0, lt), i32c(nt - 1)));
        continue;
      }
      Value* pair = b.load(list, b.min(b.add(n0, lt), b.addc(cnt, -1)));
      xrows.push_back(s.at("x_per_slot") ? pair : b.div(pair, i32c(s.at("n_used"))));
    }
    auto stage = [&](Value* kblk) {  // loads of the k step starting at unit kblk (i32)
      auto st = std::make_shared<Staged>();
      for (int64_t j = 0; j < wper && mins; ++j) {
        auto [lr, lp, valid] = item_of(j, n_witems, kb / 2);
        Value* r = b.min(b.add(m0, lr), i32c(n_out - 1));
        std::vector<Value*> ld = load_pair_q4k(b, w, is_planar(s), n_out, n_in, r, b.add(kblk, b.mulc(lp, 2)));
        st->stores.push_back([&b, &guarded, ld, lr, lp, valid, sw, bm, wq, wd, wmn] {
          std::array<std::pair<Value*, Value*>, 2> sc = mma::q4k_pair_scales(b, ld[2], ld[3]);
          guarded(valid, [&] {
            for (int h = 0; h < 2; ++h) {
              b.store(wq, b.add(b.mulc(lr, sw), b.addc(b.mulc(lp, 8), 4 * h)), b.bitcast(ld[h], Type::vector(Scalar::kI32, 4)), 16);
              Value* at = b.add(b.mulc(b.addc(b.mulc(lp, 2), h), bm), lr);
              b.store(wd, at, sc[h].first);
              b.store(wmn, at, sc[h].second);
            }
          });
        });
      }
      for (int64_t j = 0; j < wper && !mins; ++j) {
        auto [lr, lb, valid] = item_of(j, n_witems, kb);
        Value* r = b.min(b.add(m0, lr), i32c(n_out - 1));
        UnitLoad ul = load_unit(b, wt, w, is_planar(s), n_out, n_in, r, b.convert(b.add(kblk, lb), ty::i64));
        st->stores.push_back([&b, &guarded, ul, lr, lb, valid, sw, nw, bm, wq, wd, wmn] {
          std::vector<Value*> ws = ul.words();
          auto [d, dm] = ul.scales();
          guarded(valid, [&] {
            for (int64_t p = 0; p < nw / 4; ++p)
              b.store(wq, b.add(b.mulc(lr, sw), b.addc(b.mulc(lb, nw), 4 * p)),
                      b.build({ws[4 * p], ws[4 * p + 1], ws[4 * p + 2], ws[4 * p + 3]}), 16);
            b.store(wd, b.add(b.mulc(lb, bm), lr), d);
            if (wmn) b.store(wmn, b.add(b.mulc(lb, bm), lr), dm);
          });
        });
      }
      for (int64_t j = 0; j < xper; ++j) {
        auto [lt, lb, valid] = xitems[static_cast<size_t>(j)];
        Value* t = xrows[static_cast<size_t>(j)];
        Value* base = b.mul(b.convert(b.add(b.mul(t, i32c(nb)), b.add(kblk, lb)), ty::i64), b.i64(kXBlockBytes));
        std::vector<Value*> words;
        for (int i = 0; i < 9; ++i) words.push_back(b.load_at(xq, b.add(base, b.i64(4 * i)), ty::i32, 4));
        st->stores.push_back([&b, &guarded, words, lt, lb, valid, sx, bn, xs, xd, xm] {
          guarded(valid, [&] {
            Value* x0 = b.bitcast(words[0], ty::u32);
            // words q and q + 4 side by side: one 8-byte load gives a B fragment.
            for (int h = 0; h < 2; ++h)
              b.store(xs, b.add(b.mulc(lt, sx), b.addc(b.mulc(lb, 8), 4 * h)),
                      b.build({words[1 + 2 * h], words[5 + 2 * h], words[2 + 2 * h], words[6 + 2 * h]}), 16);
            b.store(xd, b.add(b.mulc(lb, bn), lt), f16_bits_to_f32(b, b.convert(b.andc(x0, 0xFFFF), ty::u16)));
            if (xm) b.store(xm, b.add(b.mulc(lb, bn), lt), f16_bits_to_f32(b, b.convert(b.shrc(x0, 16), ty::u16)));
          });
        });
      }
      return st;
    };
    auto flush = [](const std::shared_ptr<Staged>& st) {
      for (auto& fn : st->stores) fn();
    };
    flush(stage(b.i32(0)));
    b.barrier();
    std::vector<Value*> init(static_cast<size_t>(mtiles * ntiles), b.const_float(Type::vector(Scalar::kF32, 4), 0.0));
    const Type i32x2 = Type::vector(Scalar::kI32, 2), f32x2 = Type::vector(Scalar::kF32, 2);
    // The block sums leave the tensor cores already offset by 1.5 * 2^23 (the accumulator input),
    // so the float subtraction alone makes them floats.
    Value* bias4 = b.c(Type::vector(Scalar::kI32, 4), 0x4B400000);
    Value* magic = b.f32(12582912.0);
    auto acc = b.for_loop(b.i32(0), i32c(nb), i32c(kb), init, [&](Value* kblk, std::span<Value* const> itv) {
      Value* next = b.min(b.addc(kblk, kb), i32c(nb - kb));
      auto pending = stage(next);
      std::vector<Value*> a(itv.begin(), itv.end());
      std::vector<std::array<Value*, 4>> pair_words(static_cast<size_t>(mtiles));  // Q4_K: a pair's raw words
      for (int64_t blk = 0; blk < kb; ++blk) {
        const size_t nmt = static_cast<size_t>(mtiles);
        std::vector<Value*> af(nmt), ah(nmt), dw0(nmt), dw8(nmt), dm0(nmt), dm8(nmt);
        for (int64_t mt = 0; mt < mtiles; ++mt) {
          const size_t m = static_cast<size_t>(mt);
          Value* row = b.add(wm0, b.addc(gq, 16 * mt));
          Value* i0 = b.add(b.mulc(row, sw), b.addc(qq, blk * nw));
          Value* i8 = b.addc(i0, 8 * sw);
          if (mins) {
            // Unit 2p + h of the pair: bytes k and 16 + k of the pair's 32 are its elements k and
            // 16 + k, in the low (h = 0) or high (h = 1) nibbles; nibbles 0..15 are s8 as they are.
            std::array<Value*, 4>& pw = pair_words[m];
            if (blk % 2 == 0) {
              Value* p0 = b.add(b.mulc(row, sw), b.addc(qq, blk / 2 * 8));
              Value* p8 = b.addc(p0, 8 * sw);
              pw = {b.load(wq, p0), b.load(wq, p8), b.load(wq, b.addc(p0, 4)), b.load(wq, b.addc(p8, 4))};
            }
            std::vector<Value*> nib;
            for (Value* x : pw) {
              Value* u = b.bitcast(x, ty::u32);
              nib.push_back(b.bitcast(b.andc(blk % 2 ? b.shrc(u, 4) : u, 0x0F0F0F0F), ty::i32));
            }
            af[m] = b.build(nib);
          } else if (q4) {
            Value* w0 = b.load(wq, i0);
            Value* w8 = b.load(wq, i8);
            af[m] = b.build({lo_s8(b, w0), lo_s8(b, w8), hi_s8(b, w0), hi_s8(b, w8)});
          } else if (halves) {
            Value* z = b.i32(0);
            af[m] = b.build({b.load(wq, i0), b.load(wq, i8), z, z});
            ah[m] = b.build({z, z, b.load(wq, b.addc(i0, 4)), b.load(wq, b.addc(i8, 4))});
          } else {
            af[m] = b.build({b.load(wq, i0), b.load(wq, i8), b.load(wq, b.addc(i0, 4)), b.load(wq, b.addc(i8, 4))});
          }
          dw0[m] = b.load(wd, b.addc(row, blk * bm));
          dw8[m] = b.load(wd, b.addc(row, blk * bm + 8));
          if (mins) {
            dm0[m] = b.neg(b.load(wmn, b.addc(row, blk * bm)));
            dm8[m] = b.neg(b.load(wmn, b.addc(row, blk * bm + 8)));
          } else if (halves) {
            dm0[m] = b.load(wmn, b.addc(row, blk * bm));
            dm8[m] = b.load(wmn, b.addc(row, blk * bm + 8));
          }
        }
        for (int64_t n8 = 0; n8 < ntiles; ++n8) {
          Value* tok = b.add(wn0, b.addc(gq, 8 * n8));
          Value* bf = b.load(xs, b.add(b.mulc(tok, sx), b.addc(b.mulc(qq, 2), 8 * blk)), i32x2, 8);
          Value* xi = b.add(b.addc(wn0, blk * bn + 8 * n8), b.mulc(qq, 2));
          Value* dx = b.load(xd, xi, f32x2, 8);
          Value* xsum = mins ? b.load(xm, xi, f32x2, 8) : nullptr;
          for (int64_t mt = 0; mt < mtiles; ++mt) {
            const size_t m = static_cast<size_t>(mt);
            Value* c = b.mma(af[m], bf, bias4);
            Value* ch = halves ? b.mma(ah[m], bf, bias4) : nullptr;
            const size_t ai = static_cast<size_t>(mt * ntiles + n8);
            std::vector<Value*> lanes;
            for (int i = 0; i < 4; ++i) {
              Value* fi = b.sub(b.bitcast(b.extract(c, i), ty::f32), magic);
              Value* scale = b.mul(i / 2 ? dw8[m] : dw0[m], b.extract(dx, i % 2));
              Value* prev = b.extract(a[ai], i);
              // Q4_K: minus (dmin m) s_x first, then plus (d sc) d_x i.
              if (mins) prev = b.fma(i / 2 ? dm8[m] : dm0[m], b.extract(xsum, i % 2), prev);
              Value* v = b.fma(fi, scale, prev);
              if (halves) {
                Value* fh = b.sub(b.bitcast(b.extract(ch, i), ty::f32), magic);
                v = b.fma(fh, b.mul(i / 2 ? dm8[m] : dm0[m], b.extract(dx, i % 2)), v);
              }
              lanes.push_back(v);
            }
            a[ai] = b.build(lanes);
          }
        }
      }
      b.barrier();
      flush(pending);
      b.barrier();
      return a;
    });
    if (!id_) return mma::store_c(b, tile, acc, y, n_out, nt);
    // y [pair][n_out] of the listed pairs.
    for (int64_t n8 = 0; n8 < ntiles; ++n8)
      for (int i2 = 0; i2 < 2; ++i2) {
        Value* li = b.add(n0, b.add(wn0, b.addc(b.mulc(qq, 2), 8 * n8 + i2)));
        Value* in = b.cmp(Mode::kLt, li, cnt);
        Value* pair = b.load(list, b.min(li, b.addc(cnt, -1)));
        for (int64_t mt = 0; mt < mtiles; ++mt)
          for (int i = i2; i < 4; i += 2) {
            Value* r = b.add(m0, b.add(wm0, b.addc(gq, 16 * mt + 8 * (i / 2))));
            Value* v = b.extract(acc[static_cast<size_t>(mt * ntiles + n8)], i);
            b.when(b.bit_and(in, b.cmp(Mode::kLt, r, i32c(n_out))), [&] { b.store(y, b.add(b.mul(pair, i32c(n_out)), r), v); });
          }
      }
    };
    KernelLaunch l = mma::mma_launch(kname, tile0, n_out, nt);
    if (!id_) {
      tile_body(tile0);
    } else {
      // The expert's token tiles y, y + grid.y, ... below its pair count (most experts of a
      // prompt have fewer pairs than tokens: their CTAs past the count do nothing).
      const int64_t gy = l.grid[1];
      Value* tiles = b.div(b.addc(cnt, tile0.bn - 1), i32c(tile0.bn));
      b.for_loop(b.block_id(Mode::kY), tiles, i32c(gy), {}, [&](Value* ty_, std::span<Value* const>) {
        mma::MmaTile tl = tile0;
        tl.n0 = b.mulc(ty_, tile0.bn);
        tile_body(tl);
        return std::vector<Value*>{};
      });
      l.grid[2] = static_cast<uint32_t>(ne);
      l.args = {0, 1, 4, 3};
    }
    g.launches.push_back(l);
    return g;
  }
};

}  // namespace

const OpSpec& matmul_mmq_op() {
  static const MatmulMmqOp op(false);
  return op;
}

const OpSpec& matmul_mmq_id_op() {
  static const MatmulMmqOp op(true);
  return op;
}

}  // namespace loom::kernels
