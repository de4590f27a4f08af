// rms_norm_q8: RMS norm (optionally after the residual add) that writes the normalized row
// straight into the Q8_0 / Q8_1 blocks the next matvec reads, bit-identical to
// llm::ref::rms_norm followed by llm::ref::quantize_activation: the f32 row never goes to memory.
#include <cmath>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/llm/ops_ref.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Scalar;
using ir::Type;
using ir::Value;

constexpr int64_t kQ8_0 = 8, kQ8_1 = 9;  // GGUF type numbers

// Shape: n_rows, n (a multiple of 32), has_weight, eps_f32, dtype (8: Q8_0, 9: Q8_1), add (0/1:
// a + b first, the sum written to `sum`). Args: x | a, b; [w]; [sum]; xq (blocks, u8).
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
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "dtype", kQ8_0, kQ8_1));
    if (s.dims.at("n") % 32) return invalid_argument("rms_norm_q8: n={} is not a multiple of 32", s.dims.at("n"));
    if (s.dims.at("n_rows") * s.dims.at("n") > (int64_t{1} << 30))
      return invalid_argument("rms_norm_q8: more than 2^30 elements");
    if (!(elt::f32_dim(s, "eps_f32") > 0.0f)) return invalid_argument("rms_norm_q8: eps_f32 must be > 0");
    return Status();
  }

  static int64_t block_bytes(const Shape& s) { return dim_or(s, "dtype", kQ8_0) == kQ8_1 ? 36 : 34; }

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
    a.push_back(elt::buffer_arg("xq", ArgRole::kOutput, rows * (n / 32) * block_bytes(s), Scalar::kU8));
    return a;
  }

  Cost cost(const Shape& s) const override {
    const double rows = static_cast<double>(dim_or(s, "n_rows", 0)), n = static_cast<double>(dim_or(s, "n", 0));
    const bool add = dim_or(s, "add", 0) != 0;
    const double in = rows * n * 4.0 * (add ? 3.0 : 1.0);  // a, b, sum | x
    return {in + rows * (n / 32) * static_cast<double>(block_bytes(s)) + (dim_or(s, "has_weight", 0) ? 4.0 * n : 0.0),
            rows * n * (add ? 8.0 : 7.0)};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }

  // regs (GPU): warp w owns blocks w, w + warps, ...; each lane loads its value of every one of
  // them at once and keeps them in registers for the second pass, so a row costs one memory
  // round trip (the loop form, regs=0, waits for one load per element in each pass: with it the
  // fused 8B decode step was slower than rms_norm + quantize_act, 273.9 vs 326.0 tok/s). Taken
  // only where warps | n/32 with at most kMaxRegBlocks blocks per warp (else the loop form).
  static constexpr int32_t kMaxRegBlocks = 16;
  static bool regs_fit(int64_t n, int64_t warps) {
    const int64_t nb = n / 32;
    return warps <= nb && nb % warps == 0 && nb / warps <= kMaxRegBlocks;
  }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind t) const override {
    if (!elt::gpu_target(t)) return {{"threads", {1}}};
    return {{"warps", {1, 2, 4, 8, 16}}, {"regs", {0, 1}}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    if (!elt::gpu_target(t)) return {{"threads", 1}};
    const int64_t n = dim_or(s, "n", 32);
    for (int64_t w : {16, 8, 4, 2, 1})
      if ((n >= 2048 || w <= 4) && regs_fit(n, w)) return {{"warps", w}, {"regs", 1}};
    return {{"warps", n >= 2048 ? 8 : 4}, {"regs", 0}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int32_t n = static_cast<int32_t>(s.dims.at("n"));
    const bool has_w = s.dims.at("has_weight") != 0, add = s.dims.at("add") != 0;
    const bool q81 = s.dims.at("dtype") == kQ8_1;
    const float eps = elt::f32_dim(s, "eps_f32");
    const bool gpu = elt::gpu_target(t);
    const int32_t W = gpu ? static_cast<int32_t>(sch.at("warps")) : 1;
    // regs where the warps fit the row (warps | n/32, <= kMaxRegBlocks blocks each), else the
    // loop form: every schedule of the space generates.
    const bool regs = gpu && sch.count("regs") && sch.at("regs") != 0 && regs_fit(n, W);
    const int32_t threads = gpu ? 32 * W : 1;
    const int32_t nb = n / 32, bytes = q81 ? 36 : 34;

    Generated g;
    ir::Kernel* k = g.module.add_kernel("rms_norm_q8");
    ir::Builder b(*k);
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
      const Type u64 = Type::scalar(Scalar::kU64), u32 = Type::scalar(Scalar::kU32);
      for (int32_t off = 16; off >= 1; off /= 2) {
        Value* bits = b.bitcast(ss, u64);
        Value* lo = b.shfl(ir::Mode::kXor, b.convert(bits, u32), i32(off));
        Value* hi = b.shfl(ir::Mode::kXor, b.convert(b.shr(bits, b.const_int(u64, 32)), u32), i32(off));
        Value* other = b.bit_or(b.shl(b.convert(hi, u64), b.const_int(u64, 32)), b.convert(lo, u64));
        ss = b.add(ss, b.bitcast(other, f64));
      }
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

    if (!gpu) {
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
    const auto type = s.dims.at("dtype") == kQ8_1 ? llm::GgmlType::Q8_1 : llm::GgmlType::Q8_0;
    uint8_t* out = a[i].bytes.data();
    const int64_t row_bytes = (n / 32) * block_bytes(s);
    for (int64_t r = 0; r < rows; ++r) llm::ref::quantize_activation(type, y.data() + r * n, out + r * row_bytes, n);
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
    };
  }
};

}  // namespace

const OpSpec& rms_norm_q8_op() {
  static const NormQ8Op op;
  return op;
}

}  // namespace loom::kernels
