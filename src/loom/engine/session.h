// Generation loop shared by `loom run`, `loom chat` and `loom bench`: prompt (with prefix reuse),
// then sample -> detokenize -> stop checks -> decode, streaming text through a callback.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/engine/engine.h"
#include "loom/engine/sampler.h"

namespace loom::llm {

struct GenerateOptions {
  int64_t max_tokens = -1;          // -1: until end of generation or a full context
  std::vector<std::string> stop;    // generation ends before the first occurrence of any
  bool ignore_eos = false;          // keep going past end-of-generation tokens
  // Called once the prompt is in the cache, with the engine holding its last token's logits.
  std::function<void(const Engine&)> after_prompt;
};

// How generated ids become text; supplied by the tokenizer. piece_fn returns the bytes of one
// token (possibly part of a UTF-8 character); flush_fn returns what is held back at the end.
struct TextHooks {
  std::function<std::string(int32_t)> piece;
  std::function<std::string()> flush;
  std::function<bool(int32_t)> is_eog;
};

struct GenerateResult {
  std::vector<int32_t> tokens;   // generated ids (an end-of-generation token is not included)
  std::string text;              // the emitted text (stop string and what follows cut off)
  std::string stop_reason;       // "eos", "length", "stop", "context", "cancelled"
  int64_t n_prompt = 0;          // prompt tokens
  int64_t n_reused = 0;          // of which came from the cache
  double prompt_seconds = 0.0;   // time to read the prompt (the part not reused)
  double gen_seconds = 0.0;      // time from the first sampled token to the end
  double prompt_tps() const;
  double gen_tps() const;
};

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

// Runs the prompt through the engine (reusing its cached prefix), then generates. on_text gets
// each piece of text as it becomes final; returning false from it cancels. `cancel`, if given,
// is polled between tokens (for SIGINT).
Result<GenerateResult> generate(Engine& engine, Sampler& sampler, std::span<const int32_t> prompt,
                                const GenerateOptions& options, const TextHooks& hooks,
                                const std::function<bool(std::string_view)>& on_text,
                                const std::atomic<bool>* cancel = nullptr);

}  // namespace loom::llm
