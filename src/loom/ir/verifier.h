// The Loom IR verifier: types (via the op table's rules), SSA dominance in structured regions,
// address spaces, region structure, and per-target legality.
#pragma once

#include <optional>
#include <string_view>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::ir {

// Returns the first problem found as an invalid_argument (or unimplemented, for ops a target
// does not support) whose message reads "<file>:<line>:<col>: <reason>" followed by the
// offending instruction as IR text on the next line. With `target`, also checks that every op
// and construct is legal there (e.g. cpp refuses shuffles and barriers inside control flow,
// amdgpu and cpp refuse mma).
Status verify(const Module& module, std::optional<TargetKind> target = std::nullopt);
Status verify(const Kernel& kernel, std::optional<TargetKind> target = std::nullopt,
              std::string_view source_name = "<input>");

}  // namespace loom::ir
