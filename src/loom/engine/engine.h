// Engine: one model, one backend, n_seq sequence slots in the KV cache. Feeds tokens in batches
// as step Programs, keeps the logits the caller asked for, and reuses cached prefixes. The
// single-sequence API (decode/sync/truncate/tokens) works on sequence 0; step() runs tokens of
// several sequences in one batched step (continuous batching, used by `loom serve`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/backend.h"
#include "loom/model/model.h"

namespace loom::llm {

struct EngineOptions {
  int64_t n_ctx = 4096;   // cells per sequence; capped at the model's training context; 0: the model's
  int n_threads = 2;
  int64_t n_batch = 512;  // tokens per step while reading a prompt
  int n_seq = 1;          // sequence slots (each n_ctx cells: KV memory grows with n_seq * n_ctx)
  // Makes the backend the engine runs on (exec::make_backend: HRX on a device); null: the
  // reference CPU backend with n_threads threads.
  std::function<Result<std::unique_ptr<Backend>>()> make_backend;
};

// One sequence's share of a batched step: its tokens go in at positions n_past(seq)...
struct SeqTokens {
  int seq = 0;
  std::span<const int32_t> tokens;
  bool logits = true;  // keep the logits of the last token
};

// Not thread-safe. The Model must outlive the Engine.
class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const Model& model, const EngineOptions& options);

  const Model& model() const { return model_; }
  std::string_view backend_name() const { return backend_->name(); }  // "cpu-ref", "hrx:cuda:0" ...
  int64_t n_ctx() const { return n_ctx_; }  // per sequence
  int n_seq() const { return static_cast<int>(seqs_.size()); }
  int64_t n_vocab() const { return model_.config().n_vocab; }
  const std::vector<int32_t>& tokens(int seq = 0) const { return seqs_[static_cast<size_t>(seq)]; }  // what the cache holds
  int64_t n_past(int seq = 0) const { return static_cast<int64_t>(tokens(seq).size()); }

  // Appends tokens to sequence 0 at positions n_past.. and runs them through the model.
  // Afterwards logits() is the last token's; with all_logits, all_logits() holds one row per
  // token given. Fails with kResourceExhausted (and changes nothing) if the context would overflow.
  Status decode(std::span<const int32_t> tokens, bool all_logits = false);
  const float* logits() const { return last_logits_.data(); }
  const std::vector<float>& all_logits() const { return all_logits_; }

  // Forgets cached tokens of sequence 0 (or `seq`) beyond the first n.
  void truncate(int64_t n) { truncate(0, n); }
  void truncate(int seq, int64_t n);
  // Makes sequence 0's cache hold exactly `tokens`: keeps the longest common prefix with what is
  // cached and decodes the rest (at least one token, so logits() is fresh). Returns the tokens
  // reused.
  Result<int64_t> sync(std::span<const int32_t> tokens);

  // One batched step: every part's tokens are appended to its sequence (distinct sequences) and
  // all of them run through the model together, as ONE Program. Each part gets exactly the
  // logits it would get alone (step_logits(i) for part i, null where logits was false). The
  // caller keeps the step small (about n_batch tokens); it is not split. Validates everything
  // first: on error nothing changes.
  Status step(std::span<const SeqTokens> parts);
  // Makes sequence dst hold the first n tokens of sequence src (distinct), their KV cells copied
  // rather than computed. kUnimplemented where the backend cannot copy cells (the caller then
  // computes them); on any error dst is left as it was.
  Status copy_prefix(int src, int dst, int64_t n);
  // Readies the backend for steps of n_tokens tokens with n_outputs rows of logits (HRX:
  // compiles the plan of that step shape now rather than in the first such step). True if
  // something was built.
  Result<bool> prepare(int64_t n_tokens, int64_t n_outputs);

  // The final hidden state (after the output norm, before the output matrix) of every token of
  // `tokens`, read as one fresh sequence in sequence slot 0: hidden[t * n_embd + i]. Slot 0's
  // cache is emptied (before and after). Reference backend only (an HRX backend compiles its
  // plans for logits): kFailedPrecondition elsewhere. Fails like decode() on bad tokens or a
  // sequence longer than the context.
  Status hidden_states(std::span<const int32_t> tokens, std::vector<float>* hidden);
  // One embedding of `tokens`: the hidden states pooled as the GGUF declares
  // (`<arch>.pooling_type`: 2 = the first token's, 3 = the last token's) and by their mean
  // otherwise, then scaled to unit L2 norm. n_embd floats.
  Status embed(std::span<const int32_t> tokens, std::vector<float>* embedding);
  // "mean", "cls" or "last": the pooling embed() applies.
  std::string_view pooling() const;

  const float* step_logits(size_t part) const {
    return part < part_row_.size() && part_row_[part] >= 0 ? step_logits_.data() + part_row_[part] * n_vocab()
                                                           : nullptr;
  }

 private:
  Engine(const Model& model) : model_(model) {}
  const Program& program(int64_t n_tokens, int64_t n_outputs);
  // The model's Program for n tokens with every row out, cut after the output norm.
  Result<const Program*> hidden_program(int64_t n_tokens);
  // Runs n tokens with n_out rows of logits (into step_logits_) as the Program shape the
  // backend asks for, adding the padding tokens and rows it implies.
  Status run_step(int64_t n, int64_t n_out, const StepInputs& in);

  const Model& model_;
  std::unique_ptr<Backend> backend_;
  int64_t n_ctx_ = 0, n_batch_ = 512;
  std::vector<std::vector<int32_t>> seqs_;
  std::vector<float> last_logits_, all_logits_, step_logits_;
  std::vector<int64_t> part_row_;
  std::vector<int32_t> b_tokens_, b_positions_, b_seqs_, b_rows_;
  std::vector<int32_t> pad_tokens_, pad_positions_, pad_seqs_, pad_rows_;
  std::map<std::pair<int64_t, int64_t>, Program> programs_;
  std::map<int64_t, Program> hidden_programs_;
};

}  // namespace loom::llm
