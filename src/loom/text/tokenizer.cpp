// Tokenizer construction: GGUF metadata -> vocabulary, special ids, end-of-generation set and
// token attributes, following what llama.cpp's llama_vocab::load does for SPM and BPE vocabs.
#include "loom/text/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <span>

#include "loom/base/log.h"
#include "loom/gguf/gguf.h"
#include "loom/text/tokenizer_impl.h"
#include "loom/text/unicode.h"

namespace loom::llm {
namespace {

// llama_token_type values stored in tokenizer.ggml.token_type.
uint32_t attr_from_type(int64_t type) {
  switch (type) {
    case 2: return kAttrUnknown;      // UNKNOWN
    case 5: return kAttrUnused;       // UNUSED
    case 1: return kAttrNormal;       // NORMAL
    case 3: return kAttrControl;      // CONTROL
    case 4: return kAttrUserDefined;  // USER_DEFINED
    case 6: return kAttrByte;         // BYTE
    default: return kAttrUndefined;   // UNDEFINED (0) and anything else
  }
}

// Token texts that llama.cpp recognizes as special roles (its detection is by text).
bool text_in(std::string_view t, std::span<const std::string_view> list) {
  return std::find(list.begin(), list.end(), t) != list.end();
}

constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
    "<end_of_utterance>"};
constexpr std::string_view kFimPreTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
    "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                                  "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                                  "<REPO>", "<reponame>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "[e~["};

// ---- Metadata --------------------------------------------------------------------------------

Result<std::optional<int64_t>> read_id(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::optional<int64_t>();
  if (!v->is_integer()) return invalid_argument("metadata '{}': expected an integer token id, found {}", key,
                                                gguf_type_name(v->type));
  auto u = v->as_u64();
  if (!u.ok()) return invalid_argument("metadata '{}': token id must not be negative", key);
  const uint64_t cap = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return std::optional<int64_t>(static_cast<int64_t>(std::min(*u, cap)));
}

Result<std::optional<bool>> read_flag(const GgufFile& f, std::string_view key) {
  if (!f.has(key)) return std::optional<bool>();
  LOOM_ASSIGN_OR_RETURN(bool b, f.get_bool(key));
  return std::optional<bool>(b);
}

Result<std::vector<std::string>> read_strings(const GgufArray& arr, std::string_view key) {
  auto sv = arr.strings();
  if (!sv.ok()) return std::move(sv).status().with_context(fmt::format("metadata '{}'", key));
  return std::vector<std::string>(sv->begin(), sv->end());
}

// Per-token arrays may be longer than the token list (llama.cpp ignores the tail) but not shorter.
Status check_per_token(size_t n, size_t n_tokens, std::string_view key) {
  if (n < n_tokens)
    return data_loss("metadata '{}' has {} entries but the vocabulary has {} tokens", key, n, n_tokens);
  return Status();
}

}  // namespace

Result<TokenizerMetadata> read_tokenizer_metadata(const GgufFile& f) {
  TokenizerMetadata m;
  LOOM_ASSIGN_OR_RETURN(std::string_view model, f.get_string("tokenizer.ggml.model"));
  m.model = std::string(model);
  if (f.has("tokenizer.ggml.pre")) {
    LOOM_ASSIGN_OR_RETURN(std::string_view pre, f.get_string("tokenizer.ggml.pre"));
    m.pre = std::string(pre);
  }
  if (auto* v = f.find("general.name"); v && v->as_string().ok()) m.general_name = std::string(*v->as_string());
  m.general_architecture = std::string(f.architecture());

  LOOM_ASSIGN_OR_RETURN(const GgufArray* tokens, f.get_array("tokenizer.ggml.tokens"));
  LOOM_ASSIGN_OR_RETURN(m.tokens, read_strings(*tokens, "tokenizer.ggml.tokens"));
  const size_t n = m.tokens.size();

  if (f.has("tokenizer.ggml.scores")) {
    LOOM_ASSIGN_OR_RETURN(const GgufArray* a, f.get_array("tokenizer.ggml.scores"));
    if (a->elem_type != GgufType::F32 && a->elem_type != GgufType::I32)
      return invalid_argument("metadata 'tokenizer.ggml.scores': expected f32 or i32 elements, found {}",
                              gguf_type_name(a->elem_type));
    LOOM_RETURN_IF_ERROR(check_per_token(a->size(), n, "tokenizer.ggml.scores"));
    if (a->elem_type == GgufType::F32 && a->raw) {
      m.scores.resize(n);
      std::memcpy(m.scores.data(), a->raw, n * sizeof(float));
    } else {
      LOOM_ASSIGN_OR_RETURN(m.scores, a->floats());
      m.scores.resize(n);
    }
  }
  if (f.has("tokenizer.ggml.token_type")) {
    LOOM_ASSIGN_OR_RETURN(const GgufArray* a, f.get_array("tokenizer.ggml.token_type"));
    if (a->elem_type != GgufType::I32)
      return invalid_argument("metadata 'tokenizer.ggml.token_type': expected i32 elements, found {}",
                              gguf_type_name(a->elem_type));
    LOOM_RETURN_IF_ERROR(check_per_token(a->size(), n, "tokenizer.ggml.token_type"));
    if (a->raw) {
      m.token_types.resize(n);
      std::memcpy(m.token_types.data(), a->raw, n * sizeof(int32_t));
    } else {
      LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> types, a->ints());
      m.token_types.assign(types.begin(), types.begin() + static_cast<std::ptrdiff_t>(n));
    }
  }
  if (f.has("tokenizer.ggml.merges")) {
    LOOM_ASSIGN_OR_RETURN(const GgufArray* a, f.get_array("tokenizer.ggml.merges"));
    LOOM_ASSIGN_OR_RETURN(m.merges, read_strings(*a, "tokenizer.ggml.merges"));
  }

  struct IdKey {
    std::string_view key;
    std::optional<int64_t> TokenizerMetadata::*field;
  };
  // Deprecated prefix/suffix/middle keys come last so that, as in llama.cpp, they override.
  const IdKey ids[] = {
      {"tokenizer.ggml.bos_token_id", &TokenizerMetadata::bos_id},
      {"tokenizer.ggml.eos_token_id", &TokenizerMetadata::eos_id},
      {"tokenizer.ggml.eot_token_id", &TokenizerMetadata::eot_id},
      {"tokenizer.ggml.eom_token_id", &TokenizerMetadata::eom_id},
      {"tokenizer.ggml.unknown_token_id", &TokenizerMetadata::unk_id},
      {"tokenizer.ggml.seperator_token_id", &TokenizerMetadata::sep_id},
      {"tokenizer.ggml.padding_token_id", &TokenizerMetadata::pad_id},
      {"tokenizer.ggml.mask_token_id", &TokenizerMetadata::mask_id},
      {"tokenizer.ggml.fim_pre_token_id", &TokenizerMetadata::fim_pre_id},
      {"tokenizer.ggml.fim_suf_token_id", &TokenizerMetadata::fim_suf_id},
      {"tokenizer.ggml.fim_mid_token_id", &TokenizerMetadata::fim_mid_id},
      {"tokenizer.ggml.fim_pad_token_id", &TokenizerMetadata::fim_pad_id},
      {"tokenizer.ggml.fim_rep_token_id", &TokenizerMetadata::fim_rep_id},
      {"tokenizer.ggml.fim_sep_token_id", &TokenizerMetadata::fim_sep_id},
  };
  for (const auto& k : ids) {
    LOOM_ASSIGN_OR_RETURN(m.*(k.field), read_id(f, k.key));
  }
  const IdKey deprecated[] = {
      {"tokenizer.ggml.prefix_token_id", &TokenizerMetadata::fim_pre_id},
      {"tokenizer.ggml.suffix_token_id", &TokenizerMetadata::fim_suf_id},
      {"tokenizer.ggml.middle_token_id", &TokenizerMetadata::fim_mid_id},
  };
  for (const auto& k : deprecated) {
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> id, read_id(f, k.key));
    // Only an in-range deprecated id overrides (llama.cpp keeps the current one otherwise).
    if (id && *id < static_cast<int64_t>(n)) m.*(k.field) = id;
  }
  LOOM_ASSIGN_OR_RETURN(m.add_bos, read_flag(f, "tokenizer.ggml.add_bos_token"));
  LOOM_ASSIGN_OR_RETURN(m.add_eos, read_flag(f, "tokenizer.ggml.add_eos_token"));
  LOOM_ASSIGN_OR_RETURN(m.add_space_prefix, read_flag(f, "tokenizer.ggml.add_space_prefix"));
  return m;
}

