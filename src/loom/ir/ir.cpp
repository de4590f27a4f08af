// Kernel/Module storage and the literal helpers (integer wrapping, float rounding).
#include "loom/ir/ir.h"

#include <cmath>
#include <cstring>

namespace loom::ir {

bool operator==(const Literal& a, const Literal& b) {
  if (a.is_float != b.is_float) return false;
  if (!a.is_float) return a.i == b.i;
  // Bitwise: NaN equals itself and 0.0 differs from -0.0, which is what CSE needs.
  return std::memcmp(&a.f, &b.f, sizeof(double)) == 0;
}

Value* Kernel::new_value(Type type, std::string name) {
  auto v = std::make_unique<Value>();
  v->type = type;
  v->name = std::move(name);
  v->id = static_cast<uint32_t>(values_.size());
  values_.push_back(std::move(v));
  return values_.back().get();
}

Inst* Kernel::new_inst(Op op, SourceLoc loc) {
  auto inst = std::make_unique<Inst>();
  inst->op = op;
  inst->loc = loc;
  insts_.push_back(std::move(inst));
  return insts_.back().get();
}

Kernel* Module::add_kernel(std::string name) {
  kernels.push_back(std::make_unique<Kernel>());
  kernels.back()->name = std::move(name);
  return kernels.back().get();
}

Kernel* Module::find(std::string_view name) const {
  for (const auto& k : kernels)
    if (k->name == name) return k.get();
  return nullptr;
}

int64_t wrap_int(Scalar s, int64_t v) {
  switch (s) {
    case Scalar::kI1: return v & 1;
    case Scalar::kI8: return static_cast<int8_t>(v);
    case Scalar::kU8: return static_cast<uint8_t>(v);
    case Scalar::kI16: return static_cast<int16_t>(v);
    case Scalar::kU16: return static_cast<uint16_t>(v);
    case Scalar::kI32: return static_cast<int32_t>(v);
    case Scalar::kU32: return static_cast<uint32_t>(v);
    default: return v;
  }
}

namespace {
// Rounds to a binary float with `mant_bits` fraction bits and minimum normal exponent
// `min_exp`, overflowing to infinity above `max_finite` (round to nearest even).
double round_to_format(double v, int mant_bits, int min_exp, double max_finite) {
  if (!std::isfinite(v) || v == 0) return v;
  int exp = 0;
  std::frexp(v, &exp);  // v = m * 2^exp, 0.5 <= |m| < 1
  int e = exp - 1;
  if (e < min_exp) e = min_exp;  // subnormal: fixed quantum
  double quantum = std::ldexp(1.0, e - mant_bits);
  double r = std::nearbyint(v / quantum) * quantum;
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, v);
  return r;
}
}  // namespace

double round_float(Scalar s, double v) {
  switch (s) {
    case Scalar::kF64: return v;
    case Scalar::kF32: return static_cast<double>(static_cast<float>(v));
    case Scalar::kF16: return round_to_format(v, 10, -14, 65504.0);
    case Scalar::kBF16: return round_to_format(v, 7, -126, 3.38953138925153547590470800371487866880e38);
    default: return v;
  }
}

Literal make_literal(Scalar s, double float_value, int64_t int_value) {
  Literal lit;
  if (is_float(s)) {
    lit.is_float = true;
    lit.f = round_float(s, float_value);
  } else {
    lit.i = wrap_int(s, int_value);
  }
  return lit;
}

int64_t alloc_shared_bytes(const Inst& alloc) {
  return alloc.results.empty() ? 0 : (alloc.imm * alloc.results[0]->type.elem_bytes() + 15) / 16 * 16;
}

int64_t shared_bytes(const Kernel& k) {
  int64_t total = 0;
  for (const Inst* i : k.body.insts)  // the verifier keeps alloc_shared at the top level
    if (i->op == Op::kAllocShared) total += alloc_shared_bytes(*i);
  return total;
}

int64_t dynamic_shared_bytes(const Kernel& k) {
  const int64_t n = shared_bytes(k);
  return n > kStaticSharedBytes ? n : 0;
}

}  // namespace loom::ir
