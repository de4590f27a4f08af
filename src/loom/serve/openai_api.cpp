// Validation of OpenAI request bodies into ApiRequest (see openai_api.h); the response bodies are
// in openai_response.cpp.
#include "loom/serve/openai_api.h"

#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/engine/json_schema.h"

namespace loom::serve {

using nlohmann::json;

namespace {

// Responses may carry model text that is not valid UTF-8 (byte tokens): replace, never throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiError bad(std::string param, std::string message, std::string code = "") {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

bool is_number(const json& v) { return v.is_number() && !v.is_boolean(); }

// Reads an optional float field in [lo, hi].
bool get_float(const json& body, const char* key, float lo, float hi, float* out, ApiError* err) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!is_number(*it)) {
    *err = bad(key, fmt::format("'{}' must be a number", key), "invalid_type");
    return false;
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    *err = bad(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, it->dump()), "invalid_value");
    return false;
  }
  *out = static_cast<float>(v);
  return true;
}

bool get_int(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out, bool* present, ApiError* err) {
  auto it = body.find(key);
  if (present) *present = false;
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number_integer()) {
    // 3.0 is accepted as 3 (JSON has one number type); 3.5 is not.
    if (it->is_number_float() && std::isfinite(it->get<double>()) && std::floor(it->get<double>()) == it->get<double>() &&
        std::fabs(it->get<double>()) < 9e15) {
      const int64_t v = static_cast<int64_t>(it->get<double>());
      if (v < lo || v > hi) {
        *err = bad(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, v), "invalid_value");
        return false;
      }
      *out = v;
      if (present) *present = true;
      return true;
    }
    *err = bad(key, fmt::format("'{}' must be an integer", key), "invalid_type");
    return false;
  }
  int64_t v;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    v = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  } else {
    v = it->get<int64_t>();
  }
  if (v < lo || v > hi) {
    *err = bad(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, it->dump()), "invalid_value");
    return false;
  }
  *out = v;
  if (present) *present = true;
  return true;
}

bool get_bool(const json& body, const char* key, bool* out, ApiError* err) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    *err = bad(key, fmt::format("'{}' must be true or false", key), "invalid_type");
    return false;
  }
  *out = it->get<bool>();
  return true;
}

// Every field a request may carry. Anything else is named in a 400, as OpenAI's API does, so a
// misspelt parameter ("temprature") is not silently ignored. The last row holds OpenAI fields
// that change nothing here (bookkeeping for their platform).
bool reject_unknown(const json& body, Endpoint ep, ApiError* err) {
  static const std::set<std::string, std::less<>> common = {
      "model", "n", "stream", "stream_options", "temperature", "top_p", "min_p", "top_k", "seed",
      "presence_penalty", "frequency_penalty", "repeat_penalty", "max_tokens", "ignore_eos", "stop",
      "logit_bias", "logprobs", "user", "response_format", "json_schema", "grammar"};
  static const std::set<std::string, std::less<>> chat = {
      "messages", "max_completion_tokens", "tools", "functions", "tool_choice", "function_call", "top_logprobs",
      "parallel_tool_calls", "store", "metadata", "service_tier"};
  static const std::set<std::string, std::less<>> completion = {"prompt", "echo", "suffix", "best_of"};
  for (const auto& [key, value] : body.items()) {
    if (common.count(key) || (ep == Endpoint::kChat ? chat : completion).count(key)) continue;
    *err = bad(key, fmt::format("Unrecognized request argument supplied: {}", key), "unknown_parameter");
    return false;
  }
  return true;
}

