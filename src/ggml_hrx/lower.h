// The ggml side of the lowering: a ggml node becomes the same op-library calls (exec::OpCall:
// op, shape, argument -> device address) that the engine's lowering (exec/lowering.h) makes
// for its Program ops, so both front-ends reach the kernels through one op vocabulary and one
// plan compile (exec/hrx_plan.h). Nothing here knows kernels: shapes and addresses only.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ggml.h"
#include "loom/base/status.h"
#include "loom/exec/lowering.h"
#include "loom/hrx/runtime.h"  // ir::TargetKind, the device codegen target

namespace loom::ggml_hrx {

// Device bytes that a node's calls pass between them (MUL_MAT's quantized activations);
// returns their address.
using ScratchAlloc = std::function<Result<uint64_t>(uint64_t bytes)>;

// Nodes that compute nothing: views, reshapes, permutes, transposes and leaves.
bool is_noop(const ggml_tensor* node);

// The calls that compute `node`, in order, bound to its tensors' data addresses (tensor->data)
// and to scratch from `scratch`; each call's shape passed its op's validate(). No calls for a
// no-op node. `unimplemented` names why a node is not covered (an op, type or layout that no
// tested kernel takes), so supports_op and graph_compute decide the same way.
Result<std::vector<exec::OpCall>> lower_node(const ggml_tensor* node, ir::TargetKind target,
                                             const ScratchAlloc& scratch);

// Whether lower_node covers `node` on `target` (no device memory touched): supports_op.
Status check_node(const ggml_tensor* node, ir::TargetKind target);

}  // namespace loom::ggml_hrx
