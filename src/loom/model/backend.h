// Backend: executes a step Program against a Model's weights and its own KV cache. The
// reference CPU backend (ops_ref) is the first; HRX backends implement the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "loom/base/status.h"
#include "loom/model/model.h"
#include "loom/model/program.h"

namespace loom::llm {

// The sizes of the Program a step runs as: a step of n tokens may run as a Program of more
// (padding), so that a backend that compiles per Program shape meets few shapes.
struct StepShape {
  int64_t n_tokens = 0, n_outputs = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Binds the model (which must outlive the backend) and allocates an F16 KV cache of n_seq
  // sequence slots of n_ctx cells each, per layer. Called once.
  virtual Status init(const Model& model, int64_t n_ctx, int64_t n_seq) = 0;
  // The Program shape for a step of n_tokens tokens with n_outputs rows of logits (after init).
  // A backend that pads returns larger sizes; the engine then fills the extra tokens as padding:
  // token 0 at positions 0, 1, ... of sequence slot n_seq (a scratch slot that init allocated
  // and no real sequence reads), and extra output rows repeating the last real one. Default:
  // no padding.
  virtual StepShape step_shape(int64_t n_tokens, int64_t n_outputs) const { return {n_tokens, n_outputs}; }
  // Runs one step: stores the batch's K/V at the cells of (seq_ids, positions) and writes
  // program.n_outputs rows of n_vocab logits to `logits` (see StepInputs in program.h for the
  // sequence rules). The Program is the model's, for a shape step_shape returned; the backend
  // may rewrite it (fusion) and cache what it builds for that shape. Not thread-safe; one step
  // at a time.
  virtual Status execute(const Program& program, const StepInputs& in, float* logits) = 0;
  // Readies whatever the steps of this Program need before the first one runs (HRX: builds and
  // compiles its plan, which otherwise stalls that step), so that a server can pay for it before
  // it takes requests. Returns true if something was built, false if it was ready already or
  // the backend has nothing to prepare (the default: the reference backend interprets every
  // Program as it comes). Call after init, between steps.
  virtual Result<bool> prepare(const Program& program) { return false; }
  // Copies the K and V of cells [0, n_cells) of sequence slot src_seq into the same cells of
  // dst_seq, so that dst_seq can go on from that prefix without computing it (a server shares a
  // cached prompt between slots this way). Between steps only. Default: kUnimplemented (the
  // caller computes the prefix instead).
  virtual Status copy_cells(int64_t src_seq, int64_t dst_seq, int64_t n_cells) {
    return unimplemented("backend {} cannot copy KV cells between sequences", name());
  }
};

// The types of the KV cache's K and V rows: F16 (the default) or Q8_0 (llama.cpp's
// --cache-type-k/v q8_0: half the memory, 8-bit values with an fp16 scale per 32).
struct KvCacheTypes {
  GgmlType k = GgmlType::F16, v = GgmlType::F16;
  bool is_default() const { return k == GgmlType::F16 && v == GgmlType::F16; }
};

// The reference CPU backend, splitting matmul rows and attention heads over n_threads.
std::unique_ptr<Backend> make_ref_backend(int n_threads, KvCacheTypes kv = {});

}  // namespace loom::llm