// Fields whose features this server does not have: asking for them is an error rather than a
// silently different answer.
bool reject_unsupported(const json& body, Endpoint ep, ApiError* err) {
  // The legacy function-calling fields (before `tools`).
  for (const char* key : {"functions", "function_call"}) {
    auto it = body.find(key);
    if (it != body.end() && !it->is_null() && !(it->is_array() && it->empty()) && !(it->is_object() && it->empty()) &&
        !(it->is_string() && it->get<std::string>() == "none")) {
      *err = bad(key, fmt::format("'{}' is not supported by this server; use 'tools' and 'tool_choice'", key),
                 "unsupported_parameter");
      return false;
    }
  }
  if (ep == Endpoint::kCompletion) {
    auto echo = body.find("echo");
    if (echo != body.end() && echo->is_boolean() && echo->get<bool>()) {
      *err = bad("echo", "'echo' is not supported by this server", "unsupported_parameter");
      return false;
    }
    auto suffix = body.find("suffix");
    if (suffix != body.end() && !suffix->is_null() && !(suffix->is_string() && suffix->get<std::string>().empty())) {
      *err = bad("suffix", "'suffix' is not supported by this server", "unsupported_parameter");
      return false;
    }
    int64_t best_of = 1;
    if (!get_int(body, "best_of", 1, 1, &best_of, nullptr, err)) return false;
  }
  return true;
}

// Structured output: response_format {"type": "text" | "json_object" | "json_schema"} (OpenAI;
// json_object may carry a "schema" as llama-server's does), or llama-server's top-level
// "json_schema" (a schema) or "grammar" (GBNF text). At most one of them.
bool parse_format(const nlohmann::ordered_json& body, std::shared_ptr<const llm::Grammar>* out, ApiError* err) {
  using json = nlohmann::ordered_json;
  const json* schema = nullptr;
  const char* from = nullptr;
  bool any_object = false;
  int n = 0;
  auto rf = body.find("response_format");
  if (rf != body.end() && !rf->is_null()) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
      *err = bad("response_format", "'response_format' must be an object with a 'type'", "invalid_type");
      return false;
    }
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      ++n;
      from = "response_format";
      if (rf->contains("schema") && !(*rf)["schema"].is_null()) schema = &(*rf)["schema"];
      else any_object = true;
    } else if (type == "json_schema") {
      ++n;
      from = "response_format";
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object() || !js->contains("schema")) {
        *err = bad("response_format", "response_format json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}",
                   "invalid_value");
        return false;
      }
      schema = &(*js)["schema"];
    } else if (type != "text") {
      *err = bad("response_format", fmt::format("response_format type '{}' is not one of text, json_object, json_schema",
                                                type.substr(0, 40)), "invalid_value");
      return false;
    }
  }
  auto js = body.find("json_schema");
  if (js != body.end() && !js->is_null()) {
    ++n;
    from = "json_schema";
    schema = &*js;
  }
  auto gr = body.find("grammar");
  const bool has_grammar = gr != body.end() && !gr->is_null() && !(gr->is_string() && gr->get<std::string>().empty());
  if (has_grammar) ++n;
  if (n > 1) {
    *err = bad("response_format", "give one of response_format (json), json_schema and grammar, not several", "invalid_value");
    return false;
  }
  if (has_grammar) {
    if (!gr->is_string()) {
      *err = bad("grammar", "'grammar' must be a string of GBNF rules", "invalid_type");
      return false;
    }
    auto g = llm::parse_gbnf(gr->get<std::string>());
    if (!g.ok()) {
      *err = bad("grammar", "invalid grammar: " + std::string(g.status().message()), "invalid_grammar");
      return false;
    }
    *out = std::move(g).value();
    return true;
  }
  if (any_object) {
    *out = llm::json_object_grammar();
    return true;
  }
  if (schema) {
    auto g = llm::json_schema_grammar(*schema);
    if (!g.ok()) {
      *err = bad(from, "invalid or unsupported JSON schema: " + std::string(g.status().message()), "invalid_schema");
      return false;
    }
    *out = std::move(g).value();
  }
  return true;
}

