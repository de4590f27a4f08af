// The expert lists of a grouped mixture-of-experts matmul (matvec_id grouped, matmul_mmq_id):
// one kernel that, for each expert, lists the (token, slot) pairs that chose it.
#pragma once

#include <cstdint>
#include <string>

#include "loom/kernels/op_util.h"

namespace loom::kernels {

// The expert an id names (i32): ids outside 0..n_expert-1 read expert 0, as the reference does,
// rather than memory past the stacked tensor.
ir::Value* clamp_expert(Emit& b, ir::Value* id, int64_t n_expert);

// The i32 words of the groups scratch: per expert its pair count, then per expert a list of up
// to all pairs.
inline int64_t moe_groups_words(int64_t n_expert, int64_t pairs) { return n_expert * (1 + pairs); }

// Adds kernel `name` (params ids: i32 [pairs], groups: i32 [moe_groups_words]) to g and its
// launch (arguments ids_arg, groups_arg of the op): groups[e] = the number of pairs p with
// ids[p] == e, groups[n_expert + e * pairs + i] = the i-th of them in ascending order. An id
// outside 0..n_expert-1 counts as expert 0 (as the reference reads it). GPUs: a warp per expert;
// the cpu: one thread for all of them.
void add_moe_groups_kernel(Generated& g, const std::string& name, int64_t n_expert, int64_t pairs, bool cpu,
                           int ids_arg, int groups_arg);

}  // namespace loom::kernels