// ---- Construction ----------------------------------------------------------------------------

namespace {

// Bytes of an SPM/BPE byte token "<0xXX>": hex digits at [3, 5) read the way strtol would.
uint8_t byte_of_token(std::string_view text) {
  unsigned v = 0;
  for (size_t i = 3; i < 5 && i < text.size(); ++i) {
    const char c = text[i];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) break;
    v = v * 16 + static_cast<unsigned>(d);
  }
  return static_cast<uint8_t>(v);
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

}  // namespace

std::string decode_byte_level(std::string_view token_text) {
  std::string out;
  const std::vector<uint32_t> cpts = unicode::decode_utf8_lenient(token_text);
  std::string ch;
  for (uint32_t c : cpts) {
    ch.clear();
    unicode::append_utf8(ch, c);
    const int b = unicode::gpt2_utf8_to_byte(ch);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      // llama.cpp's marker for characters outside the byte map (it appends the whole token).
      out += "[UNK_BYTE_0x";
      for (unsigned char x : ch) out += fmt::format("{:02x}", x);
      out += token_text;
      out += "]";
    }
  }
  return out;
}

Tokenizer::Tokenizer(std::unique_ptr<const Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  auto meta = read_tokenizer_metadata(file);
  if (!meta.ok()) return std::move(meta).status().with_context(fmt::format("reading tokenizer of {}", file.path()));
  auto tok = create(std::move(meta).value());
  if (!tok.ok()) return std::move(tok).status().with_context(fmt::format("building tokenizer of {}", file.path()));
  return tok;
}

