// Literal encodings and identifier helpers for the emitters.
#include "loom/codegen/emit_util.h"

#include <cctype>
#include <cmath>
#include <cstring>

namespace loom::codegen {

uint32_t f32_bits(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

uint64_t f64_bits(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}

uint16_t bf16_bits(double v) {
  uint32_t u = f32_bits(v);  // exact: v is representable in bf16, hence in f32
  if (std::isnan(v)) return 0x7FC0;
  return static_cast<uint16_t>(u >> 16);
}

uint16_t f16_bits(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (std::isnan(v)) return 0x7E00;
  if (std::isinf(a) || a > 65504.0) return sign | 0x7C00;
  if (a == 0) return sign;
  int exp = 0;
  double m = std::frexp(a, &exp);  // a = m * 2^exp, m in [0.5, 1)
  int e = exp - 1;                 // a = (2m) * 2^e
  if (e < -14) {                   // subnormal: a = frac * 2^-24
    return sign | static_cast<uint16_t>(std::lround(a * 16777216.0));
  }
  uint16_t frac = static_cast<uint16_t>(std::lround((2 * m - 1) * 1024.0));
  return sign | static_cast<uint16_t>((e + 15) << 10) | frac;
}

uint64_t literal_bits(const ir::Literal& lit, ir::Scalar s) {
  switch (s) {
    case ir::Scalar::kF16: return f16_bits(lit.f);
    case ir::Scalar::kBF16: return bf16_bits(lit.f);
    case ir::Scalar::kF32: return f32_bits(lit.f);
    case ir::Scalar::kF64: return f64_bits(lit.f);
    default: {
      int bits = ir::scalar_bits(s);
      uint64_t u = static_cast<uint64_t>(lit.i);
      return bits >= 64 ? u : (u & ((uint64_t{1} << bits) - 1));
    }
  }
}

std::string value_ident(const ir::Value* v, const ir::Namer& namer) {
  const std::string& n = namer.name(v);
  bool ok = !n.empty();
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') ok = false;
  std::string out = "v";
  if (ok) {
    out += '_';
    out += n;  // (append, not operator+: GCC 12 warns falsely on "lit" + string&&)
  } else {
    out += std::to_string(v->id);
  }
  return out;
}

bool is_half(ir::Scalar s) { return s == ir::Scalar::kF16 || s == ir::Scalar::kBF16; }

}  // namespace loom::codegen
