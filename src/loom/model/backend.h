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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Binds the model (which must outlive the backend) and allocates an F16 KV cache of n_seq
  // sequence slots of n_ctx cells each, per layer. Called once.
  virtual Status init(const Model& model, int64_t n_ctx, int64_t n_seq) = 0;
  // Runs one step: stores the batch's K/V at the cells of (seq_ids, positions) and writes
  // program.n_outputs rows of n_vocab logits to `logits` (see StepInputs in program.h for the
  // sequence rules). Not thread-safe; one step at a time.
  virtual Status execute(const Program& program, const StepInputs& in, float* logits) = 0;
  // Readies whatever a step of n_tokens tokens with n_outputs rows of logits needs before the
  // first such step runs (HRX: builds and compiles its plan, which otherwise stalls that step),
  // so that a server can pay for it before it takes requests. Returns true if something was
  // built, false if it was ready already or the backend has nothing to prepare (the default:
  // the reference backend interprets every Program as it comes). Call after init, between steps.
  virtual Result<bool> prepare(int64_t n_tokens, int64_t n_outputs) { return false; }
};

// The reference CPU backend, splitting matmul rows and attention heads over n_threads.
std::unique_ptr<Backend> make_ref_backend(int n_threads);

}  // namespace loom::llm
