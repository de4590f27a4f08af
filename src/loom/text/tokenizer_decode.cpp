// Decoding: token pieces, llama_detokenize-compatible decode() with its optional clean-up pass,
// and the streaming detokenizer that never emits half a UTF-8 character.
#include "loom/text/tokenizer.h"
#include "loom/text/tokenizer_impl.h"
#include "loom/text/unicode.h"

namespace loom::llm {

std::string_view Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  const Impl& t = *impl_;
  if (!t.in_range(id)) return {};
  if (!render_special && (t.attr[id] & (kAttrUnknown | kAttrControl))) return {};
  return t.piece[id];
}

namespace {

// llama.cpp's clean_up_tokenization_spaces, three in-place passes over the bytes. The index
// arithmetic (including pass 2 blanking the byte after " ' ") is kept exactly, since the output
// must match byte for byte.
void clean_up_spaces(std::string& s) {
  int total = static_cast<int>(s.size());
  // 1: " ?", " !", " .", " ," lose the space.
  {
    const int n = total;
    total = n ? 1 : 0;
    for (int i = 1; i < n; ++i) {
      const char x = s[i];
      if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
      s[total++] = x;
    }
  }
  // 2: " ' " becomes "'".
  {
    const int n = total;
    total = n ? 1 : 0;
    for (int i = 1; i < n; ++i) {
      const char x = s[i];
      if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
        --total;
        s[++i] = '\0';
      }
      s[total++] = x;
    }
  }
  // 3: " 's", " 'm", " 're", " 've" lose the space.
  {
    const int n = total;
    total = n ? 1 : 0;
    for (int i = 1; i < n; ++i) {
      const char x = s[i];
      if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
        const char x1 = s[i + 1];
        if (x1 == 's' || x1 == 'm') {
          --total;
        } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
          const char x2 = s[i + 2];
          if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
        }
      }
      s[total++] = x;
    }
  }
  s.resize(static_cast<size_t>(total));
}

}  // namespace

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  const Impl& t = *impl_;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!t.in_range(ids[i]))
      return out_of_range("token id {} at position {} is outside the vocabulary [0, {})", ids[i], i, t.text.size());
  }
  bool remove_space = t.add_space_prefix;
  if (options.remove_special && t.add_bos && !ids.empty() && ids.front() == t.bos) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (options.remove_special && t.add_eos && !ids.empty() && ids.back() == t.eos) ids = ids.first(ids.size() - 1);

  std::string out;
  for (TokenId id : ids) {
    std::string_view p = token_to_piece(id, options.render_special);
    if (remove_space && !p.empty() && p.front() == ' ') p.remove_prefix(1);
    remove_space = false;
    out.append(p);
  }
  if (options.clean_spaces && t.clean_spaces) clean_up_spaces(out);
  return out;
}

// ---- StreamDecoder ---------------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(&tokenizer), render_special_(render_special) {}

std::string StreamDecoder::push(TokenId id) {
  held_.append(tokenizer_->token_to_piece(id, render_special_));
  const size_t n = unicode::utf8_complete_prefix(held_);
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace loom::llm
