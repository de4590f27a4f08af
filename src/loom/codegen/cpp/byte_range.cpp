// Byte bounds of integer values (see byte_range.h). Conservative: anything not understood is 255.
#include "loom/codegen/cpp/byte_range.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "loom/codegen/emit_util.h"

namespace loom::codegen {
namespace {

using ir::Op;

// All bits below the highest set bit of m, set: the largest value a bitwise combination of
// values <= m can reach.
int smear(int m) {
  for (int s = 1; s < 8; s <<= 1) m |= m >> s;
  return m;
}

// A constant shift amount, or -1.
int64_t const_amount(const ir::Value* v) {
  if (!v->def || v->def->op != Op::kConst || v->def->lit.is_float) return -1;
  return v->def->lit.i;
}

}  // namespace

int ByteRange::max_byte(const ir::Value* v) {
  if (memo_[v->id] < 0) memo_[v->id] = static_cast<int16_t>(compute(v));
  return memo_[v->id];
}

int ByteRange::compute(const ir::Value* v) {
  const ir::Inst* d = v->def;
  if (!d || !v->type.is_value() || v->type.elem() == ir::Scalar::kI1) return 255;
  auto arg = [&](size_t i) { return max_byte(d->operands[i]); };
  const int bytes = v->type.elem_bytes();
  switch (d->op) {
    case Op::kConst: {
      if (d->lit.is_float) return 255;
      uint64_t bits = literal_bits(d->lit, v->type.elem());
      int m = 0;
      for (int i = 0; i < bytes; ++i) m = std::max(m, static_cast<int>((bits >> (8 * i)) & 0xFF));
      return m;
    }
    case Op::kAnd: return std::min(arg(0), arg(1));
    case Op::kOr:
    case Op::kXor: return smear(arg(0) | arg(1));
    case Op::kAdd: {  // no byte sum reaches 256, so no carry crosses a byte
      int m = arg(0) + arg(1);
      return m <= 255 ? m : 255;
    }
    case Op::kShl: {
      int64_t k = const_amount(d->operands[1]);
      if (k < 0 || k >= 8) return 255;
      int m = arg(0) << k;  // no bit leaves its byte
      return m <= 255 ? m : 255;
    }
    case Op::kShr: {
      int64_t k = const_amount(d->operands[1]);
      if (k < 0 || k >= 8 * bytes) return 255;
      int m = arg(0);
      if (ir::is_signed(v->type.elem()) && m > 127) return 255;  // sign bits may fill in
      const int r = static_cast<int>(k % 8);
      if (r == 0) return m;  // whole bytes move down, zeros come in
      return smear((m >> r) | ((m << (8 - r)) & 0xFF));
    }
    case Op::kBitcast:
      return d->operands[0]->type.is_value() ? arg(0) : 255;  // the same bytes
    case Op::kSplat:
    case Op::kExtract: return arg(0);  // a lane's bytes are among the vector's
    case Op::kSelect: return std::max(arg(1), arg(2));
    case Op::kBuild:
    case Op::kConcat: {
      int m = 0;
      for (size_t i = 0; i < d->operands.size(); ++i) m = std::max(m, arg(i));
      return m;
    }
    default: return 255;
  }
}

int ByteRange::min_sbyte(const ir::Value* v) {
  if (smemo_[v->id] == kUnset) smemo_[v->id] = static_cast<int16_t>(compute_min(v));
  return smemo_[v->id];
}

int ByteRange::compute_min(const ir::Value* v) {
  const ir::Inst* d = v->def;
  if (!d || !v->type.is_value() || v->type.elem() == ir::Scalar::kI1) return -128;
  if (max_byte(v) <= 127) return 0;  // no byte has its top bit
  auto arg = [&](size_t i) { return min_sbyte(d->operands[i]); };
  switch (d->op) {
    case Op::kConst: {
      if (d->lit.is_float) return -128;
      const uint64_t bits = literal_bits(d->lit, v->type.elem());
      int m = 127;
      for (int i = 0; i < v->type.elem_bytes(); ++i) m = std::min(m, static_cast<int>(static_cast<int8_t>(bits >> (8 * i))));
      return m;
    }
    case Op::kMax:  // on signed byte lanes the result is at least each operand's bound
      if (v->type.elem() != ir::Scalar::kI8) return -128;
      return std::max(arg(0), arg(1));
    case Op::kBitcast: return d->operands[0]->type.is_value() ? arg(0) : -128;
    case Op::kSplat:
    case Op::kExtract: return arg(0);
    case Op::kSelect: return std::min(arg(1), arg(2));
    case Op::kBuild:
    case Op::kConcat: {
      int m = 127;
      for (size_t i = 0; i < d->operands.size(); ++i) m = std::min(m, arg(i));
      return m;
    }
    default: return -128;
  }
}

namespace {

// The range of an integer scalar type (full: unknown), or an empty one for other types.
IntRange::Bounds type_bounds(ir::Scalar e) {
  switch (e) {
    case ir::Scalar::kI8: return {-128, 127};
    case ir::Scalar::kU8: return {0, 255};
    case ir::Scalar::kI16: return {-32768, 32767};
    case ir::Scalar::kU16: return {0, 65535};
    case ir::Scalar::kI32: return {INT32_MIN, INT32_MAX};
    case ir::Scalar::kU32: return {0, UINT32_MAX};
    default: return {INT64_MIN / 4, INT64_MAX / 4};
  }
}

}  // namespace

IntRange::Bounds IntRange::of(const ir::Value* v) {
  Bounds& m = memo_[v->id];
  if (m.hi < m.lo) m = compute(v);
  return m;
}

IntRange::Bounds IntRange::compute(const ir::Value* v) {
  const Bounds full = v->type.is_value() ? type_bounds(v->type.elem()) : Bounds{INT64_MIN / 4, INT64_MAX / 4};
  const ir::Inst* d = v->def;
  if (!d || !v->type.is_value() || !ir::is_int(v->type.elem())) return full;
  auto arg = [&](size_t i) { return of(d->operands[i]); };
  // A result inside the type's range, else the full range (the op may wrap).
  auto fit = [&](int64_t lo, int64_t hi) { return lo >= full.lo && hi <= full.hi ? Bounds{lo, hi} : full; };
  switch (d->op) {
    case Op::kConst:
      if (d->lit.is_float) return full;
      return fit(d->lit.i, d->lit.i);
    case Op::kLoad: return full;  // the loaded type's range
    case Op::kConvert: {
      const ir::Type& src = d->operands[0]->type;
      if (!src.is_value() || !ir::is_int(src.elem())) return full;
      const Bounds a = arg(0);
      return fit(a.lo, a.hi);
    }
    case Op::kAnd: {
      const Bounds a = arg(0), b = arg(1);
      if (a.lo >= 0 && b.lo >= 0) return {0, std::min(a.hi, b.hi)};
      if (a.lo >= 0) return {0, a.hi};
      if (b.lo >= 0) return {0, b.hi};
      return full;
    }
    case Op::kOr: {
      const Bounds a = arg(0), b = arg(1);
      if (a.lo < 0 || b.lo < 0) return full;
      uint64_t x = static_cast<uint64_t>(a.hi | b.hi);
      for (int sh = 1; sh < 64; sh <<= 1) x |= x >> sh;
      return fit(0, static_cast<int64_t>(x));
    }
    case Op::kShl: {
      const int64_t k = const_amount(d->operands[1]);
      const Bounds a = arg(0);
      if (k < 0 || k >= 31 || a.lo < 0 || a.hi > (INT64_C(1) << 32)) return full;
      return fit(a.lo << k, a.hi << k);
    }
    case Op::kShr: {
      const int64_t k = const_amount(d->operands[1]);
      const Bounds a = arg(0);
      if (k < 0 || k >= 32 || (a.lo < 0 && !ir::is_signed(v->type.elem()))) return full;
      return {a.lo >> k, a.hi >> k};  // floor division: monotone (arithmetic for signed lanes)
    }
    case Op::kAdd: {
      const Bounds a = arg(0), b = arg(1);
      return fit(a.lo + b.lo, a.hi + b.hi);
    }
    case Op::kSub: {
      const Bounds a = arg(0), b = arg(1);
      return fit(a.lo - b.hi, a.hi - b.lo);
    }
    case Op::kMul: {
      const Bounds a = arg(0), b = arg(1);
      const int64_t lim = INT64_C(1) << 31;
      if (std::max(-a.lo, a.hi) > lim || std::max(-b.lo, b.hi) > lim) return full;
      const int64_t p[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
      return fit(*std::min_element(p, p + 4), *std::max_element(p, p + 4));
    }
    case Op::kSplat: return arg(0);
    case Op::kSelect: {
      const Bounds a = arg(1), b = arg(2);
      return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
    }
    case Op::kBuild:
    case Op::kConcat: {
      Bounds r{INT64_MAX, INT64_MIN};
      for (size_t i = 0; i < d->operands.size(); ++i) {
        const Bounds a = arg(i);
        r = {std::min(r.lo, a.lo), std::max(r.hi, a.hi)};
      }
      return r;
    }
    default: return full;
  }
}

}  // namespace loom::codegen
