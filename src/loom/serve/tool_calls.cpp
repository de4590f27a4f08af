// Tool-call formats, prompts, grammars and parsers (see tool_calls.h).
#include "loom/serve/tool_calls.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "loom/engine/json_schema.h"

namespace loom::serve {

using json = nlohmann::ordered_json;
using B = llm::GrammarBuilder;

namespace {

constexpr size_t kMaxTools = 64;
constexpr int kMaxParallelCalls = 8;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(a, b - a + 1));
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3: return "llama3";
    case ToolFormat::kMistral: return "mistral";
    case ToolFormat::kGeneric: return "generic";
  }
  return "generic";
}

ToolFormat tool_format_of(const llm::ChatTemplate& tmpl) {
  static std::mutex mu;
  static std::map<std::string, ToolFormat> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(tmpl.source());
  if (it != cache.end()) return it->second;
  const char* probe = "loom_probe_tool_7f3a";
  json tools = json::array({json{{"type", "function"},
                                 {"function", {{"name", probe}, {"description", "probe"},
                                               {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}});
  json messages = json::array({json{{"role", "user"}, {"content", "hi"}}});
  auto text = tmpl.render_json(dump(messages), true, dump(json{{"tools", tools}}));
  ToolFormat f = ToolFormat::kGeneric;
  if (text.ok() && text->find(probe) != std::string::npos) {
    const std::string& src = tmpl.source();
    if (src.find("<tool_call>") != std::string::npos) f = ToolFormat::kHermes;
    else if (src.find("[TOOL_CALLS]") != std::string::npos) f = ToolFormat::kMistral;
    else if (src.find("<|start_header_id|>") != std::string::npos || src.find("python_tag") != std::string::npos)
      f = ToolFormat::kLlama3;
    // A template that shows tools in a syntax not known here gets the generic format.
  }
  cache.emplace(tmpl.source(), f);
  return f;
}

Status parse_tools(const json& body, ToolSetup* out, std::string* param) {
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null() && !(tools->is_array() && tools->empty());
  if (has_tools) {
    *param = "tools";
    if (!tools->is_array()) return invalid_argument("'tools' must be an array of {{\"type\": \"function\", \"function\": {{...}}}}");
    if (tools->size() > kMaxTools) return invalid_argument("'tools' holds at most {} tools (got {})", kMaxTools, tools->size());
    std::map<std::string, bool> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      *param = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") ||
          !t["function"].is_object())
        return invalid_argument("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i);
      const json& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || !valid_name(f["name"].get<std::string>()))
        return invalid_argument("tools[{}].function.name must be 1-64 letters, digits, '_', '-' or '.'", i);
      const std::string name = f["name"].get<std::string>();
      if (names.count(name)) return invalid_argument("tools[{}]: the function name '{}' is used twice", i, name);
      names[name] = true;
      if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
        return invalid_argument("tools[{}].function.description must be a string", i);
      if (f.contains("parameters") && !f["parameters"].is_null()) {
        *param = fmt::format("tools[{}].function.parameters", i);
        if (!f["parameters"].is_object()) return invalid_argument("tools[{}].function.parameters must be a JSON Schema object", i);
        // The schema must compile: a forced call (or the generic format) is sampled through it.
        llm::JsonGrammar jg;
        auto r = jg.schema(f["parameters"], f["parameters"]);
        if (!r.ok()) return invalid_argument("tools[{}].function.parameters: {}", i, r.status().message());
      }
    }
    out->tools = *tools;
  }
  auto choice = body.find("tool_choice");
  *param = "tool_choice";
  out->choice = has_tools ? "auto" : "none";
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c != "none" && c != "auto" && c != "required")
        return invalid_argument("'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", "
                                "\"function\": {{\"name\": ...}}}}");
      out->choice = c;
    } else if (choice->is_object() && choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string()) {
      out->choice = "function";
      out->forced = (*choice)["function"]["name"].get<std::string>();
      bool found = false;
      if (has_tools)
        for (const json& t : *tools) found = found || t["function"]["name"] == out->forced;
      if (!found) return invalid_argument("'tool_choice' names the function '{}', which is not in 'tools'", out->forced.substr(0, 64));
    } else {
      return invalid_argument("'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", "
                              "\"function\": {{\"name\": ...}}}}");
    }
    if (!has_tools && out->choice != "none" && out->choice != "auto")
      return invalid_argument("'tool_choice' \"{}\" needs 'tools'", out->choice);
    if (!has_tools) out->choice = "none";
  }
  auto par = body.find("parallel_tool_calls");
  if (par != body.end() && !par->is_null()) {
    *param = "parallel_tool_calls";
    if (!par->is_boolean()) return invalid_argument("'parallel_tool_calls' must be true or false");
    out->parallel = par->get<bool>();
  }
  param->clear();
  out->active = has_tools && out->choice != "none";
  return Status();
}

