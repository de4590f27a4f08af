// Internal state of a Tokenizer, shared by the loader (tokenizer.cpp), the encoder
// (tokenizer_encode.cpp) and the decoder (tokenizer_decode.cpp). Not part of the public API.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/text/tokenizer.h"
#include "loom/text/tokenizer_pretok.h"

namespace loom::llm {

struct Tokenizer::Impl {
  VocabKind kind = VocabKind::kSpm;
  std::string model;     // tokenizer.ggml.model
  std::string pre_name;  // canonical pre-tokenizer variant ("" for SPM)

  std::vector<std::string> text;  // id -> vocabulary string
  std::vector<float> score;       // id -> merge score (SPM)
  std::vector<uint32_t> attr;     // id -> TokenAttr bits
  // A std::unordered_map<std::string, ...> filled in id order, like llama.cpp's: the EOT/FIM
  // detection walks it and the first match wins, so the walk order must be the same.
  std::unordered_map<std::string, TokenId> token_to_id;
  // BPE merge ranks keyed by left + '\xff' + right (0xFF never occurs in UTF-8 text).
  std::unordered_map<std::string, int32_t> bpe_ranks;
  std::vector<std::string> piece;             // id -> bytes with special tokens rendered
  std::vector<TokenId> special_tokens;        // control/user-defined/unknown, longest first
  // Trie over the special tokens' texts, so partition() only walks the tokens that occur in the
  // text (Gemma has thousands). Node 0 is the root; root_child indexes its children by byte.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> next;
    TokenId token = kNoToken;
  };
  std::vector<TrieNode> trie;
  std::array<int32_t, 256> root_child{};
  void build_special_trie();
  std::vector<TokenId> specials_in(std::string_view raw) const;  // sorted ids
  std::array<TokenId, 256> byte_token{};      // SPM byte fallback, kNoToken if absent
  std::optional<PreTokenizer> pretok;         // BPE only

  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken;
  TokenId sep = kNoToken, pad = kNoToken, mask = kNoToken;
  TokenId fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  TokenId fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool clean_spaces = false, ignore_merges = false;
  std::vector<TokenId> eog;  // sorted

  bool in_range(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < text.size(); }
  TokenId lookup(std::string_view s) const;
  int32_t merge_rank(std::string_view left, std::string_view right) const;

  // Splits `raw` into text and special-token fragments (llama.cpp's tokenizer_st_partition).
  struct Fragment {
    TokenId token;  // kNoToken for text
    size_t offset, length;
  };
  std::vector<Fragment> partition(std::string_view raw, bool parse_special) const;
  Status encode_spm(std::string_view text, std::vector<TokenId>& out) const;
  Status encode_bpe(std::string_view text, std::vector<TokenId>& out) const;
};

// llama.cpp's llama_decode_text: GPT-2 byte-level token text back to bytes.
std::string decode_byte_level(std::string_view token_text);

}  // namespace loom::llm
