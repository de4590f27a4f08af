// RMS normalization: rms_norm (rows or per-head groups, optional weight) and add_rms_norm (the
// residual add fused in front: writes the sum and its normalized row in one pass over memory).
#include <cmath>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Scalar;
using ir::Value;

// Shape: n_rows (rows or groups: tokens * heads for Gemma's q/k norm), n (values per row),
// eps_f32, has_weight (0/1; the weight has n values, shared by every row).
class NormOp final : public OpSpec {
 public:
  explicit NormOp(bool fused_add) : add_(fused_add) {}

  std::string_view name() const override { return add_ ? "add_rms_norm" : "rms_norm"; }
  std::string_view description() const override {
    return add_ ? "sum = a + b; y = sum / sqrt(mean(sum^2) + eps) [* w]"
                : "y = x / sqrt(mean(x^2) + eps) [* w] per row of n values";
  }

  Status validate(const Shape& s) const override {
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_rows", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n", 1, int64_t{1} << 20));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "has_weight", 0, 1));
    if (s.dims.at("n_rows") * s.dims.at("n") > (int64_t{1} << 30))
      return invalid_argument("{}: more than 2^30 elements", name());
    if (!(elt::f32_dim(s, "eps_f32") > 0.0f)) return invalid_argument("{}: eps_f32 must be > 0", name());
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t rows = dim_or(s, "n_rows", 0), n = dim_or(s, "n", 0);
    std::vector<ArgSpec> a;
    if (add_) {
      a.push_back(elt::buffer_arg("a", ArgRole::kInput, rows * n, Scalar::kF32));
      a.push_back(elt::buffer_arg("b", ArgRole::kInput, rows * n, Scalar::kF32));
    } else {
      a.push_back(elt::buffer_arg("x", ArgRole::kInput, rows * n, Scalar::kF32));
    }
    if (dim_or(s, "has_weight", 0)) a.push_back(elt::buffer_arg("w", ArgRole::kInput, n, Scalar::kF32));
    if (add_) a.push_back(elt::buffer_arg("sum", ArgRole::kOutput, rows * n, Scalar::kF32));
    a.push_back(elt::buffer_arg("y", ArgRole::kOutput, rows * n, Scalar::kF32));
    return a;
  }

  Cost cost(const Shape& s) const override {
    const double rows = static_cast<double>(dim_or(s, "n_rows", 0)), n = static_cast<double>(dim_or(s, "n", 0));
    const double w = dim_or(s, "has_weight", 0) ? n * 4.0 : 0.0;
    const double streams = add_ ? 4.0 : 2.0;  // a, b, sum, y  |  x, y
    return {rows * n * 4.0 * streams + w, rows * n * (add_ ? 5.0 : 4.0)};
  }

  // The reference sums squares in double; kernels sum vector partials in float.
  Tolerance tolerance(const Shape&) const override { return {1e-6, 1e-5, false}; }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    const int64_t n = dim_or(s, "n", 1);
    if (!elt::gpu_target(t)) return {{"rows_per_block", {1, 2, 4, 8}}, {"vec", elt::dividing(n, {4, 8, 16})}};
    return {{"rows_per_block", {1, 2, 4}},
            {"warps_per_row", {1, 2, 4, 8}},
            {"vec", elt::dividing(n, {2, 4})},
            {"cache", {0, 1}}};
  }

  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    const int64_t n = dim_or(s, "n", 1);
    const int64_t vec = elt::dividing(n, elt::gpu_target(t) ? std::initializer_list<int64_t>{2, 4}
                                                            : std::initializer_list<int64_t>{4, 8})
                            .back();
    if (!elt::gpu_target(t)) return {{"rows_per_block", n >= 512 ? 1 : 4}, {"vec", vec}};
    const int64_t wpr = n >= 2048 ? 8 : n >= 512 ? 2 : 1;
    return {{"rows_per_block", wpr == 1 ? 4 : 1}, {"warps_per_row", wpr}, {"vec", vec}, {"cache", 1}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int64_t n = s.dims.at("n");
    const bool has_w = s.dims.at("has_weight") != 0;
    const int vec = static_cast<int>(sch.at("vec"));
    const float eps = elt::f32_dim(s, "eps_f32");
    elt::RowLayout rows = elt::RowLayout::of(s, sch, t);

    Generated g;
    ir::Kernel* k = g.module.add_kernel(std::string(name()));
    ir::Builder b(*k);
    const ir::Type fp = elt::global_ptr(Scalar::kF32);
    Value* x = b.param(fp, add_ ? "a" : "x");
    Value* xb = add_ ? b.param(fp, "b") : nullptr;
    Value* w = has_w ? b.param(fp, "w") : nullptr;
    Value* sum = add_ ? b.param(fp, "sum") : nullptr;
    Value* y = b.param(fp, "y");
    const ir::Type vt = elt::f32_type(vec);
    const int align = 4 * vec;
    Value* nv = b.i32(static_cast<int32_t>(n / vec));

    // gpu, cache = 1: when each thread holds at most kMaxCached vectors of the row, they stay in
    // registers from the first pass to the second (unrolled, guarded loads; the weight loaded
    // with them), so the kernel makes one trip to memory before the reduction instead of two.
    // The per-thread sums are added in the same order as the loop's, so results are identical.
    const int64_t row_threads = 32 * rows.warps_per_row;  // gpu only
    const int64_t per_thread = (n / vec + row_threads - 1) / row_threads;
    const bool cached = rows.gpu && sch.at("cache") == 1 && per_thread <= kMaxCached;

    rows.emit(b, [&](const elt::RowLayout::Row& r) {
      Value* base = b.mul(r.row, b.i32(static_cast<int32_t>(n)));
      if (cached) {
        emit_cached_row(b, r, rows, x, xb, w, sum, y, base, nv, vec, static_cast<int>(per_thread), n, eps);
        return;
      }
      auto input = [&](Value* e) {
        Value* v = b.load(x, e, vt, align);
        return add_ ? b.add(v, b.load(xb, e, vt, align)) : v;
      };
      Value* zero = b.const_float(vt, 0.0);
      auto acc = b.for_loop(r.first, nv, r.stride, {zero}, [&](Value* c, std::span<Value* const> it) {
        Value* e = b.add(base, b.mul(c, b.i32(vec)));
        Value* v = input(e);
        if (add_)
          b.if_then_else(r.live, {}, [&] {
            b.store(sum, e, v, align);
            return std::vector<Value*>{};
          });
        return std::vector<Value*>{b.add(it[0], b.mul(v, v))};
      });
      Value* mean;
      if (rows.gpu) {
        Value* ss = rows.reduce(b, elt::horizontal_sum(b, acc[0]), ir::Op::kAdd);
        mean = b.div(ss, b.f32(static_cast<double>(n)));
      } else {
        // The cpu thread owns the row: squares summed in double, in order, as the reference
        // (and ggml) does, so the result is bit for bit the reference's. The float vector sum
        // above is then dead code the compiler drops.
        const ir::Type f64 = ir::Type::scalar(Scalar::kF64);
        Value* ss = b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(n)), b.i32(1), {b.const_float(f64, 0.0)},
                               [&](Value* i, std::span<Value* const> it) {
                                 Value* e = b.add(base, i);
                                 Value* v = b.load(x, e);
                                 if (add_) v = b.add(v, b.load(xb, e));
                                 return std::vector<Value*>{b.add(it[0], b.convert(b.mul(v, v), f64))};
                               })[0];
        mean = b.convert(b.div(ss, b.const_float(f64, static_cast<double>(n))), ir::Type::scalar(Scalar::kF32));
      }
      Value* scale = b.div(b.f32(1.0), b.unary(ir::Op::kSqrt, b.add(mean, b.f32(eps))));
      Value* scale_v = vec > 1 ? b.splat(scale, vec) : scale;
      b.for_loop(r.first, nv, r.stride, {}, [&](Value* c, std::span<Value* const>) {
        Value* e = b.add(base, b.mul(c, b.i32(vec)));
        Value* out = b.mul(input(e), scale_v);
        if (has_w) out = b.mul(out, b.load(w, b.mul(c, b.i32(vec)), vt, align));
        b.if_then_else(r.live, {}, [&] {
          b.store(y, e, out, align);
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
    });

    KernelLaunch l;
    l.kernel = std::string(name());
    l.grid = {rows.blocks(), 1, 1};
    l.block = {static_cast<uint32_t>(rows.threads()), 1, 1};
    for (int i = 0; i < static_cast<int>(args(s).size()); ++i) l.args.push_back(i);
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    size_t i = 0;
    elt::fill_uniform(rng, elt::f32s(a[i++]), -2.0f, 2.0f);
    if (add_) elt::fill_uniform(rng, elt::f32s(a[i++]), -2.0f, 2.0f);
    if (s.dims.at("has_weight")) elt::fill_uniform(rng, elt::f32s(a[i++]), 0.25f, 1.75f);
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const int64_t rows = s.dims.at("n_rows"), n = s.dims.at("n");
    const bool has_w = s.dims.at("has_weight") != 0;
    size_t i = 0;
    const float* x = elt::f32s(a[i++]).data();
    const float* xb = add_ ? elt::f32s(a[i++]).data() : nullptr;
    const float* w = has_w ? elt::f32s(a[i++]).data() : nullptr;
    if (add_) {
      float* sum = elt::f32s(a[i++]).data();
      llm::ref::add(x, xb, sum, rows * n);
      x = sum;
    }
    llm::ref::rms_norm(x, w, elt::f32s(a[i]).data(), rows, n, elt::f32_dim(s, "eps_f32"));
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    using elt::make_shape;
    return {
        make_shape({{"n_rows", 1}, {"n", 576}, {"has_weight", 1}}, {{"eps_f32", 1e-5f}}),   // SmolLM2 decode
        make_shape({{"n_rows", 7}, {"n", 576}, {"has_weight", 1}}, {{"eps_f32", 1e-5f}}),   // SmolLM2 prompt
        make_shape({{"n_rows", 12}, {"n", 256}, {"has_weight", 1}}, {{"eps_f32", 1e-6f}}),  // Gemma q/k norm
        make_shape({{"n_rows", 2}, {"n", 4096}, {"has_weight", 1}}, {{"eps_f32", 1e-5f}}),  // Llama-3-8B
        make_shape({{"n_rows", 5}, {"n", 64}, {"has_weight", 0}}, {{"eps_f32", 1e-6f}}),
        make_shape({{"n_rows", 3}, {"n", 37}, {"has_weight", 1}}, {{"eps_f32", 1e-5f}}),
    };
  }

 private:
  static constexpr int64_t kMaxCached = 16;

  // The gpu row body of cache = 1 (see generate).
  void emit_cached_row(ir::Builder& b, const elt::RowLayout::Row& r, elt::RowLayout& rows, Value* x, Value* xb,
                       Value* w, Value* sum, Value* y, Value* base, Value* nv, int vec, int per_thread, int64_t n,
                       float eps) const {
    const ir::Type vt = elt::f32_type(vec);
    const int align = 4 * vec;
    Value* zero = b.const_float(vt, 0.0);
    std::vector<Value*> xs, ws, in_row;
    for (int i = 0; i < per_thread; ++i) {
      Value* c = b.add(r.first, b.mul(r.stride, b.i32(i)));
      Value* inside = b.cmp(ir::Mode::kLt, c, nv);
      Value* e = b.add(base, b.mul(c, b.i32(vec)));
      std::vector<ir::Type> types = {vt};
      if (w) types.push_back(vt);
      auto loaded = b.if_then_else(
          inside, types,
          [&] {
            Value* v = b.load(x, e, vt, align);
            if (add_) v = b.add(v, b.load(xb, e, vt, align));
            std::vector<Value*> out = {v};
            if (w) out.push_back(b.load(w, b.mul(c, b.i32(vec)), vt, align));
            return out;
          },
          [&] { return w ? std::vector<Value*>{zero, zero} : std::vector<Value*>{zero}; });
      xs.push_back(loaded[0]);
      if (w) ws.push_back(loaded[1]);
      in_row.push_back(inside);
    }
    Value* acc = zero;
    for (Value* v : xs) acc = b.add(acc, b.mul(v, v));
    Value* ss = rows.reduce(b, elt::horizontal_sum(b, acc), ir::Op::kAdd);
    Value* mean = b.div(ss, b.f32(static_cast<double>(n)));
    Value* scale = b.div(b.f32(1.0), b.unary(ir::Op::kSqrt, b.add(mean, b.f32(eps))));
    Value* scale_v = vec > 1 ? b.splat(scale, vec) : scale;
    for (int i = 0; i < per_thread; ++i) {
      Value* c = b.add(r.first, b.mul(r.stride, b.i32(i)));
      Value* e = b.add(base, b.mul(c, b.i32(vec)));
      Value* out = b.mul(xs[i], scale_v);
      if (w) out = b.mul(out, ws[i]);
      b.if_then_else(b.bit_and(r.live, in_row[i]), {}, [&] {
        if (add_) b.store(sum, e, xs[i], align);
        b.store(y, e, out, align);
        return std::vector<Value*>{};
      });
    }
  }

  bool add_;
};

}  // namespace

const OpSpec& rms_norm_op() {
  static const NormOp op(false);
  return op;
}
const OpSpec& add_rms_norm_op() {
  static const NormOp op(true);
  return op;
}

}  // namespace loom::kernels
