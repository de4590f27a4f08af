// The server's tool-call formats: detection from templates, parsers of each family's syntax, the
// grammar of a forced call, and the messages handed to templates.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loom/engine/grammar.h"
#include "loom/serve/tool_calls.h"

namespace loom::serve {
namespace {

using json = nlohmann::ordered_json;

llm::ChatTemplate tmpl(const std::string& src) { return llm::ChatTemplate::from_source(src, "<s>", "</s>").value(); }

const char* kHermesLike =
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools> Reply with <tool_call>{...}"
    "</tool_call>{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
const char* kMistralLike =
    "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}{% for m in messages %}"
    "{% if m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}{% else %}{{ m.content }}{% endif %}{% endfor %}";
const char* kLlamaLike =
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{{ m.content }}{% endfor %}"
    "{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}";
const char* kNoTools = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";

TEST(ToolCalls, FormatFollowsTheTemplate) {
  EXPECT_EQ(tool_format_of(tmpl(kHermesLike)), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_of(tmpl(kMistralLike)), ToolFormat::kMistral);
  EXPECT_EQ(tool_format_of(tmpl(kLlamaLike)), ToolFormat::kLlama3);
  EXPECT_EQ(tool_format_of(tmpl(kNoTools)), ToolFormat::kGeneric);
}

TEST(ToolCalls, ParsersOfEachFamily) {
  auto h = parse_tool_output(ToolFormat::kHermes,
                             "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
                             "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 2}\"}</tool_call>",
                             1);
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.content, "Let me look.");
  EXPECT_EQ(h.calls[0].name, "f");
  EXPECT_EQ(h.calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(h.calls[1].arguments, "{\"b\":2}");  // arguments given as a string of JSON
  EXPECT_NE(h.calls[0].id, h.calls[1].id);
  auto not_call = parse_tool_output(ToolFormat::kHermes, "<tool_call>oops", 1);
  EXPECT_TRUE(not_call.calls.empty());
  EXPECT_EQ(not_call.content, "<tool_call>oops");

  auto m = parse_tool_output(ToolFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", 2);
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].id.size(), 9u);  // Mistral's templates check for 9 characters

  auto l = parse_tool_output(ToolFormat::kLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": \"y\"}}", 3);
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].arguments, "{\"x\":\"y\"}");
  auto l2 = parse_tool_output(ToolFormat::kLlama3,
                              "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}", 3);
  EXPECT_EQ(l2.calls.size(), 2u);
  auto prose = parse_tool_output(ToolFormat::kLlama3, "{\"answer\": 4}", 3);
  EXPECT_TRUE(prose.calls.empty());
  EXPECT_EQ(prose.content, "{\"answer\": 4}");

  auto g = parse_tool_output(ToolFormat::kGeneric, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": [1]}}]}", 4);
  ASSERT_EQ(g.calls.size(), 1u);
  EXPECT_EQ(g.calls[0].arguments, "{\"a\":[1]}");
  auto r = parse_tool_output(ToolFormat::kGeneric, "{\"response\": \"It is 21 C.\"}", 4);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "It is 21 C.");
}

ToolSetup setup(ToolFormat f, const std::string& choice) {
  json body = json::parse(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"]}}}]})");
  body["tool_choice"] = choice;
  ToolSetup t;
  std::string param;
  EXPECT_TRUE(parse_tools(body, &t, &param).ok());
  t.format = f;
  return t;
}

bool matches(const std::shared_ptr<const llm::Grammar>& g, std::string_view text) {
  llm::GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

TEST(ToolCalls, ForcedCallGrammars) {
  auto h = tool_grammar(setup(ToolFormat::kHermes, "required")).value();
  ASSERT_TRUE(h);
  EXPECT_TRUE(matches(h, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 3}}\n</tool_call>"));
  EXPECT_FALSE(matches(h, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 12}}\n</tool_call>"));
  EXPECT_FALSE(tool_grammar(setup(ToolFormat::kHermes, "auto")).value());  // native auto: free text
  auto l = tool_grammar(setup(ToolFormat::kLlama3, "required")).value();
  EXPECT_TRUE(matches(l, "{\"name\":\"f\",\"parameters\":{\"a\":0}}"));
  auto m = tool_grammar(setup(ToolFormat::kMistral, "required")).value();
  EXPECT_TRUE(matches(m, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 9}}]"));
  auto g = tool_grammar(setup(ToolFormat::kGeneric, "auto")).value();
  EXPECT_TRUE(matches(g, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": 1}}]}"));
  EXPECT_TRUE(matches(g, "{\"response\": \"hi\"}"));
  EXPECT_FALSE(matches(g, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, "
                          "{\"name\": \"f\", \"arguments\": {\"a\": 1}}]}"));  // one call unless parallel
}

TEST(ToolCalls, MessagesForTemplates) {
  json history = json::parse(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    {"role": "tool", "tool_call_id": "call_1", "content": "43"}])");
  json out;
  std::string extra;
  ASSERT_TRUE(tool_messages(setup(ToolFormat::kHermes, "auto"), history, &out, &extra).ok());
  EXPECT_EQ(out[1]["tool_calls"][0]["function"]["arguments"], json({{"a", 1}}));  // an object for templates
  EXPECT_NE(extra.find("\"tools\""), std::string::npos);
  ASSERT_TRUE(tool_messages(setup(ToolFormat::kGeneric, "auto"), history, &out, &extra).ok());
  EXPECT_TRUE(extra.empty());
  ASSERT_EQ(out.size(), 4u);  // system, user, assistant, one user turn for both results
  EXPECT_EQ(out[0]["role"], "system");
  EXPECT_EQ(out[2]["content"], R"({"tool_calls":[{"name":"f","arguments":{"a":1}}]})");
  EXPECT_NE(out[3]["content"].get<std::string>().find("\"name\":\"f\""), std::string::npos);
  EXPECT_NE(out[3]["content"].get<std::string>().find("43"), std::string::npos);
}

}  // namespace
}  // namespace loom::serve
