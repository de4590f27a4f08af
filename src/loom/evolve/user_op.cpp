// User-defined ops from a file (see user_op.h).
#include "loom/evolve/user_op.h"

namespace loom::evolve {

Result<const kernels::OpSpec*> resolve_op(const std::string& name, const std::string& file) {
  if (file.empty()) {
    const kernels::OpSpec* op = kernels::find_op(name);
    if (!op) return invalid_argument("unknown op '{}' (see `loom evolve ops`)", name);
    return op;
  }
  return unimplemented("op files are not supported yet ({})", file);
}

std::string op_file_of(const kernels::OpSpec&) { return ""; }

}  // namespace loom::evolve
