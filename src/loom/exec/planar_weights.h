// Which weights of a model the engine keeps in matvec_gpu's planar layout (gguf/planar.h) on a
// device: those that only matvec_gpu (decode) and matmul_mma (prompt) read.
#pragma once

#include <vector>

#include "loom/ir/ir.h"
#include "loom/model/model.h"

namespace loom::exec {

// One flag per model weight (Model::weights() order). All false unless the target is PTX; the
// projections of every layer (q, k, v, o, gate, up, down) and an untied output matrix qualify
// when their type has a planar form, their rows are dense, and both matvec_gpu and matmul_mma
// accept the planar shape (so Q4_0, Q8_0, Q4_K, Q6_K). The caller asks only when every matmul
// of these weights goes to those two ops (exec::LoweringOptions: gpu_fast_ops, gpu_batch_matvec
// and planar on).
std::vector<bool> planar_weights(const llm::Model& model, ir::TargetKind target);

}  // namespace loom::exec
