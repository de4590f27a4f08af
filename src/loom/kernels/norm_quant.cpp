// rms_norm_q8: RMS norm (optionally after the residual add) that writes the normalized row
// straight into the Q8_0 / Q8_1 / Q8_K blocks the next matvec reads, bit-identical to
// llm::ref::rms_norm followed by llm::ref::quantize_activation: the f32 row never goes to memory.
#include <cmath>
#include <functional>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Scalar;
using ir::Type;
using ir::Value;

constexpr int64_t kQ8_0 = 8, kQ8_1 = 9, kQ8_K = 15;  // GGUF type numbers

// Shape: n_rows, n (a multiple of 32; of 256 for Q8_K), has_weight, eps_f32, dtype (8: Q8_0,
// 9: Q8_1, 15: Q8_K), add (0/1: a + b first, the sum written to `sum`), inplace (optional, 0/1:
// `sum` may share memory with a or b, so no CTA may write it while another still reads the
// row: one CTA per row). Args: x | a, b; [w]; [sum]; xq (blocks, u8).
//
// Bit-exactness: the reference sums x^2 (each rounded to float) in double, in order. The cpu
// kernel does exactly that; GPU threads sum strided subsets in double and thread 0 adds the
// partials: a double sum of float squares differs from the in-order one only below 2^-53
// relative, which the float rounding of the mean absorbs except in vanishingly rare cases.
// Then scale = 1/sqrt(mean + eps) and y = (x * scale) * w in float as the reference, and each
// 32-value block is quantized as ref::quantize_activation (amax, d = amax/127, 127/amax,
// round half to even via the 1.5 * 2^23 adder).
class NormQ8Op final : public OpSpec {
 public:
  std::string_view name() const override { return "rms_norm_q8"; }
  std::string_view description() const override {
    return "[sum = a + b;] rms_norm [* w] written as Q8_0/Q8_1 blocks for the next matvec";
  }

