// quantize_act: f32 activation rows -> the format the matmul of a weight type consumes (Q8_0,
// Q8_1, Q8_K blocks, or F16), bit-exact with llm::ref::quantize_activation, which decides
// token-exactness with llama.cpp. Two layouts: one thread per block (`coop` 0, the cpp default:
// a CPU thread walks whole blocks) or four elements per thread (`coop` 1, the GPU default: a
// 4096-element row spreads over 1024 threads in 8 CTAs instead of 128 threads that each walk
// 32 elements, which left the kernel latency-bound). F16/BF16/F32: one thread per element.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;

// Round to nearest, ties to even, of |v| < 2^22 (f32 or its lanes): the float adder rounds
// v + 1.5 * 2^23.
Value* nearest_int(Emit& b, Value* v) {
  Value* t = b.add(v, b.cf(v->type, 12582912.0));
  Value* bits = b.bitcast(t, v->type.with_elem(Scalar::kI32));
  return b.sub(b.andc(bits, 0x007fffff), b.c(bits->type, 0x00400000));
}

// The largest of an f32x8's lanes (none NaN) as a tree of halves; a maximum does not depend on
// the order it is taken in.
Value* lanes_max8(Emit& b, Value* m) {
  auto vmax = [&](Value* p, Value* q) { return b.select(b.cmp(Mode::kLt, p, q), q, p); };
  Value* m4 = vmax(b.build({b.extract(m, 0), b.extract(m, 1), b.extract(m, 2), b.extract(m, 3)}),
                   b.build({b.extract(m, 4), b.extract(m, 5), b.extract(m, 6), b.extract(m, 7)}));
  return vmax(vmax(b.extract(m4, 0), b.extract(m4, 2)), vmax(b.extract(m4, 1), b.extract(m4, 3)));
}

// Q8_0 / Q8_1 of one 32-element block: d = amax/127 (fp16), q = nearbyint(x * 127/amax).
void emit_q8_block(Emit& b, Value* x, Value* xq, Value* blk, bool with_sum) {
  const int bytes = with_sum ? 36 : 34, qoff = with_sum ? 4 : 2;
  Value* xb = b.offset(x, b.mulc(blk, 32));
  Value* amax = b.for_loop(b.i32(0), b.i32(32), b.i32(1), {b.f32(0)},
                           [&](Value* j, std::span<Value* const> it) {
                             Value* a = b.op(ir::Op::kAbs, {b.load(xb, j)});
                             // std::max(amax, a): a NaN-free max where ties keep amax.
                             Value* gt = b.cmp(Mode::kLt, it[0], a);
                             return std::vector<Value*>{b.select(gt, a, it[0])};
                           })[0];
  Value* d = b.div(amax, b.f32(127.0));
  Value* nz = b.cmp(Mode::kNe, amax, b.f32(0));
  Value* id = b.select(nz, b.div(b.f32(127.0), amax), b.f32(0));
  Value* base = b.mulc(blk, bytes);
  b.store_at(xq, base, b.bitcast(b.convert(d, ty::s(Scalar::kF16)), ty::s(Scalar::kU16)), 2);
  Value* qbase = b.addc(base, qoff);
  Value* sum = b.for_loop(b.i32(0), b.i32(32), b.i32(1), {b.i32(0)},
                          [&](Value* j, std::span<Value* const> it) {
                            Value* q = nearest_int(b, b.mul(b.load(xb, j), id));
                            b.store_at(xq, b.add(qbase, j), b.convert(q, ty::s(Scalar::kI8)), 1);
                            return std::vector<Value*>{b.add(it[0], q)};
                          })[0];
  if (with_sum) {
    Value* s = b.mul(d, b.convert(sum, ty::f32));
    b.store_at(xq, b.addc(base, 2), b.bitcast(b.convert(s, ty::s(Scalar::kF16)), ty::s(Scalar::kU16)), 2);
  }
}

