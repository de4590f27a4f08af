// Small helpers shared by the emitters: float bit patterns of literals and name sanitizing.
#pragma once

#include <cstdint>
#include <string>

#include "loom/ir/ir.h"

namespace loom::codegen {

// IEEE bit patterns of a value already representable in the format (ir::round_float output).
uint16_t f16_bits(double v);
uint16_t bf16_bits(double v);
uint32_t f32_bits(double v);
uint64_t f64_bits(double v);
// The literal's bits in the element format of `s` (integers: two's complement, width of s).
uint64_t literal_bits(const ir::Literal& lit, ir::Scalar s);

// A C/LLVM-safe identifier for a value, unique within its kernel: "v_<print name>" when the
// name is [A-Za-z0-9_]+, else "v<id>".
std::string value_ident(const ir::Value* v, const ir::Namer& namer);

bool is_half(ir::Scalar s);  // f16 or bf16: stored as 16 bits, computed in f32

}  // namespace loom::codegen