namespace {

// The system text that offers the tools in the generic format.
std::string generic_system_text(const ToolSetup& t) {
  std::string s = "You can call the following tools. Each line is one tool: its name, what it does, and the JSON "
                  "Schema of its arguments.\n";
  for (const json& tool : t.tools) {
    const json& f = tool["function"];
    if (t.choice == "function" && f["name"] != t.forced) continue;
    json line = {{"name", f["name"]}};
    if (f.contains("description") && f["description"].is_string()) line["description"] = f["description"];
    line["parameters"] = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : json::object();
    s += dump(line) + "\n";
  }
  s += "\nReply with one JSON object and nothing else. To call tools: "
       "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}]}";
  if (t.choice == "auto") s += ". To answer without calling a tool: {\"response\": \"<your answer>\"}";
  s += ". A tool's result comes back as {\"tool_response\": {\"name\": ..., \"content\": ...}}";
  if (t.choice == "auto") s += "; once the results answer the question, reply with {\"response\": \"<your answer>\"}";
  s += ".";
  return s;
}

json arguments_value(const json& args) {
  if (args.is_string()) {
    json parsed = json::parse(args.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) return parsed;
  }
  return args;
}

}  // namespace

Status tool_messages(const ToolSetup& t, const json& messages, json* out, std::string* extra_vars) {
  extra_vars->clear();
  if (t.format != ToolFormat::kGeneric) {
    // Native: the template renders tool_calls and tool turns itself; arguments go in as objects
    // (as templates index into them).
    *out = json::array();
    for (json m : messages) {
      if (m.contains("tool_calls"))
        for (json& c : m["tool_calls"])
          if (c.contains("function") && c["function"].contains("arguments"))
            c["function"]["arguments"] = arguments_value(c["function"]["arguments"]);
      out->push_back(std::move(m));
    }
    if (t.active) *extra_vars = dump(json{{"tools", t.tools}});
    return Status();
  }
  // Generic: plain turns only. Tool calls become the JSON the model writes; tool results become
  // user turns; consecutive turns of one role are joined (templates such as Gemma's want the
  // roles to alternate).
  std::map<std::string, std::string> call_names;
  json turns = json::array();
  auto add = [&](const std::string& role, const std::string& content) {
    if (!turns.empty() && turns.back()["role"] == role) {
      turns.back()["content"] = turns.back()["content"].get<std::string>() + "\n\n" + content;
    } else {
      turns.push_back(json{{"role", role}, {"content", content}});
    }
  };
  if (t.active) add("system", generic_system_text(t));
  for (const json& m : messages) {
    const std::string role = m["role"].get<std::string>();
    const std::string content = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()) {
      json calls = json::array();
      for (const json& c : m["tool_calls"]) {
        const std::string name = c["function"]["name"].get<std::string>();
        if (c.contains("id") && c["id"].is_string()) call_names[c["id"].get<std::string>()] = name;
        calls.push_back(json{{"name", name}, {"arguments", arguments_value(c["function"]["arguments"])}});
      }
      if (t.active) {
        add("assistant", dump(json{{"tool_calls", calls}}));
      } else {
        // No tools on offer now (tool_choice none): the history in words, so the model answers in
        // words too.
        std::string said;
        for (const json& c : calls) said += fmt::format("I called the tool {} with {}.\n", c["name"].get<std::string>(), dump(c["arguments"]));
        add("assistant", trim(said));
      }
    } else if (role == "assistant" && t.active) {
      add("assistant", dump(json{{"response", content}}));
    } else if (role == "tool") {
      std::string name = m.contains("name") && m["name"].is_string() ? m["name"].get<std::string>() : "";
      if (name.empty() && m.contains("tool_call_id") && m["tool_call_id"].is_string())
        name = call_names[m["tool_call_id"].get<std::string>()];
      if (t.active) add("user", dump(json{{"tool_response", {{"name", name}, {"content", content}}}}));
      else add("user", fmt::format("The tool {} returned: {}", name, content));
    } else {
      add(role, content);
    }
  }
  *out = std::move(turns);
  return Status();
}

