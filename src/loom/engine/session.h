// The generation loop of `loom run` and `loom chat`: prompt (with prefix reuse), then one
// Generation (generation.h) deciding each token's text and the end, decoding between tokens and
// streaming text through a callback.
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
#include "loom/engine/generation.h"
#include "loom/engine/sampler.h"
#include "loom/text/tokenizer.h"

namespace loom::llm {

struct GenerateOptions : GenerationOptions {
  // Called once the prompt is in the cache, with the engine holding its last token's logits.
  std::function<void(const Engine&)> after_prompt;
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

// Runs the prompt through the engine (reusing its cached prefix), then generates with `sampler`
// (which keeps its history and random state afterwards). on_text gets each piece of text as it
// becomes final; returning false from it cancels, and it is not called again. `cancel`, if
// given, is polled between tokens (for SIGINT).
Result<GenerateResult> generate(Engine& engine, const Tokenizer& tokenizer, Sampler& sampler,
                                std::span<const int32_t> prompt, const GenerateOptions& options,
                                const std::function<bool(std::string_view)>& on_text,
                                const std::atomic<bool>* cancel = nullptr);

}  // namespace loom::llm
