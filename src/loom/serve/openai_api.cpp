// Validation of OpenAI request bodies and construction of response bodies (see openai_api.h).
#include "loom/serve/openai_api.h"

#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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
      "logit_bias", "logprobs", "user"};
  static const std::set<std::string, std::less<>> chat = {
      "messages", "max_completion_tokens", "tools", "functions", "tool_choice", "function_call", "top_logprobs",
      "response_format", "parallel_tool_calls", "store", "metadata", "service_tier"};
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
  for (const char* key : {"tools", "functions", "logit_bias"}) {
    auto it = body.find(key);
    if (it != body.end() && !it->is_null() && !(it->is_array() && it->empty()) && !(it->is_object() && it->empty())) {
      *err = bad(key, fmt::format("'{}' is not supported by this server", key), "unsupported_parameter");
      return false;
    }
  }
  for (const char* key : {"tool_choice", "function_call"}) {
    auto it = body.find(key);
    if (it != body.end() && !it->is_null() && !(it->is_string() && it->get<std::string>() == "none")) {
      *err = bad(key, fmt::format("'{}' is not supported by this server", key), "unsupported_parameter");
      return false;
    }
  }
  auto lp = body.find("logprobs");
  if (lp != body.end() && !lp->is_null() && !(lp->is_boolean() && !lp->get<bool>()) &&
      !(ep == Endpoint::kCompletion && lp->is_number_integer() && lp->get<int64_t>() == 0)) {
    *err = bad("logprobs", "'logprobs' is not supported by this server", "unsupported_parameter");
    return false;
  }
  auto tlp = body.find("top_logprobs");
  if (tlp != body.end() && !tlp->is_null() && !(tlp->is_number_integer() && tlp->get<int64_t>() == 0)) {
    *err = bad("top_logprobs", "'top_logprobs' is not supported by this server", "unsupported_parameter");
    return false;
  }
  auto rf = body.find("response_format");
  if (rf != body.end() && !rf->is_null()) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
      *err = bad("response_format", "'response_format' must be an object with a 'type'", "invalid_type");
      return false;
    }
    if ((*rf)["type"].get<std::string>() != "text") {
      *err = bad("response_format", "only response_format {\"type\": \"text\"} is supported", "unsupported_parameter");
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

bool chat_prompt(const json& body, const ApiContext& ctx, std::vector<int32_t>* ids, ApiError* err) {
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
    if (role != "system" && role != "user" && role != "assistant") {
      *err = bad(fmt::format("messages[{}].role", i),
                 fmt::format("role '{}' is not supported (system, developer, user, assistant)", r->get<std::string>()),
                 "invalid_value");
      return false;
    }
    llm::ChatMessage cm;
    cm.role = role;
    if (!message_content(m, i, role, &cm.content, err)) return false;
    messages.push_back(std::move(cm));
  }
  if (!ctx.tmpl) {
    *err = bad("messages", "this model has no chat template; use /v1/completions", "no_chat_template");
    return false;
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

bool completion_prompt(const json& body, const ApiContext& ctx, std::vector<int32_t>* ids, ApiError* err) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    *err = bad("prompt", "'prompt' is required", "missing_required_parameter");
    return false;
  }
  const json* p = &*it;
  // One prompt only (n = 1): a one-element array is unwrapped.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    // As `loom run` reads a raw prompt: BOS/EOS as the model says, special tokens parsed.
    auto enc = ctx.tok->encode(p->get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    if (!enc.ok()) {
      *err = bad("prompt", "tokenizing the prompt failed: " + enc.status().to_string());
      return false;
    }
    *ids = std::move(enc).value();
    return true;
  }
  if (p->is_array()) {
    if (p->empty()) {
      *err = bad("prompt", "'prompt' is empty", "invalid_value");
      return false;
    }
    for (const json& t : *p) {
      if (!t.is_number_integer()) {
        *err = bad("prompt", "'prompt' must be a string, or an array of token ids (one prompt per request)", "invalid_type");
        return false;
      }
      const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                                : t.get<int64_t>();
      if (id < 0 || id >= ctx.tok->vocab_size()) {
        *err = bad("prompt", fmt::format("token id {} is outside the vocabulary (0..{})", id, ctx.tok->vocab_size() - 1),
                   "invalid_value");
        return false;
      }
      ids->push_back(static_cast<int32_t>(id));
    }
    return true;
  }
  *err = bad("prompt", "'prompt' must be a string or an array of token ids", "invalid_type");
  return false;
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

bool parse_request(Endpoint endpoint, std::string_view body_text, const ApiContext& ctx, ApiRequest* out, ApiError* err) {
  try {
    json body = json::parse(body_text.begin(), body_text.end(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      *err = bad("", "the request body is not valid JSON", "invalid_json");
      return false;
    }
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
    if (!get_int(body, "n", 1, 1, &n, nullptr, err)) {
      err->message = "only n = 1 is supported";
      return false;
    }
    if (!get_bool(body, "stream", &r.stream, err)) return false;
    auto so = body.find("stream_options");
    if (so != body.end() && !so->is_null()) {
      if (!so->is_object()) {
        *err = bad("stream_options", "'stream_options' must be an object", "invalid_type");
        return false;
      }
      if (!get_bool(*so, "include_usage", &r.include_usage, err)) return false;
    }
    llm::SamplerParams& sp = r.gen.sampling;
    if (!get_float(body, "temperature", 0.0f, 2.0f, &sp.temp, err)) return false;
    if (!get_float(body, "top_p", 0.0f, 1.0f, &sp.top_p, err)) return false;
    if (!get_float(body, "min_p", 0.0f, 1.0f, &sp.min_p, err)) return false;
    if (!get_float(body, "presence_penalty", -2.0f, 2.0f, &sp.presence_penalty, err)) return false;
    if (!get_float(body, "frequency_penalty", -2.0f, 2.0f, &sp.frequency_penalty, err)) return false;
    if (!get_float(body, "repeat_penalty", 0.0f, 10.0f, &sp.repeat_penalty, err)) return false;
    int64_t top_k = sp.top_k;
    if (!get_int(body, "top_k", 0, 1 << 30, &top_k, nullptr, err)) return false;
    sp.top_k = static_cast<int>(top_k);
    int64_t seed = 0;
    bool has_seed = false;
    if (!get_int(body, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed, err)) return false;
    // A negative seed (or none) asks for a random one, as llama.cpp's -1 does.
    sp.seed = has_seed && seed >= 0 ? static_cast<uint64_t>(seed) : llm::SamplerParams::kRandomSeed;
    Status vs = sp.validate();
    if (!vs.ok()) {
      *err = bad("", vs.to_string(), "invalid_value");
      return false;
    }
    bool has_max = false;
    int64_t max_tokens = -1;
    if (!get_int(body, "max_tokens", 1, INT64_MAX, &max_tokens, &has_max, err)) return false;
    if (!has_max && !get_int(body, "max_completion_tokens", 1, INT64_MAX, &max_tokens, &has_max, err)) return false;
    r.gen.max_tokens = has_max ? max_tokens : -1;
    if (!get_bool(body, "ignore_eos", &r.gen.ignore_eos, err)) return false;
    auto stop = body.find("stop");
    if (stop != body.end() && !stop->is_null()) {
      if (stop->is_string()) {
        if (!stop->get<std::string>().empty()) r.gen.stop.push_back(stop->get<std::string>());
      } else if (stop->is_array()) {
        if (stop->size() > 4) {
          *err = bad("stop", "'stop' takes at most 4 sequences", "invalid_value");
          return false;
        }
        for (const json& s : *stop) {
          if (!s.is_string()) {
            *err = bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
            return false;
          }
          if (!s.get<std::string>().empty()) r.gen.stop.push_back(s.get<std::string>());
        }
      } else {
        *err = bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
        return false;
      }
    }
    const bool ok = endpoint == Endpoint::kChat ? chat_prompt(body, ctx, &r.gen.prompt, err)
                                                : completion_prompt(body, ctx, &r.gen.prompt, err);
    if (!ok) return false;
    const char* pparam = endpoint == Endpoint::kChat ? "messages" : "prompt";
    if (r.gen.prompt.empty()) {
      *err = bad(pparam, "the prompt has no tokens", "invalid_value");
      return false;
    }
    if (static_cast<int64_t>(r.gen.prompt.size()) >= ctx.n_ctx) {
      *err = bad(pparam,
                 fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens (leaving no "
                             "room to generate). Shorten the prompt.",
                             ctx.n_ctx, r.gen.prompt.size()),
                 "context_length_exceeded");
      return false;
    }
    *out = std::move(r);
    return true;
  } catch (const std::exception& e) {
    // nlohmann throws only on misuse; a request must still never take the server down.
    *err = bad("", std::string("malformed request: ") + e.what());
    return false;
  }
}

std::string openai_finish_reason(const std::string& reason) {
  if (reason == "eos" || reason == "stop") return "stop";
  return reason;
}

namespace {
json usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}
json head(Endpoint ep, const ResponseInfo& info, bool chunk) {
  json j;
  j["id"] = info.id;
  j["object"] = ep == Endpoint::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  j["created"] = info.created;
  j["model"] = info.model;
  j["system_fingerprint"] = "loom";
  return j;
}
}  // namespace

std::string completion_body(Endpoint ep, const ResponseInfo& info, const std::string& text,
                            const std::string& finish_reason, int64_t prompt_tokens, int64_t completion_tokens) {
  json j = head(ep, info, false);
  json choice;
  choice["index"] = 0;
  if (ep == Endpoint::kChat) choice["message"] = json{{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = openai_finish_reason(finish_reason);
  j["choices"] = json::array({choice});
  j["usage"] = usage(prompt_tokens, completion_tokens);
  return dump(j);
}

std::string stream_chunk(Endpoint ep, const ResponseInfo& info, const std::string& text,
                         const std::string& finish_reason, bool role_chunk) {
  json j = head(ep, info, true);
  json choice;
  choice["index"] = 0;
  if (ep == Endpoint::kChat) {
    json delta = json::object();
    if (role_chunk) delta["role"] = "assistant";
    if (role_chunk || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(openai_finish_reason(finish_reason));
  j["choices"] = json::array({choice});
  return "data: " + dump(j) + "\n\n";
}

std::string usage_chunk(Endpoint ep, const ResponseInfo& info, int64_t prompt_tokens, int64_t completion_tokens) {
  json j = head(ep, info, true);
  j["choices"] = json::array();
  j["usage"] = usage(prompt_tokens, completion_tokens);
  return "data: " + dump(j) + "\n\n";
}

std::string models_body(const std::string& model_id, int64_t created) {
  json j;
  j["object"] = "list";
  j["data"] = json::array({json{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "loom"}}});
  return dump(j);
}

}  // namespace loom::serve