Result<std::shared_ptr<const llm::Grammar>> tool_grammar(const ToolSetup& t) {
  if (!t.active) return std::shared_ptr<const llm::Grammar>();
  if (t.format != ToolFormat::kGeneric && t.choice == "auto") return std::shared_ptr<const llm::Grammar>();
  llm::JsonGrammar jg;
  B& b = jg.builder();
  const char* args_key = t.format == ToolFormat::kLlama3 ? "parameters" : "arguments";
  std::vector<B::Seq> calls;
  for (const json& tool : t.tools) {
    const json& f = tool["function"];
    if (t.choice == "function" && f["name"] != t.forced) continue;
    uint32_t args;
    if (f.contains("parameters") && f["parameters"].is_object()) {
      LOOM_ASSIGN_OR_RETURN(args, jg.schema(f["parameters"], f["parameters"]));
    } else {
      args = jg.any_object();
    }
    B::Seq s = B::literal("{\"name\":");
    s.push_back(B::ref(jg.ws()));
    B::Seq name = B::literal(dump(f["name"]) + ",");
    s.insert(s.end(), name.begin(), name.end());
    s.push_back(B::ref(jg.ws()));
    B::Seq key = B::literal(fmt::format("\"{}\":", args_key));
    s.insert(s.end(), key.begin(), key.end());
    s.push_back(B::ref(jg.ws()));
    s.push_back(B::ref(args));
    s.push_back(B::byte('}'));
    calls.push_back(std::move(s));
  }
  const uint32_t call = b.add("call", std::move(calls));
  uint32_t root;
  if (t.format == ToolFormat::kGeneric) {
    B::Seq more{B::byte(','), B::ref(jg.ws()), B::ref(call)};
    B::Seq list{B::ref(call)};
    B::Seq rest = llm::grammar_repeat(b, more, 0, t.parallel ? kMaxParallelCalls - 1 : 0);
    list.insert(list.end(), rest.begin(), rest.end());
    B::Seq tc = B::literal("{\"tool_calls\":");
    tc.push_back(B::ref(jg.ws()));
    tc.push_back(B::byte('['));
    tc.insert(tc.end(), list.begin(), list.end());
    tc.push_back(B::byte(']'));
    tc.push_back(B::byte('}'));
    std::vector<B::Seq> alts{tc};
    if (t.choice == "auto") {
      B::Seq resp = B::literal("{\"response\":");
      resp.push_back(B::ref(jg.ws()));
      resp.push_back(B::ref(jg.string()));
      resp.push_back(B::byte('}'));
      alts.push_back(std::move(resp));
    }
    root = b.add("reply", std::move(alts));
  } else if (t.format == ToolFormat::kHermes) {
    B::Seq s = B::literal("<tool_call>\n");
    s.push_back(B::ref(call));
    B::Seq end = B::literal("\n</tool_call>");
    s.insert(s.end(), end.begin(), end.end());
    root = b.add("reply", {s});
  } else if (t.format == ToolFormat::kMistral) {
    B::Seq s = B::literal("[TOOL_CALLS][");
    s.push_back(B::ref(call));
    s.push_back(B::byte(']'));
    root = b.add("reply", {s});
  } else {
    root = call;
  }
  return jg.build(root);
}

