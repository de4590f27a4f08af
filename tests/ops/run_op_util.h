// Test helper for tests/ops: run one op-library kernel on an HRX device with given input bytes
// and read back its outputs (the batched and fused matvec_gpu and the attention_decode out_q
// bit-identity tests use it).
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "loom/hrx/runtime.h"
#include "loom/kernels/op_spec.h"
#include "compiled_op.h"

namespace loom::kernels {

// Runs `op` with the given input buffers (in argument order); returns every output buffer's
// bytes, each poisoned with 0xFF bytes first (NaN as floats) so that an unwritten element cannot
// pass.
inline Result<std::vector<std::vector<uint8_t>>> run_op_bytes(const hrx::Device& dev, hrx::Stream& s, const OpSpec& op,
                                                       const Shape& shape, const Schedule& sch,
                                                       const std::vector<std::span<const uint8_t>>& inputs) {
  LOOM_ASSIGN_OR_RETURN(CompiledOp c, compile_op(op, shape, sch, dev));
  const std::vector<ArgSpec> specs = op.args(shape);
  std::vector<hrx::Buffer> bufs;
  size_t in = 0;
  for (const ArgSpec& a : specs) {
    LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev, static_cast<uint64_t>(std::max<int64_t>(a.bytes, 4))));
    if (a.role == ArgRole::kInput) {
      if (in >= inputs.size() || inputs[in].size() != static_cast<size_t>(a.bytes))
        return internal_error("input {} of {} does not match argument {}", in, shape.key(), a.name);
      LOOM_RETURN_IF_ERROR(s.copy_h2d(b, 0, inputs[in].data(), inputs[in].size()));
      ++in;
    } else {
      LOOM_RETURN_IF_ERROR(s.memset(b, 0, 0xFF, static_cast<uint64_t>(a.bytes)));
    }
    bufs.push_back(std::move(b));
  }
  LOOM_RETURN_IF_ERROR(c.enqueue(s, [&](int ai) -> const hrx::Buffer& { return bufs[static_cast<size_t>(ai)]; }));
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].role != ArgRole::kOutput) continue;
    std::vector<uint8_t> y(static_cast<size_t>(specs[i].bytes));
    LOOM_RETURN_IF_ERROR(s.copy_d2h(y.data(), bufs[i], 0, y.size()));
    out.push_back(std::move(y));
  }
  LOOM_RETURN_IF_ERROR(s.synchronize());
  return out;
}

// run_op_bytes with every output read as f32.
inline Result<std::vector<std::vector<float>>> run_op(const hrx::Device& dev, hrx::Stream& s, const OpSpec& op,
                                               const Shape& shape, const Schedule& sch,
                                               const std::vector<std::span<const uint8_t>>& inputs) {
  LOOM_ASSIGN_OR_RETURN(auto bytes, run_op_bytes(dev, s, op, shape, sch, inputs));
  std::vector<std::vector<float>> out;
  for (const auto& y : bytes) {
    std::vector<float> f(y.size() / 4);
    std::memcpy(f.data(), y.data(), f.size() * 4);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace loom::kernels
