// Sampling chain (see sampler.h). Candidate filtering follows llama.cpp's samplers so that the
// same flags mean the same thing; the random source is our own seeded mt19937_64.
#include "loom/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "loom/ref/ops_ref.h"

namespace loom::llm {

Status SamplerParams::validate() const {
  if (!(top_p > 0.0f)) return invalid_argument("--top-p must be > 0 (got {})", top_p);
  if (min_p < 0.0f || min_p > 1.0f) return invalid_argument("--min-p must be in [0, 1] (got {})", min_p);
  if (!(repeat_penalty > 0.0f)) return invalid_argument("--repeat-penalty must be > 0 (got {})", repeat_penalty);
  if (repeat_last_n < 0) return invalid_argument("--repeat-last-n must be >= 0 (got {})", repeat_last_n);
  if (std::isnan(temp)) return invalid_argument("--temp is not a number");
  for (const auto& [id, bias] : logit_bias)
    if (!std::isfinite(bias)) return invalid_argument("the logit bias of token {} is not a finite number", id);
  return Status();
}

Sampler::Sampler(const SamplerParams& params, int64_t n_vocab) : params_(params), n_vocab_(n_vocab) {
  seed_ = params.seed == SamplerParams::kRandomSeed ? std::random_device{}() : params.seed;
  rng_.seed(seed_);
}

void Sampler::reset() {
  history_.clear();
  rng_.seed(seed_);
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n <= 0) return;
  history_.push_back(token);
  while (static_cast<int>(history_.size()) > params_.repeat_last_n) history_.pop_front();
}

bool Sampler::penalties_active() const {
  return !(params_.repeat_penalty == 1.0f && params_.frequency_penalty == 0.0f && params_.presence_penalty == 0.0f) &&
         !history_.empty();
}

void Sampler::apply_logit_bias(std::vector<Candidate>& c) const {
  for (const auto& [id, bias] : params_.logit_bias)
    if (id >= 0 && static_cast<size_t>(id) < c.size()) c[static_cast<size_t>(id)].logit += bias;
}

void Sampler::apply_penalties(std::vector<Candidate>& c) const {
  if (!penalties_active()) return;
  std::unordered_map<int32_t, int> count;
  for (int32_t t : history_) ++count[t];
  for (auto& x : c) {
    auto it = count.find(x.id);
    if (it == count.end()) continue;
    // Dividing a negative logit would make the token more likely; multiply it instead.
    if (x.logit <= 0) x.logit *= params_.repeat_penalty;
    else x.logit /= params_.repeat_penalty;
    x.logit -= static_cast<float>(it->second) * params_.frequency_penalty + params_.presence_penalty;
  }
}

void Sampler::apply_top_k(std::vector<Candidate>& c, int k) {
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (k <= 0 || k >= static_cast<int>(c.size())) {
    std::sort(c.begin(), c.end(), by_logit);
    return;
  }
  std::partial_sort(c.begin(), c.begin() + k, c.end(), by_logit);
  c.resize(static_cast<size_t>(k));
}

void Sampler::softmax(std::vector<Candidate>& c) {
  float max = -INFINITY;
  for (const auto& x : c) max = std::max(max, x.logit);
  double sum = 0.0;
  for (auto& x : c) {
    x.p = std::exp(x.logit - max);
    sum += x.p;
  }
  for (auto& x : c) x.p = static_cast<float>(x.p / sum);
}

void Sampler::apply_top_p(std::vector<Candidate>& c, float p) {
  if (p >= 1.0f || c.size() <= 1) return;
  softmax(c);
  double cum = 0.0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c[i].p;
    if (cum >= p) {
      keep = i + 1;
      break;
    }
  }
  c.resize(keep);
}

void Sampler::apply_min_p(std::vector<Candidate>& c, float p) {
  if (p <= 0.0f || c.size() <= 1) return;
  float max = -INFINITY;
  for (const auto& x : c) max = std::max(max, x.logit);
  const float min_logit = max + std::log(p);  // p_i >= p * p_max  <=>  logit_i >= max + log p
  std::vector<Candidate> kept;
  for (const auto& x : c)
    if (x.logit >= min_logit) kept.push_back(x);
  if (!kept.empty()) c.swap(kept);
}

void Sampler::apply_temperature(std::vector<Candidate>& c, float t) {
  for (auto& x : c) x.logit /= t;
}

