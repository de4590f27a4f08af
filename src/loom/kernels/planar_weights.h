// Which weights of a model the engine keeps in matvec_gpu's planar layout (llm/planar.h) on a
// device: those that only matvec_gpu (decode) and matmul_mma (prompt) read.
#pragma once

#include <vector>

#include "loom/ir/ir.h"
#include "loom/llm/model.h"

namespace loom::kernels {

// One flag per model weight (Model::weights() order). All false unless the target is PTX and the
// GPU fast ops are on; the projections of every layer (q, k, v, o, gate, up, down) and an untied
// output matrix qualify when their type has a planar form that matmul_mma also reads (Q4_0,
// Q8_0, Q4_K, Q6_K), their rows are dense, and both ops accept the planar shape. Off with
// LOOM_PLANAR=0, and with LOOM_GPU_FAST_OPS=0 or LOOM_GPU_BATCH_MATVEC=0 (which route some of
// these matmuls to ops that read GGUF rows).
std::vector<bool> planar_weights(const llm::Model& model, ir::TargetKind target);

}  // namespace loom::kernels
