// OpenAI response bodies: chat.completion / text_completion objects, stream chunks with their
// deltas (content, tool_calls), logprobs in both endpoints' shapes, usage (see openai_api.h).
#include <nlohmann/json.hpp>

#include "loom/serve/openai_api.h"

namespace loom::serve {

using nlohmann::json;

namespace {
// Responses may carry model text that is not valid UTF-8 (byte tokens): replace, never throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
}  // namespace

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

namespace {

// OpenAI's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}], with
// "index" in stream deltas.
json tool_calls_json(std::span<const ToolCall> calls, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id}, {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

json token_bytes(std::string_view piece) {
  json b = json::array();
  for (char c : piece) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return b;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}.
// Completions: {"tokens", "token_logprobs", "top_logprobs": [{piece: logprob}], "text_offset"},
// offsets in bytes of the generated text (the prompt is not echoed).
json logprobs_json(Endpoint ep, const llm::Tokenizer& tok, std::span<const llm::SampleLogprobs> lps,
                   int64_t* text_offset) {
  if (ep == Endpoint::kChat) {
    json content = json::array();
    for (const auto& lp : lps) {
      auto entry = [&](const llm::TokenLogprob& t) {
        const std::string_view piece = tok.token_to_piece(t.id);
        return json{{"token", std::string(piece)}, {"logprob", t.logprob}, {"bytes", token_bytes(piece)}};
      };
      json e = entry(lp.chosen);
      json top = json::array();
      for (const auto& t : lp.top) top.push_back(entry(t));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return json{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const auto& lp : lps) {
    const std::string_view piece = tok.token_to_piece(lp.chosen.id);
    tokens.push_back(std::string(piece));
    token_logprobs.push_back(lp.chosen.logprob);
    json alts = json::object();
    for (const auto& t : lp.top) {
      const std::string key(tok.token_to_piece(t.id));
      if (!alts.contains(key)) alts[key] = t.logprob;  // two ids of one text: the likelier
    }
    top.push_back(std::move(alts));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(piece.size());
  }
  return json{{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
}

}  // namespace

std::string completion_body(Endpoint ep, const ResponseInfo& info, std::span<const ChoiceResult> choices,
                            const llm::Tokenizer* tok, int64_t prompt_tokens, int64_t completion_tokens) {
  json j = head(ep, info, false);
  j["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice;
    choice["index"] = i;
    if (ep == Endpoint::kChat) choice["message"] = json{{"role", "assistant"}, {"content", c.text}};
    else choice["text"] = c.text;
    if (!c.tool_calls.empty()) {
      choice["message"]["content"] = c.text.empty() ? json(nullptr) : json(c.text);
      choice["message"]["tool_calls"] = tool_calls_json(c.tool_calls, false);
    }
    int64_t offset = 0;
    choice["logprobs"] = tok ? logprobs_json(ep, *tok, c.logprobs, &offset) : json(nullptr);
    choice["finish_reason"] = c.tool_calls.empty() ? json(openai_finish_reason(c.finish_reason)) : json("tool_calls");
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage(prompt_tokens, completion_tokens);
  return dump(j);
}

std::string stream_chunk(Endpoint ep, const ResponseInfo& info, const StreamPiece& piece, const llm::Tokenizer* tok,
                         int64_t* text_offset) {
  json j = head(ep, info, true);
  json choice;
  choice["index"] = piece.index;
  if (ep == Endpoint::kChat) {
    json delta = json::object();
    if (piece.role) delta["role"] = "assistant";
    if (piece.role || !piece.text.empty()) delta["content"] = piece.text;
    if (!piece.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(piece.tool_calls, true);
    choice["delta"] = delta;
  } else {
    choice["text"] = piece.text;
  }
  int64_t offset = 0;
  choice["logprobs"] = tok ? logprobs_json(ep, *tok, piece.logprobs, text_offset ? text_offset : &offset) : json(nullptr);
  choice["finish_reason"] = piece.finish_reason.empty() ? json(nullptr) : json(openai_finish_reason(piece.finish_reason));
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
