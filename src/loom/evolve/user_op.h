// User-defined ops from a file (`loom evolve run --op-file my_op.json`): signature, shapes, a
// reference in Loom IR or C++, tolerance, objective and a starting kernel. See docs/evolve.md.
#pragma once

#include <string>

#include "loom/base/status.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {

// The op named `name`: a built-in op when `file` is empty, else the op the file defines (loaded
// once per process and kept alive; its name must equal `name` when `name` is not empty).
Result<const kernels::OpSpec*> resolve_op(const std::string& name, const std::string& file);

// The file a user-defined op came from ("" for built-in ops).
std::string op_file_of(const kernels::OpSpec& op);
// What a search minimizes: "median" (the median time; built-in ops) or "p90" (tail time).
std::string op_objective(const kernels::OpSpec& op);

}  // namespace loom::evolve
