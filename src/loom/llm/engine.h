// Engine: one model, one backend, one sequence in the KV cache. Feeds tokens in batches as step
// Programs, keeps the logits the caller asked for, and reuses the cached prefix across calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/llm/backend.h"
#include "loom/llm/model.h"

namespace loom::llm {

struct EngineOptions {
  int64_t n_ctx = 4096;   // capped at the model's training context; 0: the model's
  int n_threads = 2;
  int64_t n_batch = 512;  // tokens per step while reading a prompt
};

// Not thread-safe. The Model must outlive the Engine.
class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const Model& model, const EngineOptions& options);

  const Model& model() const { return model_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_vocab() const { return model_.config().n_vocab; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // what the cache holds
  int64_t n_past() const { return static_cast<int64_t>(tokens_.size()); }

  // Appends tokens at positions n_past.. and runs them through the model. Afterwards logits()
  // is the last token's; with all_logits, all_logits() holds one row per token given.
  // Fails with kResourceExhausted (and changes nothing) if the context would overflow.
  Status decode(std::span<const int32_t> tokens, bool all_logits = false);
  const float* logits() const { return last_logits_.data(); }
  const std::vector<float>& all_logits() const { return all_logits_; }

  // Forgets cached tokens beyond the first n.
  void truncate(int64_t n);
  // Makes the cache hold exactly `tokens`: keeps the longest common prefix with what is cached
  // and decodes the rest (at least one token, so logits() is fresh). Returns the tokens reused.
  Result<int64_t> sync(std::span<const int32_t> tokens);

 private:
  Engine(const Model& model) : model_(model) {}
  const Program& program(int64_t n_tokens, int64_t n_outputs);

  const Model& model_;
  std::unique_ptr<Backend> backend_;
  int64_t n_ctx_ = 0, n_batch_ = 512;
  std::vector<int32_t> tokens_;
  std::vector<float> last_logits_, all_logits_, step_logits_;
  std::map<std::pair<int64_t, int64_t>, Program> programs_;
};

}  // namespace loom::llm
