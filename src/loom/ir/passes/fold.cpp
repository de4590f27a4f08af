// Constant folding: pure ops on constants become constants (vector constants are splats, so
// lane-wise ops fold the same way), plus identities (x+0, x*1, x<<0, select on a constant,
// ...), constant-condition ifs inlined and zero-trip loops removed.
#include <cmath>
#include <optional>

#include "loom/ir/passes/passes.h"
#include "loom/ir/passes/rewrite.h"

namespace loom::ir {
namespace {

const Literal* literal_of(const Value* v) {
  return v && v->def && v->def->op == Op::kConst ? &v->def->lit : nullptr;
}

// Folds an integer (or i1) op; nullopt when the result would be undefined or is not foldable.
std::optional<Literal> eval_int(const Inst& inst, Scalar s, const std::vector<Literal>& l) {
  const bool sgn = is_signed(s);
  const int bits = scalar_bits(s);
  auto lit = [&](int64_t v) { return make_literal(s, 0, v); };
  int64_t a = l[0].i, b = l.size() > 1 ? l[1].i : 0;
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (inst.op) {
    case Op::kAdd: return lit(static_cast<int64_t>(ua + ub));
    case Op::kSub: return lit(static_cast<int64_t>(ua - ub));
    case Op::kMul: return lit(static_cast<int64_t>(ua * ub));
    case Op::kDiv:
    case Op::kRem: {
      if (b == 0) return std::nullopt;
      if (sgn) {
        if (b == -1 && a == wrap_int(s, int64_t{1} << (bits - 1))) return std::nullopt;  // overflow
        return lit(inst.op == Op::kDiv ? a / b : a % b);
      }
      return lit(static_cast<int64_t>(inst.op == Op::kDiv ? ua / ub : ua % ub));
    }
    case Op::kMin: return lit(sgn ? std::min(a, b) : static_cast<int64_t>(std::min(ua, ub)));
    case Op::kMax: return lit(sgn ? std::max(a, b) : static_cast<int64_t>(std::max(ua, ub)));
    case Op::kAnd: return lit(a & b);
    case Op::kOr: return lit(a | b);
    case Op::kXor: return lit(a ^ b);
    case Op::kShl:
    case Op::kShr:
      if (ub >= static_cast<uint64_t>(bits)) return std::nullopt;  // undefined amount
      if (inst.op == Op::kShl) return lit(static_cast<int64_t>(ua << ub));
      return lit(sgn ? a >> b : static_cast<int64_t>(ua >> ub));
    case Op::kNeg: return lit(static_cast<int64_t>(0 - ua));
    case Op::kAbs: return lit(sgn && a < 0 ? static_cast<int64_t>(0 - ua) : a);
    case Op::kNot: return lit(~a);
    case Op::kCmp: {
      bool r = false;
      int c = sgn ? (a < b ? -1 : a > b) : (ua < ub ? -1 : ua > ub);
      switch (inst.mode) {
        case Mode::kEq: r = c == 0; break;
        case Mode::kNe: r = c != 0; break;
        case Mode::kLt: r = c < 0; break;
        case Mode::kLe: r = c <= 0; break;
        case Mode::kGt: r = c > 0; break;
        case Mode::kGe: r = c >= 0; break;
        default: return std::nullopt;
      }
      return make_literal(Scalar::kI1, 0, r);
    }
    default: return std::nullopt;
  }
}

std::optional<Literal> eval_float(const Inst& inst, Scalar s, const std::vector<Literal>& l) {
  double a = l[0].f, b = l.size() > 1 ? l[1].f : 0;
  auto lit = [&](double v) { return make_literal(s, v, 0); };
  switch (inst.op) {
    case Op::kAdd: return lit(a + b);
    case Op::kSub: return lit(a - b);
    case Op::kMul: return lit(a * b);
    case Op::kDiv: return lit(a / b);
    case Op::kMin: return lit(std::fmin(a, b));
    case Op::kMax: return lit(std::fmax(a, b));
    case Op::kNeg: return lit(-a);
    case Op::kAbs: return lit(std::fabs(a));
    case Op::kFma:  // exact only in f64 (double rounding otherwise)
      return s == Scalar::kF64 ? std::optional<Literal>(lit(std::fma(a, b, l[2].f))) : std::nullopt;
    case Op::kExp: return lit(std::exp(a));
    case Op::kExp2: return lit(std::exp2(a));
    case Op::kLog: return lit(std::log(a));
    case Op::kSqrt: return lit(std::sqrt(a));
    case Op::kRsqrt: return lit(1.0 / std::sqrt(a));
    case Op::kTanh: return lit(std::tanh(a));
    case Op::kSin: return lit(std::sin(a));
    case Op::kCos: return lit(std::cos(a));
    case Op::kErf: return lit(std::erf(a));
    case Op::kCmp: {
      bool r = false;
      switch (inst.mode) {
        case Mode::kEq: r = a == b; break;
        case Mode::kNe: r = a != b; break;  // unordered: true with NaN
        case Mode::kLt: r = a < b; break;
        case Mode::kLe: r = a <= b; break;
        case Mode::kGt: r = a > b; break;
        case Mode::kGe: r = a >= b; break;
        default: return std::nullopt;
      }
      return make_literal(Scalar::kI1, 0, r);
    }
    default: return std::nullopt;
  }
}

std::optional<Literal> eval_convert(Scalar from, Scalar to, const Literal& l) {
  if (to == Scalar::kI1) return make_literal(to, 0, l.is_float ? l.f != 0 : l.i != 0);
  if (!l.is_float) {
    if (!is_float(to)) return make_literal(to, 0, l.i);
    double v = is_signed(from) ? static_cast<double>(l.i) : static_cast<double>(static_cast<uint64_t>(l.i));
    return make_literal(to, v, 0);
  }
  if (is_float(to)) return make_literal(to, l.f, 0);
  double t = std::trunc(l.f);
  if (std::isnan(t)) return std::nullopt;
  int bits = scalar_bits(to);
  double lo = is_signed(to) ? -std::ldexp(1.0, bits - 1) : 0.0;
  double hi = is_signed(to) ? std::ldexp(1.0, bits - 1) : std::ldexp(1.0, bits);
  if (t < lo || t >= hi) return std::nullopt;  // out of range: undefined
  if (!is_signed(to) && t >= std::ldexp(1.0, 63)) return make_literal(to, 0, static_cast<int64_t>(static_cast<uint64_t>(t)));
  return make_literal(to, 0, static_cast<int64_t>(t));
}

// The folded literal of a pure op whose operands are all constants, or nullopt.
std::optional<Literal> evaluate(const Inst& inst) {
  if (inst.results.size() != 1 || !inst.regions.empty()) return std::nullopt;
  std::vector<Literal> lits;
  for (const Value* v : inst.operands) {
    const Literal* l = literal_of(v);
    if (!l) return std::nullopt;
    lits.push_back(*l);
  }
  const Type rt = inst.results[0]->type;
  if (!rt.is_value()) return std::nullopt;
  switch (inst.info().rule) {
    case TypeRule::kSame:
    case TypeRule::kCmp: {
      Scalar s = inst.operands[0]->type.elem();
      return is_float(s) ? eval_float(inst, s, lits) : eval_int(inst, s, lits);
    }
    case TypeRule::kSelect: return lits[0].i ? lits[1] : lits[2];
    case TypeRule::kConvert: return eval_convert(inst.operands[0]->type.elem(), rt.elem(), lits[0]);
    case TypeRule::kBitcast: {
      Type from = inst.operands[0]->type;
      if (from.is_scalar() && rt.is_scalar() && from.is_int() && rt.is_int()) return make_literal(rt.elem(), 0, lits[0].i);
      return std::nullopt;
    }
    case TypeRule::kSplat:
    case TypeRule::kExtract: return lits[0];  // constant vectors are splats
    case TypeRule::kConcat:
      if (lits[0] == lits[1]) return lits[0];  // two equal splats
      return std::nullopt;
    default: return std::nullopt;
  }
}

bool lit_is(const Value* v, double f, int64_t i) {
  const Literal* l = literal_of(v);
  if (!l) return false;
  return l->is_float ? l->f == f : l->i == i;
}

// x+0, x*1, ... : the value the instruction equals, or nullptr.
Value* identity(const Inst& inst) {
  if (inst.results.size() != 1 || inst.operands.empty()) return nullptr;
  Value* a = inst.operands[0];
  Value* b = inst.operands.size() > 1 ? inst.operands[1] : nullptr;
  const Type t = a->type;
  const bool integer = t.is_int() || t.is_bool();
  switch (inst.op) {
    case Op::kAdd:
      if (integer && lit_is(b, 0, 0)) return a;
      if (integer && lit_is(a, 0, 0)) return b;
      return nullptr;
    case Op::kSub: return integer && lit_is(b, 0, 0) ? a : nullptr;
    case Op::kMul:
      if (lit_is(b, 1, 1)) return a;
      if (lit_is(a, 1, 1)) return b;
      if (integer && lit_is(b, 0, 0)) return b;
      if (integer && lit_is(a, 0, 0)) return a;
      return nullptr;
    case Op::kDiv: return lit_is(b, 1, 1) ? a : nullptr;
    case Op::kShl:
    case Op::kShr: return lit_is(b, 0, 0) ? a : nullptr;
    case Op::kOr:
    case Op::kXor:
      if (lit_is(b, 0, 0)) return a;
      if (lit_is(a, 0, 0)) return b;
      return nullptr;
    case Op::kAnd: {
      int64_t ones = wrap_int(t.elem(), -1);
      if (lit_is(b, 0, ones)) return a;
      if (lit_is(a, 0, ones)) return b;
      if (lit_is(b, 0, 0)) return b;
      if (lit_is(a, 0, 0)) return a;
      return nullptr;
    }
    case Op::kMin:
    case Op::kMax: return a == b ? a : nullptr;
    case Op::kSelect: {
      if (const Literal* c = literal_of(a)) return c->i ? inst.operands[1] : inst.operands[2];
      return inst.operands[1] == inst.operands[2] ? inst.operands[1] : nullptr;
    }
    default: return nullptr;
  }
}

// Trip count of a `for` with constant bounds and positive step; nullopt otherwise.
std::optional<uint64_t> trip_count(const Inst& loop) {
  const Literal* lo = literal_of(loop.operands[0]);
  const Literal* hi = literal_of(loop.operands[1]);
  const Literal* st = literal_of(loop.operands[2]);
  if (!lo || !hi || !st) return std::nullopt;
  Scalar s = loop.operands[0]->type.elem();
  if (is_signed(s)) {
    if (st->i <= 0) return std::nullopt;
    if (hi->i <= lo->i) return 0;
    // Unsigned arithmetic: hi - lo may exceed the signed range.
    uint64_t span = static_cast<uint64_t>(hi->i) - static_cast<uint64_t>(lo->i);
    return (span + static_cast<uint64_t>(st->i) - 1) / static_cast<uint64_t>(st->i);
  }
  uint64_t l = static_cast<uint64_t>(lo->i), h = static_cast<uint64_t>(hi->i), step = static_cast<uint64_t>(st->i);
  if (step == 0) return std::nullopt;
  if (h <= l) return 0;
  return (h - l - 1) / step + 1;
}

class Folder {
 public:
  explicit Folder(Kernel& k) : repl_(k), k_(k) {}

