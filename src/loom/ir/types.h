// Loom IR value types: scalars, short vectors of scalars, and pointers into an address space.
// Types are small values (4 bytes), compared with ==, printed and parsed as text ("f32x4").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace loom::ir {

enum class Scalar : uint8_t {
  kI1, kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kF16, kBF16, kF32, kF64,
};

// global: device memory (kernel buffers); shared: per-block scratch (alloc_shared);
// local: per-thread scratch (alloc_local); constant: read-only device memory.
enum class AddrSpace : uint8_t { kGlobal, kShared, kLocal, kConstant };

std::string_view scalar_name(Scalar s);
std::string_view addr_space_name(AddrSpace a);
int scalar_bits(Scalar s);  // i1 counts as 1
bool is_float(Scalar s);
bool is_int(Scalar s);      // i1 excluded
bool is_signed(Scalar s);   // signed ints (floats count as signed for compares)

class Type {
 public:
  enum class Kind : uint8_t { kInvalid, kScalar, kVector, kPointer };

  constexpr Type() = default;
  static constexpr Type scalar(Scalar s) { return Type(Kind::kScalar, s, 1, AddrSpace::kGlobal); }
  static constexpr Type vector(Scalar s, int lanes) {
    return Type(Kind::kVector, s, static_cast<uint8_t>(lanes), AddrSpace::kGlobal);
  }
  // lanes == 1 gives the scalar type.
  static constexpr Type of(Scalar s, int lanes) { return lanes == 1 ? scalar(s) : vector(s, lanes); }
  static constexpr Type pointer(AddrSpace a, Scalar pointee) { return Type(Kind::kPointer, pointee, 1, a); }

  Kind kind() const { return kind_; }
  bool valid() const { return kind_ != Kind::kInvalid; }
  bool is_scalar() const { return kind_ == Kind::kScalar; }
  bool is_vector() const { return kind_ == Kind::kVector; }
  bool is_pointer() const { return kind_ == Kind::kPointer; }
  bool is_value() const { return is_scalar() || is_vector(); }  // a number or numbers

  // Element scalar of a scalar/vector, or the pointee of a pointer.
  Scalar elem() const { return elem_; }
  int lanes() const { return lanes_; }  // 1 for scalars and pointers
  AddrSpace addr_space() const { return space_; }
  Type elem_type() const { return scalar(elem_); }
  Type with_elem(Scalar s) const { return is_value() ? of(s, lanes_) : Type(); }

  bool is_float() const { return is_value() && loom::ir::is_float(elem_); }
  bool is_int() const { return is_value() && loom::ir::is_int(elem_); }
  bool is_bool() const { return is_value() && elem_ == Scalar::kI1; }
  // Bits of the whole value (pointers: 64); i1 vectors count one bit per lane.
  int bits() const;
  int elem_bytes() const { return (scalar_bits(elem_) + 7) / 8; }

  std::string str() const;
  friend bool operator==(const Type& a, const Type& b) {
    return a.kind_ == b.kind_ && (a.kind_ == Kind::kInvalid ||
                                  (a.elem_ == b.elem_ && a.lanes_ == b.lanes_ && a.space_ == b.space_));
  }

 private:
  constexpr Type(Kind k, Scalar s, uint8_t lanes, AddrSpace a) : kind_(k), elem_(s), lanes_(lanes), space_(a) {}
  Kind kind_ = Kind::kInvalid;
  Scalar elem_ = Scalar::kI32;
  uint8_t lanes_ = 1;
  AddrSpace space_ = AddrSpace::kGlobal;
};

// Vector widths the IR accepts: 2, 4, 8 or 16 lanes of any scalar, and 32 lanes of a byte type
// (i8x32 / u8x32: one AVX2 register's bytes, for byte-wise ops such as a clamp on the cpp target).
bool valid_lanes(int lanes);
bool valid_vector(Scalar s, int lanes);

std::optional<Scalar> parse_scalar(std::string_view text);
std::optional<AddrSpace> parse_addr_space(std::string_view text);
// Scalar or vector ("f32", "u8x16"); pointers are parsed by the parser ("ptr<global, f32>").
std::optional<Type> parse_value_type(std::string_view text);

}  // namespace loom::ir