// logprobs: a boolean on chat (top_logprobs says how many alternatives), an integer count of
// alternatives on completions. Sets *out to -1 (none) or the count.
bool get_logprobs(const json& body, Endpoint ep, int* out, ApiError* err) {
  *out = -1;
  auto lp = body.find("logprobs");
  const bool has_lp = lp != body.end() && !lp->is_null();
  if (ep == Endpoint::kCompletion) {
    if (has_lp && lp->is_boolean()) {
      *err = bad("logprobs", fmt::format("'logprobs' must be an integer between 0 and {} on /v1/completions",
                                         kMaxTopLogprobs), "invalid_type");
      return false;
    }
    int64_t k = -1;
    bool present = false;
    if (!get_int(body, "logprobs", 0, kMaxTopLogprobs, &k, &present, err)) return false;
    *out = present ? static_cast<int>(k) : -1;
    return true;
  }
  bool want = false;
  if (!get_bool(body, "logprobs", &want, err)) return false;
  int64_t top = 0;
  bool has_top = false;
  if (!get_int(body, "top_logprobs", 0, kMaxTopLogprobs, &top, &has_top, err)) return false;
  if (has_top && top > 0 && !want) {
    *err = bad("top_logprobs", "'top_logprobs' needs 'logprobs': true", "invalid_value");
    return false;
  }
  *out = want ? static_cast<int>(top) : -1;
  return true;
}

// logit_bias: {"token id": bias in [-100, 100]}, ids inside the vocabulary.
bool get_logit_bias(const json& body, const ApiContext& ctx, llm::SamplerParams* sp, ApiError* err) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_object()) {
    *err = bad("logit_bias", "'logit_bias' must be an object mapping token ids to numbers", "invalid_type");
    return false;
  }
  if (static_cast<int64_t>(it->size()) > kMaxLogitBias) {
    *err = bad("logit_bias", fmt::format("'logit_bias' takes at most {} entries (got {})", kMaxLogitBias, it->size()),
               "invalid_value");
    return false;
  }
  for (const auto& [key, value] : it->items()) {
    int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    if (digits) id = std::stoll(key);
    if (!digits || id >= ctx.tok->vocab_size()) {
      *err = bad("logit_bias", fmt::format("'logit_bias' key '{}' is not a token id of this model (0..{})",
                                           key.substr(0, 40), ctx.tok->vocab_size() - 1), "invalid_value");
      return false;
    }
    if (!is_number(value) || !std::isfinite(value.get<double>()) || value.get<double>() < -100.0 ||
        value.get<double>() > 100.0) {
      *err = bad("logit_bias", fmt::format("'logit_bias' value for token {} must be a number between -100 and 100", id),
                 "invalid_value");
      return false;
    }
    sp->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
  }
  return true;
}

// Chat message content: a string, or an array of {"type": "text", "text": ...} parts.
bool message_content(const json& m, size_t i, const std::string& role, std::string* out, ApiError* err) {
  const std::string param = fmt::format("messages[{}].content", i);
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (role == "assistant") return true;  // an assistant turn may be empty
    *err = bad(param, fmt::format("messages[{}] ({}) has no content", i, role), "invalid_type");
    return false;
  }
  if (it->is_string()) {
    *out = it->get<std::string>();
    return true;
  }
  if (!it->is_array()) {
    *err = bad(param, "message content must be a string or an array of text parts", "invalid_type");
    return false;
  }
  for (const json& part : *it) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      *err = bad(param, "each content part must be an object with a 'type'", "invalid_type");
      return false;
    }
    if (part["type"].get<std::string>() != "text") {
      *err = bad(param, fmt::format("content parts of type '{}' are not supported (text only)", part["type"].get<std::string>()),
                 "unsupported_content");
      return false;
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      *err = bad(param, "a text part needs a string 'text'", "invalid_type");
      return false;
    }
    *out += part["text"].get<std::string>();
  }
  return true;
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
bool message_tool_calls(const json& m, size_t i, bool* has) {
  auto it = m.find("tool_calls");
  *has = false;
  if (it == m.end() || it->is_null()) return true;
  if (!it->is_array()) return false;
  for (const json& c : *it) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) return false;
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) return false;
    if (f.contains("arguments") && !f["arguments"].is_string() && !f["arguments"].is_object()) return false;
    if (c.contains("id") && !c["id"].is_string() && !c["id"].is_null()) return false;
  }
  (void)i;
  *has = !it->empty();
  return true;
}

