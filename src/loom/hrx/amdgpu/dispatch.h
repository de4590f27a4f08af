// The host-side half of an AMDGPU kernel dispatch, which needs no GPU: the kernarg segment
// (explicit parameters at the offsets the code object's metadata gives, hidden arguments filled
// from the launch) and the geometry of the AQL dispatch packet. The amdgpu driver uses these for
// every launch; tests check them against real llc code objects on machines without an AMD GPU.
#pragma once

#include <cstdint>
#include <span>

#include "loom/base/status.h"
#include "loom/codegen/amdgpu/code_object_info.h"
#include "loom/hrx/hrx.h"

namespace loom::hrx::amdgpu {

// What an AQL kernel dispatch packet says about the launch's shape. HSA counts the grid in
// work-items (blocks x threads per block), per dimension at most 2^32 - 1.
struct DispatchGeometry {
  uint16_t dimensions = 1;     // 1, 2 or 3: the highest dimension with more than one item, at least 1
  uint16_t workgroup[3] = {1, 1, 1};
  uint32_t grid_items[3] = {1, 1, 1};
};
// INVALID_ARGUMENT when a dimension's work-items do not fit 32 bits. Block sizes are taken as
// validated (hrx_launch bounds their product by max_threads_per_block).
Result<DispatchGeometry> dispatch_geometry(const hrx_launch_config& config);

// The kernel's explicit parameters (those whose value_kind is not hidden_*), in order.
size_t explicit_arg_count(const codegen::AmdgpuKernelInfo& kernel);

// Writes the kernarg segment of one launch into `out` (at least kernel.kernarg_segment_size
// bytes; everything not written is zeroed). args[i] points at parameter i's value as in
// hrx_launch; its first `.size` bytes (little-endian: the low bytes of an 8-byte KernelArgs slot)
// are copied to its `.offset`. arg_sizes may be null (8 readable bytes at each args[i]); a size
// below the parameter's is INVALID_ARGUMENT, as is a parameter count that differs from the
// kernel's. Hidden arguments: block counts, group sizes, remainders (0: the grid is whole
// blocks), global offsets (0) and the grid's dimensions; every other hidden argument (hostcall,
// heap, queue pointers) is 0, which Loom's kernels never read.
Status pack_kernargs(const codegen::AmdgpuKernelInfo& kernel, const hrx_launch_config& config, void* const* args,
                     uint32_t n_args, const uint32_t* arg_sizes, std::span<uint8_t> out);

}  // namespace loom::hrx::amdgpu