  bool run() {
    block(k_.body);
    if (changed_) repl_.apply(k_.body);
    return changed_;
  }

 private:
  void block(Block& b) {
    std::vector<Inst*> out;
    for (Inst* i : b.insts) {
      repl_.apply(*i);
      if (i->op == Op::kIf) {
        if (const Literal* c = literal_of(i->operands[0])) {  // inline the taken branch
          Block& taken = i->regions[c->i ? 0 : 1];
          block(taken);
          for (Inst* t : taken.insts) {
            if (t->op == Op::kYield) {
              for (size_t r = 0; r < i->results.size(); ++r) repl_.replace(i->results[r], repl_.get(t->operands[r]));
            } else {
              out.push_back(t);
            }
          }
          changed_ = true;
          continue;
        }
      }
      if (i->op == Op::kFor) {
        if (auto trips = trip_count(*i); trips && *trips == 0) {
          for (size_t r = 0; r < i->results.size(); ++r) repl_.replace(i->results[r], i->operands[r + 3]);
          changed_ = true;
          continue;
        }
      }
      for (Block& r : i->regions) block(r);
      if (i->info().has(kPure) && !i->info().has(kConvergent) && i->op != Op::kConst) {
        if (auto lit = evaluate(*i)) {
          i->op = Op::kConst;
          i->mode = Mode::kNone;
          i->imm = 0;
          i->operands.clear();
          i->lit = *lit;
          changed_ = true;
        } else if (Value* same = identity(*i)) {
          repl_.replace(i->results[0], same);
          changed_ = true;
          continue;
        }
      }
      out.push_back(i);
    }
    b.insts = std::move(out);
  }

  passes::Replacements repl_;
  Kernel& k_;
  bool changed_ = false;
};

}  // namespace

bool fold_constants(Kernel& kernel) { return Folder(kernel).run(); }

namespace passes {
std::optional<uint64_t> constant_trip_count(const Inst& loop) { return trip_count(loop); }
}  // namespace passes

}  // namespace loom::ir
