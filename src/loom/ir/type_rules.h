// The type rules of the op table (TypeRule): result-type inference for the parser and builder,
// and the per-instruction type check the verifier runs.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "loom/ir/ir.h"

namespace loom::ir {

// The result type implied by the operands, or an invalid Type when the op needs an explicit
// one (const, convert, bitcast, splat, alloc_*, if, vector loads) or the operands are wrong.
// Single-result ops only (for/if results come from their inits/explicit types).
Type infer_result_type(Op op, std::span<const Type> operand_types);

// Checks operand count, modes, operand and result types of one instruction (not its regions'
// bodies). Returns an empty string when fine, else a one-line reason. With check_results false,
// results are ignored (the parser uses this to explain why a result type cannot be inferred).
std::string check_inst_types(const Inst& inst, bool check_results = true);

// Whether `t` may be a kernel parameter (scalar, or pointer to global/constant memory).
bool valid_param_type(Type t);
// Whether `t` is a well-formed type at all (pointee not i1, lanes valid).
bool valid_type(Type t);

}  // namespace loom::ir
