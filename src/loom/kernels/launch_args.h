// Binding one launch's arguments for HRX: the op arguments the launch names (device addresses)
// and its scalars, each passed as its parameter's type. The one binder of the engine's plan
// compile, evolve's evaluator and the op harness, so a kernel gets the same argument bytes
// wherever it runs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "loom/base/status.h"
#include "loom/hrx/runtime.h"
#include "loom/ir/ir.h"
#include "loom/kernels/op_spec.h"

namespace loom::kernels {

// `addrs`: one device address per op argument (OpSpec::args order); the launch takes
// addrs[l.args[i]] for its pointer parameters, in order. `scalar_types`: the types of the
// kernel's scalar parameters (those after the pointers), one per l.scalars value. A scalar is
// an integer literal (KernelLaunch::scalars), passed as f32 (converted) to an f32 parameter, as
// the bits of the converted double to an f64 one, as i64 to a 64-bit integer parameter and as
// i32 otherwise. Errors: an argument index outside `addrs`, or a scalar count that is not the
// kernel's.
Result<hrx::KernelArgs> bind_launch_args(const KernelLaunch& l, std::span<const uint64_t> addrs,
                                         std::span<const ir::Type> scalar_types);

// The scalar parameter types of Loom IR kernel `k` for launch `l` (its parameters after the
// l.args pointers); an error when the kernel's parameter count is not the launch's.
Result<std::vector<ir::Type>> scalar_param_types(const ir::Kernel& k, const KernelLaunch& l);
// The same for the kernel l.kernel of `m`; an error when `m` lacks it.
Result<std::vector<ir::Type>> scalar_param_types(const ir::Module& m, const KernelLaunch& l);

}  // namespace loom::kernels
