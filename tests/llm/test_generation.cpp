// Generation (engine/generation.h) on the real SmolLM2 tokenizer: stop strings across token
// boundaries and at the very start, eos against ignore_eos, max_tokens, a full context, and the
// flush of held-back text (a partial UTF-8 character, a possible stop-string start). Skips when
// the model has not been fetched.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "loom/engine/generation.h"
#include "loom/gguf/gguf.h"
#include "loom/text/tokenizer.h"
#include "loom/text/unicode.h"

namespace loom::llm {
namespace {

const Tokenizer* smollm2() {
  static std::optional<Tokenizer> tok = [] () -> std::optional<Tokenizer> {
    const char* home = std::getenv("HOME");
    const std::string path = std::string(home ? home : "") + "/.cache/loom/models/SmolLM2-135M-Instruct-Q4_1.gguf";
    if (!std::filesystem::exists(path)) return std::nullopt;
    auto file = GgufFile::open(path);
    if (!file.ok()) return std::nullopt;
    auto t = Tokenizer::from_gguf(*file);
    if (!t.ok()) return std::nullopt;
    return std::move(*t);
  }();
  return tok ? &*tok : nullptr;
}

#define NEED_TOKENIZER()                                                                         \
  const Tokenizer* tok_ptr = smollm2();                                                          \
  if (!tok_ptr) GTEST_SKIP() << "model not fetched: ~/.cache/loom/models/SmolLM2-135M-Instruct-Q4_1.gguf"; \
  const Tokenizer& tok = *tok_ptr

std::vector<int32_t> ids(const Tokenizer& tok, const std::string& text) {
  auto r = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<int32_t>{};
}

// The byte-level vocabulary has one token per byte.
int32_t byte_token(const Tokenizer& tok, uint8_t b) {
  auto id = tok.find_token(unicode::gpt2_byte_to_utf8(b));
  EXPECT_TRUE(id.has_value()) << "no token for byte " << int(b);
  return id.value_or(0);
}

SamplerParams greedy() {
  SamplerParams p;
  p.temp = 0.0f;
  p.seed = 1;
  return p;
}

Generation make(const Tokenizer& tok, GenerationOptions o) {
  return Generation(tok, greedy(), tok.vocab_size(), std::move(o));
}

struct Pushed {
  std::vector<std::string> pieces;  // per pushed token
  std::string text;                 // all of it, finish() included
  std::string reason;
};

// Pushes ids until generation ends, then finishes.
Pushed push_all(Generation& g, const std::vector<int32_t>& tokens) {
  Pushed r;
  for (int32_t id : tokens) {
    Generation::Step s = g.push(id, /*cache_full=*/false);
    r.pieces.push_back(s.text);
    r.text += s.text;
    if (s.done) break;
  }
  r.text += g.finish();
  r.reason = std::string(g.reason());
  return r;
}

TEST(Generation, StopStringSplitAcrossTokens) {
  NEED_TOKENIZER();
  const std::vector<int32_t> t = ids(tok, "Hello world. The end is near, they said.");
  ASSERT_GT(t.size(), 6u);
  GenerationOptions o;
  o.stop = {"end is"};
  Generation g = make(tok, o);
  Pushed r = push_all(g, t);
  EXPECT_EQ(r.reason, "stop");
  EXPECT_EQ(r.text, "Hello world. The ");
  // " end" and " is" are separate tokens: "end" is held back (and the "e" of "The" before it,
  // until " end" shows it is not "end is"), and the token completing the stop gives nothing.
  ASSERT_GE(r.pieces.size(), 2u);
  EXPECT_EQ(tok.token_to_piece(g.tokens().back()), " is");
  EXPECT_EQ(tok.token_to_piece(g.tokens()[g.tokens().size() - 2]), " end");
  EXPECT_EQ(r.pieces[r.pieces.size() - 2], "e ");
  EXPECT_EQ(r.pieces.back(), "");
  EXPECT_EQ(g.tokens().size(), r.pieces.size());  // the token that completed the stop counts
  Generation::Step after = g.push(t.back(), false);
  EXPECT_TRUE(after.done);
  EXPECT_EQ(after.token, kNoToken);
  EXPECT_EQ(g.tokens().size(), r.pieces.size());
}

TEST(Generation, StopStringAtTheVeryStart) {
  NEED_TOKENIZER();
  const std::vector<int32_t> t = ids(tok, "Hello world");
  GenerationOptions o;
  o.stop = {"Hel", "zzz"};
  Generation g = make(tok, o);
  Generation::Step s = g.push(t[0], false);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.reason, "stop");
  EXPECT_EQ(s.text, "");
  EXPECT_EQ(s.token, t[0]);
  EXPECT_EQ(g.finish(), "");
  EXPECT_EQ(g.n_generated(), 1);
}

TEST(Generation, StopPrefixHeldBackIsReleasedAtTheEnd) {
  NEED_TOKENIZER();
  GenerationOptions o;
  o.stop = {"world!"};
  Generation g = make(tok, o);
  std::vector<int32_t> t = ids(tok, "Hello world");
  t.push_back(tok.eos_id());
  Pushed r = push_all(g, t);
  EXPECT_EQ(r.reason, "eos");
  EXPECT_EQ(r.pieces.back(), "");
  EXPECT_EQ(r.text, "Hello world");
  std::string streamed;
  for (const auto& p : r.pieces) streamed += p;
  EXPECT_EQ(streamed, "Hello ");  // "world" could have begun "world!"
}

TEST(Generation, EosEndsUnlessIgnored) {
  NEED_TOKENIZER();
  const int32_t eos = tok.eos_id();
  ASSERT_TRUE(tok.is_eog(eos));
  {
    Generation g = make(tok, {});
    std::vector<float> logits(static_cast<size_t>(tok.vocab_size()), 0.0f);
    logits[static_cast<size_t>(eos)] = 10.0f;
    Generation::Step s = g.next(logits.data(), false);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.reason, "eos");
    EXPECT_EQ(s.token, kNoToken);
    EXPECT_TRUE(g.tokens().empty());
  }
  for (bool render : {false, true}) {
    GenerationOptions o;
    o.ignore_eos = true;
    o.render_special = render;
    Generation g = make(tok, o);
    Generation::Step s = g.push(eos, false);
    EXPECT_FALSE(s.done);
    EXPECT_EQ(s.token, eos);
    EXPECT_EQ(s.text, render ? tok.token_text(eos) : "");
    EXPECT_EQ(g.tokens(), std::vector<int32_t>{eos});
  }
}

