// Jinja interpreter and chat templates: the shared case table (also checked against real jinja2
// by tests/py/test_chat_template.py), error locations, limits on hostile templates, Python
// formatting helpers and ChatTemplate over an in-memory GGUF.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "loom/base/file.h"
#include "loom/gguf/gguf.h"
#include "loom/gguf/gguf_writer.h"
#include "loom/text/chat_template.h"
#include "loom/text/jinja/json.h"
#include "loom/text/jinja/template.h"
#include "loom/text/jinja/value.h"

namespace loom::llm::jinja {
namespace {

Result<std::string> render(std::string_view source, std::string_view vars_json = "{}", const Limits& limits = {}) {
  LOOM_ASSIGN_OR_RETURN(Template t, Template::parse(source));
  LOOM_ASSIGN_OR_RETURN(Value vars, parse_json(vars_json));
  return t.render(vars.dict(), limits);
}

// Renders and expects success with `expected`.
void expect_render(std::string_view source, std::string_view expected, std::string_view vars = "{}") {
  auto r = render(source, vars);
  ASSERT_TRUE(r.ok()) << source << "\n-> " << r.status().to_string();
  EXPECT_EQ(*r, expected) << source;
}

// Expects an error whose message contains `fragment`; returns the status.
Status error_of(std::string_view source, std::string_view fragment, std::string_view vars = "{}",
                    const Limits& limits = {}) {
  auto r = render(source, vars, limits);
  EXPECT_FALSE(r.ok()) << source << " rendered " << (r.ok() ? *r : "");
  if (r.ok()) return Status();
  EXPECT_NE(r.status().to_string().find(fragment), std::string::npos)
      << source << "\nmessage: " << r.status().to_string() << "\nwanted: " << fragment;
  return r.status();
}

void expect_error(std::string_view source, std::string_view fragment, std::string_view vars = "{}",
                  const Limits& limits = {}) {
  (void)error_of(source, fragment, vars, limits);
}

// --- the shared case table ------------------------------------------------------------------------

TEST(JinjaCases, MatchExpectedOutputsAndErrors) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/py/templates/cases.json");
  ASSERT_TRUE(in) << "missing tests/py/templates/cases.json";
  std::stringstream ss;
  ss << in.rdbuf();
  auto cases = parse_json(ss.str());
  ASSERT_TRUE(cases.ok()) << cases.status().to_string();
  ASSERT_GE(cases->items().size(), 100u);
  for (const Value& c : cases->items()) {
    std::string name = c.dict().find("name")->str();
    SCOPED_TRACE(name);
    const std::string& tmpl = c.dict().find("template")->str();
    auto vars = to_json(*c.dict().find("vars"));
    ASSERT_TRUE(vars.ok());
    if (const Value* err = c.dict().find("error")) {
      expect_error(tmpl, err->str(), *vars);
    } else {
      expect_render(tmpl, c.dict().find("expected")->str(), *vars);
    }
  }
}

// --- features, each with an expectation derived from jinja2's documented behaviour -----------------

TEST(Jinja, ChatmlLoop) {
  expect_render(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
}

TEST(Jinja, TrimBlocksEatsOneNewlineOnly) { expect_render("{% if true %}\n\nx{% endif %}", "\nx"); }

TEST(Jinja, LstripBlocksOnlyAtLineStart) {
  expect_render("a  {% if true %}b{% endif %}", "a  b");
  expect_render("a\n \t {% if true %}b{% endif %}", "a\nb");
}

TEST(Jinja, CommentStripsLikeBlocks) { expect_render("x\n    {# c #}\ny", "x\ny"); }

TEST(Jinja, RawKeepsDelimiters) { expect_render("{% raw %}{% if %}{{ x }}{# y #}{% endraw %}", "{% if %}{{ x }}{# y #}"); }

TEST(Jinja, DictLiteralClosingBracesInsideVariable) { expect_render("{{ {'a': {'b': 1}}['a']['b'] }}", "1"); }

TEST(Jinja, StringLiteralEscapes) { expect_render(R"({{ 'a\tb\\c\x41\101' }})", "a\tb\\cAA"); }

TEST(Jinja, NumberLiterals) { expect_render("{{ 1_000 }} {{ 0x1f }} {{ 0b101 }} {{ 0o17 }} {{ 2.5e2 }}", "1000 31 5 15 250.0"); }

TEST(Jinja, IntegerOverflowIsAnError) { expect_error("{{ 9223372036854775807 + 1 }}", "overflow"); }

TEST(Jinja, NamespaceSharedAcrossLoopScopes) {
  expect_render("{% set ns = namespace(found=false) %}{% for m in ['a', 'sys', 'b'] %}"
                "{% if m == 'sys' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
                "True");
}

TEST(Jinja, MacroSeesLaterTopLevelAssignments) {
  expect_render("{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}", "1");
}

TEST(Jinja, NestedLoopsKeepTheirOwnLoopVariable) {
  expect_render("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
                "121;122;");
}

TEST(Jinja, LoopChanged) {
  expect_render("{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", "121");
}

TEST(Jinja, UndefinedIsFalsyEmptyAndIterable) {
  expect_render("{% if missing %}x{% endif %}[{{ missing }}]{% for a in missing %}x{% endfor %}{{ missing|length }}",
                "[]0");
}

TEST(Jinja, ItemsOfMissingMessageFieldAreUndefined) {
  expect_render("{{ m.tool_calls is defined }}|{{ m['content'] }}|{{ m.get('x', 'dflt') }}", "False|c|dflt",
                R"({"m": {"content": "c"}})");
}

TEST(Jinja, ConditionalExpressionWithoutElseIsUndefined) {
  expect_error("{{ (x if false).attr }}", "evaluated to false and no else section");
}

TEST(Jinja, MarkupAdditionEscapesPlainSide) { expect_render("{{ '<'|e + '<b>' }}|{{ '<'|e ~ '<b>' }}", "&lt;&lt;b&gt;|&lt;<b>"); }

TEST(Jinja, UnknownFilterInsideIfIsDeferredUntilRun) {
  expect_render("{% if false %}{{ x|nosuch }}{% endif %}ok", "ok");
  expect_error("{% if true %}{{ x|nosuch }}{% endif %}", "1:19: no filter named 'nosuch'");
  expect_render("{{ 1 if true else x|nosuch }}", "1");
}

TEST(Jinja, UnknownFilterInsideLoopFailsAtParse) {
  auto t = Template::parse("{% if true %}{% for i in [] %}{{ i|nosuch }}{% endfor %}{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("1:36: no filter named 'nosuch'"), std::string::npos) << t.status().message();
}

TEST(Jinja, StrftimeNowFormatsTheCurrentDate) {
  auto r = render("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 4u);
  int year = std::stoi(*r);
  EXPECT_GE(year, 2024);
  EXPECT_LT(year, 2200);
}

// Macros close over the scope that holds them, namespaces can hold themselves, loop.changed()
// keeps its last argument: all reference cycles, broken when the render ends (a sanitizer
// build, LOOM_SANITIZE=ON, reports a leak if they are not).
TEST(Jinja, ReferenceCyclesRenderAndAreReleased) {
  expect_render("{% macro m() %}x{% endmacro %}{% set ns = namespace() %}{% set ns.me = ns %}"
                "{% set j = joiner(ns) %}{% set ns.j = j %}{% set ns.m = m %}"
                "{% for i in [1, 2] %}{% if loop.changed(loop) %}{% endif %}{% endfor %}"
                "{% for i in [1, 2] %}{{ loop.changed(i // 5) }}{% endfor %}{{ ns.m() }}{{ j() }}|{{ ns.me.me.m() }}",
                "TrueFalsex|x");
}

TEST(Jinja, SortIsStableAndReverseKeepsTiesInOrder) {
  expect_render("{{ xs|sort(attribute='k', reverse=true)|map(attribute='v')|join }}", "cab",
                R"({"xs": [{"k": 1, "v": "a"}, {"k": 1, "v": "b"}, {"k": 2, "v": "c"}]})");
}

// --- errors: kinds and locations --------------------------------------------------------------------

TEST(JinjaErrors, SyntaxErrorNamesLineAndColumn) {
  Status s = error_of("line one\n{{ 1 + * 2 }}", "2:8:");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(JinjaErrors, UnterminatedBlocksPointAtTheOpeningTag) {
  expect_error("{% for m in messages %}\n{{ m }}", "1:4:");
  expect_error("{% for m in messages %}\n{{ m }}", "endfor");
  expect_error("a\n\n  {% if x %}{% else %}", "3:6:");
  expect_error("{% macro f() %}body", "endmacro");
  expect_error("{{ 'x' ", "1:1:");
}

TEST(JinjaErrors, EndTagOfAnotherBlock) { expect_error("{% for x in y %}{% endif %}", "innermost open block is 'for'"); }

TEST(JinjaErrors, UnknownFilterAndTest) {
  expect_error("\n  {{ name|shout }}", "2:11: no filter named 'shout'");
  expect_error("{% if x is shouting %}{% endif %}", "no test named 'shouting'");
}

TEST(JinjaErrors, RaiseExceptionCarriesMessageAndPosition) {
  Status s = error_of("{% if messages|length == 0 %}\n  {{- raise_exception('No messages!') }}{% endif %}",
                          "2:7: No messages!", R"({"messages": []})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(JinjaErrors, UndefinedUsedWrongly) {
  expect_error("{{ user.name }}", "'user' is undefined");
  expect_error("{{ m.a.b }}", "'dict object' has no attribute 'a'", R"({"m": {}})");
  expect_error("{{ missing + 1 }}", "'missing' is undefined");
  expect_error("{{ missing() }}", "'missing' is undefined");
}

TEST(JinjaErrors, SandboxRefusesMutationAndPrivateAttributes) {
  expect_error("{{ {'a': 1}.update({'b': 2}) }}", "access to attribute 'update' of 'dict' object is unsafe");
  expect_render("[{{ 'x'.__class__ }}]", "[]");
}

TEST(JinjaErrors, InvalidUtf8TemplateIsRefused) { expect_error(std::string("ab\xff{{ 1 }}"), "not valid UTF-8"); }

// --- limits on hostile templates ---------------------------------------------------------------------

TEST(JinjaLimits, InfiniteMacroRecursionStops) {
  Status s = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper than");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, MutualRecursionThroughCallerStops) {
  expect_error("{% macro a() %}{% call a() %}{{ caller() }}{% endcall %}{% endmacro %}{{ a() }}", "nested deeper than");
}

TEST(JinjaLimits, DeeplyNestedExpressionIsRefusedAtParse) {
  std::string src = "{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}";
  auto t = Template::parse(src);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nested deeper than"), std::string::npos) << t.status().message();
}

TEST(JinjaLimits, DeeplyNestedBlocksAreRefusedAtParse) {
  std::string src;
  for (int i = 0; i < 5000; ++i) src += "{% if true %}";
  auto t = Template::parse(src);
  ASSERT_FALSE(t.ok());
}

TEST(JinjaLimits, LongNotChainIsRefused) {
  std::string src = "{{ ";
  for (int i = 0; i < 50000; ++i) src += "not ";
  src += "1 }}";
  EXPECT_FALSE(Template::parse(src).ok());
}

TEST(JinjaLimits, ExponentialStringGrowthStops) {
  Status s = error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                          "bytes");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, OutputSizeIsBounded) {
  Limits small;
  small.max_output_bytes = 1000;
  Status s = error_of("{% for i in range(1000) %}0123456789{% endfor %}", "output exceeds 1000 bytes", "{}", small);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, EvaluationStepsAreBounded) {
  Limits small;
  small.max_steps = 100000;
  Status s = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                          "evaluation steps", "{}", small);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, RenderTimeIsBounded) {
  // Each step scans a 100000-element list: few steps, much work; the clock stops it.
  Limits quick;
  quick.max_millis = 200;
  Status s = error_of("{% set xs = range(100000)|list %}{% for i in range(100000) %}{% if -1 in xs %}{% endif %}{% endfor %}",
                      "took longer than 200 ms", "{}", quick);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, RepeatedLargeFilterResultsExhaustTheWorkBudget) {
  Limits small;
  small.max_string_work = 32 << 20;  // a few sorted copies of a 100000-element list
  Status s = error_of("{% set xs = range(100000)|list %}{% for i in range(1000) %}{{ xs|sort|length }}{% endfor %}",
                      "bytes of strings and lists", "{}", small);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, StringRepetitionIsBounded) {
  expect_error("{{ 'x' * 9000000000000000000 }}", "exceeds");
  expect_error("{{ [1, 2] * 9000000000000000000 }}", "bytes of strings and lists");
}

// --- Python compatibility helpers ---------------------------------------------------------------------

TEST(JinjaPython, FloatRepr) {
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(1e22), "1e+22");
  EXPECT_EQ(format_float(123456789.0), "123456789.0");
  EXPECT_EQ(format_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(format_float(-2.0), "-2.0");
  EXPECT_EQ(format_float(1.0 / 3), "0.3333333333333333");
}

TEST(JinjaPython, StringRepr) {
  EXPECT_EQ(py_repr_string("plain"), "'plain'");
  EXPECT_EQ(py_repr_string("it's"), "\"it's\"");
  EXPECT_EQ(py_repr_string("both ' \""), "'both \\' \"'");
  EXPECT_EQ(py_repr_string("tab\t\x01\xc3\xa9"), "'tab\\t\\x01\xc3\xa9'");
}

TEST(JinjaPython, JsonDumpsLayout) {
  auto v = parse_json(R"({"z": [1, 2.0, "\u00e9\n"], "a": {}, "n": null})");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*to_json(*v), "{\"z\": [1, 2.0, \"\xc3\xa9\\n\"], \"a\": {}, \"n\": null}");
  JsonOptions o;
  o.ensure_ascii = true;
  o.sort_keys = true;
  EXPECT_EQ(*to_json(*v, o), "{\"a\": {}, \"n\": null, \"z\": [1, 2.0, \"\\u00e9\\n\"]}");
  EXPECT_FALSE(to_json(Value()).ok());  // Undefined is not serializable
}

TEST(JinjaPython, JsonRefusesHostileNesting) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  EXPECT_FALSE(parse_json(deep).ok());
}

// --- ChatTemplate ----------------------------------------------------------------------------------

Result<GgufFile> tiny_gguf(std::string_view arch, const char* chat_template) {
  GgufWriter w;
  w.set_string("general.architecture", arch);
  w.set_strings("tokenizer.ggml.tokens", {"<pad>", "<s>", "</s>", "hi"});
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  if (chat_template) w.set_string("tokenizer.chat_template", chat_template);
  return GgufFile::parse(MappedFile::from_bytes(w.serialize()), "tiny.gguf");
}

TEST(ChatTemplate, RendersTheModelsTemplateWithItsSpecialTokens) {
  auto g = tiny_gguf("llama", "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                              "{% if add_generation_prompt %}[assistant:{% endif %}{{ eos_token if not add_generation_prompt }}");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto out = render_chat(*g, {{"system", "S"}, {"user", "U"}}, true);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "<s>[system:S][user:U][assistant:");
  out = render_chat(*g, {{"user", "U"}}, false);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<s>[user:U]</s>");
}

TEST(ChatTemplate, ToolsAndDocumentsAreNoneLikeTransformers) {
  auto t = ChatTemplate::from_source("{{ tools is none }} {{ documents is none }} {{ tools is defined }}", "", "");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render({}, false), "True True True");
  auto r = t->render_json("[]", false, R"({"tools": [{"type": "function"}]})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "False True True");
}

TEST(ChatTemplate, GemmaWithoutTemplateGetsTheBuiltinTurnFormat) {
  auto g = tiny_gguf("gemma3", nullptr);
  ASSERT_TRUE(g.ok());
  auto t = ChatTemplate::from_gguf(*g);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(t->is_builtin());
  auto out = t->render({{"system", "Be brief."}, {"user", " Hi \n"}, {"assistant", "Hello!"}}, false);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<s><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n");
  auto bad = t->render({{"user", "a"}, {"user", "b"}}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("Conversation roles must alternate"), std::string::npos);
}

TEST(ChatTemplate, MissingTemplateWithoutBuiltinIsNotFound) {
  auto g = tiny_gguf("llama", nullptr);
  ASSERT_TRUE(g.ok());
  auto t = ChatTemplate::from_gguf(*g);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplate, BadTemplateInGgufNamesTheFileAndPosition) {
  auto g = tiny_gguf("llama", "{% for m in messages %}{{ m.content }");
  ASSERT_TRUE(g.ok());
  auto t = ChatTemplate::from_gguf(*g);
  ASSERT_FALSE(t.ok());
  std::string msg = t.status().to_string();
  EXPECT_NE(msg.find("tiny.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1:"), std::string::npos) << msg;
}

TEST(ChatTemplate, MessagesJsonMustBeAnArray) {
  auto t = ChatTemplate::from_source("x", "", "");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render_json("{\"role\": \"user\"}", true).ok());
  EXPECT_FALSE(t->render_json("[{\"role\": ", true).ok());
}

}  // namespace
}  // namespace loom::llm::jinja