bool chat_prompt(const json& body, const ApiContext& ctx, const ToolSetup& tools, std::vector<int32_t>* ids,
                 ApiError* err) {
  auto it = body.find("messages");
  if (it == body.end()) {
    *err = bad("messages", "'messages' is required", "missing_required_parameter");
    return false;
  }
  if (!it->is_array() || it->empty()) {
    *err = bad("messages", "'messages' must be a non-empty array", "invalid_type");
    return false;
  }
  std::vector<llm::ChatMessage> messages;
  nlohmann::ordered_json full = nlohmann::ordered_json::array();  // with tool calls and results
  bool tool_traffic = false;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (!m.is_object()) {
      *err = bad(fmt::format("messages[{}]", i), "each message must be an object", "invalid_type");
      return false;
    }
    auto r = m.find("role");
    if (r == m.end() || !r->is_string()) {
      *err = bad(fmt::format("messages[{}].role", i), "each message needs a string 'role'", "invalid_type");
      return false;
    }
    std::string role = r->get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      *err = bad(fmt::format("messages[{}].role", i),
                 fmt::format("role '{}' is not supported (system, developer, user, assistant, tool)", r->get<std::string>()),
                 "invalid_value");
      return false;
    }
    llm::ChatMessage cm;
    cm.role = role;
    bool has_calls = false;
    if (role == "assistant" && !message_tool_calls(m, i, &has_calls)) {
      *err = bad(fmt::format("messages[{}].tool_calls", i),
                 "tool_calls must be an array of {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                 "invalid_type");
      return false;
    }
    if (!(has_calls && (m.find("content") == m.end() || m["content"].is_null())) &&
        !message_content(m, i, role, &cm.content, err))
      return false;
    nlohmann::ordered_json fm = {{"role", role}, {"content", cm.content}};
    if (has_calls) {
      fm["tool_calls"] = nlohmann::ordered_json::parse(dump(m["tool_calls"]));
      for (auto& c : fm["tool_calls"]) {
        c["type"] = "function";
        if (!c["function"].contains("arguments")) c["function"]["arguments"] = "{}";
      }
      tool_traffic = true;
    }
    if (role == "tool") {
      tool_traffic = true;
      for (const char* k : {"tool_call_id", "name"})
        if (m.contains(k) && m[k].is_string()) fm[k] = m[k].get<std::string>();
    }
    full.push_back(std::move(fm));
    messages.push_back(std::move(cm));
  }
  if (!ctx.tmpl) {
    *err = bad("messages", "this model has no chat template; use /v1/completions", "no_chat_template");
    return false;
  }
  if (tools.active || tool_traffic) {
    nlohmann::ordered_json turns;
    std::string extra;
    Status st = tool_messages(tools, full, &turns, &extra);
    auto text = st.ok() ? ctx.tmpl->render_json(turns.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                                                /*add_generation_prompt=*/true, extra)
                        : Result<std::string>(st);
    if (!text.ok()) {
      *err = bad("messages", "the chat template failed on these messages: " + text.status().to_string(),
                 "template_error");
      return false;
    }
    auto enc = ctx.tok->encode(text.value(), /*add_special=*/false, /*parse_special=*/true);
    if (!enc.ok()) {
      *err = bad("messages", "tokenizing the prompt failed: " + enc.status().to_string());
      return false;
    }
    *ids = std::move(enc).value();
    if (ctx.tok->add_bos() && ctx.tok->bos_id() != llm::kNoToken && (ids->empty() || (*ids)[0] != ctx.tok->bos_id()))
      ids->insert(ids->begin(), ctx.tok->bos_id());
    return true;
  }
  auto text = ctx.tmpl->render(messages, /*add_generation_prompt=*/true);
  if (!text.ok()) {
    *err = bad("messages", "the chat template rejected these messages: " + text.status().to_string(), "template_error");
    return false;
  }
  auto enc = ctx.tok->encode(*text, /*add_special=*/false, /*parse_special=*/true);
  if (!enc.ok()) {
    *err = bad("messages", "tokenizing the conversation failed: " + enc.status().to_string());
    return false;
  }
  *ids = std::move(enc).value();
  // Templates usually write BOS as text; add the id only when the model wants one and it is
  // not there yet (as `loom chat` does).
  if (ctx.tok->add_bos() && ctx.tok->bos_id() != llm::kNoToken && (ids->empty() || (*ids)[0] != ctx.tok->bos_id()))
    ids->insert(ids->begin(), ctx.tok->bos_id());
  return true;
}