TEST(Generation, MaxTokens) {
  NEED_TOKENIZER();
  const std::vector<int32_t> t = ids(tok, "one two three four");
  ASSERT_GE(t.size(), 3u);
  GenerationOptions o;
  o.max_tokens = 2;
  Generation g = make(tok, o);
  Pushed r = push_all(g, t);
  EXPECT_EQ(r.reason, "length");
  EXPECT_EQ(r.pieces.size(), 2u);
  EXPECT_EQ(g.n_generated(), 2);
  EXPECT_EQ(r.text, "one two");

  // max_tokens 0: nothing is sampled.
  o.max_tokens = 0;
  Generation z = make(tok, o);
  std::vector<float> logits(static_cast<size_t>(tok.vocab_size()), 0.0f);
  Generation::Step s = z.next(logits.data(), false);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.reason, "length");
  EXPECT_EQ(s.token, kNoToken);
  EXPECT_EQ(z.n_generated(), 0);
}

TEST(Generation, FullContextEndsAfterTheTokensText) {
  NEED_TOKENIZER();
  const std::vector<int32_t> t = ids(tok, "Hi there");
  Generation g = make(tok, {});
  EXPECT_FALSE(g.push(t[0], false).done);
  Generation::Step s = g.push(t[1], /*cache_full=*/true);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.reason, "context");
  EXPECT_EQ(s.text, " there");
  EXPECT_EQ(g.n_generated(), 2);
}

TEST(Generation, HeldBackUtf8TailIsFlushedUnlessStoppedOrCancelled) {
  NEED_TOKENIZER();
  // U+1F600 as four byte tokens.
  const std::vector<int32_t> emoji = {byte_token(tok, 0xF0), byte_token(tok, 0x9F), byte_token(tok, 0x98),
                                      byte_token(tok, 0x80)};
  std::vector<int32_t> t = ids(tok, "Hi");
  t.insert(t.end(), emoji.begin(), emoji.end());
  {
    Generation g = make(tok, {});
    Pushed r = push_all(g, t);
    EXPECT_EQ(r.reason, "");  // not ended: the caller stops pushing
    EXPECT_EQ(r.pieces.back(), "\xF0\x9F\x98\x80");  // whole once complete
    EXPECT_EQ(r.pieces[r.pieces.size() - 2], "");
    EXPECT_EQ(r.text, "Hi\xF0\x9F\x98\x80");
  }
  {  // the length limit falls inside the character: its bytes are released by finish()
    GenerationOptions o;
    o.max_tokens = static_cast<int64_t>(t.size()) - 2;
    Generation g = make(tok, o);
    Pushed r = push_all(g, t);
    EXPECT_EQ(r.reason, "length");
    EXPECT_EQ(r.pieces.back(), "");
    EXPECT_EQ(r.text, "Hi\xF0\x9F");
    EXPECT_EQ(g.finish(), "");  // once
  }
  {  // eos inside the character
    std::vector<int32_t> e(t.begin(), t.end() - 1);
    e.push_back(tok.eos_id());
    Generation g = make(tok, {});
    Pushed r = push_all(g, e);
    EXPECT_EQ(r.reason, "eos");
    EXPECT_EQ(r.text, "Hi\xF0\x9F\x98");
  }
  {  // cancelled inside the character: nothing more
    Generation g = make(tok, {});
    for (size_t i = 0; i + 1 < t.size(); ++i) g.push(t[i], false);
    g.cancel();
    EXPECT_EQ(g.reason(), "cancelled");
    EXPECT_EQ(g.finish(), "");
    EXPECT_TRUE(g.push(t.back(), false).done);
  }
}

TEST(Generation, BorrowedSamplerKeepsItsHistory) {
  NEED_TOKENIZER();
  Sampler sampler(greedy(), tok.vocab_size());
  const std::vector<int32_t> t = ids(tok, "one two");
  {
    Generation g(tok, sampler, {});
    g.accept_prompt(t);
    g.push(t[0], false);
    EXPECT_EQ(&g.sampler(), &sampler);
  }
  // The sampler is still usable after the Generation is gone.
  std::vector<float> logits(static_cast<size_t>(tok.vocab_size()), 0.0f);
  logits[7] = 1.0f;
  EXPECT_EQ(sampler.sample(logits.data()), 7);
}

}  // namespace
}  // namespace loom::llm
