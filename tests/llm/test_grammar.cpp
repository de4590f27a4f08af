// Grammars, the JSON-schema compiler and grammar-constrained sampling.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "loom/engine/grammar.h"
#include "loom/engine/json_schema.h"
#include "loom/engine/sampler.h"

namespace loom::llm {
namespace {

using json = nlohmann::ordered_json;

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

std::shared_ptr<const Grammar> schema(const json& s) {
  auto g = json_schema_grammar(s);
  EXPECT_TRUE(g.ok()) << g.status().to_string() << " for " << s.dump();
  return g.ok() ? g.value() : nullptr;
}

TEST(Grammar, GbnfBasics) {
  auto g = parse_gbnf(R"(root ::= "a" x* ("b" | [0-9]{2,3}) # comment
x ::= [^a-c0-9]
  | "zz")");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(matches(g.value(), "ab"));
  EXPECT_TRUE(matches(g.value(), "adzzb"));
  EXPECT_TRUE(matches(g.value(), "a12"));
  EXPECT_TRUE(matches(g.value(), "a123"));
  EXPECT_FALSE(matches(g.value(), "a1234"));
  EXPECT_FALSE(matches(g.value(), "a1"));
  EXPECT_FALSE(matches(g.value(), "acb"));
  GrammarMatcher m(g.value());
  EXPECT_FALSE(m.accept_bytes("b"));  // refused bytes leave the state as it was
  EXPECT_TRUE(m.accept_bytes("a"));
  EXPECT_FALSE(m.can_end());
}

TEST(Grammar, GbnfErrors) {
  EXPECT_FALSE(parse_gbnf("root ::= x").ok());                 // undefined
  EXPECT_FALSE(parse_gbnf("x ::= \"a\"").ok());                // no root
  EXPECT_FALSE(parse_gbnf("root ::= root \"a\" | \"b\"").ok());  // left recursion
  EXPECT_FALSE(parse_gbnf("root ::= x\nx ::= x").ok());
  EXPECT_FALSE(parse_gbnf("root ::= (\"a\"").ok());
  EXPECT_FALSE(parse_gbnf("root ::= [b-a]").ok());
  EXPECT_FALSE(parse_gbnf("root ::= \"a\"{5,2}").ok());
  EXPECT_FALSE(parse_gbnf("root ::= [^\\x00-\\xff]").ok());   // admits nothing
  auto deep = std::string(200, '(') + "\"a\"" + std::string(200, ')');
  EXPECT_FALSE(parse_gbnf("root ::= " + deep).ok());
}

TEST(JsonSchema, ObjectsRequiredAndOptional) {
  auto g = schema(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
    "c":{"type":"boolean"}},"required":["b"]})"));
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"b":"x"})"));
  EXPECT_TRUE(matches(g, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(matches(g, R"({"a": -5, "b": "h\u00e9\n"})"));
  EXPECT_TRUE(matches(g, "{\"b\": \"h\xc3\xa9\"}"));
  EXPECT_FALSE(matches(g, R"({"a":1})"));       // b missing
  EXPECT_FALSE(matches(g, R"({"b":"x","a":1})"));  // schema order
  EXPECT_FALSE(matches(g, R"({"b":1})"));
  EXPECT_FALSE(matches(g, R"({"b":"x",})"));
  EXPECT_FALSE(matches(g, "{\"b\":\"\x01\"}"));
}

TEST(JsonSchema, IntegerRangesExact) {
  std::mt19937 rng(7);
  std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 0}, {-3, 3}, {7, 123}, {-250, -17}, {99, 1000}, {5, 5}};
  for (int i = 0; i < 6; ++i) {
    int64_t a = static_cast<int64_t>(rng() % 4000) - 2000, b = a + static_cast<int64_t>(rng() % 3000);
    ranges.emplace_back(a, b);
  }
  for (auto [lo, hi] : ranges) {
    auto g = schema(json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}});
    ASSERT_TRUE(g);
    for (int64_t v = lo - 60; v <= hi + 60; ++v)
      ASSERT_EQ(matches(g, std::to_string(v)), v >= lo && v <= hi) << v << " in [" << lo << ", " << hi << "]";
    EXPECT_FALSE(matches(g, "0" + std::to_string(std::abs(lo) + 10)));  // leading zero
  }
  auto ge = schema(json{{"type", "integer"}, {"exclusiveMinimum", 10}});
  EXPECT_FALSE(matches(ge, "10"));
  EXPECT_TRUE(matches(ge, "11"));
  EXPECT_TRUE(matches(ge, "123456789"));
  EXPECT_FALSE(matches(ge, "-11"));
}

TEST(JsonSchema, NumbersStayInBounds) {
  auto g = schema(json{{"type", "number"}, {"minimum", -2.5}, {"maximum", 3.25}});
  ASSERT_TRUE(g);
  for (const char* ok : {"-2", "0", "3", "0.5", "2.999", "-1.75", "-0.5"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"4", "-3", "3.5", "-2.6", "1e5", "01"}) EXPECT_FALSE(matches(g, bad)) << bad;
  auto any = schema(json{{"type", "number"}});
  for (const char* ok : {"-2", "1.5e3", "0.25", "12E-2"}) EXPECT_TRUE(matches(any, ok)) << ok;
}

