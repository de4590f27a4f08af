// Program: the list of op launches of one engine step (one batch of tokens through the model),
// built from an architecture recipe and executed by a Backend. The same Program runs on the
// reference CPU backend today and on HRX kernels (CPU, GPU) later.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/ref/ops_ref.h"

namespace loom::llm {

// Ops a Program may launch. Shapes are those of the launch's values; see ops_ref.h for the
// numerics each op must reproduce.
enum class OpCode : uint8_t {
  kGetRows,     // out[t] = row tokens[t] of weight (embedding table)
  kRmsNorm,     // out = rms_norm(in0 over groups of `group` values) * weight (weight optional)
  kMatMul,      // out[t] = weight · in0[t]
  kAdd,         // out = in0 + in1
  kScale,       // out = in0 * f
  kSoftcap,     // out = f * tanh(in0 / f)
  kRope,        // out = rope(in0) at the step's positions (out may alias in0)
  kKvStore,     // cache[layer] K <- in0, V <- in1 at the step's positions (no out)
  kAttention,   // out = attention(in0 = q, cache[layer]) over cells [0, n_kv)
  kSwiGlu,      // out = silu(in0) * in1
  kGeGlu,       // out = gelu(in0) * in1
  kGatherRows,  // out[i] = in0[output_rows[i]] (keep the rows whose logits are wanted)
};
const char* op_name(OpCode op);

// An activation: a float32 matrix [rows, cols], rows = tokens of the step (or outputs).
struct ValueDesc {
  int64_t rows = 0, cols = 0;
  std::string name;
  int32_t slot = -1;  // memory slot assigned by ProgramBuilder::finish (values share slots)
};

struct Launch {
  OpCode op = OpCode::kAdd;
  int32_t out = -1;              // value id (-1 for kKvStore)
  int32_t in0 = -1, in1 = -1;    // value ids
  int32_t weight = -1;           // Model weight id (matrix, table or norm vector)
  int32_t layer = -1;            // KV cache layer
  int64_t group = 0;             // kRmsNorm: values per normalized group
  float eps = 0.0f;              // kRmsNorm
  float f = 0.0f;                // kScale factor, kSoftcap cap
  int32_t n_head = 0, head_dim = 0;  // kRope
  ref::RopeParams rope;          // kRope (freq_factors points into the Model, or null)
  ref::AttentionParams attn;     // kAttention
};

struct Program {
  int64_t n_tokens = 0;   // batch size of the step
  int64_t n_outputs = 0;  // rows of logits it produces
  std::vector<ValueDesc> values;
  std::vector<Launch> launches;
  std::vector<int64_t> slot_floats;  // size of each memory slot, in floats
  int32_t logits = -1;               // value holding [n_outputs, n_vocab]

  // One line per launch ("matmul  %12[7x576] = blk.0.attn_q.weight · %11"), for debugging and
  // the golden tests of later backends.
  std::string to_string(const std::vector<std::string>& weight_names) const;
};

// Builds a Program; values get memory slots by liveness at finish() so a step needs a few
// buffers, not one per value.
class ProgramBuilder {
 public:
  ProgramBuilder(int64_t n_tokens, int64_t n_outputs);
  int32_t value(int64_t rows, int64_t cols, std::string name);
  const ValueDesc& desc(int32_t id) const { return program_.values[static_cast<size_t>(id)]; }
  void launch(const Launch& l) { program_.launches.push_back(l); }
  Program finish(int32_t logits);

  int64_t n_tokens() const { return program_.n_tokens; }
  int64_t n_outputs() const { return program_.n_outputs; }

 private:
  Program program_;
};

// What changes from step to step without changing the Program.
//
// One step may carry tokens of several sequences (continuous batching). The backend's KV cache
// has n_seq sequence slots of n_ctx cells each (Backend::init); token t is stored in the cell of
// (seq_ids[t], positions[t]) and attends only to the cells of its own sequence with positions
// <= positions[t] (and inside the sliding window, where the layer has one). Rows never mix:
// every op of a step is row-wise except attention, which is per token, so a batched step gives
// each sequence exactly the logits it would get alone. The Program does not know about
// sequences; only these inputs do.
struct StepInputs {
  const int32_t* tokens = nullptr;       // [n_tokens]
  const int32_t* positions = nullptr;    // [n_tokens], position in the token's own sequence
  const int32_t* seq_ids = nullptr;      // [n_tokens] sequence slot of each token; null: all 0
  const int32_t* output_rows = nullptr;  // [n_outputs] indices into the batch
  int64_t n_kv = 0;                      // > every position of the step: positions [0, n_kv) of
                                         // the step's sequences are valid after its store
};

}  // namespace loom::llm
