// The entry-point ABI of kernels compiled by the cpp backend (shared with the runtime, which
// loads the shared object and calls these functions from its thread pool).
//
// Each kernel @name becomes
//     extern "C" void name(void* const* args, const loom::codegen::LaunchDims* dims);
// args[i] points at the value of parameter i (a pointer parameter: at the pointer; a scalar: at
// the scalar), like cuLaunchKernel's kernelParams. One call runs blocks with linear index
// block_begin <= b < block_end (linear = x + grid[0] * (y + grid[1] * z)); within a block the
// threads run one after another on the calling thread (the code is a loop over thread indices,
// split into phases at top-level barriers). Calls on disjoint block ranges may run concurrently.
// A block has at most kMaxBlockThreads threads.
#pragma once

#include <cstdint>

namespace loom::codegen {

struct LaunchDims {
  uint32_t grid[3];   // blocks per grid in x, y, z
  uint32_t block[3];  // threads per block in x, y, z
  uint64_t block_begin;
  uint64_t block_end;
};

using CpuKernelFn = void (*)(void* const* args, const LaunchDims* dims);

inline constexpr uint32_t kMaxBlockThreads = 1024;

}  // namespace loom::codegen
