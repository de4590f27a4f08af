// One sequence's generation rules (see generation.h).
#include "loom/engine/generation.h"

#include <algorithm>

#include "loom/engine/grammar.h"

namespace loom::llm {

std::string StopMatcher::feed(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  // A complete stop string ends generation; text before it is released.
  size_t hit = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    size_t at = pending_.find(s);
    if (at != std::string::npos) hit = std::min(hit, at);
  }
  if (hit != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, hit);
    pending_.clear();
    return out;
  }
  // Keep the longest suffix that is a prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); k > keep; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

Generation::Generation(const Tokenizer& tokenizer, const SamplerParams& sampling, int64_t n_vocab,
                       GenerationOptions options)
    : tokenizer_(&tokenizer),
      own_sampler_(std::make_unique<Sampler>(sampling, n_vocab)),
      sampler_(own_sampler_.get()),
      options_(std::move(options)),
      detok_(tokenizer, options_.render_special),
      stop_(options_.stop) {
  if (options_.grammar)
    matcher_ = std::make_unique<GrammarMatcher>(
        options_.grammar, tokenizer, options_.trie ? options_.trie : std::make_shared<const TokenTrie>(tokenizer));
}

Generation::Generation(const Tokenizer& tokenizer, Sampler& sampler, GenerationOptions options)
    : tokenizer_(&tokenizer),
      sampler_(&sampler),
      options_(std::move(options)),
      detok_(tokenizer, options_.render_special),
      stop_(options_.stop) {
  if (options_.grammar)
    matcher_ = std::make_unique<GrammarMatcher>(
        options_.grammar, tokenizer, options_.trie ? options_.trie : std::make_shared<const TokenTrie>(tokenizer));
}

Generation::~Generation() = default;

void Generation::accept_prompt(std::span<const int32_t> prompt) {
  for (int32_t t : prompt) sampler_->accept(t);
}

bool Generation::length_reached() const {
  return options_.max_tokens >= 0 && n_generated() >= options_.max_tokens;
}

Generation::Step Generation::end(std::string_view reason, Step step) {
  reason_ = reason;
  step.done = true;
  step.reason = reason_;
  return step;
}

Generation::Step Generation::next(const float* logits, bool cache_full) {
  if (done()) return Step{{}, kNoToken, true, reason_};
  // Checked before sampling as well, so max_tokens 0 samples nothing.
  if (length_reached()) return end("length", Step{});
  if (matcher_ && matcher_->must_end()) return end("stop", Step{});
  if (options_.logprobs < 0) {
    const int32_t id = sampler_->sample(logits, nullptr, 0, matcher_.get());
    if (id < 0) return end("stop", Step{});  // the grammar accepts no token of this vocabulary
    return push(id, cache_full);
  }
  SampleLogprobs lp;
  const int32_t id = sampler_->sample(logits, &lp, options_.logprobs, matcher_.get());
  if (id < 0) return end("stop", Step{});
  Step step = push(id, cache_full);
  if (step.token != kNoToken) step.logprobs = std::move(lp);
  return step;
}

Generation::Step Generation::push(int32_t id, bool cache_full) {
  if (done()) return Step{{}, kNoToken, true, reason_};
  if (length_reached()) return end("length", Step{});
  sampler_->accept(id);
  if (!options_.ignore_eos && tokenizer_->is_eog(id)) return end("eos", Step{});
  if (matcher_) matcher_->accept(id);
  tokens_.push_back(id);
  Step step;
  step.token = id;
  step.text = stop_.feed(detok_.push(id));
  if (stop_.stopped()) return end("stop", std::move(step));
  if (length_reached()) return end("length", std::move(step));
  if (cache_full) return end("context", std::move(step));
  return step;
}

void Generation::cancel() {
  if (!done()) reason_ = "cancelled";
}

std::string Generation::finish() {
  if (reason_ == "stop" || reason_ == "cancelled") {
    detok_.reset();
    return {};
  }
  std::string out = stop_.feed(detok_.finish());
  out += stop_.flush();
  return out;
}

}  // namespace loom::llm