// emit_q8_block for the cpp target in f32x8 vectors: the same values in every bit. The lanes'
// running maxima start at 0 and take a value only when it is larger (so NaN never wins, as in
// the scalar loop), and a maximum does not depend on the order it is taken in; each quant is
// the same product rounded the same way (the host compiler does not contract, -ffp-contract=off);
// the sum of the quants is an exact integer sum.
void emit_q8_block_cpu(Emit& b, Value* x, Value* xq, Value* blk, bool with_sum) {
  const Type f32x8 = Type::vector(Scalar::kF32, 8), i32x8 = Type::vector(Scalar::kI32, 8);
  const int bytes = with_sum ? 36 : 34, qoff = with_sum ? 4 : 2;
  Value* xb = b.offset(x, b.mulc(blk, 32));
  Value* v[4];
  Value* m = b.cf(f32x8, 0);
  for (int k = 0; k < 4; ++k) {
    v[k] = b.load(xb, b.i32(8 * k), f32x8, 4);
    Value* a = b.bitcast(b.andc(b.bitcast(v[k], i32x8), 0x7FFFFFFF), f32x8);
    m = b.select(b.cmp(Mode::kLt, m, a), a, m);
  }
  Value* amax = lanes_max8(b, m);
  Value* d = b.div(amax, b.f32(127.0));
  Value* nz = b.cmp(Mode::kNe, amax, b.f32(0));
  Value* id = b.splat(b.select(nz, b.div(b.f32(127.0), amax), b.f32(0)), 8);
  Value* base = b.mulc(blk, bytes);
  b.store_at(xq, base, b.bitcast(b.convert(d, ty::s(Scalar::kF16)), ty::s(Scalar::kU16)), 2);
  Value* sum = nullptr;
  for (int k = 0; k < 4; ++k) {
    Value* q = nearest_int(b, b.mul(v[k], id));
    b.store_at(xq, b.addc(base, qoff + 8 * k), b.convert(q, Type::vector(Scalar::kI8, 8)), 1);
    sum = sum ? b.add(sum, q) : q;
  }
  if (with_sum) {
    Value* tot = b.extract(sum, 0);
    for (int l = 1; l < 8; ++l) tot = b.add(tot, b.extract(sum, l));
    Value* sv = b.mul(d, b.convert(tot, ty::f32));
    b.store_at(xq, b.addc(base, 2), b.bitcast(b.convert(sv, ty::s(Scalar::kF16)), ty::s(Scalar::kU16)), 2);
  }
}

// Q8_K of one 256-element block: max = first element of largest magnitude, iscale = -127/max,
// q = min(127, nearest(iscale * x)), bsums per 16, d = 1/iscale (f32).
void emit_q8k_block(Emit& b, Value* x, Value* xq, Value* blk) {
  Value* xb = b.offset(x, b.mulc(blk, 256));
  auto mm = b.for_loop(b.i32(0), b.i32(256), b.i32(1), {b.f32(0), b.f32(0)},
                       [&](Value* j, std::span<Value* const> it) {
                         Value* v = b.load(xb, j);
                         Value* a = b.op(ir::Op::kAbs, {v});
                         Value* gt = b.cmp(Mode::kGt, a, it[0]);
                         return std::vector<Value*>{b.select(gt, a, it[0]), b.select(gt, v, it[1])};
                       });
  Value* amax = mm[0];
  Value* mx = mm[1];
  Value* base = b.mulc(blk, 292);
  Value* zero = b.cmp(Mode::kEq, amax, b.f32(0));
  Value* iscale = b.select(zero, b.f32(0), b.div(b.f32(-127.0), mx));
  Value* d = b.select(zero, b.f32(0), b.div(b.f32(1.0), iscale));
  b.store_at(xq, base, d, 4);
  Value* qbase = b.addc(base, 4);
  Value* sbase = b.addc(base, 260);
  b.for_loop(b.i32(0), b.i32(16), b.i32(1), {}, [&](Value* g, std::span<Value* const>) {
    Value* g16 = b.mulc(g, 16);
    Value* sum = b.for_loop(b.i32(0), b.i32(16), b.i32(1), {b.i32(0)},
                            [&](Value* l, std::span<Value* const> it) {
                              Value* j = b.add(g16, l);
                              Value* q = b.min(b.i32(127), nearest_int(b, b.mul(iscale, b.load(xb, j))));
                              b.store_at(xq, b.add(qbase, j), b.convert(q, ty::s(Scalar::kI8)), 1);
                              return std::vector<Value*>{b.add(it[0], q)};
                            })[0];
    b.store_at(xq, b.add(sbase, b.mulc(g, 2)), b.convert(sum, ty::s(Scalar::kI16)), 2);
    return std::vector<Value*>{};
  });
}

