// Shared pieces of the HRX conformance suite: the devices to run on (cpu always; every CUDA and
// AMD GPU, or one "cuda" / "amdgpu" entry that skips with the reason when none is usable) and small kernels
// in Loom IR text.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/hrx/runtime.h"
#include "loom/ir/ir.h"

namespace loom::test {

// "cpu", then "cuda:0".."cuda:N-1", or "cuda" when the driver or devices are missing, then
// "amdgpu:0".."amdgpu:N-1", or "amdgpu" when the HSA runtime or AMD GPUs are missing.
std::vector<std::string> hrx_device_specs();

// c[i] = a[i] + b[i] for i < n (f32).
extern const char* const kVectorAddIr;
// Every thread of a 3-D grid writes, at its global linear index, its global (x, y, z) position
// packed as x | y << 10 | z << 20 into pos, and the grid and block sizes packed as
// gx | gy << 4 | gz << 8 | bx << 12 | by << 18 | bz << 24 into dims.
extern const char* const kDims3dIr;
// y[i] = y[i] * a + x[i] for i < n (f32): order-sensitive, for stream and graph tests.
extern const char* const kAxpyIr;
// Does nothing (launch overhead).
extern const char* const kEmptyIr;

// Parses IR text; fails the test on error.
ir::Module parse_ir(const char* text);

}  // namespace loom::test
