// Token sampling: the chain llama.cpp applies by default (logit bias, repetition/frequency/
// presence penalties, top-k, top-p, min-p, temperature, then a seeded draw), or greedy at
// temperature 0. It can also report the log-probabilities of the distribution it drew from.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm {

struct SamplerParams {
  float temp = 0.8f;               // <= 0: greedy (argmax after penalties)
  int top_k = 40;                  // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off
  int repeat_last_n = 64;          // window of previous tokens the penalties look at
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // Added to the logits of these token ids before anything else (ids outside the vocabulary
  // are ignored; callers validate them).
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0xFFFFFFFFull;   // kRandomSeed draws one from the OS
  static constexpr uint64_t kRandomSeed = 0xFFFFFFFFull;

  Status validate() const;
};

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;  // natural log; at least kMinLogprob
};

// The distribution a token was drawn from, as log-probabilities: the log-softmax over the whole
// vocabulary of the logits after logit bias and penalties, before temperature and the top-k /
// top-p / min-p cuts (so a greedy request reports the same values as a sampled one, and no
// token's value is -infinity).
struct SampleLogprobs {
  static constexpr float kMinLogprob = -9999.0f;
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the n_top most likely tokens, most likely first
};

// A rule on which tokens may come next (a grammar: see grammar.h). accepts() answers for one
// token; allowed() fills a mask of n_vocab bytes (1: may come next) for all of them at once.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool accepts(int32_t token) = 0;
  virtual void allowed(std::vector<uint8_t>* mask) = 0;
};

// Not thread-safe. Deterministic for a given seed, parameters and token history.
class Sampler {
 public:
  Sampler(const SamplerParams& params, int64_t n_vocab);

  // Picks the next token from one row of n_vocab logits (not modified). With `logprobs`, also
  // fills it (see SampleLogprobs) with the chosen token and the n_top most likely ones.
  // With a constraint, only tokens it accepts can be drawn: the most likely candidates (after
  // bias and penalties) are asked first, and when they do not give the top-k (greedy: one)
  // accepted tokens the whole vocabulary is masked; logprobs then describe the masked
  // distribution. Returns -1 when the constraint accepts no token.
  int32_t sample(const float* logits, SampleLogprobs* logprobs = nullptr, int n_top = 0,
                 TokenConstraint* constraint = nullptr);
  // Records a token of the context (prompt or generated) for the penalties.
  void accept(int32_t token);
  void reset();
  uint64_t seed() const { return seed_; }
  const SamplerParams& params() const { return params_; }

  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  // The individual stages, exposed for tests; each keeps at least one candidate.
  static void apply_top_k(std::vector<Candidate>& c, int k);        // sorts by logit, descending
  static void apply_top_p(std::vector<Candidate>& c, float p);      // needs sorted input
  static void apply_min_p(std::vector<Candidate>& c, float p);
  static void apply_temperature(std::vector<Candidate>& c, float t);
  static void softmax(std::vector<Candidate>& c);                   // fills p
  void apply_penalties(std::vector<Candidate>& c) const;
  void apply_logit_bias(std::vector<Candidate>& c) const;  // c indexed by token id

 private:
  bool penalties_active() const;
  int32_t draw();  // temperature, cuts and the seeded draw on cand_
  bool constrain(TokenConstraint& c);  // sets disallowed candidates of cand_ to -inf
  // Log-softmax of n_vocab values at `id` and the n_top largest.
  void describe(const float* values, int32_t id, int n_top, SampleLogprobs* out);

  SamplerParams params_;
  int64_t n_vocab_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::deque<int32_t> history_;
  std::vector<Candidate> cand_;
  std::vector<float> adjusted_;   // logits after bias and penalties (for logprobs)
  std::vector<int32_t> order_;    // scratch for the top-n search
  std::vector<uint8_t> mask_;     // scratch for constrain()
};

}  // namespace loom::llm
