// The lowering of a (fused) step Program to op-library calls: one op call per launch, by a table
// with one entry per Program op. The HRX backend binds the calls to its device buffers; a ggml
// backend on HRX can bind the same calls to the tensors of a ggml graph.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/exec/weight_plan.h"
#include "loom/kernels/op_spec.h"
#include "loom/model/model.h"
#include "loom/model/program.h"

namespace loom::exec {

// One op instance: the op, its shape, and a device address per op argument.
struct OpCall {
  const kernels::OpSpec* op = nullptr;
  kernels::Shape shape;
  std::map<std::string, uint64_t> bind;  // op argument name -> device address
  std::string label;                     // for errors and profiles: "add + rms_norm_q8 -> ffn_norm-3"
  int32_t out_value = -1;                // the f32 Program value it writes last (value dumps)
};

// Where a step's data lives: the addresses the lowering binds op arguments to.
struct Bindings {
  std::function<uint64_t(int32_t)> value;   // Program value -> address of its slot
  std::function<uint64_t(int32_t)> weight;  // model weight -> address (WeightPlan's layout)
  std::function<uint64_t(int32_t)> k_cache, v_cache;  // layer -> its F16 cache
  uint64_t tokens = 0, positions = 0, seq_ids = 0, output_rows = 0;  // step inputs (i32 each)
  uint64_t rope_freqs = 0;  // the model's rope_freqs (f32), if it has them
  int64_t n_seq_slots = 0;  // sequence slots of the cache (the padding slot included)
  int64_t n_ctx = 0;        // cells per slot
};

struct LoweringContext {
  const llm::Model& model;
  const WeightPlan& plan;
  const Bindings& at;
  int64_t decode_attention_max = 8;  // FuseOptions::decode_attention_max
};

// The op call of launch l of program p.
Result<OpCall> lower_launch(const llm::Program& p, const llm::Launch& l, const LoweringContext& c);

// The op-library op a Program op lowers to ("matmul" ops: the weight plan's choice).
std::string_view lowered_op(llm::OpCode op);

}  // namespace loom::exec
