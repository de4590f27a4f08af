// Unit tests of the tokenizer on small hand-made vocabularies: UTF-8 helpers, pre-tokenizer
// regexes, SPM and BPE merges, special-token partitioning, streaming detokenization, hostile
// GGUF metadata, model path lookup and concurrent use. (Agreement with llama.cpp on the real
// models is tests/py/test_tokenizer.py.)
#include <algorithm>
#include <memory>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "loom/base/file.h"
#include "loom/base/options.h"
#include "loom/engine/model_path.h"
#include "loom/gguf/gguf.h"
#include "loom/gguf/gguf_writer.h"
#include "loom/text/tokenizer.h"
#include "loom/text/tokenizer_pretok.h"
#include "loom/text/unicode.h"

namespace loom::llm {
namespace {

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- UTF-8 helpers ---------------------------------------------------------------------------

TEST(TokenizerUnicode, CompletePrefixHoldsBackOnlyPartialCharacters) {
  using unicode::utf8_complete_prefix;
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8_complete_prefix("\xC3"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\xC3\xA9"), 2u);
  // Never-valid tails are not held: lone continuation, invalid leads, bad second bytes.
  EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);
  EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);
  EXPECT_EQ(utf8_complete_prefix("a\xC0"), 2u);
  EXPECT_EQ(utf8_complete_prefix("a\xE0\x80"), 3u);  // overlong prefix
  EXPECT_EQ(utf8_complete_prefix("a\xED\xA0"), 3u);  // surrogate prefix
  EXPECT_EQ(utf8_complete_prefix("a\xF4\x90"), 3u);  // above U+10FFFF
}

TEST(TokenizerUnicode, LenientDecodeMatchesLlamaRules) {
  using unicode::decode_utf8_lenient;
  EXPECT_EQ(decode_utf8_lenient("a\xC3\xA9"), (std::vector<uint32_t>{'a', 0xE9}));
  EXPECT_EQ(decode_utf8_lenient("\x80z"), (std::vector<uint32_t>{0xFFFD, 'z'}));
  EXPECT_EQ(decode_utf8_lenient("\xE2\x82"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_utf8_lenient("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));  // surrogate kept
  EXPECT_EQ(decode_utf8_lenient("\xC0\xAF"), (std::vector<uint32_t>{0x2F}));        // overlong kept
  EXPECT_EQ(decode_utf8_lenient("\xF8"), (std::vector<uint32_t>{0xFFFD}));
}

TEST(TokenizerUnicode, Gpt2ByteMapIsABijection) {
  std::vector<bool> seen(256);
  for (int b = 0; b < 256; ++b) {
    const std::string_view c = unicode::gpt2_byte_to_utf8(static_cast<uint8_t>(b));
    const int back = unicode::gpt2_utf8_to_byte(c);
    ASSERT_EQ(back, b);
    seen[b] = true;
  }
  EXPECT_EQ(unicode::gpt2_byte_to_utf8(' '), "\xC4\xA0");  // U+0120 'Ġ'
  EXPECT_EQ(unicode::gpt2_byte_to_utf8('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(unicode::gpt2_byte_to_utf8('A'), "A");
  EXPECT_EQ(unicode::gpt2_utf8_to_byte("\xE2\x82\xAC"), -1);
}

// ---- Pre-tokenizer ---------------------------------------------------------------------------

TEST(TokenizerPretok, TranslatesLlamaDialect) {
  EXPECT_EQ(translate_llama_regex("\\s+(?!\\S)"), "\\p{White_Space}+(?!\\P{White_Space})");
  EXPECT_EQ(translate_llama_regex("[^\\s\\p{L}]"), "[^\\p{White_Space}\\p{L}]");
  EXPECT_EQ(translate_llama_regex("\\d{3}[\\d.]"), "[0-9]{3}[0-9.]");
  EXPECT_EQ(translate_llama_regex("[\\p{Lu}\\p{Ll}]"), "[\\p{L}\\p{L}]");
}

std::vector<std::string> split(const PreTokenizer& p, std::string_view text) {
  auto r = p.split_raw(text);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<std::string>{};
}

TEST(TokenizerPretok, Gpt2Split) {
  auto p = PreTokenizer::create("gpt-2", nullptr);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  using V = std::vector<std::string>;
  EXPECT_EQ(split(*p, "Hello  world"), (V{"Hello", " ", " world"}));
  EXPECT_EQ(split(*p, "it's 42!!"), (V{"it", "'s", " 42", "!!"}));
  EXPECT_EQ(split(*p, "a\tb"), (V{"a", "\t", "b"}));
  EXPECT_EQ(split(*p, "end   "), (V{"end", "   "}));
  // A no-break space is White_Space for llama.cpp (not a letter, not a plain space).
  EXPECT_EQ(split(*p, "x\xC2\xA0y"), (V{"x", "\xC2\xA0", "y"}));
}

TEST(TokenizerPretok, SmollmSplitsDigitsFirst) {
  auto p = PreTokenizer::create("smollm", nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(split(*p, "ab 123"), (std::vector<std::string>{"ab", " ", "1", "2", "3"}));
  EXPECT_FALSE(p->traits().clean_spaces);
}

TEST(TokenizerPretok, NonAsciiWhitespaceDoesNotMatchExplicitRanges) {
  // deepseek-coder's CJK range U+0800..U+4E00 covers U+3000, but llama.cpp hides non-ASCII
  // spaces from its regexes, so U+3000 stays outside that class.
  auto p = PreTokenizer::from_patterns({"[\u4e00-\u9fa5\u0800-\u4e00]+"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(split(*p, "\xE3\x80\x80\xE3\x81\x82"), (std::vector<std::string>{"\xE3\x80\x80", "\xE3\x81\x82"}));
}

TEST(TokenizerPretok, EmptyMatchesCutLikeStdRegex) {
  // superbpe's second pattern only ever matches the empty string: the cuts group digits by 3
  // from the right.
  auto p = PreTokenizer::from_patterns({"(?=(\\d{3})+(?!\\d))"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(split(*p, "1234567"), (std::vector<std::string>{"1", "234", "567"}));
}

TEST(TokenizerPretok, UnknownAndUnsupportedNames) {
  // As llama.cpp: an unknown type is refused by name, an empty one means "default".
  bool fell_back = true;
  auto p = PreTokenizer::create("surely-not-a-tokenizer", &fell_back);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(contains(p.status().to_string(), "unknown pre-tokenizer type 'surely-not-a-tokenizer'"))
      << p.status().to_string();
  auto e = PreTokenizer::create("", &fell_back);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_TRUE(fell_back);
  EXPECT_EQ(e->traits().canonical, "default");
  for (const char* known : {"default", "smollm", "gpt-2", "llama-bpe", "qwen2"}) {
    auto k = PreTokenizer::create(known, &fell_back);
    ASSERT_TRUE(k.ok()) << known << ": " << k.status().to_string();
    EXPECT_FALSE(fell_back) << known;
  }
  auto k = PreTokenizer::create("kimi-k2", &fell_back);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kUnimplemented);
}

// ---- Hand-made vocabularies ------------------------------------------------------------------

// SPM vocabulary: <unk> <s> </s>, then the given pieces (normal), then 256 byte tokens, then
// extra special tokens. Scores: earlier pieces score higher.
TokenizerMetadata spm_meta(const std::vector<std::string>& pieces,
                           const std::vector<std::pair<std::string, int>>& specials = {}) {
  TokenizerMetadata m;
  m.model = "llama";
  auto add = [&](std::string t, int type, float score) {
    m.tokens.push_back(std::move(t));
    m.token_types.push_back(type);
    m.scores.push_back(score);
  };
  add("<unk>", 2, 0);
  add("<s>", 3, 0);
  add("</s>", 3, 0);
  for (size_t i = 0; i < pieces.size(); ++i) add(pieces[i], 1, -static_cast<float>(i));
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 6, 0);
  for (const auto& [t, type] : specials) add(t, type, 0);
  return m;
}

Tokenizer make(TokenizerMetadata m) {
  auto t = Tokenizer::create(std::move(m));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

TokenId id_of(const Tokenizer& t, std::string_view text) {
  auto id = t.find_token(text);
  EXPECT_TRUE(id.has_value()) << "no token " << text;
  return id.value_or(kNoToken);
}

std::vector<TokenId> encode(const Tokenizer& t, std::string_view text, bool add_special = true, bool parse_special = true) {
  auto r = t.encode(text, add_special, parse_special);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<TokenId>{};
}

TEST(TokenizerSpm, MergesByScoreWithSpacePrefix) {
  // "ab" outscores "▁a", so "▁ab" is reached through "ab" first.
  Tokenizer t = make(spm_meta({"ab", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab", "\xE2\x96\x81", "a", "b"}));
  EXPECT_EQ(t.kind(), VocabKind::kSpm);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(encode(t, "ab"), (std::vector<TokenId>{1, id_of(t, "\xE2\x96\x81" "ab")}));
  EXPECT_EQ(encode(t, "ab", false), (std::vector<TokenId>{id_of(t, "\xE2\x96\x81" "ab")}));
  // Spaces become U+2581; "▁b" is no token, so it stays "▁" + "b".
  EXPECT_EQ(encode(t, "a b", false),
            (std::vector<TokenId>{id_of(t, "\xE2\x96\x81" "a"), id_of(t, "\xE2\x96\x81"), id_of(t, "b")}));
}

TEST(TokenizerSpm, ByteFallbackAndStreamingNeverSplitsACharacter) {
  Tokenizer t = make(spm_meta({"\xE2\x96\x81", "a"}));
  // U+1F600 is no token: four byte tokens after the space prefix.
  const std::vector<TokenId> ids = encode(t, "\xF0\x9F\x98\x80", false);
  ASSERT_EQ(ids, (std::vector<TokenId>{id_of(t, "\xE2\x96\x81"), id_of(t, "<0xF0>"), id_of(t, "<0x9F>"),
                                       id_of(t, "<0x98>"), id_of(t, "<0x80>")}));
  StreamDecoder s(t);
  EXPECT_EQ(s.push(ids[0]), " ");
  EXPECT_EQ(s.push(ids[1]), "");
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_EQ(s.push(ids[2]), "");
  EXPECT_EQ(s.push(ids[3]), "");
  EXPECT_EQ(s.pending(), 3u);
  EXPECT_EQ(s.push(ids[4]), "\xF0\x9F\x98\x80");
  EXPECT_EQ(s.finish(), "");

  // A byte that can never start a character passes straight through; a broken sequence is
  // released as soon as it is known to be broken; finish() flushes a trailing partial one.
  StreamDecoder s2(t);
  EXPECT_EQ(s2.push(id_of(t, "<0xFF>")), "\xFF");
  EXPECT_EQ(s2.push(id_of(t, "<0xE2>")), "");
  EXPECT_EQ(s2.push(id_of(t, "a")), "\xE2" "a");
  EXPECT_EQ(s2.push(id_of(t, "<0xC3>")), "");
  EXPECT_EQ(s2.finish(), "\xC3");

  // The whole decode gives the bytes back (BOS renders as its text unless removed).
  auto all = t.decode(encode(t, "a\xF0\x9F\x98\x80"), DecodeOptions{.remove_special = true});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, " a\xF0\x9F\x98\x80");
}

TEST(TokenizerSpecial, LongestTokenFirstAcrossTheWholeText) {
  // "bcd" is longer than "ab", so it is split out first even though "ab" starts earlier.
  Tokenizer t = make(spm_meta({"a", "c", "d", "\xE2\x96\x81"}, {{"ab", 3}, {"bcd", 3}}));
  const TokenId ab = id_of(t, "ab"), bcd = id_of(t, "bcd");
  EXPECT_EQ(encode(t, "abcd", false), (std::vector<TokenId>{id_of(t, "\xE2\x96\x81"), id_of(t, "a"), bcd}));
  EXPECT_EQ(encode(t, "abab", false), (std::vector<TokenId>{ab, ab}));
}

TEST(TokenizerSpecial, ParseSpecialOffStillSplitsUserDefined) {
  Tokenizer t = make(spm_meta({"\xE2\x96\x81", "x"}, {{"<ctl>", 3}, {"UDX", 4}}));
  const TokenId ctl = id_of(t, "<ctl>"), udx = id_of(t, "UDX");
  const std::vector<TokenId> on = encode(t, "<ctl>xUDX", false, true);
  EXPECT_EQ(on, (std::vector<TokenId>{ctl, id_of(t, "\xE2\x96\x81"), id_of(t, "x"), udx}));
  const std::vector<TokenId> off = encode(t, "<ctl>xUDX", false, false);
  ASSERT_GE(off.size(), 2u);
  EXPECT_EQ(off.back(), udx);
  EXPECT_EQ(std::count(off.begin(), off.end(), ctl), 0);
  // Without parse_special the control token's text goes through byte fallback.
  EXPECT_EQ(off[1], id_of(t, "<0x3C>"));
  // Rendering: control tokens vanish when render_special is off, user-defined ones stay.
  EXPECT_EQ(t.token_to_piece(ctl, false), "");
  EXPECT_EQ(t.token_to_piece(ctl, true), "<ctl>");
  EXPECT_EQ(t.token_to_piece(udx, false), "UDX");
}

TEST(TokenizerSpecial, Phi3NameAddsRstripToSpecialTokens) {
  TokenizerMetadata m = spm_meta({"\xE2\x96\x81", "x"}, {{"<|end|>", 3}});
  m.general_name = "Phi-3 mini";
  Tokenizer t = make(std::move(m));
  EXPECT_TRUE(t.token_attr(id_of(t, "<|end|>")) & kAttrRstrip);
  // The spaces after the special token are dropped, so "x" is not space-prefixed twice.
  EXPECT_EQ(encode(t, "<|end|>   x", false),
            (std::vector<TokenId>{id_of(t, "<|end|>"), id_of(t, "\xE2\x96\x81"), id_of(t, "x")}));
}

TEST(TokenizerSpecial, EndOfGenerationByText) {
  Tokenizer t = make(spm_meta({"a"}, {{"<end_of_turn>", 3}, {"<|im_end|>", 1}}));
  EXPECT_TRUE(t.is_eog(t.eos_id()));
  EXPECT_TRUE(t.is_eog(id_of(t, "<end_of_turn>")));
  EXPECT_TRUE(t.is_eog(id_of(t, "<|im_end|>")));
  // A normal-typed end marker is promoted to control, as llama.cpp does.
  EXPECT_TRUE(t.is_control(id_of(t, "<|im_end|>")));
  EXPECT_FALSE(t.is_eog(id_of(t, "a")));
  EXPECT_FALSE(t.is_eog(kNoToken));
}

// Byte-level BPE vocabulary: the 256 byte characters, the given merged tokens, and merges.
TokenizerMetadata bpe_meta(const std::vector<std::string>& merged, const std::vector<std::string>& merges,
                           std::string pre = "gpt-2") {
  TokenizerMetadata m;
  m.model = "gpt2";
  m.pre = std::move(pre);
  m.tokens.push_back("<|endoftext|>");
  m.token_types.push_back(3);
  for (int b = 0; b < 256; ++b) {
    m.tokens.emplace_back(unicode::gpt2_byte_to_utf8(static_cast<uint8_t>(b)));
    m.token_types.push_back(1);
  }
  for (const auto& s : merged) {
    m.tokens.push_back(s);
    m.token_types.push_back(1);
  }
  m.merges = merges;
  m.bos_id = 0;
  m.eos_id = 0;
  return m;
}

TEST(TokenizerBpe, MergesByRank) {
  // "l l" ranks first, then "h e", then "he ll": hello -> hell + o; " w" merges into "Ġw".
  Tokenizer t = make(bpe_meta({"ll", "he", "hell", "\xC4\xA0w"}, {"l l", "h e", "he ll", "\xC4\xA0 w"}));
  EXPECT_EQ(t.kind(), VocabKind::kBpe);
  EXPECT_FALSE(t.add_bos());
  const std::vector<TokenId> expect = {id_of(t, "hell"), id_of(t, "o"), id_of(t, "\xC4\xA0w"), id_of(t, "o"),
                                       id_of(t, "r"), id_of(t, "l"), id_of(t, "d")};
  EXPECT_EQ(encode(t, "hello world"), expect);
  auto back = t.decode(expect);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "hello world");
  // Non-ASCII bytes come out through the byte map: 'é' is bytes C3 A9.
  EXPECT_EQ(encode(t, "\xC3\xA9"), (std::vector<TokenId>{id_of(t, "\xC3\x83"), id_of(t, "\xC2\xA9")}));
  EXPECT_EQ(t.token_to_piece(id_of(t, "\xC4\xA0w")), " w");
}

TEST(TokenizerBpe, CleanSpacesOnlyWhenAskedAndWhenTheVocabularyWantsIt) {
  Tokenizer t = make(bpe_meta({}, {"x y"}));  // gpt-2: clean_up_tokenization_spaces on
  const std::vector<TokenId> ids = encode(t, "a , b . c ' d 's");
  auto raw = t.decode(ids);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw, "a , b . c ' d 's");
  auto clean = t.decode(ids, DecodeOptions{.clean_spaces = true});
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(*clean, "a, b. c'd's");
  Tokenizer s = make(bpe_meta({}, {"x y"}, "smollm"));  // smollm: clean-up off
  auto kept = s.decode(encode(s, "a ."), DecodeOptions{.clean_spaces = true});
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "a .");
}

TEST(TokenizerBpe, ConcurrentEncodesAgree) {
  Tokenizer t = make(bpe_meta({"ll", "he", "hell"}, {"l l", "h e", "he ll"}, "llama-bpe"));
  const std::vector<std::string> texts = {"hello there", "caf\xC3\xA9 \xF0\x9F\x98\x80 123456",
                                          std::string(500, 'l'), "<|endoftext|>hello\n\n  x"};
  std::vector<std::vector<TokenId>> expected;
  for (const auto& s : texts) expected.push_back(encode(t, s));
  std::vector<int> failures(8, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 50; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) {
          auto r = t.encode(texts[i]);
          if (!r.ok() || *r != expected[i]) ++failures[k];
        }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(failures[k], 0) << "thread " << k;
}

TEST(TokenizerDecode, RejectsIdsOutsideTheVocabulary) {
  Tokenizer t = make(spm_meta({"a"}));
  const std::vector<TokenId> bad = {1, t.vocab_size()};
  auto r = t.decode(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(t.token_to_piece(-5), "");
  EXPECT_EQ(t.token_to_piece(t.vocab_size()), "");
}

// ---- Hostile GGUF metadata -------------------------------------------------------------------

std::vector<std::string> few_tokens() { return {"<unk>", "<s>", "</s>", "a", "b"}; }

Result<Tokenizer> from_writer(const GgufWriter& w) {
  LOOM_ASSIGN_OR_RETURN(GgufFile f, GgufFile::parse(MappedFile::from_bytes(w.serialize()), "hostile.gguf"));
  return Tokenizer::from_gguf(f);
}

GgufWriter base_spm() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", few_tokens());
  return w;
}

void expect_error(const Result<Tokenizer>& r, StatusCode code, std::string_view needle) {
  ASSERT_FALSE(r.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().to_string(), needle)) << r.status().to_string();
}

TEST(TokenizerHostile, ValidMinimalFileLoads) {
  auto r = from_writer(base_spm());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->vocab_size(), 5);
  EXPECT_EQ(r->bos_id(), 1);
  EXPECT_EQ(r->unk_id(), 0);
}

TEST(TokenizerHostile, MissingKeys) {
  GgufWriter no_model;
  no_model.set_strings("tokenizer.ggml.tokens", few_tokens());
  expect_error(from_writer(no_model), StatusCode::kNotFound, "tokenizer.ggml.model");
  GgufWriter no_tokens;
  no_tokens.set_string("tokenizer.ggml.model", "llama");
  expect_error(from_writer(no_tokens), StatusCode::kNotFound, "tokenizer.ggml.tokens");
  GgufWriter e2;
  e2.set_string("tokenizer.ggml.model", "llama");
  e2.set_strings("tokenizer.ggml.tokens", {});
  expect_error(from_writer(e2), StatusCode::kDataLoss, "empty");
}

TEST(TokenizerHostile, WrongTypes) {
  GgufWriter a;
  a.set_string("tokenizer.ggml.model", "llama");
  a.set_string("tokenizer.ggml.tokens", "not an array");
  expect_error(from_writer(a), StatusCode::kInvalidArgument, "tokenizer.ggml.tokens");
  GgufWriter b;
  b.set_string("tokenizer.ggml.model", "llama");
  b.set_i32s("tokenizer.ggml.tokens", {1, 2, 3});
  expect_error(from_writer(b), StatusCode::kInvalidArgument, "tokenizer.ggml.tokens");
  GgufWriter c = base_spm();
  c.set_f32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1});
  expect_error(from_writer(c), StatusCode::kInvalidArgument, "token_type");
  GgufWriter d = base_spm();
  d.set_string("tokenizer.ggml.bos_token_id", "1");
  expect_error(from_writer(d), StatusCode::kInvalidArgument, "bos_token_id");
  GgufWriter e = base_spm();
  e.set_u32("tokenizer.ggml.add_bos_token", 1);
  expect_error(from_writer(e), StatusCode::kInvalidArgument, "add_bos_token");
}

TEST(TokenizerHostile, MismatchedLengths) {
  GgufWriter a = base_spm();
  a.set_f32s("tokenizer.ggml.scores", {0, 0, 0});
  expect_error(from_writer(a), StatusCode::kDataLoss, "tokenizer.ggml.scores");
  GgufWriter b = base_spm();
  b.set_i32s("tokenizer.ggml.token_type", {1, 1});
  expect_error(from_writer(b), StatusCode::kDataLoss, "tokenizer.ggml.token_type");
}

TEST(TokenizerHostile, SpecialIdsOutOfRange) {
  GgufWriter a = base_spm();
  a.set_u32("tokenizer.ggml.bos_token_id", 1000000);  // out of range: default (1) kept
  a.set_u32("tokenizer.ggml.eos_token_id", 4);
  a.set_u32("tokenizer.ggml.eot_token_id", 5);  // == vocab size: ignored
  auto r = from_writer(a);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->bos_id(), 1);
  EXPECT_EQ(r->eos_id(), 4);
  EXPECT_EQ(r->eot_id(), kNoToken);
  GgufWriter b = base_spm();
  b.set_i32("tokenizer.ggml.eos_token_id", -3);
  expect_error(from_writer(b), StatusCode::kInvalidArgument, "eos_token_id");
}

TEST(TokenizerHostile, DuplicateTokensAndUnknownModels) {
  GgufWriter a;
  a.set_string("tokenizer.ggml.model", "llama");
  a.set_strings("tokenizer.ggml.tokens", {"<unk>", "x", "y", "x"});
  expect_error(from_writer(a), StatusCode::kDataLoss, "duplicates");
  GgufWriter b;
  b.set_string("tokenizer.ggml.model", "bert");
  b.set_strings("tokenizer.ggml.tokens", few_tokens());
  expect_error(from_writer(b), StatusCode::kUnimplemented, "bert");
  GgufWriter c;
  c.set_string("tokenizer.ggml.model", "gpt2");
  c.set_strings("tokenizer.ggml.tokens", few_tokens());
  expect_error(from_writer(c), StatusCode::kNotFound, "merges");
  GgufWriter d = c;
  d.set_strings("tokenizer.ggml.merges", {"a b"});
  d.set_string("tokenizer.ggml.pre", "afmoe");
  expect_error(from_writer(d), StatusCode::kUnimplemented, "afmoe");
}

TEST(TokenizerHostile, UnknownPreTokenizerTypeIsRefused) {
  GgufWriter bpe;
  bpe.set_string("tokenizer.ggml.model", "gpt2");
  bpe.set_strings("tokenizer.ggml.tokens", few_tokens());
  bpe.set_strings("tokenizer.ggml.merges", {"a b"});
  GgufWriter unknown = bpe;
  unknown.set_string("tokenizer.ggml.pre", "no-such-pre");
  expect_error(from_writer(unknown), StatusCode::kUnimplemented, "unknown pre-tokenizer type 'no-such-pre'");
  // Absent or empty: llama.cpp's "default" cascade (with a warning), as llama.cpp falls back.
  auto absent = from_writer(bpe);
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent->pre_name(), "default");
  GgufWriter empty = bpe;
  empty.set_string("tokenizer.ggml.pre", "");
  auto e = from_writer(empty);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->pre_name(), "default");
  GgufWriter smollm = bpe;
  smollm.set_string("tokenizer.ggml.pre", "smollm");
  auto s = from_writer(smollm);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->pre_name(), "command-r");  // smollm shares command-r's cascade
  // SentencePiece vocabularies have no pre-tokenizer; llama.cpp ignores the key there (Gemma 3
  // says "default"), and so does Loom.
  GgufWriter spm = base_spm();
  spm.set_string("tokenizer.ggml.pre", "no-such-pre");
  auto sp = from_writer(spm);
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
}

TEST(TokenizerHostile, MissingByteFallbackIsAnErrorNotACrash) {
  // An SPM vocabulary without <0xXX> tokens cannot spell "▁z" (llama.cpp throws from .at()).
  auto r = from_writer(base_spm());
  ASSERT_TRUE(r.ok());
  auto ids = r->encode("z");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(ids.status().to_string(), "no byte token")) << ids.status().to_string();
}

// ---- Model path ------------------------------------------------------------------------------

TEST(ModelPath, HonoursTheModelAndCacheOptions) {
  auto no_model = std::make_unique<opt::ScopedFlag>(opt::Opt::kModel, "");
  opt::ScopedFlag cache(opt::Opt::kCacheDir, "/nonexistent-loom-cache");
  EXPECT_EQ(default_model_path(), "/nonexistent-loom-cache/models/SmolLM2-135M-Instruct-Q4_1.gguf");
  auto missing = resolve_model_path("");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(missing.status().to_string(), "tools/setup.sh"));
  no_model.reset();
  opt::ScopedFlag model(opt::Opt::kModel, "/nonexistent/model.gguf");
  EXPECT_EQ(default_model_path(), "/nonexistent/model.gguf");
  EXPECT_TRUE(contains(resolve_model_path("").status().to_string(), "/nonexistent/model.gguf does not exist"));
  const std::string self = std::string(LOOM_SOURCE_DIR) + "/tests/llm/test_tokenizer.cpp";
  auto given = resolve_model_path(self);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(*given, self);
}

}  // namespace
}  // namespace loom::llm
