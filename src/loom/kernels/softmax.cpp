// Row softmax in place: x = softmax(x * scale + mask) per row (mask optional, 0 / -inf entries).
#include <cmath>
#include <limits>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Scalar;
using ir::Value;

// Shape: n_rows, n, scale_f32, has_mask (0/1; the mask is [n_rows, n]).
class SoftmaxOp final : public OpSpec {
 public:
  std::string_view name() const override { return "softmax"; }
  std::string_view description() const override {
    return "x = softmax(x * scale + mask) per row, in place";
  }
  Status validate(const Shape& s) const override {
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_rows", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "has_mask", 0, 1));
    if (s.dims.at("n_rows") * s.dims.at("n") > (int64_t{1} << 30))
      return invalid_argument("softmax: more than 2^30 elements");
    if (!s.dims.count("scale_f32")) return invalid_argument("softmax: shape lacks scale_f32");
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t e = dim_or(s, "n_rows", 0) * dim_or(s, "n", 0);
    std::vector<ArgSpec> a = {elt::buffer_arg("x", ArgRole::kInOut, e, Scalar::kF32)};
    if (dim_or(s, "has_mask", 0)) a.push_back(elt::buffer_arg("mask", ArgRole::kInput, e, Scalar::kF32));
    return a;
  }
  Cost cost(const Shape& s) const override {
    const double e = static_cast<double>(dim_or(s, "n_rows", 0) * dim_or(s, "n", 0));
    return {e * 4.0 * (dim_or(s, "has_mask", 0) ? 3.0 : 2.0), e * 5.0};
  }
  // ggml's polynomial exp and double sum vs the target's exp and a float sum.
  Tolerance tolerance(const Shape&) const override { return {1e-7, 2e-5, false}; }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    const int64_t n = dim_or(s, "n", 1);
    if (!elt::gpu_target(t)) return {{"rows_per_block", {1, 2, 4, 8}}, {"vec", elt::dividing(n, {4, 8, 16})}};
    return {{"rows_per_block", {1, 2, 4}}, {"warps_per_row", {1, 2, 4, 8}}, {"vec", elt::dividing(n, {2, 4})}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    const int64_t n = dim_or(s, "n", 1);
    if (!elt::gpu_target(t))
      return {{"rows_per_block", n >= 512 ? 1 : 4}, {"vec", elt::dividing(n, {4, 8}).back()}};
    const int64_t wpr = n >= 2048 ? 8 : n >= 512 ? 2 : 1;
    return {{"rows_per_block", wpr == 1 ? 4 : 1}, {"warps_per_row", wpr}, {"vec", elt::dividing(n, {2, 4}).back()}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int64_t n = s.dims.at("n");
    const bool has_mask = s.dims.at("has_mask") != 0;
    const int vec = static_cast<int>(sch.at("vec"));
    elt::RowLayout rows = elt::RowLayout::of(s, sch, t);

    Generated g;
    ir::Kernel* k = g.module.add_kernel("softmax");
    ir::Builder b(*k);
    Value* x = b.param(elt::global_ptr(Scalar::kF32), "x");
    Value* mask = has_mask ? b.param(elt::global_ptr(Scalar::kF32), "mask") : nullptr;
    const ir::Type vt = elt::f32_type(vec);
    const int align = 4 * vec;
    Value* nv = b.i32(static_cast<int32_t>(n / vec));
    auto splat = [&](Value* v) { return vec > 1 ? b.splat(v, vec) : v; };
    Value* scale = splat(b.f32(elt::f32_dim(s, "scale_f32")));

    rows.emit(b, [&](const elt::RowLayout::Row& r) {
      Value* base = b.mul(r.row, b.i32(static_cast<int32_t>(n)));
      auto scaled = [&](Value* e) {
        Value* v = b.mul(b.load(x, e, vt, align), scale);
        return has_mask ? b.add(v, b.load(mask, e, vt, align)) : v;
      };
      auto elem = [&](Value* c) { return b.add(base, b.mul(c, b.i32(vec))); };
      Value* ninf = b.const_float(vt, -std::numeric_limits<float>::max());  // finite: a literal -inf is not an int
      auto mx = b.for_loop(r.first, nv, r.stride, {ninf}, [&](Value* c, std::span<Value* const> it) {
        return std::vector<Value*>{b.max(it[0], scaled(elem(c)))};
      });
      Value* m = splat(rows.reduce(b, elt::horizontal_max(b, mx[0]), ir::Op::kMax));
      auto sm = b.for_loop(r.first, nv, r.stride, {b.const_float(vt, 0.0)}, [&](Value* c, std::span<Value* const> it) {
        return std::vector<Value*>{b.add(it[0], b.unary(ir::Op::kExp, b.sub(scaled(elem(c)), m)))};
      });
      Value* total = rows.reduce(b, elt::horizontal_sum(b, sm[0]), ir::Op::kAdd);
      Value* inv = splat(b.div(b.f32(1.0), total));
      b.for_loop(r.first, nv, r.stride, {}, [&](Value* c, std::span<Value* const>) {
        Value* e = elem(c);
        Value* p = b.mul(b.unary(ir::Op::kExp, b.sub(scaled(e), m)), inv);
        b.if_then_else(r.live, {}, [&] {
          b.store(x, e, p, align);
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
    });

    KernelLaunch l;
    l.kernel = "softmax";
    l.grid = {rows.blocks(), 1, 1};
    l.block = {static_cast<uint32_t>(rows.threads()), 1, 1};
    l.args = has_mask ? std::vector<int>{0, 1} : std::vector<int>{0};
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    elt::fill_uniform(rng, elt::f32s(a[0]), -6.0f, 6.0f);
    if (!s.dims.at("has_mask")) return;
    // Causal-looking masks: row r keeps a random prefix (at least one entry), -inf after it.
    const int64_t rows = s.dims.at("n_rows"), n = s.dims.at("n");
    auto mask = elt::f32s(a[1]);
    std::uniform_int_distribution<int64_t> keep(1, n);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t k = keep(rng);
      for (int64_t j = 0; j < n; ++j)
        mask[static_cast<size_t>(r * n + j)] = j < k ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  }
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const int64_t rows = s.dims.at("n_rows"), n = s.dims.at("n");
    float* x = elt::f32s(a[0]).data();
    const float* mask = s.dims.at("has_mask") ? elt::f32s(a[1]).data() : nullptr;
    for (int64_t r = 0; r < rows; ++r)
      if (!llm::ref::softmax(x + r * n, mask ? mask + r * n : nullptr, n, elt::f32_dim(s, "scale_f32")))
        return invalid_argument("softmax: row {} is fully masked", r);
    return Status();
  }
  std::vector<Shape> test_shapes() const override {
    using elt::make_shape;
    return {make_shape({{"n_rows", 1}, {"n", 49152}, {"has_mask", 0}}, {{"scale_f32", 1.0f}}),
            make_shape({{"n_rows", 9}, {"n", 64}, {"has_mask", 1}}, {{"scale_f32", 0.125f}}),
            make_shape({{"n_rows", 32}, {"n", 512}, {"has_mask", 1}}, {{"scale_f32", 0.0883883f}}),
            make_shape({{"n_rows", 3}, {"n", 13}, {"has_mask", 0}}, {{"scale_f32", 2.0f}})};
  }
};

}  // namespace

const OpSpec& softmax_op() {
  static const SoftmaxOp op;
  return op;
}

}  // namespace loom::kernels
