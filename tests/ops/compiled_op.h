// Test helper for tests/ops: an op-library kernel generated for a device, compiled and loaded,
// with its launches (run_op_util.h's bit-identity runs and the GPU timing tests share it).
#pragma once

#include <vector>

#include "loom/hrx/runtime.h"
#include "loom/kernels/op_spec.h"

namespace loom::kernels {

struct CompiledOp {
  Generated gen;
  hrx::Module module;
  std::vector<hrx::Kernel> kernels;  // one per gen.launches entry

  // Enqueues every launch on s; buffer_of(ai) is the buffer of argument ai.
  template <class BufferOf>
  Status enqueue(hrx::Stream& s, BufferOf&& buffer_of) const {
    for (size_t li = 0; li < gen.launches.size(); ++li) {
      const KernelLaunch& l = gen.launches[li];
      hrx::KernelArgs a;
      for (int ai : l.args) a.buffer(buffer_of(ai));
      for (int64_t sc : l.scalars) a.i64(sc);
      LOOM_RETURN_IF_ERROR(s.launch(kernels[li], {l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]}, a));
    }
    return Status();
  }
};

inline Result<CompiledOp> compile_op(const OpSpec& op, const Shape& shape, const Schedule& sch, const hrx::Device& dev) {
  CompiledOp c;
  LOOM_ASSIGN_OR_RETURN(c.gen, op.generate(shape, sch, dev.target()));
  LOOM_ASSIGN_OR_RETURN(c.module, hrx::Module::compile(dev, c.gen.module));
  for (const KernelLaunch& l : c.gen.launches) {
    LOOM_ASSIGN_OR_RETURN(hrx::Kernel k, c.module.kernel(l.kernel));
    c.kernels.push_back(std::move(k));
  }
  return c;
}

}  // namespace loom::kernels
