// IR-to-IR passes: constant folding (with a few algebraic identities and constant if/select),
// common subexpression elimination, dead code elimination and full unrolling of loops with a
// constant trip count. Each takes a verified kernel, keeps it verified, and returns whether it
// changed anything. Semantics are preserved exactly for integers; float folding evaluates with
// IEEE double and rounds to the type (transcendentals fold to the correctly rounded value, which
// a GPU's approximate instruction may not produce bit for bit).
#pragma once

#include "loom/ir/ir.h"

namespace loom::ir {

bool fold_constants(Kernel& kernel);
bool eliminate_common_subexpressions(Kernel& kernel);
bool eliminate_dead_code(Kernel& kernel);

struct UnrollLimits {
  int max_trip_count = 32;     // loops with more iterations stay loops
  int max_unrolled_insts = 2048;  // trip count x body size (instructions, nested included)
};
bool unroll_loops(Kernel& kernel, UnrollLimits limits = {});

// Rewrites tanh and erf into exp2, fma, div and selects (for targets without accurate
// instructions for them): tanh via exp2(-2|x| log2 e) for |x| >= 0.6 and a Taylor series below
// (relative error ~1e-6 with an exact exp2), erf via a Taylor series for |x| < 0.5 and Abramowitz & Stegun 7.1.26 above
// (absolute error <= 1.5e-7). Returns whether anything was rewritten.
bool lower_tanh_erf(Kernel& kernel);

// Rewrites cp_async into a load and a store of its bytes and drops cp_async_commit and
// cp_async_wait, for targets without asynchronous copies (cpp, amdgpu). Returns whether anything
// was rewritten.
bool lower_async_copies(Kernel& kernel);
// The module itself when it has no asynchronous copies, else a copy of it in `storage` with
// them lowered as above.
const Module& without_async_copies(const Module& module, Module& storage);

// The standard pipeline used by `loom ir compile` and the golden tests: fold, CSE, DCE and
// unroll, repeated until nothing changes (bounded).
void optimize(Kernel& kernel);
void optimize(Module& module);

}  // namespace loom::ir