// emit_q8k_block for the cpp target in f32x8 vectors, the same bytes: the block's largest
// magnitude is a maximum over the lanes (order-free; a lane takes a value only when it is larger,
// so NaN never wins, as with the scalar strict '>'), the element it comes from is the first one of
// that magnitude (the least index among the lanes equal to it: the scalar loop keeps the first),
// each quant is the same product rounded the same way, and the bsums are exact integer sums.
void emit_q8k_block_cpu(Emit& b, Value* x, Value* xq, Value* blk) {
  const Type f32x8 = Type::vector(Scalar::kF32, 8), i32x8 = Type::vector(Scalar::kI32, 8);
  Value* xb = b.offset(x, b.mulc(blk, 256));
  Value* v[32];
  Value* a[32];
  Value* m = b.cf(f32x8, 0);
  for (int k = 0; k < 32; ++k) {
    v[k] = b.load(xb, b.i32(8 * k), f32x8, 4);
    a[k] = b.bitcast(b.andc(b.bitcast(v[k], i32x8), 0x7FFFFFFF), f32x8);
    m = b.select(b.cmp(Mode::kLt, m, a[k]), a[k], m);
  }
  Value* amax = lanes_max8(b, m);
  // The first index of the largest magnitude (256 where none: amax is then 0 and unused).
  std::vector<Value*> iota;
  for (int l = 0; l < 8; ++l) iota.push_back(b.i32(l));
  Value* lanes = b.build(iota);
  Value* am = b.splat(amax, 8);
  Value* first = b.c(i32x8, 256);
  for (int k = 0; k < 32; ++k)
    first = b.min(first, b.select(b.cmp(Mode::kEq, a[k], am), b.addc(lanes, 8 * k), b.c(i32x8, 256)));
  Value* j0 = b.extract(first, 0);
  for (int l = 1; l < 8; ++l) j0 = b.min(j0, b.extract(first, l));
  Value* mx = b.load(xb, b.min(j0, b.i32(255)));
  Value* base = b.mulc(blk, 292);
  Value* zero = b.cmp(Mode::kEq, amax, b.f32(0));
  Value* iscale = b.select(zero, b.f32(0), b.div(b.f32(-127.0), mx));
  Value* d = b.select(zero, b.f32(0), b.div(b.f32(1.0), iscale));
  b.store_at(xq, base, d, 4);
  Value* is8 = b.splat(iscale, 8);
  Value* q[32];
  for (int k = 0; k < 32; ++k) {
    q[k] = b.min(b.c(i32x8, 127), nearest_int(b, b.mul(is8, v[k])));
    b.store_at(xq, b.addc(base, 4 + 8 * k), b.convert(q[k], Type::vector(Scalar::kI8, 8)), 1);
  }
  for (int g = 0; g < 16; ++g) {
    Value* s2 = b.add(q[2 * g], q[2 * g + 1]);
    Value* t = b.extract(s2, 0);
    for (int l = 1; l < 8; ++l) t = b.add(t, b.extract(s2, l));
    b.store_at(xq, b.addc(base, 260 + 2 * g), b.convert(t, ty::s(Scalar::kI16)), 2);
  }
}

