// Byte bounds of integer values (see byte_range.h). Conservative: anything not understood is 255.
#include "loom/codegen/cpp/byte_range.h"

#include <algorithm>

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
    case Op::kSplat: return arg(0);
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

}  // namespace loom::codegen
