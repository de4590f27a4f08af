// PTX for one lane of an elementwise op: integer and float arithmetic, math instructions,
// compares, selects, conversions, and whole-value bit casts.
#include <bit>
#include <cmath>

#include "loom/codegen/emit_util.h"
#include "loom/codegen/ptx/ptx_internal.h"

namespace loom::codegen::ptx {

using namespace ir;

namespace {
std::string f32_imm(double v) { return fmt::format("0f{:08X}", f32_bits(v)); }

std::string_view cmp_name(Mode m, bool is_float_cmp) {
  switch (m) {
    case Mode::kEq: return "eq";
    case Mode::kNe: return is_float_cmp ? "neu" : "ne";  // float ne is unordered (true with NaN)
    case Mode::kLt: return "lt";
    case Mode::kLe: return "le";
    case Mode::kGt: return "gt";
    case Mode::kGe: return "ge";
    default: return "eq";
  }
}
}  // namespace

std::string KernelEmitter::widen_half(const std::string& reg, Scalar s) {
  std::string t = new_reg(RC::kB32);
  line(fmt::format("cvt.f32.{} {}, {};", type_suffix(s), t, reg));
  return t;
}

void KernelEmitter::narrow_half(const std::string& f32, Scalar s, const std::string& d) {
  line(fmt::format("cvt.rn.{}.f32 {}, {};", type_suffix(s), d, f32));
}

void KernelEmitter::select(RC rc, const std::string& c, const std::string& a, const std::string& b, const std::string& d) {
  if (rc != RC::kPred) {
    line(fmt::format("selp.{} {}, {}, {}, {};", bits_suffix(rc), d, a, b, c));
    return;
  }
  std::string t1 = new_reg(RC::kPred), t2 = new_reg(RC::kPred), t3 = new_reg(RC::kPred);
  line(fmt::format("and.pred {}, {}, {};", t1, c, a));
  line(fmt::format("not.pred {}, {};", t2, c));
  line(fmt::format("and.pred {}, {}, {};", t3, t2, b));
  line(fmt::format("or.pred {}, {}, {};", d, t1, t3));
}

Status KernelEmitter::lane(const Inst& in, int l, const std::string& d) {
  auto opr = [&](size_t i) -> const std::string& {
    const Value* v = in.operands[i];
    return regs_[v->id][v->type.is_vector() ? static_cast<size_t>(l) : 0];
  };
  const Type rt = in.result()->type;
  if (in.op == Op::kSelect) {
    select(rc_of(rt), opr(0), opr(1), opr(2), d);
    return Status();
  }
  Scalar s = in.operands[0]->type.elem();
  if (in.op == Op::kConvert) {
    convert(s, rt.elem(), opr(0), d);
    return Status();
  }
  std::vector<std::string> a;
  for (size_t i = 0; i < in.operands.size(); ++i) a.push_back(opr(i));
  if (!is_half(s)) return arith(in, s, a, d);
  // f16/bf16: compute in f32 and round once per op.
  for (auto& r : a) r = widen_half(r, s);
  if (in.op == Op::kCmp) return arith(in, Scalar::kF32, a, d);
  std::string t = new_reg(RC::kB32);
  LOOM_RETURN_IF_ERROR(arith(in, Scalar::kF32, a, t));
  narrow_half(t, s, d);
  return Status();
}

// add, sub and mul of f16 vectors (an even lane count): one f16x2 instruction per lane pair.
// Their results equal the lane-wise form's (exact in f32, then rounded once: f32 holds more than
// twice f16's precision, so the second rounding cannot differ); fma is left lane-wise, where the
// f32 form rounds twice.
bool KernelEmitter::packed_half2(const Inst& in) {
  const Value* r = in.result();
  if (in.op != Op::kAdd && in.op != Op::kSub && in.op != Op::kMul) return false;
  if (r->type.elem() != Scalar::kF16 || r->type.lanes() % 2 != 0) return false;
  const auto& d = define(r);
  const std::string_view name = in.op == Op::kAdd ? "add" : in.op == Op::kSub ? "sub" : "mul";
  for (size_t l = 0; l < d.size(); l += 2) {
    std::vector<std::string> w;
    for (const Value* v : in.operands) {
      w.push_back(new_reg(RC::kB32));
      line(fmt::format("mov.b32 {}, {{{}, {}}};", w.back(), regs_[v->id][l], regs_[v->id][l + 1]));
    }
    std::string o = new_reg(RC::kB32);
    line(fmt::format("{}.rn.f16x2 {}, {}, {};", name, o, w[0], w[1]));
    line(fmt::format("mov.b32 {{{}, {}}}, {};", d[l], d[l + 1], o));
  }
  return true;
}

Status KernelEmitter::arith(const Inst& in, Scalar s, const std::vector<std::string>& a, const std::string& d) {
  const bool flt = is_float(s);
  const RC rc = rc_of(s);
  const std::string_view t = arith_suffix(s);
  const std::string_view rn = flt ? ".rn" : "";
  auto emit2 = [&](std::string_view op) { line(fmt::format("{}.{} {}, {}, {};", op, t, d, a[0], a[1])); };
  // Integer division and remainder by a constant power of two become shifts and masks: ptxas
  // emits its generic reciprocal sequence (about 20 instructions, MUFU.RCP and conversions) for
  // div/rem even by an immediate 8. Signed: q = (x + (x < 0 ? 2^k - 1 : 0)) >> k (rounds toward
  // zero, as div does), r = x - (q << k) (the sign of x, as rem's).
  const Value* divisor = in.operands.size() > 1 ? in.operands[1] : nullptr;
  if ((in.op == Op::kDiv || in.op == Op::kRem) && !flt && (rc == RC::kB32 || rc == RC::kB64) && divisor->def &&
      divisor->def->op == Op::kConst && divisor->def->lit.i > 0 && (divisor->def->lit.i & (divisor->def->lit.i - 1)) == 0) {
    const int64_t dv = divisor->def->lit.i;
    const int bits = rc == RC::kB32 ? 32 : 64, k = std::countr_zero(static_cast<uint64_t>(dv));
    const std::string_view b = bits_suffix(rc);
    if (k >= bits - 1) {  // 2^31 / 2^63: left to ptxas
      emit2(in.op == Op::kDiv ? "div" : "rem");
      return Status();
    }
    if (!is_signed(s)) {
      if (in.op == Op::kDiv) line(fmt::format("shr.u{} {}, {}, {};", bits, d, a[0], k));
      else line(fmt::format("and.{} {}, {}, {};", b, d, a[0], dv - 1));
      return Status();
    }
    if (k == 0) {
      if (in.op == Op::kDiv) copy(d, a[0], rc);
      else line(fmt::format("mov.{} {}, 0;", b, d));
      return Status();
    }
    const std::string bias = new_reg(rc), sum = new_reg(rc);
    line(fmt::format("shr.s{} {}, {}, {};", bits, bias, a[0], bits - 1));
    line(fmt::format("shr.u{} {}, {}, {};", bits, bias, bias, bits - k));
    line(fmt::format("add.s{} {}, {}, {};", bits, sum, a[0], bias));
    if (in.op == Op::kDiv) {
      line(fmt::format("shr.s{} {}, {}, {};", bits, d, sum, k));
    } else {
      const std::string m = new_reg(rc);
      line(fmt::format("and.{} {}, {}, {};", b, m, sum, -dv));
      line(fmt::format("sub.s{} {}, {}, {};", bits, d, a[0], m));
    }
    return Status();
  }
  auto emit1 = [&](std::string_view op) { line(fmt::format("{}.{} {}, {};", op, t, d, a[0])); };
  auto shift_amount = [&]() -> std::string {
    if (rc == RC::kB32) return a[1];
    std::string amt = new_reg(RC::kB32);
    line(fmt::format("cvt.u32.{} {}, {};", rc == RC::kB16 ? "u16" : "u64", amt, a[1]));
    return amt;
  };
  switch (in.op) {
    case Op::kAdd: line(fmt::format("add{}.{} {}, {}, {};", rn, t, d, a[0], a[1])); break;
    case Op::kSub: line(fmt::format("sub{}.{} {}, {}, {};", rn, t, d, a[0], a[1])); break;
    case Op::kMul: line(fmt::format("mul{}.{} {}, {}, {};", flt ? ".rn" : ".lo", t, d, a[0], a[1])); break;
    case Op::kDiv: line(fmt::format("div{}.{} {}, {}, {};", rn, t, d, a[0], a[1])); break;
    case Op::kRem: emit2("rem"); break;
    case Op::kMin: emit2("min"); break;
    case Op::kMax: emit2("max"); break;
    case Op::kAnd: line(fmt::format("and.{} {}, {}, {};", bits_suffix(rc), d, a[0], a[1])); break;
    case Op::kOr: line(fmt::format("or.{} {}, {}, {};", bits_suffix(rc), d, a[0], a[1])); break;
    case Op::kXor: line(fmt::format("xor.{} {}, {}, {};", bits_suffix(rc), d, a[0], a[1])); break;
    case Op::kNot: line(fmt::format("not.{} {}, {};", bits_suffix(rc), d, a[0])); break;
    case Op::kShl: line(fmt::format("shl.{} {}, {}, {};", bits_suffix(rc), d, a[0], shift_amount())); break;
    case Op::kShr:
      line(fmt::format("shr.{}{} {}, {}, {};", is_signed(s) ? "s" : "u", std::max(16, scalar_bits(s)), d, a[0],
                       shift_amount()));
      break;
    case Op::kNeg: line(fmt::format("neg.{} {}, {};", flt ? t : (rc == RC::kB16 ? "s16" : rc == RC::kB32 ? "s32" : "s64"), d, a[0])); break;
    case Op::kAbs:
      if (!flt && !is_signed(s)) copy(d, a[0], rc);
      else emit1("abs");
      break;
    case Op::kFma: line(fmt::format("fma.rn.{} {}, {}, {}, {};", t, d, a[0], a[1], a[2])); break;
    case Op::kExp: {
      std::string x = new_reg(RC::kB32);
      line(fmt::format("mul.rn.f32 {}, {}, {};", x, a[0], f32_imm(1.4426950408889634)));
      line(fmt::format("ex2.approx.f32 {}, {};", d, x));
      break;
    }
    case Op::kExp2: line(fmt::format("ex2.approx.f32 {}, {};", d, a[0])); break;
    case Op::kLog: {
      std::string x = new_reg(RC::kB32);
      line(fmt::format("lg2.approx.f32 {}, {};", x, a[0]));
      line(fmt::format("mul.rn.f32 {}, {}, {};", d, x, f32_imm(0.6931471805599453)));
      break;
    }
    case Op::kSqrt: line(fmt::format("sqrt.rn.f32 {}, {};", d, a[0])); break;
    case Op::kRsqrt: line(fmt::format("rsqrt.approx.f32 {}, {};", d, a[0])); break;
    case Op::kSin: line(fmt::format("sin.approx.f32 {}, {};", d, a[0])); break;
    case Op::kCos: line(fmt::format("cos.approx.f32 {}, {};", d, a[0])); break;
    case Op::kCmp: {
      const Scalar cs = s;
      if (cs == Scalar::kI1) {
        if (in.mode == Mode::kNe) {
          line(fmt::format("xor.pred {}, {}, {};", d, a[0], a[1]));
        } else {
          std::string x = new_reg(RC::kPred);
          line(fmt::format("xor.pred {}, {}, {};", x, a[0], a[1]));
          line(fmt::format("not.pred {}, {};", d, x));
        }
        return Status();
      }
      line(fmt::format("setp.{}.{} {}, {}, {};", cmp_name(in.mode, flt), t, d, a[0], a[1]));
      return Status();
    }
    default: return internal_error("ptx: no lane form for '{}'", op_name(in.op));
  }
  if (!flt && scalar_bits(s) == 8) {
    switch (in.op) {  // results that can leave the 8-bit range of the 16-bit register
      case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kRem: case Op::kShl:
      case Op::kNeg: case Op::kAbs: case Op::kNot:
        normalize(d, s);
        break;
      default: break;
    }
  }
  return Status();
}

void KernelEmitter::convert(Scalar from, Scalar to, const std::string& a, const std::string& d) {
  if (from == to) {
    copy(d, a, rc_of(to));
    return;
  }
  if (to == Scalar::kI1) {
    if (is_float(from)) {
      std::string x = is_half(from) ? widen_half(a, from) : a;
      line(fmt::format("setp.neu.{} {}, {}, {};", from == Scalar::kF64 ? "f64" : "f32", d, x,
                       from == Scalar::kF64 ? "0d0000000000000000" : "0f00000000"));
    } else {
      line(fmt::format("setp.ne.{} {}, {}, 0;", arith_suffix(from), d, a));
    }
    return;
  }
  if (from == Scalar::kI1) {
    if (to == Scalar::kF32) line(fmt::format("selp.f32 {}, 0f3F800000, 0f00000000, {};", d, a));
    else if (to == Scalar::kF64) line(fmt::format("selp.f64 {}, 0d3FF0000000000000, 0d0000000000000000, {};", d, a));
    else if (is_half(to)) line(fmt::format("selp.b16 {}, {}, 0, {};", d, to == Scalar::kF16 ? "0x3C00" : "0x3F80", a));
    else line(fmt::format("selp.{} {}, 1, 0, {};", arith_suffix(to), d, a));
    return;
  }
  const int fb = scalar_bits(from), tb = scalar_bits(to);
  if (!is_float(from) && !is_float(to)) {
    const int rfb = std::max(16, fb), rtb = std::max(16, tb);
    if (rfb == rtb) {
      copy(d, a, rc_of(to));
    } else if (rtb > rfb) {  // widen with the source's signedness (8-bit sources are already extended)
      char sign = is_signed(from) ? 's' : 'u';
      line(fmt::format("cvt.{}{}.{}{} {}, {};", sign, rtb, sign, rfb, d, a));
    } else {
      line(fmt::format("cvt.u{}.u{} {}, {};", rtb, rfb, d, a));
    }
    normalize(d, to);
    return;
  }
  if (!is_float(from)) {  // int -> float
    if (is_half(to)) {
      std::string t = new_reg(RC::kB32);
      line(fmt::format("cvt.rn.f32.{} {}, {};", arith_suffix(from), t, a));
      narrow_half(t, to, d);
    } else {
      line(fmt::format("cvt.rn.{}.{} {}, {};", type_suffix(to), arith_suffix(from), d, a));
    }
    return;
  }
  std::string x = a;
  Scalar f = from;
  if (is_half(from) && !(from == Scalar::kF16 && to == Scalar::kF64)) {
    x = widen_half(a, from);
    f = Scalar::kF32;
  }
  if (!is_float(to)) {  // float -> int, toward zero
    line(fmt::format("cvt.rzi.{}.{} {}, {};", arith_suffix(to), type_suffix(f), d, x));
    normalize(d, to);
    return;
  }
  if (f == to) {
    copy(d, x, rc_of(to));
  } else if (tb > scalar_bits(f)) {
    line(fmt::format("cvt.{}.{} {}, {};", type_suffix(to), type_suffix(f), d, x));
  } else if (to == Scalar::kBF16 && f == Scalar::kF64) {
    std::string t = new_reg(RC::kB32);
    line(fmt::format("cvt.rn.f32.f64 {}, {};", t, x));
    narrow_half(t, to, d);
  } else {
    line(fmt::format("cvt.rn.{}.{} {}, {};", type_suffix(to), type_suffix(f), d, x));
  }
}

// Whole value as 32-bit words (little-endian lane order); the last word may be partial.
std::vector<std::string> KernelEmitter::to_words(const Value* v) {
  const auto& regs = regs_[v->id];
  const int eb = scalar_bits(v->type.elem());
  std::vector<std::string> words;
  if (eb == 32) return regs;
  if (eb == 64) {
    for (const auto& r : regs) {
      std::string lo = new_reg(RC::kB32), hi = new_reg(RC::kB32);
      line(fmt::format("mov.b64 {{{}, {}}}, {};", lo, hi, r));
      words.push_back(lo);
      words.push_back(hi);
    }
    return words;
  }
  const size_t per_word = static_cast<size_t>(32 / eb);
  for (size_t i = 0; i < regs.size(); i += per_word) {
    std::string w = new_reg(RC::kB32);
    if (eb == 16 && i + 1 < regs.size()) {
      line(fmt::format("mov.b32 {}, {{{}, {}}};", w, regs[i], regs[i + 1]));
    } else {
      line(fmt::format("mov.b32 {}, 0;", w));
      for (size_t j = 0; j < per_word && i + j < regs.size(); ++j) {
        std::string t = new_reg(RC::kB32);
        line(fmt::format("cvt.u32.u16 {}, {};", t, regs[i + j]));
        if (eb == 8) line(fmt::format("and.b32 {0}, {0}, 255;", t));
        if (j) line(fmt::format("shl.b32 {0}, {0}, {1};", t, static_cast<int>(j) * eb));
        line(fmt::format("or.b32 {0}, {0}, {1};", w, t));
      }
    }
    words.push_back(w);
  }
  return words;
}

void KernelEmitter::from_words(const std::vector<std::string>& words, Type t, const std::vector<std::string>& d) {
  const int eb = scalar_bits(t.elem());
  if (eb == 32) {
    for (size_t i = 0; i < d.size(); ++i) copy(d[i], words[i], RC::kB32);
    return;
  }
  if (eb == 64) {
    for (size_t i = 0; i < d.size(); ++i) line(fmt::format("mov.b64 {}, {{{}, {}}};", d[i], words[2 * i], words[2 * i + 1]));
    return;
  }
  const size_t per_word = static_cast<size_t>(32 / eb);
  for (size_t i = 0; i < d.size(); ++i) {
    const std::string& w = words[i / per_word];
    size_t j = i % per_word;
    if (eb == 16 && j == 0 && i + 1 < d.size()) {
      line(fmt::format("mov.b32 {{{}, {}}}, {};", d[i], d[i + 1], w));
      ++i;
      continue;
    }
    std::string x = new_reg(RC::kB32);
    line(fmt::format("bfe.u32 {}, {}, {}, {};", x, w, static_cast<int>(j) * eb, eb));
    line(fmt::format("cvt.u16.u32 {}, {};", d[i], x));
    normalize(d[i], t.elem());
  }
}

void KernelEmitter::bitcast(const Inst& in) {
  const Value* src = in.operands[0];
  const Value* r = in.result();
  const auto& d = define(r);
  if (r->type.is_pointer()) {
    copy(d[0], reg(src), RC::kB64);
    return;
  }
  if (src->type.lanes() == r->type.lanes()) {  // same element size: lane by lane
    for (size_t l = 0; l < d.size(); ++l) {
      copy(d[l], regs_[src->id][l], rc_of(r->type));
      normalize(d[l], r->type.elem());
    }
    return;
  }
  from_words(to_words(src), r->type, d);
}

}  // namespace loom::codegen::ptx