// Cooperative Q8_0 / Q8_1 / Q8_K: thread i of the launch owns elements 4i..4i+3 (one 16-byte
// load), so a block of 32 (256) elements is shared by 8 (64) consecutive threads of one CTA.
// Bit-exactness: the block maximum is combined from the threads' maxima in element order with
// the reference's comparison (std::max for Q8_0/Q8_1; for Q8_K a strict '>' that keeps the
// first element of the largest magnitude, and each thread's candidate is its own first one);
// the quants use the reference's float operations per element; integer sums are exact in any
// order. Phases split by CTA barriers: thread maxima | quants and partial sums | block sums.
void emit_q8_coop(Emit& b, GgmlType t, Value* x, Value* xq, int64_t units, int64_t threads) {
  const bool qk = t == GgmlType::Q8_K, q81 = t == GgmlType::Q8_1;
  const int64_t group = qk ? 64 : 8;  // threads per quant block
  const int bytes = qk ? 292 : q81 ? 36 : 34, qoff = qk || q81 ? 4 : 2;
  Value* tid = b.thread_id(Mode::kX);
  Value* i = b.global_x();
  Value* live = b.cmp(Mode::kLt, i, b.i32(static_cast<int32_t>(units)));
  Value* ic = b.min(i, b.i32(static_cast<int32_t>(units - 1)));  // idle threads read a valid row
  Value* v = b.load(x, b.mulc(ic, 4), ty::v(Scalar::kF32, 4), 16);
  Value* sh_a = b.alloc_shared(Scalar::kF32, threads);
  Value* sh_m = qk ? b.alloc_shared(Scalar::kF32, threads) : nullptr;
  Value* sh_s = b.alloc_shared(Scalar::kI32, threads);
  Value* amax = b.f32(0);
  Value* mx = b.f32(0);
  for (int j = 0; j < 4; ++j) {
    Value* e = b.extract(v, j);
    Value* a = b.op(ir::Op::kAbs, {e});
    if (qk) {
      Value* gt = b.cmp(Mode::kGt, a, amax);
      mx = b.select(gt, e, mx);
      amax = b.select(gt, a, amax);
    } else {
      amax = b.select(b.cmp(Mode::kLt, amax, a), a, amax);  // std::max(amax, a)
    }
  }
  b.store(sh_a, tid, amax);
  if (qk) b.store(sh_m, tid, mx);
  b.barrier();

  Value* g0 = b.sub(tid, b.rem(tid, b.i32(static_cast<int32_t>(group))));
  Value* bm = b.f32(0);
  Value* bmx = b.f32(0);
  for (int64_t k = 0; k < group; ++k) {
    Value* a = b.load(sh_a, b.addc(g0, k));
    if (qk) {
      Value* gt = b.cmp(Mode::kGt, a, bm);
      bmx = b.select(gt, b.load(sh_m, b.addc(g0, k)), bmx);
      bm = b.select(gt, a, bm);
    } else {
      bm = b.select(b.cmp(Mode::kLt, bm, a), a, bm);
    }
  }
  Value* blk = b.div(i, b.i32(static_cast<int32_t>(group)));
  Value* sub = b.rem(i, b.i32(static_cast<int32_t>(group)));
  Value* base = b.mul(blk, b.i32(bytes));
  Value* d;
  Value* scale;  // what x is multiplied by before rounding
  if (qk) {
    Value* zero = b.cmp(Mode::kEq, bm, b.f32(0));
    scale = b.select(zero, b.f32(0), b.div(b.f32(-127.0), bmx));
    d = b.select(zero, b.f32(0), b.div(b.f32(1.0), scale));
  } else {
    d = b.div(bm, b.f32(127.0));
    scale = b.select(b.cmp(Mode::kNe, bm, b.f32(0)), b.div(b.f32(127.0), bm), b.f32(0));
  }
  Value* packed = b.i32(0);
  Value* qsum = b.i32(0);
  for (int j = 0; j < 4; ++j) {
    // A max that cannot change the product (|x * scale| <= 127.5) keeps a host compiler from
    // fusing the multiply into the rounding add: the reference rounds the product first.
    Value* q = nearest_int(b, b.max(b.mul(b.extract(v, j), scale), b.f32(-1024.0)));
    if (qk) q = b.min(b.i32(127), q);
    qsum = b.add(qsum, q);
    packed = b.bit_or(packed, b.shlc(b.andc(q, 0xFF), 8 * j));
  }
  b.store(sh_s, tid, qsum);
  b.if_then_else(live, {}, [&] {
    Value* qo = b.add(base, b.addc(b.mulc(sub, 4), qoff));
    Value* pu = b.bitcast(packed, ty::u32);
    if (qk || q81) {
      b.store_at(xq, qo, pu, 4);
    } else {  // Q8_0 quants are only 2-byte aligned (34-byte blocks)
      b.store_at(xq, qo, b.convert(b.andc(pu, 0xFFFF), ty::s(Scalar::kU16)), 2);
      b.store_at(xq, b.addc(qo, 2), b.convert(b.shrc(pu, 16), ty::s(Scalar::kU16)), 2);
    }
    b.if_then_else(b.cmp(Mode::kEq, sub, b.i32(0)), {}, [&] {
      if (qk) b.store_at(xq, base, d, 4);
      else b.store_at(xq, base, b.bitcast(b.convert(d, ty::s(Scalar::kF16)), ty::s(Scalar::kU16)), 2);
      return std::vector<Value*>{};
    });
    return std::vector<Value*>{};
  });
  if (!qk && !q81) return;
  b.barrier();
  // Block sums: Q8_1's s = d * (sum of its 32 quants), by the block's first thread; Q8_K's 16
  // bsums of 16 quants, by the first thread of each run of 4.
  const int64_t per = qk ? 4 : 8;
  Value* first = b.cmp(Mode::kEq, b.rem(tid, b.i32(static_cast<int32_t>(per))), b.i32(0));
  b.if_then_else(b.bit_and(live, first), {}, [&] {
    Value* s = b.load(sh_s, tid);
    for (int64_t k = 1; k < per; ++k) s = b.add(s, b.load(sh_s, b.addc(tid, k)));
    if (qk) {
      Value* off = b.add(base, b.addc(b.mulc(b.div(sub, b.i32(4)), 2), 260));
      b.store_at(xq, off, b.convert(s, ty::s(Scalar::kI16)), 2);
    } else {
      Value* sv = b.mul(d, b.convert(s, ty::f32));
      b.store_at(xq, b.addc(base, 2), b.bitcast(b.convert(sv, ty::s(Scalar::kF16)), ty::s(Scalar::kU16)), 2);
    }
    return std::vector<Value*>{};
  });
}

