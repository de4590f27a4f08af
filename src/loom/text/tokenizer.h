// Tokenizer: text <-> token ids, built from GGUF metadata and identical to llama.cpp's for the
// two vocabulary kinds Loom supports: byte-level BPE (tokenizer.ggml.model "gpt2", with the
// pre-tokenizer regexes llama.cpp uses per tokenizer.ggml.pre) and SentencePiece-style BPE
// ("llama": score-ordered merges, U+2581 for spaces, <0xXX> byte fallback; Gemma 3 uses it).
//
// Threading: a Tokenizer is immutable once built; every const method may run on many threads at
// once. StreamDecoder holds per-stream state and belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm {

class GgufFile;

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// Token attributes (bit flags; the values of llama.cpp's llama_token_attr).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

enum class VocabKind { kSpm, kBpe };

// What a GGUF file says about its tokenizer, as plain data (tokenizer.ggml.* keys plus the two
// general.* keys llama.cpp consults). Absent optional keys stay nullopt/empty.
struct TokenizerMetadata {
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;          // empty, or one per token
  std::vector<int32_t> token_types;   // empty, or one per token (llama_token_type values)
  std::vector<std::string> merges;    // "left right", rank = index
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, unk_id, sep_id, pad_id, mask_id;
  std::optional<int64_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string general_name;          // general.name (llama.cpp keys a phi-3 quirk on it)
  std::string general_architecture;  // general.architecture
};

// Reads the tokenizer keys; wrong value types, missing token list, or per-token arrays whose
// length differs from the token list are errors naming the key.
Result<TokenizerMetadata> read_tokenizer_metadata(const GgufFile& file);

struct DecodeOptions {
  // Drop a leading BOS / trailing EOS that the model adds by itself (add_bos / add_eos).
  bool remove_special = false;
  // Control and unknown tokens render as their text; otherwise they render as nothing.
  bool render_special = true;
  // Apply llama.cpp's clean_up_tokenization_spaces (" ." -> "." ...) when the vocabulary asks
  // for it. Off by default because it loses bytes.
  bool clean_spaces = false;
};

class Tokenizer {
 public:
  // Everything llama.cpp's llama_vocab::load does for SPM and BPE vocabularies: defaults per
  // kind, special ids (out-of-range ids fall back to defaults with a warning), EOG set detection
  // by token text, attribute fixes. Errors: unknown tokenizer model, missing/mismatched arrays,
  // duplicate token strings, bad merges/pre-tokenizer. Everything is copied: the GgufFile may be
  // closed afterwards. Loading Gemma 3's 262k-token vocabulary takes about half a second.
  static Result<Tokenizer> from_gguf(const GgufFile& file);
  static Result<Tokenizer> create(TokenizerMetadata meta);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // llama_tokenize(text, add_special, parse_special): add_special adds BOS/EOS as the model's
  // add_bos/add_eos say; parse_special matches control tokens written in the text (user-defined
  // tokens are always matched, as in llama.cpp). Text is raw bytes; invalid UTF-8 is accepted.
  Result<std::vector<TokenId>> encode(std::string_view text, bool add_special = true,
                                      bool parse_special = true) const;

  // The bytes of one token (llama_token_to_piece with lstrip 0). With render_special false,
  // control and unknown tokens give "". Out-of-range ids give "". The view lives as long as the
  // Tokenizer.
  std::string_view token_to_piece(TokenId id, bool render_special = true) const;

  // llama_detokenize(remove_special, unparse_special) without the clean-up pass unless asked.
  // Errors on ids outside [0, vocab_size).
  Result<std::string> decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  VocabKind kind() const;
  const std::string& model_name() const;  // "gpt2" | "llama"
  const std::string& pre_name() const;    // pre-tokenizer variant in use ("default" on fallback)
  int32_t vocab_size() const;
  const std::string& token_text(TokenId id) const;  // raw vocabulary string; "" if out of range
  uint32_t token_attr(TokenId id) const;            // TokenAttr bits; 0 if out of range
  std::optional<TokenId> find_token(std::string_view text) const;

  TokenId bos_id() const;  // kNoToken when the model has none
  TokenId eos_id() const;
  TokenId eot_id() const;
  TokenId unk_id() const;
  TokenId pad_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  // End of generation: EOS, EOT, EOM and the tokens llama.cpp recognizes by text.
  bool is_eog(TokenId id) const;
  const std::vector<TokenId>& eog_ids() const;  // sorted
  bool is_control(TokenId id) const;            // control or unknown

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<const Impl> impl);
  std::unique_ptr<const Impl> impl_;
  friend class StreamDecoder;
};

// Incremental detokenizer for generated text: feed ids one at a time; each push returns only
// complete UTF-8 characters and holds back a trailing partial character (e.g. an emoji whose
// bytes arrive as separate <0xXX> tokens) until it completes. Bytes that can never form a valid
// character are passed through as they are. finish() returns whatever is still held.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = true);

  std::string push(TokenId id);
  std::string finish();
  // Bytes held back so far (a proper prefix of a UTF-8 character).
  size_t pending() const { return held_.size(); }
  void reset() { held_.clear(); }

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string held_;
};

}  // namespace loom::llm