namespace {

std::string call_id(ToolFormat f, uint64_t seq, size_t i) {
  static const char* alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t x = seq * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1;
  std::string id;
  for (int k = 0; k < 9; ++k) {
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    id += alnum[x % 62];
  }
  return f == ToolFormat::kMistral ? id : "call_" + id;
}

// {"name": ..., "arguments"|"parameters": {...}} -> a call; false when it is not one.
bool call_from(const json& j, ToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  out->name = j["name"].get<std::string>();
  json args = j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : json::object();
  if (args.is_string()) {
    json parsed = json::parse(args.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded()) args = parsed;
  }
  out->arguments = dump(args);
  return true;
}

}  // namespace

ToolOutput parse_tool_output(ToolFormat f, std::string_view text, uint64_t seq) {
  ToolOutput out;
  auto add_call = [&](const json& j) {
    ToolCall c;
    if (!call_from(j, &c)) return false;
    c.id = call_id(f, seq, out.calls.size());
    out.calls.push_back(std::move(c));
    return true;
  };
  switch (f) {
    case ToolFormat::kGeneric: {
      json j = json::parse(text.begin(), text.end(), nullptr, false);
      if (j.is_object() && j.contains("tool_calls") && j["tool_calls"].is_array()) {
        for (const json& c : j["tool_calls"]) add_call(c);
        if (j.contains("response") && j["response"].is_string()) out.content = j["response"].get<std::string>();
        if (!out.calls.empty()) return out;
      }
      if (j.is_object() && j.contains("response") && j["response"].is_string()) {
        out.content = j["response"].get<std::string>();
        return out;
      }
      out.content = std::string(text);
      return out;
    }
    case ToolFormat::kHermes: {
      std::string content;
      size_t at = 0;
      while (true) {
        const size_t open = text.find("<tool_call>", at);
        if (open == std::string_view::npos) {
          content += text.substr(at);
          break;
        }
        content += text.substr(at, open - at);
        const size_t body = open + 11;
        size_t close = text.find("</tool_call>", body);
        const std::string_view inner = text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
        json j = json::parse(inner.begin(), inner.end(), nullptr, false);
        if (j.is_discarded() || !add_call(j)) {
          content += text.substr(open);  // not a call after all: keep the text
          break;
        }
        if (close == std::string_view::npos) break;
        at = close + 12;
      }
      out.content = out.calls.empty() ? std::string(text) : trim(content);
      return out;
    }
    case ToolFormat::kMistral: {
      const size_t at = text.find("[TOOL_CALLS]");
      if (at == std::string_view::npos) {
        out.content = std::string(text);
        return out;
      }
      const std::string_view rest = text.substr(at + 12);
      json j = json::parse(rest.begin(), rest.end(), nullptr, false);
      if (j.is_object()) j = json::array({j});
      if (j.is_array())
        for (const json& c : j) add_call(c);
      out.content = out.calls.empty() ? std::string(text) : trim(text.substr(0, at));
      return out;
    }
    case ToolFormat::kLlama3: {
      std::string body = trim(text);
      if (body.rfind("<|python_tag|>", 0) == 0) body = trim(std::string_view(body).substr(14));
      // One call, several separated by ';', or an array of them.
      json j = json::parse(body, nullptr, false);
      if (j.is_discarded() && body.find(';') != std::string::npos) {
        json arr = json::array();
        size_t a = 0;
        while (a <= body.size()) {
          size_t b = body.find(';', a);
          json part = json::parse(body.substr(a, b == std::string::npos ? std::string::npos : b - a), nullptr, false);
          if (part.is_discarded()) {
            arr = json();
            break;
          }
          arr.push_back(part);
          if (b == std::string::npos) break;
          a = b + 1;
        }
        j = arr;
      }
      if (j.is_object()) j = json::array({j});
      bool all = j.is_array() && !j.empty();
      if (all)
        for (const json& c : j) all = all && c.is_object() && c.contains("name") && (c.contains("parameters") || c.contains("arguments"));
      if (all)
        for (const json& c : j) add_call(c);
      if (out.calls.empty()) out.content = std::string(text);
      return out;
    }
  }
  out.content = std::string(text);
  return out;
}

}  // namespace loom::serve