// One prompt: a string (tokenized as `loom run` reads a raw prompt: BOS/EOS as the model says,
// special tokens parsed) or a non-empty array of token ids. `param` names it in errors.
bool one_prompt(const json& p, const ApiContext& ctx, const std::string& param, std::vector<int32_t>* ids,
                ApiError* err) {
  if (p.is_string()) {
    auto enc = ctx.tok->encode(p.get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    if (!enc.ok()) {
      *err = bad(param, "tokenizing the prompt failed: " + enc.status().to_string());
      return false;
    }
    *ids = std::move(enc).value();
    return true;
  }
  if (!p.is_array()) {
    *err = bad(param, "a prompt must be a string or an array of token ids", "invalid_type");
    return false;
  }
  if (p.empty()) {
    *err = bad(param, "the prompt is empty", "invalid_value");
    return false;
  }
  for (const json& t : p) {
    if (!t.is_number_integer()) {
      *err = bad(param, "a prompt must be a string or an array of token ids", "invalid_type");
      return false;
    }
    const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                              : t.get<int64_t>();
    if (id < 0 || id >= ctx.tok->vocab_size()) {
      *err = bad(param, fmt::format("token id {} is outside the vocabulary (0..{})", id, ctx.tok->vocab_size() - 1),
                 "invalid_value");
      return false;
    }
    ids->push_back(static_cast<int32_t>(id));
  }
  return true;
}

// `prompt`: one prompt (a string or an array of token ids), or a list of them (strings, or
// arrays of token ids), one set of choices per prompt.
bool completion_prompts(const json& body, const ApiContext& ctx, std::vector<std::vector<int32_t>>* out,
                        ApiError* err) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    *err = bad("prompt", "'prompt' is required", "missing_required_parameter");
    return false;
  }
  const json& p = *it;
  const bool list = p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array());
  if (!list) {
    out->emplace_back();
    if (!one_prompt(p, ctx, "prompt", &out->back(), err)) return false;
    return true;
  }
  if (static_cast<int64_t>(p.size()) > kMaxPrompts) {
    *err = bad("prompt", fmt::format("'prompt' takes at most {} prompts (got {})", kMaxPrompts, p.size()),
               "invalid_value");
    return false;
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (!p[i].is_string() && !p[i].is_array()) {
      *err = bad("prompt", "a list of prompts holds strings or arrays of token ids", "invalid_type");
      return false;
    }
    out->emplace_back();
    if (!one_prompt(p[i], ctx, "prompt", &out->back(), err)) return false;
  }
  return true;
}

}  // namespace

