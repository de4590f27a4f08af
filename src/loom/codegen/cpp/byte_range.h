// A small value-range fact for the cpp emitter: an upper bound on every byte of an integer
// value, so `dot4` can use x86's unsigned-by-signed byte multiply (vpmaddubsw) when one
// operand's bytes are known to be at most 127 (then signed and unsigned readings agree and no
// 16-bit pair sum can saturate).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/ir/ir.h"

namespace loom::codegen {

// A second fact for `dot4` with two signed operands: a lower bound on every byte read as a
// signed number. When one operand has no -128 byte, x86's sign trick is exact (the other
// operand's magnitudes as unsigned bytes, this one's bytes times the other's signs: vpsignb,
// then vpmaddubsw, whose pair sums stay within 2 * 128 * 127).
class ByteRange {
 public:
  ByteRange() = default;
  explicit ByteRange(const ir::Kernel& k) : memo_(k.num_values(), -1), smemo_(k.num_values(), kUnset) {}
  // The largest value any byte of v's representation can have (0..255; 255 = unknown).
  int max_byte(const ir::Value* v);
  // The smallest value any byte of v's representation can have, read as i8 (-128 = unknown):
  // from constants, a max with a constant on byte lanes, bytes known to be <= 127, and the ops
  // that move bytes unchanged (bitcast, splat, extract, build, concat, select).
  int min_sbyte(const ir::Value* v);

 private:
  static constexpr int16_t kUnset = 1000;
  int compute(const ir::Value* v);
  int compute_min(const ir::Value* v);
  std::vector<int16_t> memo_, smemo_;
};

// Bounds of integer values as signed numbers, for ops that need a value to fit a narrower lane
// (a scale that fits 16 bits multiplies vpmaddubsw's pair sums in vpmaddwd / vpdpwssd). Built from
// constants, narrow loads and converts, masks, shifts, or, add, sub, mul, splat, build and
// select; anything else is its type's full range (unknown).
class IntRange {
 public:
  IntRange() = default;
  explicit IntRange(const ir::Kernel& k) : memo_(k.num_values()) {}
  struct Bounds {
    int64_t lo = 0, hi = -1;  // hi < lo: not computed yet
  };
  Bounds of(const ir::Value* v);
  bool within(const ir::Value* v, int64_t lo, int64_t hi) {
    const Bounds b = of(v);
    return b.lo >= lo && b.hi <= hi;
  }

 private:
  Bounds compute(const ir::Value* v);
  std::vector<Bounds> memo_;
};

}  // namespace loom::codegen