  Status validate(const Shape& s) const override {
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_rows", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n", 32, int64_t{1} << 20));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "has_weight", 0, 1));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "add", 0, 1));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "dtype", kQ8_0, kQ8_K));
    if (s.dims.at("dtype") != kQ8_0 && s.dims.at("dtype") != kQ8_1 && s.dims.at("dtype") != kQ8_K)
      return invalid_argument("rms_norm_q8: dtype {} is not Q8_0 (8), Q8_1 (9) or Q8_K (15)", s.dims.at("dtype"));
    if (s.dims.count("inplace")) LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "inplace", 0, 1));
    if (s.dims.at("n") % 32) return invalid_argument("rms_norm_q8: n={} is not a multiple of 32", s.dims.at("n"));
    // Q8_K: whole 256-blocks; the GPU form holds at most kMaxVecLoads float4s per thread.
    if (s.dims.at("dtype") == kQ8_K && (s.dims.at("n") % 256 || s.dims.at("n") > 4 * 512 * kMaxVecLoads))
      return invalid_argument("rms_norm_q8: Q8_K needs n a multiple of 256 and at most {}", 4 * 512 * kMaxVecLoads);
    if (s.dims.at("n_rows") * s.dims.at("n") > (int64_t{1} << 30))
      return invalid_argument("rms_norm_q8: more than 2^30 elements");
    if (!(elt::f32_dim(s, "eps_f32") > 0.0f)) return invalid_argument("rms_norm_q8: eps_f32 must be > 0");
    return Status();
  }

  static int64_t block_bytes(const Shape& s) {
    const int64_t t = dim_or(s, "dtype", kQ8_0);
    return t == kQ8_K ? 292 : t == kQ8_1 ? 36 : 34;
  }
  static int64_t block_elems(const Shape& s) { return dim_or(s, "dtype", kQ8_0) == kQ8_K ? 256 : 32; }
  static int64_t row_bytes(const Shape& s) { return dim_or(s, "n", 0) / block_elems(s) * block_bytes(s); }

  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t rows = dim_or(s, "n_rows", 0), n = dim_or(s, "n", 0);
    const bool add = dim_or(s, "add", 0) != 0;
    std::vector<ArgSpec> a;
    if (add) {
      a.push_back(elt::buffer_arg("a", ArgRole::kInput, rows * n, Scalar::kF32));
      a.push_back(elt::buffer_arg("b", ArgRole::kInput, rows * n, Scalar::kF32));
    } else {
      a.push_back(elt::buffer_arg("x", ArgRole::kInput, rows * n, Scalar::kF32));
    }
    if (dim_or(s, "has_weight", 0)) a.push_back(elt::buffer_arg("w", ArgRole::kInput, n, Scalar::kF32));
    if (add) a.push_back(elt::buffer_arg("sum", ArgRole::kOutput, rows * n, Scalar::kF32));
    a.push_back(elt::buffer_arg("xq", ArgRole::kOutput, rows * row_bytes(s), Scalar::kU8));
    return a;
  }

  Cost cost(const Shape& s) const override {
    const double rows = static_cast<double>(dim_or(s, "n_rows", 0)), n = static_cast<double>(dim_or(s, "n", 0));
    const bool add = dim_or(s, "add", 0) != 0;
    const double in = rows * n * 4.0 * (add ? 3.0 : 1.0);  // a, b, sum | x
    return {in + rows * static_cast<double>(row_bytes(s)) + (dim_or(s, "has_weight", 0) ? 4.0 * n : 0.0),
            rows * n * (add ? 8.0 : 7.0)};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }

  // regs (GPU): warp w owns blocks w, w + warps, ...; each lane loads its value of every one of
  // them at once and keeps them in registers for the second pass, so a row costs one memory
  // round trip (the loop form, regs=0, waits for one load per element in each pass, which made
  // the fused 8B decode step slower than separate rms_norm and quantize_act launches). Taken
  // only where warps | n/32 with at most kMaxRegBlocks blocks per warp (else the loop form).
  static constexpr int32_t kMaxRegBlocks = 16;
  static bool regs_fit(int64_t n, int64_t warps) {
    const int64_t nb = n / 32;
    return warps <= nb && nb % warps == 0 && nb / warps <= kMaxRegBlocks;
  }
  // vec (GPU): thread i of a CTA of T = 32 * warps threads owns the float4s i + j*T
  // of the row, j < J = ceil(n / 4T), all loaded at once with one 16-byte load each; every CTA
  // sums the squares of the whole row (the same order in each, so the same sum) and then
  // quantizes its slice: split=1 runs J CTAs per row, CTA c taking the float4s j = c (the
  // row's work spreads over J SMs with no grid sync, at the price of each CTA reading the row
  // from L2); split=0 one CTA that quantizes every j. Quant blocks are 8 (Q8_K: 64) consecutive
  // threads, their maxima combined by shuffles (and, for Q8_K, across the two warps through
  // shared memory). The only GPU form for Q8_K; at most kMaxVecLoads float4s per thread.
  static constexpr int32_t kMaxVecLoads = 32;
  static int64_t vec_loads(int64_t n, int64_t warps) { return (n / 4 + 32 * warps - 1) / (32 * warps); }
  static bool inplace(const Shape& s) { return dim_or(s, "inplace", 0) != 0; }
  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    if (!elt::gpu_target(t)) return {{"threads", {1}}};
    const std::vector<int64_t> split = inplace(s) ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1};
    if (dim_or(s, "dtype", kQ8_0) == kQ8_K) return {{"warps", {2, 4, 8, 16}}, {"regs", {0}}, {"vec", {1}}, {"split", split}};
    return {{"warps", {1, 2, 4, 8, 16}}, {"regs", {0, 1}}, {"vec", {0, 1}}, {"split", split}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    if (!elt::gpu_target(t)) return {{"threads", 1}};
    const int64_t n = dim_or(s, "n", 32);
    const bool qk = dim_or(s, "dtype", kQ8_0) == kQ8_K;
    // vec with split: the fewest warps, at least 4, that keep each thread at <= 4 float4s
    // (4096: 8 warps x 4 CTAs; 576: 4 warps x 2 CTAs). H200, one call per graph node with
    // dependent launch (tests/ops/small_kernel_bench_test.cpp): 4096 Q8_0 1.54 us (2/4/16 warps
    // 3.67/2.17/1.69, one CTA of 16 warps 2.19, the regs form 2.99); 576 Q8_0 4 warps
    // 1.01 us (1/2 warps 1.57/1.15, regs form 2.26); 4096 Q8_K 8 warps 1.80 us (add_rms_norm +
    // quantize_act: 1.83 + 1.78). In place, one CTA must hold the row: vec where 16 warps do it
    // in one pass, else (Q8_0/Q8_1) the regs/loop forms below.
    if (!inplace(s) || qk || vec_loads(n, 16) == 1) {
      for (int64_t w : {4, 8, 16}) {
        if (w == 16 || vec_loads(n, w) <= (inplace(s) ? 1 : 4))
          return {{"warps", w}, {"regs", 0}, {"vec", 1}, {"split", inplace(s) ? 0 : 1}};
      }
    }
    for (int64_t w : {16, 8, 4, 2, 1})
      if ((n >= 2048 || w <= 4) && regs_fit(n, w)) return {{"warps", w}, {"regs", 1}, {"vec", 0}, {"split", 0}};
    return {{"warps", n >= 2048 ? 8 : 4}, {"regs", 0}, {"vec", 0}, {"split", 0}};
  }

  Result<Generated> generate_vec(const Shape& s, int32_t warps, bool split, ir::TargetKind t) const;

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int32_t n = static_cast<int32_t>(s.dims.at("n"));
    const bool has_w = s.dims.at("has_weight") != 0, add = s.dims.at("add") != 0;
    const bool q81 = s.dims.at("dtype") == kQ8_1;
    const float eps = elt::f32_dim(s, "eps_f32");
    const bool gpu = elt::gpu_target(t);
    const int32_t W = gpu ? static_cast<int32_t>(sch.at("warps")) : 1;
    const bool qk = s.dims.at("dtype") == kQ8_K;
    // vec where asked (always for Q8_K); rows too long for it (> kMaxVecLoads float4s per
    // thread) take the regs/loop forms, so every schedule of the space generates.
    if (gpu && (qk || (sch.count("vec") && sch.at("vec") != 0 && vec_loads(n, W) <= kMaxVecLoads)))
      return generate_vec(s, W, sch.count("split") && sch.at("split") != 0 && !inplace(s), t);
    // regs where the warps fit the row (warps | n/32, <= kMaxRegBlocks blocks each), else the
    // loop form: every schedule of the space generates.
    const bool regs = gpu && sch.count("regs") && sch.at("regs") != 0 && regs_fit(n, W);
    const int32_t threads = gpu ? 32 * W : 1;
    const int32_t nb = n / 32, bytes = q81 ? 36 : 34;

    Generated g;
    ir::Kernel* k = g.module.add_kernel("rms_norm_q8");
    Emit b(*k);
    const Type fp = elt::global_ptr(Scalar::kF32);
    Value* x = b.param(fp, add ? "a" : "x");
    Value* xb = add ? b.param(fp, "b") : nullptr;
    Value* w = has_w ? b.param(fp, "w") : nullptr;
    Value* sum = add ? b.param(fp, "sum") : nullptr;
    Value* xq = b.param(elt::global_ptr(Scalar::kI8), "xq");
    Value* xh = b.bitcast(xq, elt::global_ptr(Scalar::kF16));  // fp16 scale fields
    auto i32 = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
    const Type f64 = Type::scalar(Scalar::kF64), f16 = Type::scalar(Scalar::kF16);
    const Type i8 = Type::scalar(Scalar::kI8), i32t = Type::scalar(Scalar::kI32);

    Value* row = b.block_id(ir::Mode::kX);
    Value* tid = b.thread_id(ir::Mode::kX);
    Value* base = b.mul(row, i32(n));
    auto input = [&](Value* e) {
      Value* v = b.load(x, e);
      return add ? b.add(v, b.load(xb, e)) : v;
    };
    // regs: the lane's value of each of its warp's blocks, loaded (with the weight) up front.
    Value* warp = gpu ? b.div(tid, i32(32)) : nullptr;
    Value* lane = gpu ? b.rem(tid, i32(32)) : nullptr;
    const int32_t per_warp = regs ? nb / W : 0;
    std::vector<Value*> rv, rw;
    auto reg_col = [&](int32_t j) { return b.add(b.mul(b.add(warp, i32(j * W)), i32(32)), lane); };
    Value* ss = nullptr;
    if (regs) {
      for (int32_t j = 0; j < per_warp; ++j) {
        rv.push_back(input(b.add(base, reg_col(j))));
        if (has_w) rw.push_back(b.load(w, reg_col(j)));
      }
      if (add)
        for (int32_t j = 0; j < per_warp; ++j) b.store(sum, b.add(base, reg_col(j)), rv[static_cast<size_t>(j)]);
      ss = b.const_float(f64, 0.0);
      for (Value* v : rv) ss = b.add(ss, b.convert(b.mul(v, v), f64));
      // Across the warp in double (shuffles move 32 bits: the two halves); each butterfly step
      // adds the same two values on both lanes, so every lane ends with the same sum.
      ss = b.warp_sum_f64(ss);
      Value* sh = b.alloc_shared(Scalar::kF64, W);
      b.if_then_else(b.cmp(ir::Mode::kEq, lane, i32(0)), {}, [&] {
        b.store(sh, warp, ss);
        return std::vector<Value*>{};
      });
      b.barrier();
      ss = b.load(sh, i32(0));
      for (int32_t i = 1; i < W; ++i) ss = b.add(ss, b.load(sh, i32(i)));
    }
    // Sum of squares in double over the thread's elements (in order on the cpu).
    if (!regs) {
    auto part = b.for_loop(tid, i32(n), i32(threads), {b.const_float(f64, 0.0)}, [&](Value* i, std::span<Value* const> it) {
      Value* e = b.add(base, i);
      Value* v = input(e);
      if (add) b.store(sum, e, v);
      return std::vector<Value*>{b.add(it[0], b.convert(b.mul(v, v), f64))};
    });
    ss = part[0];
    if (gpu) {
      Value* sh = b.alloc_shared(Scalar::kF64, threads);
      b.store(sh, tid, ss);
      b.barrier();
      ss = b.for_loop(i32(0), i32(threads), i32(1), {b.const_float(f64, 0.0)}, [&](Value* i, std::span<Value* const> it) {
        return std::vector<Value*>{b.add(it[0], b.load(sh, i))};
      })[0];
    }
    }
    Value* mean = b.convert(b.div(ss, b.const_float(f64, static_cast<double>(n))), elt::f32_type());
    Value* scale = b.div(b.f32(1.0), b.unary(ir::Op::kSqrt, b.add(mean, b.f32(eps))));
    // The add form reads the sum it wrote (the same float as a + b): `sum` may be `a` or `b`
    // (an in-place residual), whose elements other threads read in this second pass.
    auto y_at = [&](Value* i) {
      Value* e = b.add(base, i);
      Value* v = b.mul(add ? b.load(sum, e) : b.load(x, e), scale);
      return has_w ? b.mul(v, b.load(w, i)) : v;
    };
    // Round half to even of |v| < 2^22: the float adder rounds v + 1.5 * 2^23. v is y * id, and
    // the host compiler of the cpp target may fuse that multiply into the add (one rounding
    // instead of two: q off by one at near-ties, seen here once in ~40 runs); a max that cannot
    // change v (|v| <= 127.5) stands between them so the product is rounded first, as in the
    // reference's nearbyint(x * id). PTX never fuses (mul.rn, add.rn).
    auto nearest = [&](Value* v) {
      v = b.max(v, b.f32(-1024.0));
      Value* bits = b.bitcast(b.add(v, b.f32(12582912.0)), i32t);
      return b.sub(b.bit_and(bits, i32(0x007fffff)), i32(0x00400000));
    };
    auto scales = [&](Value* amax) {
      Value* d = b.div(amax, b.f32(127.0));
      Value* id = b.select(b.cmp(ir::Mode::kNe, amax, b.f32(0.0)), b.div(b.f32(127.0), amax), b.f32(0.0));
      return std::pair<Value*, Value*>{d, id};
    };
    Value* row_blocks = b.mul(row, i32(nb));
    auto store_block_head = [&](Value* blk, Value* d, Value* qsum) {
      Value* hi = b.mul(b.add(row_blocks, blk), i32(bytes / 2));
      b.store(xh, hi, b.convert(d, f16));
      if (q81) b.store(xh, b.add(hi, i32(1)), b.convert(b.mul(d, b.convert(qsum, elt::f32_type())), f16));
    };
    auto q_index = [&](Value* blk, Value* j) {
      return b.add(b.add(b.mul(b.add(row_blocks, blk), i32(bytes)), i32(q81 ? 4 : 2)), j);
    };

    if (!gpu && qk) {
      // Q8_K as quantize_row_q8_K: the first element of the largest magnitude sets iscale =
      // -127/max, q = min(127, nearest(iscale * y)), 16 sums of 16 quants, d = 1/iscale (f32).
      Value* xu = b.bitcast(xq, elt::global_ptr(Scalar::kU8));
      const int32_t nbk = n / 256;
      b.for_loop(i32(0), i32(nbk), i32(1), {}, [&](Value* blk, std::span<Value* const>) {
        Value* first = b.mul(blk, i32(256));
        auto mm = b.for_loop(i32(0), i32(256), i32(1), {b.f32(0.0), b.f32(0.0)}, [&](Value* j, std::span<Value* const> it) {
          Value* y = y_at(b.add(first, j));
          Value* a = b.op(ir::Op::kAbs, {y});
          Value* gt = b.cmp(ir::Mode::kGt, a, it[0]);
          return std::vector<Value*>{b.select(gt, a, it[0]), b.select(gt, y, it[1])};
        });
        Value* zero = b.cmp(ir::Mode::kEq, mm[0], b.f32(0.0));
        Value* iscale = b.select(zero, b.f32(0.0), b.div(b.f32(-127.0), mm[1]));
        Value* d = b.select(zero, b.f32(0.0), b.div(b.f32(1.0), iscale));
        Value* bb = b.mul(b.add(b.mul(row, i32(nbk)), blk), i32(292));
        b.store_at(xu, bb, d, 4);
        b.for_loop(i32(0), i32(16), i32(1), {}, [&](Value* gi, std::span<Value* const>) {
          Value* g16 = b.mul(gi, i32(16));
          Value* qs = b.for_loop(i32(0), i32(16), i32(1), {i32(0)}, [&](Value* l, std::span<Value* const> it) {
            Value* j = b.add(g16, l);
            Value* q = b.min(i32(127), nearest(b.mul(iscale, y_at(b.add(first, j)))));
            b.store_at(xu, b.add(bb, b.add(i32(4), j)), b.convert(q, i8), 1);
            return std::vector<Value*>{b.add(it[0], q)};
          })[0];
          b.store_at(xu, b.add(bb, b.add(i32(260), b.mul(gi, i32(2)))), b.convert(qs, Type::scalar(Scalar::kI16)), 2);
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
    } else if (!gpu) {
      b.for_loop(i32(0), i32(nb), i32(1), {}, [&](Value* blk, std::span<Value* const>) {
        Value* first = b.mul(blk, i32(32));
        Value* amax = b.for_loop(i32(0), i32(32), i32(1), {b.f32(0.0)}, [&](Value* j, std::span<Value* const> it) {
          Value* a = b.op(ir::Op::kAbs, {y_at(b.add(first, j))});
          return std::vector<Value*>{b.select(b.cmp(ir::Mode::kLt, it[0], a), a, it[0])};  // std::max
        })[0];
        auto [d, id] = scales(amax);
        Value* qsum = b.for_loop(i32(0), i32(32), i32(1), {i32(0)}, [&](Value* j, std::span<Value* const> it) {
          Value* q = nearest(b.mul(y_at(b.add(first, j)), id));
          b.store(xq, q_index(blk, j), b.convert(q, i8));
          return std::vector<Value*>{b.add(it[0], q)};
        })[0];
        store_block_head(blk, d, qsum);
        return std::vector<Value*>{};
      });
    } else {
      // One warp per block of 32 values, lane j on value j.
      auto quant_block = [&](Value* blk, Value* y) {
        Value* amax = b.warp_reduce(ir::Mode::kMax, b.op(ir::Op::kAbs, {y}));
        auto [d, id] = scales(amax);
        Value* q = nearest(b.mul(y, id));
        b.store(xq, q_index(blk, lane), b.convert(q, i8));
        Value* qsum = q81 ? b.warp_reduce(ir::Mode::kAdd, q) : i32(0);
        b.if_then_else(b.cmp(ir::Mode::kEq, lane, i32(0)), {}, [&] {
          store_block_head(blk, d, qsum);
          return std::vector<Value*>{};
        });
      };
      if (regs) {
        for (int32_t j = 0; j < per_warp; ++j) {
          Value* y = b.mul(rv[static_cast<size_t>(j)], scale);  // as y_at: (x * scale) * w
          if (has_w) y = b.mul(y, rw[static_cast<size_t>(j)]);
          quant_block(b.add(warp, i32(j * W)), y);
        }
      } else {
        b.for_loop(warp, i32(nb), i32(W), {}, [&](Value* blk, std::span<Value* const>) {
          quant_block(blk, y_at(b.add(b.mul(blk, i32(32)), lane)));
          return std::vector<Value*>{};
        });
      }
    }

    KernelLaunch l;
    l.kernel = "rms_norm_q8";
    l.grid = {static_cast<uint32_t>(s.dims.at("n_rows")), 1, 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    for (int i = 0; i < static_cast<int>(args(s).size()); ++i) l.args.push_back(i);
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    size_t i = 0;
    elt::fill_uniform(rng, elt::f32s(a[i++]), -2.0f, 2.0f);
    if (s.dims.at("add")) elt::fill_uniform(rng, elt::f32s(a[i++]), -2.0f, 2.0f);
    if (s.dims.at("has_weight")) elt::fill_uniform(rng, elt::f32s(a[i++]), 0.25f, 1.75f);
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const int64_t rows = s.dims.at("n_rows"), n = s.dims.at("n");
    const bool add = s.dims.at("add") != 0;
    size_t i = 0;
    const float* x = elt::f32s(a[i++]).data();
    const float* xb = add ? elt::f32s(a[i++]).data() : nullptr;
    const float* w = s.dims.at("has_weight") ? elt::f32s(a[i++]).data() : nullptr;
    if (add) {
      float* sm = elt::f32s(a[i++]).data();
      llm::ref::add(x, xb, sm, rows * n);
      x = sm;
    }
    std::vector<float> y(static_cast<size_t>(rows * n));
    llm::ref::rms_norm(x, w, y.data(), rows, n, elt::f32_dim(s, "eps_f32"));
    const auto type = static_cast<llm::GgmlType>(s.dims.at("dtype"));
    uint8_t* out = a[i].bytes.data();
    const int64_t rb = row_bytes(s);
    for (int64_t r = 0; r < rows; ++r) llm::ref::quantize_activation(type, y.data() + r * n, out + r * rb, n);
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    using elt::make_shape;
    return {
        make_shape({{"n_rows", 1}, {"n", 576}, {"has_weight", 1}, {"dtype", kQ8_1}, {"add", 0}}, {{"eps_f32", 1e-5f}}),
        make_shape({{"n_rows", 3}, {"n", 576}, {"has_weight", 1}, {"dtype", kQ8_1}, {"add", 1}}, {{"eps_f32", 1e-5f}}),
        make_shape({{"n_rows", 1}, {"n", 4096}, {"has_weight", 1}, {"dtype", kQ8_0}, {"add", 1}}, {{"eps_f32", 1e-5f}}),
        make_shape({{"n_rows", 2}, {"n", 64}, {"has_weight", 0}, {"dtype", kQ8_0}, {"add", 0}}, {{"eps_f32", 1e-6f}}),
        // Llama-3-8B rows at a batched decode step (GPU: 16 warps, 8 blocks each in registers).
        make_shape({{"n_rows", 4}, {"n", 4096}, {"has_weight", 1}, {"dtype", kQ8_0}, {"add", 1}}, {{"eps_f32", 1e-5f}}),
        // 3 blocks per row: 1 warp (the regs path) ...
        make_shape({{"n_rows", 2}, {"n", 96}, {"has_weight", 1}, {"dtype", kQ8_1}, {"add", 1}}, {{"eps_f32", 1e-5f}}),
        // Q8_K (the Q4_K/Q6_K models' activations): the 8B row, a one-block row, three blocks.
        make_shape({{"n_rows", 1}, {"n", 4096}, {"has_weight", 1}, {"dtype", kQ8_K}, {"add", 1}}, {{"eps_f32", 1e-5f}}),
        make_shape({{"n_rows", 2}, {"n", 256}, {"has_weight", 0}, {"dtype", kQ8_K}, {"add", 0}}, {{"eps_f32", 1e-6f}}),
        make_shape({{"n_rows", 3}, {"n", 768}, {"has_weight", 1}, {"dtype", kQ8_K}, {"add", 1}, {"inplace", 1}},
                   {{"eps_f32", 1e-5f}}),
        // In place: one CTA per row (the vec form without split, or the regs form).
        make_shape({{"n_rows", 2}, {"n", 4096}, {"has_weight", 1}, {"dtype", kQ8_0}, {"add", 1}, {"inplace", 1}},
                   {{"eps_f32", 1e-5f}}),
    };
  }
};


Result<Generated> NormQ8Op::generate_vec(const Shape& s, int32_t W, bool split, ir::TargetKind t) const {
  const int32_t n = static_cast<int32_t>(s.dims.at("n"));
  const bool has_w = s.dims.at("has_weight") != 0, add = s.dims.at("add") != 0;
  const bool q81 = s.dims.at("dtype") == kQ8_1, qk = s.dims.at("dtype") == kQ8_K;
  const float eps = elt::f32_dim(s, "eps_f32");
  const int32_t T = 32 * W, F = n / 4, J = static_cast<int32_t>(vec_loads(n, W));
  if (J > kMaxVecLoads) return invalid_argument("rms_norm_q8: {} float4s per thread (at most {})", J, kMaxVecLoads);
  if (qk && W % 2) return invalid_argument("rms_norm_q8: Q8_K blocks span two warps (warps={})", W);
  const int32_t bytes = static_cast<int32_t>(block_bytes(s)), qoff = qk || q81 ? 4 : 2;
  const int32_t group = qk ? 64 : 8;  // threads (float4s) per quant block
  const int32_t rbytes = static_cast<int32_t>(row_bytes(s));

  Generated g;
  ir::Kernel* k = g.module.add_kernel("rms_norm_q8");
  Emit b(*k);
  const Type fp = elt::global_ptr(Scalar::kF32), f4 = ty::v(Scalar::kF32, 4);
  const Type f64 = Type::scalar(Scalar::kF64), f16 = Type::scalar(Scalar::kF16), u16 = Type::scalar(Scalar::kU16);
  Value* x = b.param(fp, add ? "a" : "x");
  Value* xb = add ? b.param(fp, "b") : nullptr;
  Value* w = has_w ? b.param(fp, "w") : nullptr;
  Value* sum = add ? b.param(fp, "sum") : nullptr;
  Value* xq = b.param(elt::global_ptr(Scalar::kI8), "xq");
  Value* xu = b.bitcast(xq, elt::global_ptr(Scalar::kU8));
  auto i32 = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };

  Value* tid = b.thread_id(ir::Mode::kX);
  Value* lane = b.rem(tid, i32(32));
  Value* warp = b.div(tid, i32(32));
  Value* row = b.block_id(ir::Mode::kX);
  Value* cta = split ? b.block_id(ir::Mode::kY) : i32(0);
  Value* base = b.mul(row, i32(n));
  // The row, one float4 per j (clamped past the end: those lanes add nothing to the sum and
  // store nothing; blocks are whole float4 groups, so a block is all in or all out).
  std::vector<Value*> v(static_cast<size_t>(J)), in(static_cast<size_t>(J), nullptr);
  for (int32_t j = 0; j < J; ++j) {
    Value* f = b.add(tid, i32(int64_t{j} * T));
    if (int64_t{j + 1} * T > F) {
      in[static_cast<size_t>(j)] = b.cmp(ir::Mode::kLt, f, i32(F));
      f = b.min(f, i32(F - 1));
    }
    Value* e = b.add(base, b.mul(f, i32(4)));
    Value* val = b.load(x, e, f4, 16);
    if (add) val = b.add(val, b.load(xb, e, f4, 16));
    v[static_cast<size_t>(j)] = val;
  }
  // This CTA's slices: (j, the float4's index in the row, valid, values), the weights loaded and
  // the sums stored before the reduction so their latency overlaps it.
  struct Slice {
    Value* f;
    Value* ok;
    Value* val;
    Value* wv;
  };
  std::vector<Slice> slices;
  auto make_slice = [&](Value* jv, Value* val, bool maybe_out) {
    Slice sl;
    sl.f = b.add(tid, b.mul(jv, i32(T)));
    sl.ok = maybe_out ? b.cmp(ir::Mode::kLt, sl.f, i32(F)) : nullptr;
    Value* fc = maybe_out ? b.min(sl.f, i32(F - 1)) : sl.f;
    sl.val = val;
    sl.wv = has_w ? b.load(w, b.mul(fc, i32(4)), f4, 16) : nullptr;
    if (add) {
      auto st = [&] {
        b.store(sum, b.add(base, b.mul(sl.f, i32(4))), val, 16);
        return std::vector<Value*>{};
      };
      if (sl.ok) b.if_then_else(sl.ok, {}, st);
      else st();
    }
    slices.push_back(sl);
  };
  if (split) {
    Value* val = v[0];
    for (int32_t j = 1; j < J; ++j) val = b.select(b.cmp(ir::Mode::kEq, cta, i32(j)), v[static_cast<size_t>(j)], val);
    make_slice(cta, val, int64_t{J} * T > F);
  } else {
    for (int32_t j = 0; j < J; ++j) make_slice(i32(j), v[static_cast<size_t>(j)], in[static_cast<size_t>(j)] != nullptr);
  }

  // Sum of squares in double: the thread's values in order, the warp by a butterfly (each step
  // adds the same two values on both lanes, so all lanes agree), then the warps in order.
  Value* ss = b.const_float(f64, 0.0);
  for (int32_t j = 0; j < J; ++j)
    for (int e = 0; e < 4; ++e) {
      Value* xe = b.extract(v[static_cast<size_t>(j)], e);
      Value* sq = b.convert(b.mul(xe, xe), f64);
      if (in[static_cast<size_t>(j)]) sq = b.select(in[static_cast<size_t>(j)], sq, b.const_float(f64, 0.0));
      ss = b.add(ss, sq);
    }
  {
    ss = b.warp_sum_f64(ss);
    if (W > 1) {
      Value* sh = b.alloc_shared(Scalar::kF64, W);
      b.if_then_else(b.cmp(ir::Mode::kEq, lane, i32(0)), {}, [&] {
        b.store(sh, warp, ss);
        return std::vector<Value*>{};
      });
      b.barrier();
      ss = b.load(sh, i32(0));
      for (int32_t i = 1; i < W; ++i) ss = b.add(ss, b.load(sh, i32(i)));
    }
  }
  Value* mean = b.convert(b.div(ss, b.const_float(f64, static_cast<double>(n))), elt::f32_type());
  Value* scale = b.div(b.f32(1.0), b.unary(ir::Op::kSqrt, b.add(mean, b.f32(eps))));

  // As the loop form's `nearest` (the max keeps a host compiler from fusing the multiply).
  auto nearest = [&](Value* val) {
    val = b.max(val, b.f32(-1024.0));
    Value* bits = b.bitcast(b.add(val, b.f32(12582912.0)), ty::i32);
    return b.sub(b.bit_and(bits, i32(0x007fffff)), i32(0x00400000));
  };
  auto when = [&](Value* cond, const std::function<void()>& body) {
    if (!cond) return body();
    b.if_then_else(cond, {}, [&] {
      body();
      return std::vector<Value*>{};
    });
  };
  for (const Slice& sl : slices) {
    std::vector<Value*> y(4);
    for (int e = 0; e < 4; ++e) {
      y[static_cast<size_t>(e)] = b.mul(b.extract(sl.val, e), scale);  // (x * scale) * w, as the reference
      if (has_w) y[static_cast<size_t>(e)] = b.mul(y[static_cast<size_t>(e)], b.extract(sl.wv, e));
    }
    Value* blk = b.div(sl.f, i32(group));
    Value* sub = b.rem(sl.f, i32(group));
    Value* bb = b.add(b.mul(row, i32(rbytes)), b.mul(blk, i32(bytes)));
    Value* scale_q;  // what y is multiplied by before rounding
    Value* d;
    if (!qk) {
      Value* am = b.f32(0.0);
      for (Value* ye : y) {
        Value* a = b.op(ir::Op::kAbs, {ye});
        am = b.select(b.cmp(ir::Mode::kLt, am, a), a, am);  // std::max
      }
      for (int32_t off = 4; off >= 1; off /= 2) am = b.max(am, b.shfl(ir::Mode::kXor, am, i32(off)));
      d = b.div(am, b.f32(127.0));
      scale_q = b.select(b.cmp(ir::Mode::kNe, am, b.f32(0.0)), b.div(b.f32(127.0), am), b.f32(0.0));
    } else {
      // The first element of the largest magnitude, as the reference's strict '>' scan: each
      // thread's own first, then ranges merged lower-first (the upper one wins only if larger).
      Value* am = b.f32(0.0);
      Value* mx = b.f32(0.0);
      for (Value* ye : y) {
        Value* a = b.op(ir::Op::kAbs, {ye});
        Value* gt = b.cmp(ir::Mode::kGt, a, am);
        mx = b.select(gt, ye, mx);
        am = b.select(gt, a, am);
      }
      std::tie(am, mx) = b.warp_absmax(am, mx, lane);
      Value* sa = b.alloc_shared(Scalar::kF32, W);
      Value* sm = b.alloc_shared(Scalar::kF32, W);
      b.if_then_else(b.cmp(ir::Mode::kEq, lane, i32(0)), {}, [&] {
        b.store(sa, warp, am);
        b.store(sm, warp, mx);
        return std::vector<Value*>{};
      });
      b.barrier();
      Value* w0 = b.sub(warp, b.rem(warp, i32(2)));
      Value* w1 = b.add(w0, i32(1));
      auto [ba, bm] = b.merge_absmax(b.load(sa, w0), b.load(sm, w0), b.load(sa, w1), b.load(sm, w1));
      Value* zero = b.cmp(ir::Mode::kEq, ba, b.f32(0.0));
      scale_q = b.select(zero, b.f32(0.0), b.div(b.f32(-127.0), bm));
      d = b.select(zero, b.f32(0.0), b.div(b.f32(1.0), scale_q));
    }
    Value* packed = b.i32(0);
    Value* qsum = b.i32(0);
    for (int e = 0; e < 4; ++e) {
      Value* q = nearest(b.mul(y[static_cast<size_t>(e)], scale_q));
      if (qk) q = b.min(i32(127), q);
      qsum = b.add(qsum, q);
      packed = b.bit_or(packed, b.shlc(b.andc(q, 0xFF), 8 * e));
    }
    // Integer sums are exact in any order: Q8_1's 32 (8 lanes), Q8_K's 16 (4 lanes).
    if (q81 || qk)
      for (int32_t off = qk ? 2 : 4; off >= 1; off /= 2) qsum = b.add(qsum, b.shfl(ir::Mode::kXor, qsum, i32(off)));
    when(sl.ok, [&] {
      Value* qo = b.add(bb, b.add(i32(qoff), b.mul(sub, i32(4))));
      Value* pu = b.bitcast(packed, ty::u32);
      if (qk || q81) {
        b.store_at(xu, qo, pu, 4);
      } else {  // Q8_0 quants are only 2-byte aligned (34-byte blocks)
        b.store_at(xu, qo, b.convert(b.andc(pu, 0xFFFF), u16), 2);
        b.store_at(xu, b.addc(qo, 2), b.convert(b.shrc(pu, 16), u16), 2);
      }
      if (qk) {
        when(b.cmp(ir::Mode::kEq, b.rem(sub, i32(4)), i32(0)), [&] {
          Value* so = b.add(bb, b.add(i32(260), b.mul(b.div(sub, i32(4)), i32(2))));
          b.store_at(xu, so, b.convert(qsum, Type::scalar(Scalar::kI16)), 2);
        });
      }
      when(b.cmp(ir::Mode::kEq, sub, i32(0)), [&] {
        if (qk) {
          b.store_at(xu, bb, d, 4);
        } else {
          b.store_at(xu, bb, b.bitcast(b.convert(d, f16), u16), 2);
          if (q81)
            b.store_at(xu, b.addc(bb, 2), b.bitcast(b.convert(b.mul(d, b.convert(qsum, elt::f32_type())), f16), u16), 2);
        }
      });
    });
  }

  KernelLaunch l;
  l.kernel = "rms_norm_q8";
  l.grid = {static_cast<uint32_t>(s.dims.at("n_rows")), static_cast<uint32_t>(split ? J : 1), 1};
  l.block = {static_cast<uint32_t>(T), 1, 1};
  for (int i = 0; i < static_cast<int>(args(s).size()); ++i) l.args.push_back(i);
  g.launches.push_back(l);
  LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
  return g;
}

}  // namespace

const OpSpec& rms_norm_q8_op() {
  static const NormQ8Op op;
  return op;
}

}  // namespace loom::kernels
