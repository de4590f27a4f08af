// C++ emitter of the cpp target: Loom IR -> one C++ translation unit with an extern "C" entry
// point per kernel (ABI in cpu_abi.h). Scalars map to C++ scalars, vectors to GCC/Clang vector
// extension types, f16/bf16 to 16-bit storage computed in float.
#pragma once

#include <string>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::codegen {

// Expects a module that passed ir::verify(module, TargetKind::kCpp).
Result<std::string> emit_cpp(const ir::Module& module);

}  // namespace loom::codegen
