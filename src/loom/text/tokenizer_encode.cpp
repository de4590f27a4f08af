// Encoding: special-token partitioning, then SentencePiece-style merges (by score, with byte
// fallback) or byte-level BPE merges (by rank) on each text fragment, as llama.cpp does them.
#include <algorithm>
#include <queue>

#include "loom/text/tokenizer.h"
#include "loom/text/tokenizer_impl.h"
#include "loom/text/unicode.h"

namespace loom::llm {
namespace {

// ASCII whitespace as the C locale's isspace sees it (used for lstrip/rstrip).
bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// A run of bytes in the text being merged; alive symbols form a doubly linked list.
struct Symbol {
  int prev, next;
  size_t offset, length;  // length 0: merged into its left neighbour
};

}  // namespace

std::vector<Tokenizer::Impl::Fragment> Tokenizer::Impl::partition(std::string_view raw, bool parse_special) const {
  std::vector<Fragment> frags;
  if (raw.empty()) return frags;
  frags.push_back({kNoToken, 0, raw.size()});
  // Fragments are substrings of `raw`, so tokens absent from it can be skipped up front; the
  // rest are still applied one at a time, longest first, as llama.cpp does.
  const std::vector<TokenId> present = specials_in(raw);
  if (present.empty()) return frags;
  std::vector<Fragment> next;
  for (TokenId id : special_tokens) {
    if (!std::binary_search(present.begin(), present.end(), id)) continue;
    const uint32_t a = attr[id];
    // Without parse_special only user-defined tokens are split out.
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& s = text[id];
    if (s.empty()) continue;
    bool any = false;
    for (const auto& f : frags) {
      if (f.token == kNoToken && raw.substr(f.offset, f.length).find(s) != std::string_view::npos) {
        any = true;
        break;
      }
    }
    if (!any) continue;
    next.clear();
    for (const auto& f : frags) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t off = f.offset, len = f.length;
      while (true) {
        const size_t hit = raw.substr(0, off + len).find(s, off);
        if (hit == std::string_view::npos) {
          if (len > 0) next.push_back({kNoToken, off, len});
          break;
        }
        size_t left_len = hit - off;
        if (a & kAttrLstrip)
          while (left_len > 0 && is_c_space(raw[off + left_len - 1])) --left_len;
        if (left_len > 0) next.push_back({kNoToken, off, left_len});
        next.push_back({id, 0, 0});
        size_t r_off = hit + s.size();
        size_t r_len = off + len - r_off;
        if (a & kAttrRstrip)
          while (r_len > 0 && is_c_space(raw[r_off])) ++r_off, --r_len;
        off = r_off;
        len = r_len;
      }
    }
    frags.swap(next);
  }
  return frags;
}

// ---- SentencePiece-style BPE -----------------------------------------------------------------

Status Tokenizer::Impl::encode_spm(std::string_view s, std::vector<TokenId>& out) const {
  std::vector<Symbol> sym;
  for (size_t off = 0; off < s.size();) {
    const size_t len = std::min(unicode::utf8_len_from_lead(static_cast<uint8_t>(s[off])), s.size() - off);
    const int i = static_cast<int>(sym.size());
    sym.push_back({i - 1, off + len == s.size() ? -1 : i + 1, off, len});
    off += len;
  }
  if (sym.empty()) return Status();

  struct Bigram {
    float score;
    int left, right;
    size_t size;
  };
  // Highest score first; ties go to the leftmost pair.
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const size_t size = sym[l].length + sym[r].length;
    const TokenId id = lookup(s.substr(sym[l].offset, size));
    if (id == kNoToken) return;
    queue.push({score[id], l, r, size});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    // Stale entries: a side already merged away, or grown since the pair was queued.
    if (l.length == 0 || r.length == 0 || l.length + r.length != b.size) continue;
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i != -1; i = sym[i].next) {
    const std::string_view piece = s.substr(sym[i].offset, sym[i].length);
    const TokenId id = lookup(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const TokenId b = byte_token[static_cast<uint8_t>(c)];
      if (b == kNoToken)
        return data_loss("vocabulary has no byte token for 0x{:02X} (needed for byte fallback)", static_cast<uint8_t>(c));
      out.push_back(b);
    }
  }
  return Status();
}

// ---- Byte-level BPE --------------------------------------------------------------------------

Status Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<TokenId>& out) const {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> words, pretok->split(text));

  struct Bigram {
    int32_t rank;
    int left, right;
    size_t size;
  };
  // Lowest rank first; ties go to the leftmost pair.
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::vector<Symbol> sym;
  for (const std::string& w : words) {
    sym.clear();
    if (ignore_merges && lookup(w) != kNoToken) {
      out.push_back(lookup(w));
      continue;
    }
    for (size_t off = 0; off < w.size();) {
      const size_t len = std::min(unicode::utf8_len_from_lead(static_cast<uint8_t>(w[off])), w.size() - off);
      const int i = static_cast<int>(sym.size());
      sym.push_back({i - 1, off + len == w.size() ? -1 : i + 1, off, len});
      off += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    const std::string_view ws = w;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const int32_t rank = merge_rank(ws.substr(sym[l].offset, sym[l].length), ws.substr(sym[r].offset, sym[r].length));
      if (rank < 0) return;
      queue.push({rank, l, r, sym[l].length + sym[r].length});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.length == 0 || r.length == 0 || l.length + r.length != b.size) continue;
      l.length += r.length;
      r.length = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (const Symbol& x : sym) {
      if (x.length == 0) continue;
      const std::string_view piece = ws.substr(x.offset, x.length);
      const TokenId id = lookup(piece);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
      // No token for the merged text: llama.cpp looks up each byte of it as a one-byte token
      // (only ASCII printable bytes can hit, since the text is byte-encoded) and drops misses.
      for (char c : piece) {
        const TokenId b = lookup(std::string_view(&c, 1));
        if (b != kNoToken) out.push_back(b);
      }
    }
  }
  return Status();
}

// ---- Public entry ----------------------------------------------------------------------------

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<TokenId> out;
  const std::vector<Impl::Fragment> frags = t.partition(text, parse_special);
  if (add_special && t.add_bos) {
    if (t.bos == kNoToken) return failed_precondition("the model asks for a BOS token but has none");
    out.push_back(t.bos);
  }
  if (t.kind == VocabKind::kSpm) {
    bool prev_special = true;  // a leading text fragment gets the space prefix too
    std::string buf;
    for (const auto& f : frags) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (t.add_space_prefix && prev_special) buf = "\xe2\x96\x81";
      for (char c : text.substr(f.offset, f.length)) {
        if (c == ' ') buf += "\xe2\x96\x81";
        else buf.push_back(c);
      }
      LOOM_RETURN_IF_ERROR(t.encode_spm(buf, out));
      prev_special = false;
    }
  } else {
    for (const auto& f : frags) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        continue;
      }
      LOOM_RETURN_IF_ERROR(t.encode_bpe(text.substr(f.offset, f.length), out));
    }
  }
  if (add_special && t.add_eos) {
    if (t.eos == kNoToken) return failed_precondition("the model asks for an EOS token but has none");
    out.push_back(t.eos);
  }
  return out;
}

}  // namespace loom::llm
