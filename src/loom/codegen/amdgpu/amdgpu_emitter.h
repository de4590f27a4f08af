// AMDGPU emitter: Loom IR -> textual LLVM IR for amdgcn-amd-amdhsa (wave32), compiled by
// Debian's llc/ld.lld into a code object for gfx1100 (RDNA3) or gfx1151 (RDNA3.5).
// Compile-verified only: nothing here runs the code object.
//
// Mapping: values are LLVM SSA values (vectors as LLVM vectors), loops and ifs become blocks with
// phis, address spaces 1 (global), 3 (shared), 4 (constant), 5 (local/private). Block sizes come
// from the HSA dispatch packet; shuffles and warp reductions use ds_bpermute over 32 lanes;
// dot4 is llvm.amdgcn.sdot4; mma is refused by the verifier. f16/bf16 arithmetic is computed in
// f32; tanh and erf are expanded as for PTX (see ir::lower_tanh_erf).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::codegen {

struct AmdgpuEmitOptions {
  // Kernel name -> the largest block (threads) it is launched with, as
  // "amdgpu-flat-work-group-size"="1,N": llc then budgets registers for N threads instead of
  // 1024 (up to 256 VGPRs per lane where at most 256 threads share a workgroup, 192 at 1024).
  // A kernel not named may be launched with any block up to 1024 threads.
  std::map<std::string, int> max_block_threads;
};

// The module's LLVM IR. It is the same for every gfx11 arch (the CPU is chosen at llc time).
// Does not verify (amdgpu_target().emit does).
Result<std::string> emit_amdgpu_llvm(const ir::Module& module, const AmdgpuEmitOptions& options = {});

// llc + ld.lld: LLVM IR text -> ELF code object for `arch` (gfx1100, gfx1151). Tools come from
// $LOOM_LLC / $LOOM_LLD or llc-19 / ld.lld-19 / llc / ld.lld on PATH (unavailable when
// missing). Results are cached in $LOOM_CACHE_DIR/kernels/amdgpu/<hash>.hsaco.
Result<std::vector<uint8_t>> compile_amdgpu_code_object(std::string_view llvm_ir, std::string_view arch);

}  // namespace loom::codegen
