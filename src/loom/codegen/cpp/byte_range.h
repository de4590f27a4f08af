// A small value-range fact for the cpp emitter: an upper bound on every byte of an integer
// value, so `dot4` can use x86's unsigned-by-signed byte multiply (vpmaddubsw) when one
// operand's bytes are known to be at most 127 (then signed and unsigned readings agree and no
// 16-bit pair sum can saturate).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/ir/ir.h"

namespace loom::codegen {

class ByteRange {
 public:
  ByteRange() = default;
  explicit ByteRange(const ir::Kernel& k) : memo_(k.num_values(), -1) {}
  // The largest value any byte of v's representation can have (0..255; 255 = unknown).
  int max_byte(const ir::Value* v);

 private:
  int compute(const ir::Value* v);
  std::vector<int16_t> memo_;
};

}  // namespace loom::codegen
