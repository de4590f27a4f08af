// IR-level rewrites evolve applies to generated kernels (knobs "ev_*" of a schedule candidate):
// they widen an op's search space beyond its own schedule knobs without touching the op
// library. Each takes a verified kernel and keeps it verified; a rewrite that changes float
// rounding (fma splitting) is checked, like every candidate, against the op's tolerance.
#pragma once

#include "loom/ir/ir.h"

namespace loom::store {

// Unrolls every innermost `for` with a constant trip count divisible by `factor` (> 1) by that
// factor: one iteration of the new loop runs `factor` copies of the body. Returns loops changed.
int unroll_inner_loops(ir::Kernel& k, int factor);

// Replaces `fma` on vectors of `lanes` or more lanes with `mul` + `add` (two roundings): the cpp
// target emits vector fma as a per-lane loop of std::fma, mul and add as vector operators.
int split_vector_fma(ir::Kernel& k, int min_lanes = 2);

}  // namespace loom::store
