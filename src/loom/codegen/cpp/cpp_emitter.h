// C++ emitter of the cpp target: Loom IR -> one C++ translation unit with an extern "C" entry
// point per kernel (ABI in cpu_abi.h). Scalars map to C++ scalars, vectors to GCC/Clang vector
// extension types, f16/bf16 to 16-bit storage computed in float.
#pragma once

#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::codegen {

// Expects a module that passed ir::verify(module, TargetKind::kCpp).
Result<std::string> emit_cpp(const ir::Module& module);

// The fixed text every emitted translation unit starts with (includes, SIMD helpers). Golden
// files store what follows it, so a prelude change does not rewrite every golden.
std::string_view cpp_prelude();

// The system headers the prelude includes (a part of it). Parsing them is a third to two thirds
// of a kernel's compile time, so the host compiler precompiles them once per compiler and flags.
std::string_view cpp_system_includes();

}  // namespace loom::codegen
