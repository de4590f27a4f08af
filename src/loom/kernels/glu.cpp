// Gated activations of the FFN: swiglu (SiLU(g) * u, Llama) and geglu (GELU(g) * u, Gemma),
// on the MapOp kernel shape.
#include <cmath>
#include <vector>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::Scalar;
using ir::Value;

Value* splat_like(ir::Builder& b, Value* scalar, Value* like) {
  return like->type.is_vector() ? b.splat(scalar, like->type.lanes()) : scalar;
}

// y = g / (1 + exp(-g)) * u with ggml's polynomial exp, as the reference (its tail of n % 8
// values uses libm's expf: a few ulp apart there, hence the tolerance).
class SwigluOp final : public MapOp {
 public:
  std::string_view name() const override { return "swiglu"; }
  std::string_view description() const override { return "y = silu(g) * u"; }
  Tolerance tolerance(const Shape&) const override { return {1e-6, 4e-6, false}; }

 protected:
  std::vector<std::string> inputs() const override { return {"g", "u"}; }
  double flops_per_element() const override { return 5; }
  float input_range() const override { return 12.0f; }
  bool strided_rows() const override { return true; }
  Value* apply(ir::Builder& b, const Shape&, std::span<Value* const> in) const override {
    // ggml's exp (llm::ref::silu_ggml): bit for bit the reference wherever it uses it (all
    // but a tail of n % 8 values).
    Value* g = in[0];
    Value* one = splat_like(b, b.f32(1.0), g);
    Value* e = elt::exp_ggml(b, b.sub(splat_like(b, b.f32(0.0), g), g));
    return b.mul(b.div(g, b.add(one, e)), in[1]);
  }
  void host(const Shape&, std::span<const float* const> in, float* y, int64_t n) const override {
    llm::ref::swiglu(in[0], in[1], y, n);
  }
};

// y = gelu(g) * u with GELU as ggml's CPU backend evaluates it: the tanh approximation at the
// fp16 rounding of g, rounded to fp16 (its lookup table), 0 below -10 and g above 10. The
// kernel computes the table entry instead of reading a table, in the reference's float order.
class GegluOp final : public MapOp {
 public:
  std::string_view name() const override { return "geglu"; }
  std::string_view description() const override { return "y = gelu(g) * u (ggml's fp16 GELU)"; }
  // A tanh a few ulp away can move the fp16 rounding of GELU by one fp16 step (2^-11 relative).
  // For g < -3 the 1 + tanh(z) of the formula cancels: a tanh 1e-7 apart moves gelu by ~|g| * 1e-7
  // (times |u| <= 12 here), hence the absolute part.
  Tolerance tolerance(const Shape&) const override { return {2e-5, 1.2e-3, false}; }

 protected:
  std::vector<std::string> inputs() const override { return {"g", "u"}; }
  double flops_per_element() const override { return 10; }
  float input_range() const override { return 12.0f; }
  bool strided_rows() const override { return true; }
  Value* apply(ir::Builder& b, const Shape&, std::span<Value* const> in) const override { return entries(b, in, false); }
  Value* apply_on(ir::Builder& b, const Shape&, std::span<Value* const> in, ir::TargetKind t) const override {
    return entries(b, in, t == ir::TargetKind::kCpp);
  }
  void host(const Shape&, std::span<const float* const> in, float* y, int64_t n) const override {
    llm::ref::geglu(in[0], in[1], y, n);
  }

 private:
  // fast_vector: the cpp target's vector tanh with the check below (its error bound is known);
  // elsewhere every lane takes the scalar tanh.
  Value* entries(ir::Builder& b, std::span<Value* const> in, bool fast_vector) const {
    Value* g = in[0];
    const int lanes = g->type.lanes();
    auto c = [&](double v) { return splat_like(b, b.f32(v), g); };
    const ir::Type h = ir::Type::of(Scalar::kF16, lanes);
    Value* x = b.convert(b.convert(g, h), g->type);  // the table's input
    Value* inner = b.mul(b.mul(c(0.79788456080286535587989211986876f), x),
                         b.fma(b.mul(c(0.044715f), x), x, c(1.0)));
    // The table entry needs the C library's tanh (the reference's): the emitter's vector tanh
    // (2.5 ulp) moves an entry by one fp16 step now and then (Gemma 3 on real text: logits off
    // from the 83rd token, another greedy answer). So vectors take the fast tanh and keep its
    // entries only where no tanh within the bound below could round to another fp16 value; a
    // vector with any such lane is recomputed lane by lane with the C library's tanh. Other
    // targets take their scalar tanh in every lane (PTX's vectors are one lane anyway).
    auto entry = [&](Value* th) { return b.mul(b.mul(c(0.5), x), b.add(c(1.0), th)); };
    auto to_h = [&](Value* v) { return b.convert(b.convert(v, h), g->type); };
    Value* rounded = nullptr;
    auto scalar_lanes = [&] {
      std::vector<Value*> per_lane;
      for (int l = 0; l < lanes; ++l) per_lane.push_back(b.unary(ir::Op::kTanh, b.extract(inner, l)));
      return to_h(entry(b.build(std::move(per_lane))));
    };
    if (lanes == 1) {
      rounded = to_h(entry(b.unary(ir::Op::kTanh, inner)));
    } else if (!fast_vector) {
      rounded = scalar_lanes();
    } else {
      Value* fast = entry(b.unary(ir::Op::kTanh, inner));
      // |tanh error| <= 3 ulp <= 3 * 2^-24 and two roundings of 1 + tanh: (1 + tanh) moves by
      // < 2^-21, gelu by 0.5 |x| 2^-21 plus its own two roundings (<= |gelu| 2^-23); doubled.
      Value* bound = b.fma(b.unary(ir::Op::kAbs, x), c(std::ldexp(1.0, -21)),
                           b.mul(b.unary(ir::Op::kAbs, fast), c(std::ldexp(1.0, -22))));
      Value* lo_h = to_h(b.sub(fast, bound));
      Value* hi_h = to_h(b.add(fast, bound));
      // 1 where the ends round apart (or NaN), summed over the lanes.
      Value* apart = b.select(b.cmp(ir::Mode::kEq, lo_h, hi_h), c(0.0), c(1.0));
      Value* n_apart = b.extract(apart, 0);
      for (int l = 1; l < lanes; ++l) n_apart = b.add(n_apart, b.extract(apart, l));
      rounded = b.if_then_else(b.cmp(ir::Mode::kGt, n_apart, b.f32(0.0)), {g->type},
                               [&] { return std::vector<Value*>{scalar_lanes()}; },
                               [&] { return std::vector<Value*>{to_h(fast)}; })[0];
    }
    Value* lo = b.cmp(ir::Mode::kLe, g, c(-10.0));
    Value* hi = b.cmp(ir::Mode::kGe, g, c(10.0));
    Value* act = b.select(hi, g, b.select(lo, c(0.0), rounded));
    return b.mul(act, in[1]);
  }
};

}  // namespace

const OpSpec& swiglu_op() {
  static const SwigluOp op;
  return op;
}
const OpSpec& geglu_op() {
  static const GegluOp op;
  return op;
}

}  // namespace loom::kernels
