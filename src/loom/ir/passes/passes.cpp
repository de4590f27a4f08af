// The standard pass pipeline.
#include "loom/ir/passes/passes.h"

namespace loom::ir {

void optimize(Kernel& kernel) {
  for (int round = 0; round < 8; ++round) {
    bool changed = fold_constants(kernel);
    changed |= eliminate_common_subexpressions(kernel);
    changed |= eliminate_dead_code(kernel);
    changed |= unroll_loops(kernel);
    if (!changed) break;
  }
}

void optimize(Module& module) {
  for (auto& k : module.kernels) optimize(*k);
}

}  // namespace loom::ir