TEST(JsonSchema, ArraysEnumsAnyOfRefs) {
  auto g = schema(json::parse(R"({"type":"array","items":{"enum":["red","green",3,null]},"minItems":1,"maxItems":3})"));
  EXPECT_TRUE(matches(g, R"(["red"])"));
  EXPECT_TRUE(matches(g, R"(["red", 3, null])"));
  EXPECT_FALSE(matches(g, R"([])"));
  EXPECT_FALSE(matches(g, R"(["red",3,null,"green"])"));
  EXPECT_FALSE(matches(g, R"(["blue"])"));
  auto u = schema(json::parse(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"null"},{"const":{"k":[1,2]}}]})"));
  EXPECT_TRUE(matches(u, R"("ab")"));
  EXPECT_FALSE(matches(u, R"("abc")"));
  EXPECT_TRUE(matches(u, "null"));
  EXPECT_TRUE(matches(u, R"({"k":[1,2]})"));
  auto tree = schema(json::parse(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
    "properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})"));
  ASSERT_TRUE(tree);
  EXPECT_TRUE(matches(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(tree, R"({"v":1,"kids":[{}]})"));
  // Keywords beside anyOf apply to each branch; enum values keep to the type.
  auto both = schema(json::parse(R"({"enum":["a","b",3],"anyOf":[{"type":"string"},{"type":"null"}]})"));
  EXPECT_TRUE(matches(both, R"("a")"));
  EXPECT_FALSE(matches(both, R"("c")"));
  EXPECT_FALSE(matches(both, "3"));
  EXPECT_FALSE(matches(both, "null"));
  auto obj = json_object_grammar();
  EXPECT_TRUE(matches(obj, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(matches(obj, R"([1])"));
}

TEST(JsonSchema, HostileSchemasAreRefused) {
  auto refused = [](const std::string& text, const std::string& words) {
    auto g = json_schema_grammar_text(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.status().to_string().find(words), std::string::npos) << g.status().to_string();
  };
  refused(R"({"type":"string","pattern":"a+"})", "'pattern' is not supported");
  refused(R"({"type":"integer","minimum":5,"maximum":1})", "admit no value");
  refused(R"({"type":"array","minItems":3,"maxItems":1})", "greater than maxItems");
  refused(R"({"enum":[]})", "admits no value");
  refused(R"({"type":"string","enum":[1,2]})", "admits no value");
  refused(R"({"type":"string","const":1})", "admits no value");
  refused(R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})", "left-recursive");
  refused(R"({"$ref":"https://example.com/s.json"})", "only local $ref");
  refused(R"({"type":"object","required":["x"],"additionalProperties":false})", "additionalProperties is false");
  refused(R"({"type":"wat"})", "unknown type");
  refused("{\"type\":", "not valid JSON");
  std::string deep = "{\"type\":\"integer\"}";
  for (int i = 0; i < 100; ++i) deep = "{\"type\":\"array\",\"items\":" + deep + "}";
  refused(deep, "deeper than");
  json wide = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 3000; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
  refused(wide.dump(), "too many properties");
  // anyOf branches each repeating a large sibling enum: refused as it grows, not after.
  json multiplied = {{"enum", json::array()}, {"anyOf", json::array()}};
  for (int i = 0; i < 500; ++i) multiplied["enum"].push_back(std::string(1000, 'a') + std::to_string(i));
  for (int i = 0; i < 500; ++i) multiplied["anyOf"].push_back({{"type", "string"}});
  refused(multiplied.dump(), "too large");
  // Recursion through properties is fine (it consumes input) and stays small.
  EXPECT_TRUE(json_schema_grammar_text(R"({"type":"object","properties":{"x":{"$ref":"#"}}})").ok());
}

// A byte-level BPE vocabulary small enough to reason about: printable ASCII, a few merged
// tokens, and an end-of-generation control token.
Tokenizer tiny_tokenizer() {
  TokenizerMetadata m;
  m.model = "llama";
  auto add = [&](std::string text, int32_t type) {
    m.tokens.push_back(std::move(text));
    m.token_types.push_back(type);
    m.scores.push_back(-static_cast<float>(m.tokens.size()));
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 6);
  }
  for (const char* piece : {"\u2581", "{\"", "\":", "true", "\u2581\"", "ok", "}"}) add(piece, 1);
  m.unk_id = 0;
  m.bos_id = 1;
  m.eos_id = 2;
  return Tokenizer::create(std::move(m)).value();
}

TEST(GrammarSampling, MaskAgreesWithAcceptsAndSamplingFollowsTheGrammar) {
  Tokenizer tok = tiny_tokenizer();
  auto g = schema(json::parse(R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})"));
  ASSERT_TRUE(g);
  auto trie = std::make_shared<const TokenTrie>(tok);
  GrammarMatcher m(g, tok, trie);
  std::vector<uint8_t> mask;
  std::mt19937 rng(3);
  std::string text;
  const int32_t eos = tok.eos_id();
  for (int step = 0; step < 40; ++step) {
    m.allowed(&mask);
    for (int32_t id = 0; id < tok.vocab_size(); ++id) ASSERT_EQ(mask[id] != 0, m.accepts(id)) << "token " << id;
    // Random logits: the sampler must pick an allowed token, greedy and sampled.
    std::vector<float> logits(static_cast<size_t>(tok.vocab_size()));
    for (auto& x : logits) x = static_cast<float>(rng() % 1000) / 100.0f;
    SamplerParams sp;
    sp.temp = step % 2 ? 0.0f : 1.0f;
    sp.seed = 1;
    Sampler sampler(sp, tok.vocab_size());
    const int32_t id = sampler.sample(logits.data(), nullptr, 0, &m);
    ASSERT_GE(id, 0);
    ASSERT_TRUE(mask[id]) << "sampled a refused token " << id;
    if (id == eos) break;
    ASSERT_TRUE(m.accept(id));
    text += tok.token_to_piece(id, false);
  }
  EXPECT_TRUE(m.can_end()) << text;
  auto parsed = json::parse(text, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << text;
  EXPECT_TRUE(parsed["ok"].is_boolean()) << text;
}

}  // namespace
}  // namespace loom::llm