std::string error_body(const ApiError& e) {
  json j;
  j["error"]["message"] = e.message;
  j["error"]["type"] = e.type;
  j["error"]["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  j["error"]["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return dump(j);
}

namespace {

bool parse_sampling(const json& body, const ApiContext& ctx, llm::SamplerParams* sp, ApiError* err) {
  if (!get_float(body, "temperature", 0.0f, 2.0f, &sp->temp, err)) return false;
  if (!get_float(body, "top_p", 0.0f, 1.0f, &sp->top_p, err)) return false;
  if (!get_float(body, "min_p", 0.0f, 1.0f, &sp->min_p, err)) return false;
  if (!get_float(body, "presence_penalty", -2.0f, 2.0f, &sp->presence_penalty, err)) return false;
  if (!get_float(body, "frequency_penalty", -2.0f, 2.0f, &sp->frequency_penalty, err)) return false;
  if (!get_float(body, "repeat_penalty", 0.0f, 10.0f, &sp->repeat_penalty, err)) return false;
  int64_t top_k = sp->top_k;
  if (!get_int(body, "top_k", 0, 1 << 30, &top_k, nullptr, err)) return false;
  sp->top_k = static_cast<int>(top_k);
  int64_t seed = 0;
  bool has_seed = false;
  if (!get_int(body, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed, err)) return false;
  // A negative seed (or none) asks for a random one, as llama.cpp's -1 does.
  sp->seed = has_seed && seed >= 0 ? static_cast<uint64_t>(seed) : llm::SamplerParams::kRandomSeed;
  if (!get_logit_bias(body, ctx, sp, err)) return false;
  Status vs = sp->validate();
  if (!vs.ok()) {
    *err = bad("", vs.to_string(), "invalid_value");
    return false;
  }
  return true;
}

// max_tokens / max_completion_tokens, ignore_eos, stop.
bool parse_limits(const json& body, GenParams* gen, ApiError* err) {
  bool has_max = false;
  int64_t max_tokens = -1;
  if (!get_int(body, "max_tokens", 1, INT64_MAX, &max_tokens, &has_max, err)) return false;
  if (!has_max && !get_int(body, "max_completion_tokens", 1, INT64_MAX, &max_tokens, &has_max, err)) return false;
  gen->max_tokens = has_max ? max_tokens : -1;
  if (!get_bool(body, "ignore_eos", &gen->ignore_eos, err)) return false;
  auto stop = body.find("stop");
  if (stop == body.end() || stop->is_null()) return true;
  if (stop->is_string()) {
    if (!stop->get<std::string>().empty()) gen->stop.push_back(stop->get<std::string>());
    return true;
  }
  if (!stop->is_array()) {
    *err = bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
    return false;
  }
  if (stop->size() > 4) {
    *err = bad("stop", "'stop' takes at most 4 sequences", "invalid_value");
    return false;
  }
  for (const json& s : *stop) {
    if (!s.is_string()) {
      *err = bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
      return false;
    }
    if (!s.get<std::string>().empty()) gen->stop.push_back(s.get<std::string>());
  }
  return true;
}

// The prompt(s), each checked against the slot's context.
bool parse_prompts(const json& body, Endpoint endpoint, const ApiContext& ctx, ApiRequest* r, ApiError* err) {
  if (endpoint == Endpoint::kChat) {
    r->prompts.emplace_back();
    if (!chat_prompt(body, ctx, r->tools, &r->prompts.back(), err)) return false;
  } else if (!completion_prompts(body, ctx, &r->prompts, err)) {
    return false;
  }
  const char* pparam = endpoint == Endpoint::kChat ? "messages" : "prompt";
  for (const auto& prompt : r->prompts) {
    if (prompt.empty()) {
      *err = bad(pparam, "the prompt has no tokens", "invalid_value");
      return false;
    }
    if (static_cast<int64_t>(prompt.size()) >= ctx.n_ctx) {
      *err = bad(pparam,
                 fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens (leaving no "
                             "room to generate). Shorten the prompt.",
                             ctx.n_ctx, prompt.size()),
                 "context_length_exceeded");
      return false;
    }
  }
  if (static_cast<int64_t>(r->prompts.size()) * r->n > kMaxChoices) {
    *err = bad("n", fmt::format("{} prompts x n = {} asks for {} choices; at most {} per request", r->prompts.size(),
                                r->n, static_cast<int64_t>(r->prompts.size()) * r->n, kMaxChoices),
               "invalid_value");
    return false;
  }
  r->gen.prompt = r->prompts[0];
  return true;
}

bool parse_body(Endpoint endpoint, const json& body, const nlohmann::ordered_json& obody, const ApiContext& ctx,
                ApiRequest* out, ApiError* err) {
  if (!body.is_object()) {
    *err = bad("", "the request body must be a JSON object", "invalid_type");
    return false;
  }
  ApiRequest r;
  r.endpoint = endpoint;
  auto model = body.find("model");
  if (model != body.end() && !model->is_null() && !model->is_string()) {
    *err = bad("model", "'model' must be a string", "invalid_type");
    return false;
  }
  if (!reject_unsupported(body, endpoint, err)) return false;
  if (!reject_unknown(body, endpoint, err)) return false;
  int64_t n = 1;
  if (!get_int(body, "n", 1, kMaxChoicesPerPrompt, &n, nullptr, err)) return false;
  r.n = static_cast<int>(n);
  if (!get_bool(body, "stream", &r.stream, err)) return false;
  auto so = body.find("stream_options");
  if (so != body.end() && !so->is_null()) {
    if (!so->is_object()) {
      *err = bad("stream_options", "'stream_options' must be an object", "invalid_type");
      return false;
    }
    if (!get_bool(*so, "include_usage", &r.include_usage, err)) return false;
  }
  if (!parse_sampling(body, ctx, &r.gen.sampling, err)) return false;
  if (!get_logprobs(body, endpoint, &r.gen.logprobs, err)) return false;
  if (!parse_limits(body, &r.gen, err)) return false;
  if (!parse_format(obody, &r.gen.grammar, err)) return false;
  if (endpoint == Endpoint::kChat) {
    std::string param;
    Status ts = parse_tools(obody, &r.tools, &param);
    if (!ts.ok()) {
      *err = bad(param, std::string(ts.message()), "invalid_tools");
      return false;
    }
    if (ctx.tmpl) r.tools.format = tool_format_of(*ctx.tmpl);
    if (r.tools.active) {
      if (r.gen.grammar) {
        *err = bad("response_format", "response_format, json_schema and grammar cannot be combined with tools",
                   "invalid_value");
        return false;
      }
      auto g = tool_grammar(r.tools);
      if (!g.ok()) {
        *err = bad("tools", std::string(g.status().message()), "invalid_tools");
        return false;
      }
      r.gen.grammar = std::move(g).value();
    }
  }
  if (!parse_prompts(body, endpoint, ctx, &r, err)) return false;
  *out = std::move(r);
  return true;
}

}  // namespace

bool parse_request(Endpoint endpoint, std::string_view body_text, const ApiContext& ctx, ApiRequest* out, ApiError* err) {
  try {
    json body = json::parse(body_text.begin(), body_text.end(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      *err = bad("", "the request body is not valid JSON", "invalid_json");
      return false;
    }
    // Schemas (response_format, tools) keep their property order: read the body again with
    // ordered keys for them.
    nlohmann::ordered_json obody =
        nlohmann::ordered_json::parse(body_text.begin(), body_text.end(), nullptr, /*allow_exceptions=*/false);
    return parse_body(endpoint, body, obody, ctx, out, err);
  } catch (const std::exception& e) {
    // nlohmann throws only on misuse; a request must still never take the server down.
    *err = bad("", std::string("malformed request: ") + e.what());
    return false;
  }
}

std::vector<GenParams> expand_choices(const ApiRequest& r) {
  std::vector<GenParams> out;
  for (const auto& prompt : r.prompts) {
    for (int j = 0; j < r.n; ++j) {
      GenParams g = r.gen;
      g.prompt = prompt;
      if (g.sampling.seed != llm::SamplerParams::kRandomSeed) g.sampling.seed += static_cast<uint64_t>(j);
      out.push_back(std::move(g));
    }
  }
  return out;
}

}  // namespace loom::serve
