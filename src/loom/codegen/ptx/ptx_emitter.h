// PTX emitter of the ptx target: Loom IR -> PTX text for sm_80 / sm_90 (.version 8.0,
// .address_size 64), loadable with cuModuleLoadDataEx and checked with ptxas in CI.
//
// Mapping: each scalar is one virtual register (.pred for i1, .b16 for 8/16-bit values, which
// 8-bit values keep sign/zero-extended, .b32, .b64), vectors are one register per lane, loops
// and ifs become branches. f16/bf16 arithmetic is computed in f32 and rounded back. exp, exp2,
// log, sin, cos use the approximate hardware instructions (ex2/lg2/sin/cos.approx, as CUDA's
// fast intrinsics); rsqrt uses rsqrt.approx; tanh and erf are expanded from ex2 (relative error
// about 1e-6 and absolute error 1.5e-7 respectively); add/mul carry .rn so nothing is contracted.
#pragma once

#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::codegen {

// Choices of the emitted code that are not in the IR. The output depends only on the module, the
// arch and these.
struct PtxOptions {
  // sm_90: every kernel lets its dependents launch right after its own griddepcontrol.wait
  // (griddepcontrol.launch_dependents). Without it, dependents launch as this grid's blocks
  // exit: measured better for prompt-sized steps, worse for decode (docs/performance.md).
  bool launch_dependents = true;
};

// The comment line that names a kernel's dynamic shared memory in the emitted text, followed by
// "KERNEL BYTES" (kernels above ir::kStaticSharedBytes); hrx_module_load_ptx reads it.
inline constexpr std::string_view kPtxDynamicSharedTag = "// loom.dynamic_shared_bytes ";

// `arch` is "sm_80" or "sm_90". Expects a module verified for TargetKind::kPtx.
Result<std::string> emit_ptx(const ir::Module& module, std::string_view arch, const PtxOptions& options = {});

}  // namespace loom::codegen
