// Pre-tokenizer regex cascades of byte-level BPE vocabularies, run with PCRE2. The patterns and
// the per-variant flags are the ones llama.cpp uses for each `tokenizer.ggml.pre` value.
#include "loom/text/tokenizer_pretok.h"

#include <algorithm>
#include <array>

#include <pcre2.h>

#include "loom/text/unicode.h"

namespace loom::llm {
namespace {

// ---- Patterns (llama.cpp's dialect; translate_llama_regex() turns them into PCRE2) ----------

// GPT-2's split. llama.cpp runs it with hand-written code that behaves as if the pattern ended
// in "|\s+" (a lone whitespace before a non-space becomes its own word); we append that.
constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kJais2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|"
    "\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|"
    "\\s{1,2}(?!\\S)|\\s{1}";
constexpr std::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kChatGlm4 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kPoro = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+";
constexpr std::string_view kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGraniteEmbMulti =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kYoutuCjk =
    "[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+|"
    "[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kYoutu =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kDeepseekV3Main =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kSpark25Main =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+";
constexpr std::string_view kHanKana = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kDeepseekCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
constexpr std::string_view kDeepseekLlmLetters =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+";
constexpr std::string_view kDeepseekLlmPunct = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+";
constexpr std::string_view kSeedCoder =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kBailing =
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
constexpr std::string_view kUfakzeka =
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kExaoneMoe =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
constexpr std::string_view kMinicpm5 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kNewlines = "[^\\n]+|[\\n]+";

struct Variant {
  std::vector<std::string_view> names;
  std::vector<std::string_view> patterns;
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;
  bool no_bos_id = false;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> table = {
      {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano"},
       {kLlama3}, true, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      {{"jais-2"}, {kJais2}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, "\\s+$", kDeepseekCjk, "\\p{N}+"}, false},
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, {"\\p{N}{1,3}", kHanKana, kDeepseekV3Main}, false},
      {{"spark2_5"}, {"\\p{N}{1,3}", kHanKana, kSpark25Main, "\\p{N}"}, false},
      {{"youtu"}, {kYoutuCjk, kYoutu}, false, true},
      {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"}, false},
      {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, {"\\p{N}", kGpt2}},
      {{"command-r", "smollm"}, {"\\p{N}", kGpt2}, false},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
        "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "mpt", "olmo",
        "jais"},
       {kGpt2}},
      {{"trillion", "granite-docling"}, {kGpt2}, false},
      {{"stablelm2", "megrez"}, {kQwen2}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"}, {kQwen2}, false},
      {{"qwen35"}, {kQwen35}, false},
      {{"poro-chat"}, {kPoro}, false},
      {{"bloom", "gpt3-finnish"}, {kPoro}},
      {{"chatglm-bpe"}, {kChatGlm4}, true, false, false, true},
      {{"glm4", "glm5"}, {kChatGlm4}, true, true, false, true},
      {{"viking"}, {kPoro, "\\p{N}"}, false},
      {{"tekken"}, {kTekken}, false, true, true},
      {{"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
        "[\\p{P}!-/:-@\\[-`{-~]", kGpt2},
       false, false, true},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}, false},
      {{"granite-embed-multi-97m"}, {kGraniteEmbMulti}, false, true},
      {{"superbpe"}, {"\\p{N}+", "(?=(\\d{3})+(?!\\d))"}, false},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailing}, false},
      {{"seed-coder"}, {kSeedCoder}, false},
      {{"ufakzeka"}, {kUfakzeka}, false},
      {{"grok-2"}, {kQwen2}, false},
      {{"laguna"}, {kNewlines, kQwen2}, false},
      {{"exaone-moe"}, {kExaoneMoe}},
      {{"minicpm5"}, {"\\p{N}{1,3}", kMinicpm5}, true, true},
  };
  return table;
}

// Names llama.cpp knows but implements with code of its own (or without GPT-2 byte encoding).
constexpr std::array<std::string_view, 9> kUnsupported = {
    "kimi-k2", "afmoe", "tiny_aya", "cohere2moe", "gemma4", "granite-embed-multi-311m",
    "sarvam-moe", "whitespace", "hybriddna"};

