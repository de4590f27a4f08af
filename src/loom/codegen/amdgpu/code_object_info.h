// What an AMDGPU code object says about its kernels: registers, LDS, scratch and spills, read from
// the HSA metadata note (NT_AMDGPU_METADATA, msgpack) that llc writes into the ELF, and the
// occupancy those numbers allow on an RDNA3 / RDNA3.5 chip.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::codegen {

// One entry of a kernel's `.args` list: where the value goes in the kernarg segment. Explicit
// parameters have value_kind global_buffer or by_value; the runtime fills the hidden_* ones.
struct AmdgpuKernelArg {
  int64_t offset = 0;      // .offset (bytes into the kernarg segment)
  int64_t size = 0;        // .size (bytes)
  std::string value_kind;  // .value_kind
};

// One kernel's entry of the metadata's `amdhsa.kernels` list (names of the fields there).
struct AmdgpuKernelInfo {
  std::string name;            // .name
  int64_t vgpr_count = 0;      // .vgpr_count (per lane)
  int64_t sgpr_count = 0;      // .sgpr_count (per wave)
  int64_t lds_bytes = 0;       // .group_segment_fixed_size (static LDS per workgroup)
  int64_t scratch_bytes = 0;   // .private_segment_fixed_size (per lane: spills and stack)
  int64_t vgpr_spill_count = 0;
  int64_t sgpr_spill_count = 0;
  int64_t wavefront_size = 0;  // .wavefront_size (32 for the wave32 code Loom emits)
  int64_t max_flat_workgroup_size = 0;
  bool uses_dynamic_stack = false;
  int64_t kernarg_segment_size = 0;   // .kernarg_segment_size
  int64_t kernarg_segment_align = 0;  // .kernarg_segment_align
  std::vector<AmdgpuKernelArg> args;  // .args, in the metadata's order
};

struct AmdgpuCodeObjectInfo {
  std::string target;  // amdhsa.target, e.g. "amdgcn-amd-amdhsa--gfx1100"
  std::vector<AmdgpuKernelInfo> kernels;
};

// Parses an ELF64 little-endian code object (the output of compile_amdgpu_code_object). Every
// read is bounds-checked: a truncated or malformed file is a data_loss error, never a crash.
Result<AmdgpuCodeObjectInfo> read_amdgpu_code_object(std::span<const uint8_t> elf);

// The register file and LDS of one chip, for occupancy (wave32).
struct AmdgpuArchLimits {
  int vgprs_per_simd = 0;  // per lane, wave32: 1536 on gfx1100/gfx1101/gfx1151, 1024 on others
  int vgpr_granule = 0;    // allocation unit: 24 with the large register file, 16 otherwise
  int max_waves_per_simd = 16;
  int lds_per_wgp = 128 * 1024;  // WGP mode: one workgroup may use at most 64 KiB of it
  int lds_per_workgroup = 64 * 1024;
  int simds_per_wgp = 4;
};
// The limits of a gfx11 arch (gfx1100..gfx1103, gfx1150, gfx1151); unimplemented otherwise.
Result<AmdgpuArchLimits> amdgpu_arch_limits(std::string_view arch);

// Waves per SIMD the kernel's VGPRs and its LDS (at `block_threads` threads per workgroup)
// allow, and which of them bounds it ("vgpr", "lds", or "-" when the hardware's maximum does).
// SGPRs do not limit occupancy on gfx10+ (every wave gets its own 106).
struct AmdgpuOccupancy {
  int waves_per_simd = 0;
  std::string limiter;
};
AmdgpuOccupancy amdgpu_occupancy(const AmdgpuKernelInfo& k, const AmdgpuArchLimits& limits, int block_threads);

}  // namespace loom::codegen
