// One sequence's generation state: sampler, streaming detokenizer, stop strings, token counter
// and the end-of-generation rule. llm::generate (`loom run`, `loom chat`) and the server's
// scheduler both drive one per sequence, so texts, stop reasons and counts agree between them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/engine/sampler.h"
#include "loom/text/tokenizer.h"

namespace loom::llm {

class Grammar;
class GrammarMatcher;
class TokenTrie;

// Holds back text that might be the beginning of a stop string. Feed text pieces; emit what it
// returns; after a hit, stopped() is true and nothing more is returned.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string feed(std::string_view text);
  std::string flush();  // at the end: releases held text (unless stopped)
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

struct GenerationOptions {
  int64_t max_tokens = -1;          // -1: until end of generation or a full context
  std::vector<std::string> stop;    // generation ends before the first occurrence of any
  bool ignore_eos = false;          // keep going past end-of-generation tokens
  bool render_special = false;      // control tokens render as their text (else as nothing)
  int logprobs = -1;                // >= 0: report each output token's log-probability and
                                    // this many most likely alternatives (Step::logprobs)
  // When set, only tokens whose bytes continue a string of this grammar are sampled; end of
  // generation is allowed once the text is complete, and forced ("stop") when nothing can
  // follow it. Text past a stop string still ends generation as usual.
  std::shared_ptr<const Grammar> grammar;
  // The tokenizer's vocabulary trie (TokenTrie) for the grammar; built for this Generation when
  // null (pass a shared one when generating many times with one tokenizer).
  std::shared_ptr<const TokenTrie> trie;
};

// The rules, in the order next()/push() apply them to a token:
//   max_tokens already reached       -> "length", nothing sampled (max_tokens 0)
//   a grammar that is complete with nothing able to follow -> "stop", nothing sampled
//   end-of-generation token          -> "eos" (unless ignore_eos); the token is not output
//   its text completes a stop string -> "stop"; the text is cut before the stop string
//   max_tokens reached with it       -> "length"
//   the cache is full (cache_full)   -> "context": the token cannot be decoded
// Otherwise the caller decodes the token and asks for the next one. cancel() ends with
// "cancelled". finish() releases what the detokenizer (a partial UTF-8 character) and the stop
// matcher (a possible start of a stop string) hold back, except after "stop" and "cancelled":
// text past a stop string is not output, and a consumer that went away gets nothing more (nor
// a chat history a dangling partial character).
// Not thread-safe; the Tokenizer (and a borrowed Sampler) must outlive it.
class Generation {
 public:
  struct Step {
    std::string text;            // text that became final with this token (often empty)
    int32_t token = kNoToken;    // the token added to the output; kNoToken for none
    bool done = false;           // generation ended; reason says why
    std::string_view reason;     // "eos" | "length" | "stop" | "context" | "cancelled" when done
    std::optional<SampleLogprobs> logprobs;  // with options.logprobs >= 0, for a sampled output token
  };

  // With its own sampler (one per request).
  Generation(const Tokenizer& tokenizer, const SamplerParams& sampling, int64_t n_vocab,
             GenerationOptions options);
  // With a sampler that lives longer: `loom chat` keeps one for the whole conversation, so a
  // seeded conversation continues one random stream across turns.
  Generation(const Tokenizer& tokenizer, Sampler& sampler, GenerationOptions options);
  ~Generation();

  // Records the prompt for the sampler's penalties (before the first next()).
  void accept_prompt(std::span<const int32_t> prompt);
  // Samples the next token from one row of logits and applies the rules. cache_full: the
  // sequence's cache already holds its n_ctx tokens, so no further token can be decoded.
  Step next(const float* logits, bool cache_full);
  // The same for a token chosen elsewhere (recorded in the sampler's history as well).
  Step push(int32_t id, bool cache_full);
  // Ends generation ("cancelled") unless it has ended already.
  void cancel();
  // The held-back text that belongs to the output (see above); "" on later calls.
  std::string finish();

  bool done() const { return !reason_.empty(); }
  std::string_view reason() const { return reason_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // output ids (no eos)
  int64_t n_generated() const { return static_cast<int64_t>(tokens_.size()); }
  Sampler& sampler() { return *sampler_; }
  const GenerationOptions& options() const { return options_; }

 private:
  bool length_reached() const;
  Step end(std::string_view reason, Step step);

  const Tokenizer* tokenizer_;
  std::unique_ptr<Sampler> own_sampler_;
  Sampler* sampler_;
  GenerationOptions options_;
  StreamDecoder detok_;
  StopMatcher stop_;
  std::vector<int32_t> tokens_;
  std::string_view reason_;  // empty while generating; points at a string literal
  std::unique_ptr<GrammarMatcher> matcher_;
};

}  // namespace loom::llm