class QuantizeActOp final : public OpSpec {
 public:
  std::string_view name() const override { return "quantize_act"; }
  std::string_view description() const override {
    return "f32 activation rows -> Q8_0/Q8_1/Q8_K blocks, F16 or BF16 (the matmul's activation operand)";
  }

  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(GgmlType t, shape_type(s, "dtype"));
    if (t != GgmlType::Q8_0 && t != GgmlType::Q8_1 && t != GgmlType::Q8_K && t != GgmlType::F16 &&
        t != GgmlType::BF16 && t != GgmlType::F32)
      return invalid_argument("quantize_act: dtype {} is not an activation format", llm::ggml_type_name(t));
    LOOM_ASSIGN_OR_RETURN(int64_t n, s.get("n_in"));
    LOOM_ASSIGN_OR_RETURN(int64_t nt, s.get("n_tokens"));
    if (nt <= 0 || nt > (1 << 20)) return invalid_argument("quantize_act: n_tokens={} out of range", nt);
    LOOM_RETURN_IF_ERROR(check_row(t, n, "n_in"));
    if (n * nt > (int64_t{1} << 30)) return invalid_argument("quantize_act: too large");
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& s) const override {
    GgmlType t = static_cast<GgmlType>(s.at("dtype"));
    int64_t n = s.at("n_in"), nt = s.at("n_tokens");
    return {{"x", ArgKind::kBuffer, ArgRole::kInput, n * nt * 4, Scalar::kF32},
            {"xq", ArgKind::kBuffer, ArgRole::kOutput, type_row_bytes(t, n) * nt,
             t == GgmlType::F32 ? Scalar::kF32 : Scalar::kU8}};
  }

  Cost cost(const Shape& s) const override {
    GgmlType t = static_cast<GgmlType>(s.at("dtype"));
    int64_t n = s.at("n_in"), nt = s.at("n_tokens");
    return {static_cast<double>(n * nt * 4 + type_row_bytes(t, n) * nt), static_cast<double>(3 * n * nt)};
  }

  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }

  // coop (Q8_* only): 0 one thread per block, 1 four elements per thread (emit_q8_coop); a
  // cooperative Q8_K block spans 64 threads, so its CTAs have at least 64.
  static bool q8(const Shape& s) {
    auto it = s.dims.find("dtype");
    const auto t = static_cast<GgmlType>(it == s.dims.end() ? 8 : it->second);
    return t == GgmlType::Q8_0 || t == GgmlType::Q8_1 || t == GgmlType::Q8_K;
  }
  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind) const override {
    if (!q8(s)) return {{"threads", {32, 64, 128, 256}}, {"coop", {0}}};
    return {{"threads", {32, 64, 128, 256}}, {"coop", {0, 1}}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    if (t == ir::TargetKind::kCpp) return {{"threads", 32}, {"coop", 0}};
    return {{"threads", 128}, {"coop", q8(s) ? 1 : 0}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    GgmlType t = static_cast<GgmlType>(s.at("dtype"));
    const int64_t n = s.at("n_in"), nt = s.at("n_tokens");
    const bool coop = sch.at("coop") != 0;
    const int64_t per =
        coop ? 4 : (t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F32) ? 1 : type_block_elems(t);
    const int64_t units = n * nt / per;  // rows are whole blocks, so blocks never straddle rows
    const int64_t threads = coop && t == GgmlType::Q8_K ? std::max<int64_t>(64, sch.at("threads")) : sch.at("threads");
    Generated g;
    std::string kname = fmt::format("quantize_act_{}", llm::ggml_type_name(t));
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    Value* x = b.param(ty::gptr(Scalar::kF32), "x");
    Value* xq = b.param(ty::gptr(Scalar::kU8), "xq");
    if (coop) emit_q8_coop(b, t, x, xq, units, threads);
    Value* i = coop ? nullptr : b.global_x();
    if (!coop) b.if_then_else(b.cmp(Mode::kLt, i, b.i32(static_cast<int32_t>(units))), {}, [&] {
      switch (t) {
        case GgmlType::Q8_0:
        case GgmlType::Q8_1:
          if (target == ir::TargetKind::kCpp) emit_q8_block_cpu(b, x, xq, i, t == GgmlType::Q8_1);
          else emit_q8_block(b, x, xq, i, t == GgmlType::Q8_1);
          break;
        case GgmlType::Q8_K:
          if (target == ir::TargetKind::kCpp) emit_q8k_block_cpu(b, x, xq, i);
          else emit_q8k_block(b, x, xq, i);
          break;
        case GgmlType::F16: {
          Value* h = b.bitcast(b.convert(b.load(x, i), ty::s(Scalar::kF16)), ty::s(Scalar::kU16));
          b.store_at(xq, b.mulc(i, 2), h, 2);
          break;
        }
        case GgmlType::BF16: {
          // Round to nearest even on the bits (NaN: truncated, quiet bit set), as fp32_to_bf16.
          Value* u = b.bitcast(b.load(x, i), ty::u32);
          Value* rne = b.shrc(b.add(b.add(u, b.c(ty::u32, 0x7FFF)), b.andc(b.shrc(u, 16), 1)), 16);
          Value* nan = b.cmp(Mode::kGt, b.andc(u, 0x7FFFFFFF), b.c(ty::u32, 0x7F800000));
          Value* h = b.select(nan, b.bit_or(b.shrc(u, 16), b.c(ty::u32, 0x40)), rne);
          b.store_at(xq, b.mulc(i, 2), b.convert(h, ty::s(Scalar::kU16)), 2);
          break;
        }
        default: b.store_at(xq, b.mulc(i, 4), b.load(x, i), 4); break;
      }
      return std::vector<Value*>{};
    });
    KernelLaunch l;
    l.kernel = kname;
    l.grid = {static_cast<uint32_t>((units + threads - 1) / threads), 1, 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    l.args = {0, 1};
    g.launches.push_back(l);
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    int64_t n = s.at("n_in"), nt = s.at("n_tokens");
    std::vector<float> v = random_floats(rng, static_cast<size_t>(n * nt), -2.0f, 2.0f);
    // Exact halves exercise the ties-to-even rounding; one all-zero block the amax == 0 path
    // (the rest of the data stays random).
    std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
    for (int i = 0; i < 8; ++i) v[pick(rng)] = 0.5f * static_cast<float>(static_cast<int>(pick(rng) % 9) - 4);
    if (n >= 512 && nt >= 1) std::fill(v.begin() + 256, v.begin() + 512, 0.0f);
    // Blocks whose largest magnitude occurs twice with opposite signs (beyond the random range):
    // Q8_K's scale takes the sign of the first (in one 8-lane group, and 100 elements apart).
    if (n >= 256) {
      v[100] = -2.5f;
      v[200] = 2.5f;
    }
    if (n >= 768) {
      v[512 + 30] = 3.0f;
      v[512 + 31] = -3.0f;
    }
    a[0].bytes.resize(v.size() * 4);
    std::memcpy(a[0].bytes.data(), v.data(), a[0].bytes.size());
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    GgmlType t = static_cast<GgmlType>(s.at("dtype"));
    int64_t n = s.at("n_in"), nt = s.at("n_tokens");
    const float* x = reinterpret_cast<const float*>(a[0].bytes.data());
    int64_t rb = type_row_bytes(t, n);
    a[1].bytes.resize(static_cast<size_t>(rb * nt));
    for (int64_t r = 0; r < nt; ++r) llm::ref::quantize_activation(t, x + r * n, a[1].bytes.data() + r * rb, n);
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    for (int dt : {8, 9, 15, 1, 30}) {
      out.push_back({{{"n_in", 256}, {"n_tokens", 1}, {"dtype", dt}}});
      out.push_back({{{"n_in", dt == 15 ? 1536 : 576}, {"n_tokens", 3}, {"dtype", dt}}});
    }
    out.push_back({{{"n_in", 4096}, {"n_tokens", 2}, {"dtype", 8}}});
    return out;
  }
};

}  // namespace

const OpSpec& quantize_act_op() {
  static const QuantizeActOp op;
  return op;
}

}  // namespace loom::kernels
