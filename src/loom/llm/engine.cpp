// Engine: batching of tokens into step Programs, context limit, prefix reuse.
#include "loom/llm/engine.h"

#include <algorithm>
#include <numeric>

namespace loom::llm {

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const EngineOptions& options) {
  if (options.n_ctx < 0) return invalid_argument("context size must be >= 0 (got {})", options.n_ctx);
  if (options.n_batch <= 0) return invalid_argument("batch size must be > 0 (got {})", options.n_batch);
  std::unique_ptr<Engine> e(new Engine(model));
  const int64_t train = model.config().n_ctx_train > 0 ? model.config().n_ctx_train : options.n_ctx;
  e->n_ctx_ = options.n_ctx == 0 ? train : std::min(options.n_ctx, train);
  e->n_batch_ = options.n_batch;
  e->backend_ = make_ref_backend(options.n_threads);
  LOOM_RETURN_IF_ERROR(e->backend_->init(model, e->n_ctx_));
  e->last_logits_.assign(static_cast<size_t>(model.config().n_vocab), 0.0f);
  return e;
}

const Program& Engine::program(int64_t n_tokens, int64_t n_outputs) {
  auto key = std::make_pair(n_tokens, n_outputs);
  auto it = programs_.find(key);
  if (it == programs_.end()) it = programs_.emplace(key, model_.build_program(n_tokens, n_outputs)).first;
  return it->second;
}

Status Engine::decode(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) return invalid_argument("nothing to decode (empty token list)");
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n_past() + n > n_ctx_)
    return resource_exhausted("{} tokens do not fit in the context: {} cached + {} new > {} (raise -c, up to the "
                              "model's {})", n_past() + n, n_past(), n, n_ctx_, model_.config().n_ctx_train);
  const int64_t n_vocab = this->n_vocab();
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) return invalid_argument("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
  if (all_logits) all_logits_.assign(static_cast<size_t>(n * n_vocab), 0.0f);
  std::vector<int32_t> positions, rows;
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(n_batch_, n - done);
    const int64_t n_out = all_logits ? m : 1;
    positions.resize(static_cast<size_t>(m));
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(n_past()));
    rows.resize(static_cast<size_t>(n_out));
    if (all_logits) std::iota(rows.begin(), rows.end(), 0);
    else rows[0] = static_cast<int32_t>(m - 1);
    StepInputs in;
    in.tokens = tokens.data() + done;
    in.positions = positions.data();
    in.output_rows = rows.data();
    in.n_kv = n_past() + m;
    step_logits_.resize(static_cast<size_t>(n_out * n_vocab));
    Status s = backend_->execute(program(m, n_out), in, step_logits_.data());
    if (!s.ok()) return s;
    tokens_.insert(tokens_.end(), tokens.begin() + done, tokens.begin() + done + m);
    if (all_logits) std::copy(step_logits_.begin(), step_logits_.end(), all_logits_.begin() + done * n_vocab);
    std::copy(step_logits_.end() - n_vocab, step_logits_.end(), last_logits_.begin());
    done += m;
  }
  return Status();
}

void Engine::truncate(int64_t n) {
  if (n < n_past()) tokens_.resize(static_cast<size_t>(std::max<int64_t>(0, n)));
}

Result<int64_t> Engine::sync(std::span<const int32_t> tokens) {
  if (tokens.empty()) return invalid_argument("nothing to decode (empty token list)");
  size_t common = 0;
  while (common < tokens.size() && common < tokens_.size() && tokens[common] == tokens_[common]) ++common;
  // At least the last token is decoded again so that logits() belongs to it.
  if (common == tokens.size()) --common;
  if (static_cast<int64_t>(tokens.size()) > n_ctx_)
    return resource_exhausted("{} tokens do not fit in the context of {} (raise -c, up to the model's {})",
                              tokens.size(), n_ctx_, model_.config().n_ctx_train);
  truncate(static_cast<int64_t>(common));
  LOOM_RETURN_IF_ERROR(decode(tokens.subspan(common)));
  return static_cast<int64_t>(common);
}

}  // namespace loom::llm