void Sampler::describe(const float* values, int32_t id, int n_top, SampleLogprobs* out) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n_vocab_; ++i) max = std::max(max, values[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab_; ++i) sum += std::exp(static_cast<double>(values[i]) - max);
  const double lse = max + std::log(sum);
  auto logprob = [&](int32_t t) {
    const double v = static_cast<double>(values[t]) - lse;
    return static_cast<float>(std::max<double>(v, SampleLogprobs::kMinLogprob));
  };
  out->chosen = {id, logprob(id)};
  out->top.clear();
  const int64_t k = std::min<int64_t>(std::max(n_top, 0), n_vocab_);
  if (k == 0) return;
  order_.resize(static_cast<size_t>(n_vocab_));
  for (int64_t i = 0; i < n_vocab_; ++i) order_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  for (int64_t i = 0; i < k; ++i) out->top.push_back({order_[static_cast<size_t>(i)], logprob(order_[static_cast<size_t>(i)])});
}

int32_t Sampler::sample(const float* logits, SampleLogprobs* logprobs, int n_top, TokenConstraint* constraint) {
  if (!constraint && params_.temp <= 0.0f && !penalties_active() && params_.logit_bias.empty()) {
    // Greedy without penalties: the first maximum, without copying the vocabulary (262144
    // candidates for Gemma 3, once per token and stream), eight logits at a time.
    const int32_t id = static_cast<int32_t>(ref::argmax(logits, n_vocab_));
    if (logprobs) describe(logits, id, n_top, logprobs);
    return id;
  }
  if (constraint && params_.temp <= 0.0f && !penalties_active() && params_.logit_bias.empty() && !logprobs) {
    // Greedy under a grammar: the model's own choice is usually acceptable.
    const int32_t id = static_cast<int32_t>(ref::argmax(logits, n_vocab_));
    if (constraint->accepts(id)) return id;
  }
  cand_.resize(static_cast<size_t>(n_vocab_));
  for (int64_t i = 0; i < n_vocab_; ++i) cand_[static_cast<size_t>(i)] = {static_cast<int32_t>(i), logits[i], 0.0f};
  apply_logit_bias(cand_);
  apply_penalties(cand_);
  if (constraint && !constrain(*constraint)) return -1;
  if (logprobs) {
    adjusted_.resize(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) adjusted_[i] = cand_[i].logit;
  }
  const int32_t id = draw();
  if (logprobs) describe(adjusted_.data(), id, n_top, logprobs);
  return id;
}

// Asking a grammar about one token costs a walk over its bytes; masking the vocabulary costs a
// walk over the vocabulary's trie. Most steps need only the top candidate (greedy) or the top-k,
// and the model's favourites are usually acceptable, so those are asked first.
bool Sampler::constrain(TokenConstraint& c) {
  const int64_t need = params_.temp <= 0.0f ? 1 : (params_.top_k > 0 ? params_.top_k : n_vocab_);
  constexpr int64_t kProbe = 64;
  if (need <= kProbe) {
    const int64_t m = std::min<int64_t>(kProbe, n_vocab_);
    order_.resize(static_cast<size_t>(n_vocab_));
    for (int64_t i = 0; i < n_vocab_; ++i) order_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::partial_sort(order_.begin(), order_.begin() + m, order_.end(), [&](int32_t a, int32_t b) {
      return cand_[a].logit > cand_[b].logit || (cand_[a].logit == cand_[b].logit && a < b);
    });
    std::vector<int32_t> ok;
    for (int64_t i = 0; i < m && static_cast<int64_t>(ok.size()) < need; ++i) {
      const int32_t id = order_[static_cast<size_t>(i)];
      if (std::isinf(cand_[id].logit) && cand_[id].logit < 0) break;
      if (c.accepts(id)) ok.push_back(id);
    }
    if (static_cast<int64_t>(ok.size()) >= need) {
      // The top `need` accepted tokens are the top-k of the masked distribution: the rest
      // would be cut by top-k anyway.
      mask_.assign(static_cast<size_t>(n_vocab_), 0);
      for (int32_t id : ok) mask_[static_cast<size_t>(id)] = 1;
      for (auto& x : cand_)
        if (!mask_[static_cast<size_t>(x.id)]) x.logit = -INFINITY;
      return true;
    }
  }
  c.allowed(&mask_);
  bool any = false;
  for (auto& x : cand_) {
    if (!mask_[static_cast<size_t>(x.id)]) x.logit = -INFINITY;
    else any = true;
  }
  return any;
}

// The rest of the chain on cand_ (bias and penalties applied, indexed by id).
int32_t Sampler::draw() {
  if (params_.temp <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < cand_.size(); ++i)
      if (cand_[i].logit > cand_[best].logit) best = i;
    return cand_[best].id;
  }
  apply_top_k(cand_, params_.top_k);
  apply_top_p(cand_, params_.top_p);
  apply_min_p(cand_, params_.min_p);
  apply_temperature(cand_, params_.temp);
  softmax(cand_);
  // Inverse-CDF draw with 53 random bits: reproducible across standard libraries.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  double cum = 0.0;
  for (const auto& x : cand_) {
    cum += x.p;
    if (u < cum) return x.id;
  }
  return cand_.back().id;
}

}  // namespace loom::llm