// Surrogate code points cannot appear in the UTF-8 that PCRE2 matches; a private-use character
// stands in (both are \p{C}, which is all that the patterns can observe).
constexpr uint32_t kSurrogateStandIn = 0xE000;

}  // namespace

// ---- Regex wrapper ---------------------------------------------------------------------------

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

std::string translate_llama_regex(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += "\\p{White_Space}";
      } else if (e == 'S') {
        out += "\\P{White_Space}";
      } else if (e == 'd') {
        out += in_class ? "0-9" : "[0-9]";
      } else if (e == 'p' && i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i + 3);
        if (close == std::string_view::npos) {
          out += p.substr(i);
          break;
        }
        std::string_view name = p.substr(i + 3, close - (i + 3));
        if (name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" || name == "Lo") name = "L";
        out += "\\p{";
        out += name;
        out += "}";
        i = close;
        continue;
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

namespace {

Result<std::unique_ptr<PreTokenizer::Regex>> compile_pcre2(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return invalid_argument("pre-tokenizer regex does not compile at offset {}: {} (pattern {})", off,
                            reinterpret_cast<const char*>(msg), pattern);
  }
  auto re = std::make_unique<PreTokenizer::Regex>();
  re->code = code;
  re->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_patterns(const std::vector<std::string>& patterns) {
  PreTokenizer pt;
  pt.traits_.canonical = "custom";
  for (const auto& p : patterns) {
    LOOM_ASSIGN_OR_RETURN(auto re, compile_pcre2(translate_llama_regex(p)));
    pt.regexes_.push_back(std::move(re));
  }
  LOOM_ASSIGN_OR_RETURN(pt.wide_space_, compile_pcre2("(?![\\x00-\\x7F])\\p{White_Space}"));
  return pt;
}

Result<PreTokenizer> PreTokenizer::create(std::string_view pre, bool* fell_back) {
  if (fell_back) *fell_back = false;
  for (auto name : kUnsupported) {
    if (pre == name)
      return unimplemented("pre-tokenizer '{}' is not supported by Loom (llama.cpp implements it with custom code)",
                           pre);
  }
  const Variant* found = nullptr;
  for (const auto& v : variants()) {
    for (auto name : v.names)
      if (name == pre) found = &v;
    if (found) break;
  }
  if (!found) {
    // As llama.cpp: a missing type means "default" (the caller warns); a type it does not know
    // is refused, since another cascade would silently tokenize differently from the model's.
    if (!pre.empty())
      return unimplemented("unknown pre-tokenizer type '{}' (tokenizer.ggml.pre); llama.cpp refuses it too", pre);
    if (fell_back) *fell_back = true;
    found = &variants().front();
  }
  std::vector<std::string> patterns(found->patterns.begin(), found->patterns.end());
  LOOM_ASSIGN_OR_RETURN(PreTokenizer pt, from_patterns(patterns));
  pt.traits_.canonical = std::string(found->names.front());
  pt.traits_.clean_spaces = found->clean_spaces;
  pt.traits_.ignore_merges = found->ignore_merges;
  pt.traits_.add_bos = found->add_bos;
  pt.traits_.no_bos_id = found->no_bos_id;
  return pt;
}

// ---- Splitting -------------------------------------------------------------------------------

namespace {

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() {
    if (md) pcre2_match_data_free(md);
  }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

// One pcre2_match call; falls back to the interpreter when the JIT runs out of stack.
int match_once(const pcre2_code* code, std::string_view subject, size_t start, uint32_t options,
               pcre2_match_data* md) {
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                       options | PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                     options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  }
  return rc;
}

Status pcre2_failure(int rc) {
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(rc, msg, sizeof(msg));
  return resource_exhausted("pre-tokenizer regex failed: {}", reinterpret_cast<const char*>(msg));
}

// Appends to `cuts` the end offsets (in bytes of `subject`) of the pieces the regex cuts the
// subject into: matches, and the unmatched gaps between them, in order. Empty matches act as cut
// points, as std::regex_iterator makes them in llama.cpp.
Status split_segment(const pcre2_code* code, std::string_view subject, std::vector<size_t>& cuts) {
  MatchData data(code);
  if (!data.md) return resource_exhausted("out of memory for regex match data");
  size_t pos = 0, last = 0;
  uint32_t options = 0;
  while (pos <= subject.size()) {
    int rc = match_once(code, subject, pos, options, data.md);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match at an empty match's position: step one character and search again.
      options = 0;
      if (pos >= subject.size()) break;
      ++pos;
      while (pos < subject.size() && (static_cast<uint8_t>(subject[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (rc < 0) return pcre2_failure(rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t begin = ov[0], end = ov[1];
    if (begin > last) cuts.push_back(begin);
    if (end > begin) cuts.push_back(end);
    last = std::max(last, end);
    pos = end;
    options = end == begin ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  if (last < subject.size()) cuts.push_back(subject.size());
  return Status();
}

}  // namespace

namespace {

// The UTF-8 subject PCRE2 matches, with the code point index of each byte (read only at
// character starts) and the byte offset of each code point (plus the end).
struct Subject {
  std::string bytes;
  std::vector<uint32_t> cpt_at;
  std::vector<size_t> byte_of;

  explicit Subject(const std::vector<uint32_t>& cpts) {
    bytes.reserve(cpts.size() + 8);
    cpt_at.reserve(cpts.size() + 8);
    byte_of.resize(cpts.size() + 1);
    for (size_t i = 0; i < cpts.size(); ++i) {
      byte_of[i] = bytes.size();
      unicode::append_utf8(bytes, cpts[i]);
      cpt_at.resize(bytes.size(), static_cast<uint32_t>(i));
    }
    byte_of[cpts.size()] = bytes.size();
    cpt_at.push_back(static_cast<uint32_t>(cpts.size()));
  }
};

}  // namespace

Result<std::vector<std::string>> PreTokenizer::split_raw(std::string_view text) const {
  const std::vector<uint32_t> cpts = unicode::decode_utf8_lenient(text);
  // What the regexes see: surrogates (not encodable for PCRE2) as a private-use stand-in, and
  // non-ASCII White_Space as U+000B, the substitution llama.cpp makes before its std::regex runs.
  std::vector<uint32_t> seen = cpts;
  bool non_ascii = false;
  for (uint32_t& c : seen) {
    if (c >= 0xD800 && c <= 0xDFFF) c = kSurrogateStandIn;
    non_ascii |= c >= 0x80;
  }
  if (non_ascii) {
    const Subject first(seen);
    MatchData data(wide_space_->code);
    if (!data.md) return resource_exhausted("out of memory for regex match data");
    size_t pos = 0;
    while (pos < first.bytes.size()) {
      const int rc = match_once(wide_space_->code, first.bytes, pos, 0, data.md);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) return pcre2_failure(rc);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
      seen[first.cpt_at[ov[0]]] = 0x0B;
      pos = ov[1];
    }
  }
  const Subject subject(seen);

  // Segments as code point index ranges, refined by each regex in turn.
  std::vector<size_t> bounds = {0, cpts.size()};  // segment i = [bounds[i], bounds[i+1])
  if (cpts.empty()) bounds = {0};
  std::vector<size_t> cuts;
  for (const auto& re : regexes_) {
    std::vector<size_t> next = {0};
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      const size_t b0 = subject.byte_of[bounds[s]], b1 = subject.byte_of[bounds[s + 1]];
      cuts.clear();
      LOOM_RETURN_IF_ERROR(split_segment(re->code, std::string_view(subject.bytes).substr(b0, b1 - b0), cuts));
      for (size_t c : cuts) next.push_back(subject.cpt_at[b0 + c]);
    }
    bounds = std::move(next);
  }

  std::vector<std::string> words;
  words.reserve(bounds.size());
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    std::string w;
    for (size_t i = bounds[s]; i < bounds[s + 1]; ++i) unicode::append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
  }
  return words;
}

Result<std::vector<std::string>> PreTokenizer::split(std::string_view text) const {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> words, split_raw(text));
  for (auto& w : words) {
    std::string enc;
    enc.reserve(w.size() * 2);
    for (char c : w) enc += unicode::gpt2_byte_to_utf8(static_cast<uint8_t>(c));
    w = std::move(enc);
  }
  return words;
}

}  // namespace loom::llm
