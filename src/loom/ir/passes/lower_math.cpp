// Expansion of tanh and erf into simpler ops for the GPU targets (see passes.h for accuracy).
#include <cmath>

#include "loom/ir/builder.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/passes/rewrite.h"

namespace loom::ir {
namespace {

constexpr double kLog2e = 1.4426950408889634;

Value* expand_tanh(Builder& b, Value* x) {
  Type t = x->type;
  auto c = [&](double v) { return b.const_float(t, v); };
  Value* a = b.unary(Op::kAbs, x);
  // |x| >= 0.6: (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.3, so nothing cancels.
  Value* e = b.unary(Op::kExp2, b.mul(a, c(-2 * kLog2e)));
  Value* r = b.div(b.sub(c(1), e), b.add(c(1), e));
  Value* large = b.select(b.cmp(Mode::kLt, x, c(0)), b.neg(r), r);
  // |x| < 0.6: the Taylor series to x^15 (truncation error below 2e-7 relative).
  const double taylor[] = {-929569.0 / 638512875, 21844.0 / 6081075, -1382.0 / 155925, 62.0 / 2835,
                           -17.0 / 315,           2.0 / 15,          -1.0 / 3,          1.0};
  Value* z = b.mul(x, x);
  Value* p = c(taylor[0]);
  for (int i = 1; i < 8; ++i) p = b.fma(p, z, c(taylor[i]));
  return b.select(b.cmp(Mode::kLt, a, c(0.6)), b.mul(x, p), large);
}

Value* expand_erf(Builder& b, Value* x) {
  Type t = x->type;
  auto c = [&](double v) { return b.const_float(t, v); };
  Value* a = b.unary(Op::kAbs, x);
  Value* z = b.mul(x, x);
  // |x| < 0.5: 2/sqrt(pi) * x * sum_n (-z)^n / (n! (2n+1)), six terms (error < 2e-8).
  const double taylor[] = {-1.0 / 1320, 1.0 / 216, -1.0 / 42, 1.0 / 10, -1.0 / 3, 1.0};
  Value* p = c(taylor[0]);
  for (int i = 1; i < 6; ++i) p = b.fma(p, z, c(taylor[i]));
  Value* small = b.mul(b.mul(x, p), c(2 / std::sqrt(M_PI)));
  // |x| >= 0.5: Abramowitz & Stegun 7.1.26, 1 - t (a1 + t (a2 + ...)) exp(-x^2), t = 1/(1 + p|x|).
  Value* tt = b.div(c(1), b.fma(a, c(0.3275911), c(1)));
  const double as[] = {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592};
  Value* q = c(as[0]);
  for (int i = 1; i < 5; ++i) q = b.fma(q, tt, c(as[i]));
  q = b.mul(q, tt);
  Value* ez = b.unary(Op::kExp2, b.mul(b.neg(z), c(kLog2e)));
  Value* r = b.sub(c(1), b.mul(q, ez));
  Value* large = b.select(b.cmp(Mode::kLt, x, c(0)), b.neg(r), r);
  return b.select(b.cmp(Mode::kLt, a, c(0.5)), small, large);
}

}  // namespace

bool lower_tanh_erf(Kernel& kernel) {
  passes::Replacements repl(kernel);
  Builder b(kernel);
  const bool changed = passes::rewrite_blocks(kernel, [&](Inst* i, std::vector<Inst*>& out) {
    if (i->op != Op::kTanh && i->op != Op::kErf) {
      out.push_back(i);
      return false;
    }
    Block tmp;
    b.set_insertion_block(&tmp);
    Value* v = i->op == Op::kTanh ? expand_tanh(b, i->operands[0]) : expand_erf(b, i->operands[0]);
    for (Inst* n : tmp.insts) n->loc = i->loc;
    out.insert(out.end(), tmp.insts.begin(), tmp.insts.end());
    repl.replace(i->results[0], v);
    return true;
  });
  if (changed) repl.apply(kernel.body);
  return changed;
}

}  // namespace loom::ir
