// Type names, sizes and text form.
#include "loom/ir/types.h"

#include <array>
#include <charconv>

namespace loom::ir {
namespace {
struct ScalarInfo {
  std::string_view name;
  int bits;
  bool is_float, is_signed;
};
constexpr std::array<ScalarInfo, 13> kScalars = {{
    {"i1", 1, false, false},
    {"i8", 8, false, true},
    {"u8", 8, false, false},
    {"i16", 16, false, true},
    {"u16", 16, false, false},
    {"i32", 32, false, true},
    {"u32", 32, false, false},
    {"i64", 64, false, true},
    {"u64", 64, false, false},
    {"f16", 16, true, true},
    {"bf16", 16, true, true},
    {"f32", 32, true, true},
    {"f64", 64, true, true},
}};
constexpr std::array<std::string_view, 4> kSpaces = {"global", "shared", "local", "constant"};
}  // namespace

std::string_view scalar_name(Scalar s) { return kScalars[static_cast<int>(s)].name; }
std::string_view addr_space_name(AddrSpace a) { return kSpaces[static_cast<int>(a)]; }
int scalar_bits(Scalar s) { return kScalars[static_cast<int>(s)].bits; }
bool is_float(Scalar s) { return kScalars[static_cast<int>(s)].is_float; }
bool is_int(Scalar s) { return s != Scalar::kI1 && !is_float(s); }
bool is_signed(Scalar s) { return kScalars[static_cast<int>(s)].is_signed; }

bool valid_lanes(int lanes) { return lanes == 2 || lanes == 4 || lanes == 8 || lanes == 16; }
bool valid_vector(Scalar s, int lanes) {
  // i8x32 / u8x32: one AVX2 register's bytes; f32x32 / f32x64: wgmma accumulators.
  return valid_lanes(lanes) || (lanes == 32 && (s == Scalar::kI8 || s == Scalar::kU8)) ||
         ((lanes == 32 || lanes == 64) && s == Scalar::kF32);
}

int Type::bits() const {
  if (kind_ == Kind::kPointer) return 64;
  if (kind_ == Kind::kInvalid) return 0;
  return scalar_bits(elem_) * lanes_;
}

std::string Type::str() const {
  switch (kind_) {
    case Kind::kInvalid: return "<invalid>";
    case Kind::kScalar: return std::string(scalar_name(elem_));
    case Kind::kVector: return std::string(scalar_name(elem_)) + "x" + std::to_string(lanes_);
    case Kind::kPointer:
      return "ptr<" + std::string(addr_space_name(space_)) + ", " + std::string(scalar_name(elem_)) + ">";
  }
  return "<invalid>";
}

std::optional<Scalar> parse_scalar(std::string_view text) {
  for (size_t i = 0; i < kScalars.size(); ++i)
    if (kScalars[i].name == text) return static_cast<Scalar>(i);
  return std::nullopt;
}

std::optional<AddrSpace> parse_addr_space(std::string_view text) {
  for (size_t i = 0; i < kSpaces.size(); ++i)
    if (kSpaces[i] == text) return static_cast<AddrSpace>(i);
  return std::nullopt;
}

std::optional<Type> parse_value_type(std::string_view text) {
  if (auto s = parse_scalar(text)) return Type::scalar(*s);
  size_t x = text.rfind('x');
  if (x == std::string_view::npos || x == 0 || x + 1 >= text.size()) return std::nullopt;
  auto s = parse_scalar(text.substr(0, x));
  if (!s) return std::nullopt;
  int lanes = 0;
  auto digits = text.substr(x + 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), lanes);
  if (ec != std::errc() || end != digits.data() + digits.size() || !valid_vector(*s, lanes)) return std::nullopt;
  return Type::vector(*s, lanes);
}

}  // namespace loom::ir
