// The step plans of the HRX backend: the op calls a step lowers to, the bound launches they
// compile to, and the compile step (hrx_compile.cpp). Internal to the exec part (hrx_backend.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/exec/lowering.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_spec.h"
#include "loom/model/program.h"

namespace loom::exec::hrx_detail {

using kernels::OpSpec;
using kernels::Shape;
using llm::Program;

using exec::OpCall;

// A kernel launch with its arguments resolved.
struct BoundLaunch {
  hrx::Kernel kernel;
  hrx::Dim3 grid, block;
  hrx::KernelArgs args;
  std::string label;
  int32_t dump_value = -1;  // set on the last launch of a call that writes a Program value
  std::string op;           // op-library name (profile)
  double bytes = 0, flops = 0;  // the call's cost, on its last launch (profile)
};

// Everything one step shape needs on the device.
struct Plan {
  int64_t n_padded = 0, n_outputs = 0;    // the Program's step shape (tokens padded by step_shape)
  Program program;                         // the fused Program the launches run
  std::vector<hrx::Buffer> slots;          // the Program's value slots
  std::vector<hrx::Buffer> scratch;        // per-op scratch
  hrx::Buffer step;                        // tokens | positions | seq ids | output rows (i32)
  std::vector<BoundLaunch> launches;
  hrx::Graph graph;
  int runs = 0;
  uint64_t tokens_off = 0, pos_off = 0, seq_off = 0, rows_off = 0;
  std::vector<int32_t> host_step;          // staging for `step`
  std::vector<hrx::Event> prof_events;     // two per launch when profiling
};

// A device buffer of `bytes` (at least 4) that the plan owns; returns its address.
Result<uint64_t> plan_scratch(const hrx::Device& dev, Plan& plan, uint64_t bytes);

// Generates every call's kernels, merges them into one module (one compile per plan), and
// binds the launches.
// stored_used: the stored kernels already announced (op|shape|id), kept by the backend across plans.
Result<std::unique_ptr<Plan>> compile_plan(const hrx::Device& dev, std::set<std::string>& stored_used,
                                           std::unique_ptr<Plan> plan, std::vector<OpCall> calls);

}  // namespace loom::exec::hrx_detail
