// Pre-tokenizer of byte-level BPE vocabularies: the regex cascade llama.cpp applies for each
// `tokenizer.ggml.pre` value, run with PCRE2, plus GPT-2 byte encoding of the resulting words.
// Internal to the tokenizer; PCRE2 stays out of every other header.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm {

// Per-variant flags that llama.cpp ties to the pre-tokenizer name.
struct PreTokenizerTraits {
  std::string canonical;       // the variant's name ("default" for the fallback)
  bool clean_spaces = true;    // clean_up_tokenization_spaces when detokenizing
  bool ignore_merges = false;  // a word that is itself a token skips the merges
  bool add_bos = false;        // default for add_bos_token before metadata overrides it
  bool no_bos_id = false;      // the variant has no default BOS id (chatglm)
};

// Compiled regex cascade. Immutable after create(); split() may run on many threads at once
// (each call allocates its own match data).
class PreTokenizer {
 public:
  // `pre` is tokenizer.ggml.pre. An empty name falls back to llama.cpp's "default" cascade;
  // `*fell_back` tells the caller to warn. A name llama.cpp does not know is kUnimplemented
  // ("unknown pre-tokenizer type 'x'"), as llama.cpp refuses it; so are known names that
  // llama.cpp implements with code Loom does not have (kimi-k2, afmoe, tiny_aya, gemma4, ...).
  static Result<PreTokenizer> create(std::string_view pre, bool* fell_back);
  // Builds a cascade from explicit patterns in llama.cpp's dialect (tests).
  static Result<PreTokenizer> from_patterns(const std::vector<std::string>& patterns);

  struct Regex;  // a compiled PCRE2 pattern (opaque)

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  const PreTokenizerTraits& traits() const { return traits_; }

  // Splits `text` into words, each GPT-2 byte-encoded (valid UTF-8). As in llama.cpp, invalid
  // input bytes become U+FFFD first, and the regexes see every non-ASCII White_Space character
  // as U+000B (so "[\u0800-\u4e00]" does not match U+3000, while \s still does). Errors only
  // if PCRE2 fails (match limits).
  Result<std::vector<std::string>> split(std::string_view text) const;
  // Same cascade, returning the raw (not byte-encoded) words; for tests.
  Result<std::vector<std::string>> split_raw(std::string_view text) const;

 private:
  PreTokenizer() = default;
  PreTokenizerTraits traits_;
  std::vector<std::unique_ptr<Regex>> regexes_;
  std::unique_ptr<Regex> wide_space_;  // non-ASCII White_Space characters
};

// Translates a pattern in llama.cpp's dialect into PCRE2 syntax with the semantics llama.cpp
// gives it: \s and \S mean the Unicode White_Space property (llama.cpp's table), \d is ASCII,
// \p{Lu}/\p{Ll}/\p{Lt}/\p{Lm}/\p{Lo} mean any letter (llama.cpp collapses them to \p{L}).
// Exposed for tests.
std::string translate_llama_regex(std::string_view pattern);

}  // namespace loom::llm