Result<Tokenizer> Tokenizer::create(TokenizerMetadata m) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  t.model = m.model;
  const size_t n = m.tokens.size();
  if (n == 0) return data_loss("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return data_loss("vocabulary of {} tokens is too large", n);
  if (!m.scores.empty()) LOOM_RETURN_IF_ERROR(check_per_token(m.scores.size(), n, "tokenizer.ggml.scores"));
  if (!m.token_types.empty())
    LOOM_RETURN_IF_ERROR(check_per_token(m.token_types.size(), n, "tokenizer.ggml.token_type"));

  // Defaults per vocabulary kind, as llama.cpp sets them before reading metadata.
  TokenId def_bos = kNoToken, def_eos = kNoToken, def_unk = kNoToken;
  bool no_bos_id = false;
  if (m.model == "llama") {
    t.kind = VocabKind::kSpm;
    def_bos = 1;
    def_eos = 2;
    def_unk = 0;
    t.add_space_prefix = true;
    t.add_bos = true;
  } else if (m.model == "gpt2") {
    t.kind = VocabKind::kBpe;
    def_bos = 11;
    def_eos = 11;
    if (m.merges.empty() && m.pre != "kimi-k2") return not_found("tokenizer.ggml.merges is missing (needed by a gpt2 vocabulary)");
    bool fell_back = false;
    auto pt = PreTokenizer::create(m.pre, &fell_back);
    if (!pt.ok()) return std::move(pt).status();
    if (fell_back) log_warn("tokenizer: missing pre-tokenizer type, using 'default' (tokenization quality may suffer)");
    t.pre_name = pt->traits().canonical;
    t.clean_spaces = pt->traits().clean_spaces;
    t.ignore_merges = pt->traits().ignore_merges;
    t.add_bos = pt->traits().add_bos;
    no_bos_id = pt->traits().no_bos_id;
    t.pretok.emplace(std::move(pt).value());
    for (size_t i = 0; i < m.merges.size(); ++i) {
      const std::string& w = m.merges[i];
      const size_t sp = w.find(' ', 1);
      std::string key = sp == std::string::npos ? std::string("\xff") : w.substr(0, sp) + '\xff' + w.substr(sp + 1);
      t.bpe_ranks.try_emplace(std::move(key), static_cast<int32_t>(i));
    }
  } else {
    return unimplemented("tokenizer model '{}' is not supported (Loom handles 'gpt2' and 'llama')", m.model);
  }
  if (no_bos_id) def_bos = kNoToken;
  if (m.add_space_prefix) t.add_space_prefix = *m.add_space_prefix;

  // Vocabulary.
  t.text.resize(n);
  t.score.assign(n, 0.0f);
  t.attr.assign(n, kAttrNormal);
  for (size_t i = 0; i < n; ++i) {
    std::string w = std::move(m.tokens[i]);
    if (w.empty()) w = fmt::format("[EMPTY_{}]", i);
    t.token_to_id[w] = static_cast<TokenId>(i);
    t.text[i] = std::move(w);
    if (!m.scores.empty()) t.score[i] = m.scores[i];
    if (!m.token_types.empty()) t.attr[i] = attr_from_type(m.token_types[i]);
  }
  if (t.token_to_id.size() != n) {
    // llama.cpp aborts on this; find one duplicate to name it.
    for (size_t i = 0; i < n; ++i) {
      TokenId owner = t.token_to_id[t.text[i]];
      if (owner != static_cast<TokenId>(i))
        return data_loss("tokenizer.ggml.tokens: token {} duplicates token {} ({:?})", i, owner, t.text[i]);
    }
  }

  // Special ids: out-of-range defaults are disabled; out-of-range metadata keeps the default.
  auto resolve = [&](TokenId def, const std::optional<int64_t>& meta, std::string_view name) -> TokenId {
    TokenId id = def;
    if (id >= 0 && static_cast<size_t>(id) >= n) id = kNoToken;
    if (meta) {
      if (*meta >= 0 && static_cast<uint64_t>(*meta) < n) {
        id = static_cast<TokenId>(*meta);
      } else {
        log_warn("tokenizer: bad special token {} = {}, using default id {}", name, *meta, id);
      }
    }
    return id;
  };
  t.bos = resolve(def_bos, m.bos_id, "bos");
  t.eos = resolve(def_eos, m.eos_id, "eos");
  t.eot = resolve(kNoToken, m.eot_id, "eot");
  t.eom = resolve(kNoToken, m.eom_id, "eom");
  t.unk = resolve(def_unk, m.unk_id, "unk");
  t.sep = resolve(kNoToken, m.sep_id, "sep");
  t.pad = resolve(kNoToken, m.pad_id, "pad");
  t.mask = resolve(kNoToken, m.mask_id, "mask");
  t.fim_pre = resolve(kNoToken, m.fim_pre_id, "fim_pre");
  t.fim_suf = resolve(kNoToken, m.fim_suf_id, "fim_suf");
  t.fim_mid = resolve(kNoToken, m.fim_mid_id, "fim_mid");
  t.fim_pad = resolve(kNoToken, m.fim_pad_id, "fim_pad");
  t.fim_rep = resolve(kNoToken, m.fim_rep_id, "fim_rep");
  t.fim_sep = resolve(kNoToken, m.fim_sep_id, "fim_sep");
  if (m.add_bos) t.add_bos = *m.add_bos;
  if (m.add_eos) t.add_eos = *m.add_eos;

  // Role detection by token text, in token_to_id's walk order (first match wins).
  auto make_control = [&](TokenId id) { t.attr[id] |= kAttrControl; };
  for (const auto& [word, id] : t.token_to_id) {
    if (t.eot == kNoToken && text_in(word, kEotTexts)) { t.eot = id; make_control(id); }
    if (t.eom == kNoToken && word == "<|eom_id|>") { t.eom = id; make_control(id); }
    if (t.fim_pre == kNoToken && text_in(word, kFimPreTexts)) { t.fim_pre = id; make_control(id); }
    if (t.fim_suf == kNoToken && text_in(word, kFimSufTexts)) { t.fim_suf = id; make_control(id); }
    if (t.fim_mid == kNoToken && text_in(word, kFimMidTexts)) { t.fim_mid = id; make_control(id); }
    if (t.fim_pad == kNoToken && text_in(word, kFimPadTexts)) { t.fim_pad = id; make_control(id); }
    if (t.fim_rep == kNoToken && text_in(word, kFimRepTexts)) { t.fim_rep = id; make_control(id); }
    if (t.fim_sep == kNoToken && word == "<|file_sep|>") { t.fim_sep = id; make_control(id); }
  }
  for (const auto& [word, id] : t.token_to_id) {
    if ((t.attr[id] & kAttrControl) && word.find("unused") != std::string::npos) t.attr[id] |= kAttrUnused;
  }
  std::vector<TokenId> eog;
  auto add_eog = [&](TokenId id) {
    if (id != kNoToken && std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
  };
  add_eog(t.fim_pad);
  add_eog(t.fim_rep);
  add_eog(t.fim_sep);
  for (const auto& [word, id] : t.token_to_id) {
    if (text_in(word, kEogTexts)) {
      add_eog(id);
      make_control(id);
    }
  }
  for (const auto& [word, id] : t.token_to_id) {
    if (word == "<|channel|>" || word == "<|message|>" || word == "<|start|>" || word == "<|constrain|>")
      t.attr[id] = kAttrUserDefined;
  }
  add_eog(t.eos);
  add_eog(t.eot);
  add_eog(t.eom);
  {
    // o200k_harmony / solar-open: "<|end|>" is not an end of generation there.
    bool has_return = false, has_call = false, has_end = false, has_flush = false;
    TokenId end_id = kNoToken;
    for (TokenId id : eog) {
      const std::string& w = t.text[id];
      if (w == "<|return|>") has_return = true;
      else if (w == "<|call|>" || w == "<|calls|>") has_call = true;
      else if (w == "<|flush|>") has_flush = true;
      else if (w == "<|end|>") { has_end = true; end_id = id; }
    }
    if ((has_return && has_call && has_end) || (has_call && has_flush && has_end)) {
      eog.erase(std::find(eog.begin(), eog.end(), end_id));
      t.attr[end_id] = kAttrUserDefined;
    }
  }
  {
    // gemma4 / plamo: "</s>" is a normal token there.
    bool marker = false;
    TokenId s_id = kNoToken;
    for (TokenId id : eog) {
      const std::string& w = t.text[id];
      if (w == "<|tool_response>" || w == "<|plamo:eos|>") marker = true;
      else if (w == "</s>") s_id = id;
    }
    if (marker && s_id != kNoToken) {
      eog.erase(std::find(eog.begin(), eog.end(), s_id));
      t.attr[s_id] = kAttrNormal;
    }
  }
  std::sort(eog.begin(), eog.end());
  t.eog = std::move(eog);

  // Special tokens for partitioning, longest first. std::sort with llama.cpp's comparator over
  // the same id order gives the same order for equal lengths.
  for (size_t i = 0; i < n; ++i)
    if (t.attr[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) t.special_tokens.push_back(static_cast<TokenId>(i));
  std::sort(t.special_tokens.begin(), t.special_tokens.end(),
            [&](TokenId a, TokenId b) { return t.text[a].size() > t.text[b].size(); });
  t.build_special_trie();

  // Piece cache (special tokens rendered).
  t.piece.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = t.attr[i];
    const std::string& w = t.text[i];
    if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
      t.piece[i] = w;
    } else if (a & kAttrNormal) {
      t.piece[i] = t.kind == VocabKind::kSpm ? replace_all(w, "\xe2\x96\x81", " ") : decode_byte_level(w);
    } else if (a & kAttrByte) {
      // llama.cpp reads w[3..5) and throws on shorter texts; treat those as empty.
      if (w.size() > 3) t.piece[i] = std::string(1, static_cast<char>(byte_of_token(w)));
    }
  }

  // Byte fallback of SPM: "<0xXX>", else the byte itself as a token.
  t.byte_token.fill(kNoToken);
  if (t.kind == VocabKind::kSpm) {
    for (int b = 0; b < 256; ++b) {
      TokenId id = t.lookup(fmt::format("<0x{:02X}>", b));
      if (id == kNoToken) id = t.lookup(std::string(1, static_cast<char>(b)));
      t.byte_token[b] = id;
    }
  }

  // Per-model attribute quirks llama.cpp keys on names.
  {
    std::string name = m.general_name;
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto contains_any = [](const std::string& s, std::initializer_list<std::string_view> subs) {
      for (auto sub : subs)
        if (s.find(sub) != std::string::npos) return true;
      return false;
    };
    auto set_attr = [&](std::string_view word, uint32_t bit, bool on) {
      TokenId id = t.lookup(word);
      if (id == kNoToken) return;
      t.attr[id] = on ? (t.attr[id] | bit) : (t.attr[id] & ~bit);
    };
    if (contains_any(m.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains_any(m.general_architecture, {"nomic-bert-moe", "jina-bert-v3"})) {
      set_attr("<mask>", kAttrLstrip, true);
    } else if (contains_any(name, {"phi-3", "phi3"})) {
      for (TokenId id : t.special_tokens) t.attr[id] |= kAttrRstrip;
      set_attr("</s>", kAttrRstrip, true);
      for (auto w : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(w, kAttrRstrip, false);
    } else if (contains_any(name, {"modern-bert"})) {
      set_attr("[MASK]", kAttrLstrip, true);
    }
  }

  return Tokenizer(std::unique_ptr<const Impl>(std::move(impl)));
}

void Tokenizer::Impl::build_special_trie() {
  trie.assign(1, TrieNode{});
  root_child.fill(-1);
  for (TokenId id : special_tokens) {
    int32_t node = 0;
    for (char ch : text[id]) {
      const uint8_t c = static_cast<uint8_t>(ch);
      int32_t child = -1;
      if (node == 0) {
        child = root_child[c];
      } else {
        for (const auto& [b, n] : trie[node].next)
          if (b == c) child = n;
      }
      if (child < 0) {
        child = static_cast<int32_t>(trie.size());
        trie.emplace_back();
        if (node == 0) root_child[c] = child;
        else trie[node].next.emplace_back(c, child);
      }
      node = child;
    }
    trie[node].token = id;
  }
}

std::vector<TokenId> Tokenizer::Impl::specials_in(std::string_view raw) const {
  std::vector<TokenId> found;
  for (size_t i = 0; i < raw.size(); ++i) {
    int32_t node = root_child[static_cast<uint8_t>(raw[i])];
    for (size_t j = i + 1; node >= 0; ++j) {
      if (trie[node].token != kNoToken) found.push_back(trie[node].token);
      if (j >= raw.size()) break;
      int32_t child = -1;
      const uint8_t c = static_cast<uint8_t>(raw[j]);
      for (const auto& [b, n] : trie[node].next)
        if (b == c) child = n;
      node = child;
    }
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  return found;
}

// ---- Accessors -------------------------------------------------------------------------------

TokenId Tokenizer::Impl::lookup(std::string_view s) const {
  // One scratch string per thread: std::unordered_map<std::string> has no string_view lookup,
  // and keeping llama.cpp's exact map type matters for the detection walk above.
  thread_local std::string scratch;
  scratch.assign(s.data(), s.size());
  auto it = token_to_id.find(scratch);
  return it == token_to_id.end() ? kNoToken : it->second;
}

int32_t Tokenizer::Impl::merge_rank(std::string_view left, std::string_view right) const {
  thread_local std::string scratch;
  scratch.clear();
  scratch.append(left);
  scratch.push_back('\xff');
  scratch.append(right);
  auto it = bpe_ranks.find(scratch);
  return it == bpe_ranks.end() ? -1 : it->second;
}

VocabKind Tokenizer::kind() const { return impl_->kind; }
const std::string& Tokenizer::model_name() const { return impl_->model; }
const std::string& Tokenizer::pre_name() const { return impl_->pre_name; }
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->text.size()); }
const std::string& Tokenizer::token_text(TokenId id) const {
  static const std::string kEmpty;
  return impl_->in_range(id) ? impl_->text[id] : kEmpty;
}
uint32_t Tokenizer::token_attr(TokenId id) const { return impl_->in_range(id) ? impl_->attr[id] : 0; }
std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  TokenId id = impl_->lookup(text);
  return id == kNoToken ? std::nullopt : std::optional<TokenId>(id);
}
TokenId Tokenizer::bos_id() const { return impl_->bos; }
TokenId Tokenizer::eos_id() const { return impl_->eos; }
TokenId Tokenizer::eot_id() const { return impl_->eot; }
TokenId Tokenizer::unk_id() const { return impl_->unk; }
TokenId Tokenizer::pad_id() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }
bool Tokenizer::is_eog(TokenId id) const {
  return id != kNoToken && std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}
const std::vector<TokenId>& Tokenizer::eog_ids() const { return impl_->eog; }
bool Tokenizer::is_control(TokenId id) const {
  return impl_->in_range(id) && (impl_->attr[id] & (kAttrControl | kAttrUnknown));
}

}  // namespace loom::llm
