// layer_norm: y = (x - mean(x)) / sqrt(var(x) + eps) per row, without weight or bias (ggml's
// NORM; a model's weight and bias follow as separate MUL and ADD nodes).
#include <algorithm>
#include <cmath>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Scalar;
using ir::Value;

// Shape: n_rows, n (values per row), eps_f32. Args: x [n_rows, n], y [n_rows, n].
class LayerNormOp final : public OpSpec {
 public:
  std::string_view name() const override { return "layer_norm"; }
  std::string_view description() const override {
    return "y = (x - mean) / sqrt(mean((x - mean)^2) + eps) per row of n values (no weight)";
  }
  Status validate(const Shape& s) const override {
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_rows", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n", 1, int64_t{1} << 20));
    if (s.dims.at("n_rows") * s.dims.at("n") > (int64_t{1} << 30))
      return invalid_argument("layer_norm: more than 2^30 elements");
    if (!(elt::f32_dim(s, "eps_f32") >= 0.0f) || !s.dims.count("eps_f32"))
      return invalid_argument("layer_norm: eps_f32 must be present and >= 0");
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t e = dim_or(s, "n_rows", 0) * dim_or(s, "n", 0);
    return {elt::buffer_arg("x", ArgRole::kInput, e, Scalar::kF32), elt::buffer_arg("y", ArgRole::kOutput, e, Scalar::kF32)};
  }
  Cost cost(const Shape& s) const override {
    const double e = static_cast<double>(dim_or(s, "n_rows", 0) * dim_or(s, "n", 0));
    return {e * 4.0 * 3.0, e * 5.0};
  }
  // The reference sums in double (as ggml's CPU backend); kernels sum vector partials in float.
  // The float mean's rounding enters every output through x - mean, and it grows with the row
  // (sqrt(n) for random data): a 4096-wide row summed one lane at a time (vec 1) measured
  // |diff| 1.08e-6 on an output of 0.0028. 1e-6 up to 256 elements, sqrt(n / 256) x that above.
  Tolerance tolerance(const Shape& s) const override {
    const double n = static_cast<double>(dim_or(s, "n", 1));
    return {1e-6 * std::max(1.0, std::sqrt(n / 256.0)), 1e-5, false};
  }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    const int64_t n = dim_or(s, "n", 1);
    if (!elt::gpu_target(t)) return {{"rows_per_block", {1, 2, 4, 8}}, {"vec", elt::dividing(n, {4, 8, 16})}};
    return {{"rows_per_block", {1, 2, 4}}, {"warps_per_row", {1, 2, 4, 8}}, {"vec", elt::dividing(n, {2, 4})}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    const int64_t n = dim_or(s, "n", 1);
    if (!elt::gpu_target(t)) return {{"rows_per_block", n >= 512 ? 1 : 4}, {"vec", elt::dividing(n, {4, 8}).back()}};
    const int64_t wpr = n >= 2048 ? 8 : n >= 512 ? 2 : 1;
    return {{"rows_per_block", wpr == 1 ? 4 : 1}, {"warps_per_row", wpr}, {"vec", elt::dividing(n, {2, 4}).back()}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int64_t n = s.dims.at("n");
    const int vec = static_cast<int>(sch.at("vec"));
    elt::RowLayout rows = elt::RowLayout::of(s, sch, t);

    Generated g;
    ir::Kernel* k = g.module.add_kernel("layer_norm");
    ir::Builder b(*k);
    Value* x = b.param(elt::global_ptr(Scalar::kF32), "x");
    Value* y = b.param(elt::global_ptr(Scalar::kF32), "y");
    const ir::Type vt = elt::f32_type(vec);
    const int align = 4 * vec;
    Value* nv = b.i32(static_cast<int32_t>(n / vec));
    auto splat = [&](Value* v) { return vec > 1 ? b.splat(v, vec) : v; };
    Value* inv_n = b.f32(1.0f / static_cast<float>(n));

    rows.emit(b, [&](const elt::RowLayout::Row& r) {
      Value* base = b.mul(r.row, b.i32(static_cast<int32_t>(n)));
      auto elem = [&](Value* c) { return b.add(base, b.mul(c, b.i32(vec))); };
      auto sm = b.for_loop(r.first, nv, r.stride, {b.const_float(vt, 0.0)}, [&](Value* c, std::span<Value* const> it) {
        return std::vector<Value*>{b.add(it[0], b.load(x, elem(c), vt, align))};
      });
      Value* mean = b.mul(rows.reduce(b, elt::horizontal_sum(b, sm[0]), ir::Op::kAdd), inv_n);
      Value* mean_v = splat(mean);
      auto sq = b.for_loop(r.first, nv, r.stride, {b.const_float(vt, 0.0)}, [&](Value* c, std::span<Value* const> it) {
        Value* d = b.sub(b.load(x, elem(c), vt, align), mean_v);
        return std::vector<Value*>{b.fma(d, d, it[0])};
      });
      Value* var = b.mul(rows.reduce(b, elt::horizontal_sum(b, sq[0]), ir::Op::kAdd), inv_n);
      Value* scale = splat(b.div(b.f32(1.0), b.unary(ir::Op::kSqrt, b.add(var, b.f32(elt::f32_dim(s, "eps_f32"))))));
      b.for_loop(r.first, nv, r.stride, {}, [&](Value* c, std::span<Value* const>) {
        Value* e = elem(c);
        Value* v = b.mul(b.sub(b.load(x, e, vt, align), mean_v), scale);
        b.if_then_else(r.live, {}, [&] {
          b.store(y, e, v, align);
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
    });

    KernelLaunch l;
    l.kernel = "layer_norm";
    l.grid = {rows.blocks(), 1, 1};
    l.block = {static_cast<uint32_t>(rows.threads()), 1, 1};
    l.args = {0, 1};
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    // An offset from zero, as activations have: the mean must come out of the sum.
    elt::fill_uniform(rng, elt::f32s(a[0]), -3.0f, 5.0f);
  }
  // ggml's CPU NORM: sums in double, variance of the centred values, 1 / sqrtf(var + eps).
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const int64_t rows = s.dims.at("n_rows"), n = s.dims.at("n");
    const float eps = elt::f32_dim(s, "eps_f32");
    const float* x = elt::f32s(a[0]).data();
    float* y = elt::f32s(a[1]).data();
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]);
      const float mean = static_cast<float>(sum / static_cast<double>(n));
      double sum2 = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const float v = xr[i] - mean;
        yr[i] = v;
        sum2 += static_cast<double>(v * v);
      }
      const float variance = static_cast<float>(sum2 / static_cast<double>(n));
      const float scale = 1.0f / std::sqrt(variance + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] *= scale;
    }
    return Status();
  }
  std::vector<Shape> test_shapes() const override {
    using elt::make_shape;
    return {make_shape({{"n_rows", 7}, {"n", 576}}, {{"eps_f32", 1e-5f}}),
            make_shape({{"n_rows", 1}, {"n", 4096}}, {{"eps_f32", 1e-6f}}),
            make_shape({{"n_rows", 9}, {"n", 13}}, {{"eps_f32", 1e-5f}})};
  }
};

}  // namespace

const OpSpec& layer_norm_op() {
  static const LayerNormOp op;
  return op;
}

}  // namespace loom::kernels
