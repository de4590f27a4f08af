// Program: the list of op launches of one engine step (one batch of tokens through the model),
// built from an architecture recipe and executed by a Backend: the reference CPU backend
// interprets it, the HRX backends fuse it (a Program-to-Program pass) and lower each launch to
// one op-library kernel.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/gguf/ggml_types.h"
#include "loom/ref/ops_ref.h"

namespace loom::llm {

// The op vocabulary of a Program, from model to kernel. Architecture recipes write the plain
// forms; a backend's fusion pass (exec/fuse.h) rewrites a Program into the fused and quantizing
// forms, which are Program ops too: every op here has a reference implementation (the reference
// backend runs plain and fused Programs alike) and lowers to exactly one op-library op
// (exec/lowering.h). Shapes are those of the launch's values; ref/ops_ref.h has the numerics.
enum class OpCode : uint8_t {
  kGetRows,     // out[t] = row tokens[t] of weight (embedding table)             [get_rows]
  kRmsNorm,     // out = rms_norm(in0 over groups of `group` values) * weight     [rms_norm]
                //   (weight optional)
  kMatMul,      // out[t] = weight · in0[t]; in0 may be quantized (a kQuantize output, in the
                //   format the chosen kernel reads); with weight1 (and weight2): out1, out2 =
                //   weight1/2 · in0 in the same launch; glu: out = silu(weight · in0) *
                //   (weight1 · in0) and no out1   [matvec | matmul | matvec_gpu | matmul_mma]
  kAdd,         // out = in0 + in1                                                [add]
  kScale,       // out = in0 * f                                                  [scale]
  kSoftcap,     // out = f * tanh(in0 / f)                                        [softcap]
  kRopeKv,      // in0 (q) rotated in place at the step's positions; in1 (k) rotated and
                //   stored with in2 (v) in cache[layer] at (seq, position); out = in0  [rope_kv]
  kAttention,   // out = attention(in0 = q, cache[layer]) over cells [0, n_kv); out1 (if set):
                //   out quantized to out1's type too          [attention_decode | attention_prompt]
  kSwiGlu,      // out = silu(in0) * in1                                          [swiglu]
  kGeGlu,       // out = gelu(in0) * in1                                          [geglu]
  kGatherRows,  // out[i] = in0[output_rows[i]] (keep the rows whose logits are wanted)  [gather_rows]
  kQuantize,    // out = in0 converted to out's type (Q8_0/Q8_1/Q8_K blocks, or F16), as a
                //   matmul kernel reads its activations                          [quantize_act]
  kAddRmsNorm,  // out1 = in0 + in1; out = rms_norm(out1) * weight                [add_rms_norm]
  kRmsNormQ8,   // out = rms_norm(in0 [+ in1, written to out1]) * weight, quantized to out's
                //   type (Q8_0/Q8_1/Q8_K); the f32 norm is never written         [rms_norm_q8]
  kAddBias,     // out[t] = in0[t] + weight (an f32 vector of in0's cols: a projection's bias)
                //                                                                [add_bias]
  kMoeRoute,    // router: per row of in0 (logits [rows, n_expert]) p = softmax(in0), out1 (i32
                //   [rows, k]) = the k largest p (descending, lower index first on ties), out
                //   (f32 [rows, k]) = their p, divided by their sum when norm_w  [moe_route]
  kMatMulId,    // expert mat-vecs: weight holds n_expert stacked matrices (Weight::n_expert);
                //   out[t, j] = weight[in1[t, j]] · x, x = in0[t] (in0 of n_in cols) or in0[t, j]
                //   (k * n_in cols); out is [rows, k * expert_rows]; in0 may be quantized as for
                //   kMatMul; glu (fused): out = silu(weight[e] · x) * (weight1[e] · x)  [matvec_id]
  kMoeSum,      // out[t] = sum over j in order of in0[t, j] * in1[t, j] (in0: [rows, k * n],
                //   in1: f32 [rows, k]), each product rounded, then added         [moe_sum]
};
const char* op_name(OpCode op);

// An activation: a matrix [rows, cols], rows = tokens of the step (or outputs). Float32, or
// quantized activation rows (type Q8_0/Q8_1/Q8_K/F16: ref::quantized_row_bytes(type, cols) each),
// or I32 (the experts a router chose).
struct ValueDesc {
  int64_t rows = 0, cols = 0;
  std::string name;
  int32_t slot = -1;  // memory slot assigned by assign_slots (values share slots)
  GgmlType type = GgmlType::F32;
  uint64_t bytes() const;
};

struct Launch {
  OpCode op = OpCode::kAdd;
  int32_t out = -1;                   // value id (-1: none)
  int32_t out1 = -1, out2 = -1;       // second/third outputs (see OpCode)
  int32_t in0 = -1, in1 = -1, in2 = -1;  // value ids
  int32_t weight = -1;                // Model weight id (matrix, table, norm or bias vector)
  int32_t weight1 = -1, weight2 = -1;  // kMatMul: more matrices read with the same input
  bool glu = false;                   // kMatMul: out = silu(weight · in0) * (weight1 · in0)
  bool norm_w = false;                // kMoeRoute: renormalize the chosen experts' weights
  int32_t layer = -1;                 // KV cache layer
  int64_t group = 0;                  // kRmsNorm: values per normalized group
  float eps = 0.0f;                   // kRmsNorm, kAddRmsNorm, kRmsNormQ8
  float f = 0.0f;                     // kScale factor, kSoftcap cap
  int32_t n_head = 0, n_head_kv = 0, head_dim = 0;  // kRopeKv (q heads, k heads)
  ref::RopeParams rope;               // kRopeKv (freq_factors points into the Model, or null)
  ref::AttentionParams attn;          // kAttention

  // Every value the launch reads / writes (-1 entries skipped by callers).
  std::array<int32_t, 3> inputs() const { return {in0, in1, in2}; }
  std::array<int32_t, 3> outputs() const { return {out, out1, out2}; }
};

struct Program {
  int64_t n_tokens = 0;   // batch size of the step
  int64_t n_outputs = 0;  // rows of logits it produces
  std::vector<ValueDesc> values;
  std::vector<Launch> launches;
  std::vector<uint64_t> slot_bytes;  // size of each memory slot
  int32_t logits = -1;               // value holding [n_outputs, n_vocab]

  // One line per launch ("matmul      %12[7x576] <- %11[7x576], blk.0.attn_q.weight"), for
  // `loom run --dump-program` and tests.
  std::string to_string(const std::vector<std::string>& weight_names) const;
};

// Gives every value a memory slot by liveness, so a step needs a few buffers, not one per
// value: a launch's outputs take free slots (never one of the launch's own inputs, except a value
// written in place), and a value's slot is freed after its last reader.
void assign_slots(Program& p);

// Builds a Program; finish() assigns the slots.
class ProgramBuilder {
 public:
  ProgramBuilder(int64_t n_tokens, int64_t n_outputs);
  int32_t value(int64_t rows, int64_t cols, std::string name, GgmlType type = GgmlType::F32);
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
