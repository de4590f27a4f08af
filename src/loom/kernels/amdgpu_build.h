// The op library built for AMDGPU: every op at each of its test shapes, with its default amdgpu
// schedule, emitted and compiled into a code object (llc + ld.lld), and the resources each kernel
// uses (registers, LDS, scratch, spills, occupancy) as the code object's metadata states them.
// Compile-only: nothing here runs a kernel.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/codegen/amdgpu/code_object_info.h"

namespace loom::kernels {

// One kernel of one op shape's code object.
struct AmdgpuKernelReport {
  std::string op, shape, schedule;  // op name, Shape::key(), schedule_key()
  codegen::AmdgpuKernelInfo info;
  int block_threads = 0;            // the largest block its launches use
  codegen::AmdgpuOccupancy occupancy;
};

// An op shape that produced no kernels: `refused` when its generator declines the amdgpu target
// by design (an unimplemented status: a form that needs PTX-only instructions), otherwise a
// failure (generation, verification, llc or lld, or a code object over the target's limits).
struct AmdgpuShapeProblem {
  std::string op, shape, reason;
};

struct AmdgpuBuildReport {
  std::string arch;
  int shapes = 0;  // op shapes attempted
  std::vector<AmdgpuKernelReport> kernels;
  std::vector<AmdgpuShapeProblem> refused, failed;
};

// Builds every op (or only `op_filter` when not empty) for `arch` (gfx1100, gfx1151), `threads`
// compilations at a time. Errors only for a bad arch, an unknown op or a missing toolchain;
// per-shape problems are in the report. Code objects are cached (compile_amdgpu_code_object).
Result<AmdgpuBuildReport> build_ops_amdgpu(std::string_view arch, std::string_view op_filter, int threads);

// The report as text: a header, one line per kernel, per refused and per failed shape, and a
// summary line. Deterministic (op registry and test-shape order), so it serves as a golden.
std::string format_amdgpu_report(const AmdgpuBuildReport& r);

}  // namespace loom::kernels
