// AMDGPU emitter: Loom IR -> textual LLVM IR for amdgcn-amd-amdhsa (wave32), compiled by
// Debian's llc/ld.lld into a code object for gfx1100 (RDNA3) or gfx1151 (RDNA3.5).
// Compile-verified only: nothing here runs the code object.
//
// Mapping: values are LLVM SSA values (vectors as LLVM vectors), loops and ifs become blocks with
// phis, address spaces 1 (global), 3 (shared), 4 (constant), 5 (local/private). Block sizes come
// from the HSA dispatch packet; warp reductions and shfl.xor by a constant mask move values with
// DPP and v_permlanex16 (amdgpu_lane_xor), the other shuffles with ds_bpermute over 32 lanes;
// dot4 is v_dot4_i32_iu8 (llvm.amdgcn.sudot4, both signed); mma is refused by the verifier. f16/bf16 arithmetic is computed in
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

// How the emitter moves a value from lane `lane ^ mask` (0 < mask < 32) of a wave32 on gfx11:
// mask < 16 stays inside each row of 16 lanes, as one DPP control (llvm.amdgcn.update.dpp):
// quad_perm [m^0, m^1, m^2, m^3] (dpp_ctrl = sum of (j ^ m) << 2j) for mask < 4, else
// row_xmask:mask (0x160 + mask). mask >= 16 reads the other row: v_permlanex16 with lane
// selects i ^ (mask - 16) (nibble i of sel_lo | sel_hi << 32 names the lane of the other row that
// lane i of a row reads).
struct AmdgpuLaneXor {
  bool permlanex16 = false;
  uint32_t dpp_ctrl = 0;  // when !permlanex16
  uint32_t sel_lo = 0, sel_hi = 0;  // when permlanex16
};
AmdgpuLaneXor amdgpu_lane_xor(int mask);

// The module's LLVM IR. It is the same for every gfx11 arch (the CPU is chosen at llc time).
// Does not verify (amdgpu_target().emit does).
Result<std::string> emit_amdgpu_llvm(const ir::Module& module, const AmdgpuEmitOptions& options = {});

// llc + ld.lld: LLVM IR text -> ELF code object for `arch` (gfx1100, gfx1151). Tools come from
// $LOOM_LLC / $LOOM_LLD or llc-19 / ld.lld-19 / llc / ld.lld on PATH (unavailable when
// missing). Results are cached in $LOOM_CACHE_DIR/kernels/amdgpu/<hash>.hsaco.
Result<std::vector<uint8_t>> compile_amdgpu_code_object(std::string_view llvm_ir, std::string_view arch);

}  // namespace loom::codegen
