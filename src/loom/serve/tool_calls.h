// Tool calling in OpenAI's shape: the tool-call syntax each model family writes (found from its
// chat template), the prompt that offers the tools, the grammar that forces a call, and the
// parser that turns generated text back into content and tool_calls. See docs/server.md
// ("Tool calling").
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/base/status.h"
#include "loom/engine/grammar.h"
#include "loom/text/chat_template.h"

namespace loom::serve {

// How a model writes a tool call:
//   kHermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (Hermes, Qwen 2.5/3)
//   kLlama3   {"name": ..., "parameters": {...}}, optionally after <|python_tag|> (Llama 3.x)
//   kMistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
//   kGeneric  a template without tool support: the tools are described in a system message and
//             every reply is one JSON object, {"tool_calls": [{"name", "arguments"}]} or
//             {"response": "text"}, enforced by a grammar (what llama-server does for such
//             templates, e.g. Gemma 3's).
enum class ToolFormat { kGeneric, kHermes, kLlama3, kMistral };
const char* tool_format_name(ToolFormat f);

// The format of a template: native when rendering it with a `tools` variable shows the tools,
// told apart by the markers its source uses; kGeneric otherwise. Cached per template.
ToolFormat tool_format_of(const llm::ChatTemplate& tmpl);

struct ToolCall {
  std::string id;         // "call_" + 9 characters (Mistral's templates want 9 alphanumerics)
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ToolSetup {
  bool active = false;             // tools offered and tool_choice not "none"
  ToolFormat format = ToolFormat::kGeneric;
  std::string choice = "auto";     // auto | required | function
  std::string forced;              // the function's name when choice is "function"
  bool parallel = false;           // parallel_tool_calls given as true: up to 8 calls in a
                                   // forced or generic reply (small models repeat a call until
                                   // the limit when allowed to, so one is the default)
  nlohmann::ordered_json tools;            // the request's tools (OpenAI shape), validated
};

// Validates `tools`, `tool_choice` and `parallel_tool_calls` of a request body (read with its
// keys in order, so schemas keep their property order). On error fills
// *param and returns the message.
Status parse_tools(const nlohmann::ordered_json& body, ToolSetup* out, std::string* param);

// The messages (OpenAI shape: role, content, tool_calls, tool_call_id, name) as the template
// gets them, and the extra template variables ({"tools": ...} for native formats, "" for
// none). The generic format rewrites tool traffic into plain turns (see above).
Status tool_messages(const ToolSetup& t, const nlohmann::ordered_json& messages, nlohmann::ordered_json* out_messages,
                     std::string* extra_vars);

// The grammar a reply must follow: the generic format always (a JSON object), native formats
// when a call is forced (required / a named function). Null when sampling is free.
Result<std::shared_ptr<const llm::Grammar>> tool_grammar(const ToolSetup& t);

// Splits generated text into content and tool calls; `seq` makes the call ids of one response
// distinct.
struct ToolOutput {
  std::string content;
  std::vector<ToolCall> calls;
};
ToolOutput parse_tool_output(ToolFormat f, std::string_view text, uint64_t seq);

}  // namespace loom::serve
