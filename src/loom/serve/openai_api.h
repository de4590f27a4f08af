// The OpenAI-compatible request and response shapes: validation of chat/completions bodies into
// GenParams (chat template + tokenizer), response bodies, SSE chunks, errors. No HTTP here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loom/serve/scheduler.h"
#include "loom/serve/tool_calls.h"
#include "loom/text/chat_template.h"
#include "loom/text/tokenizer.h"

namespace loom::serve {

enum class Endpoint { kChat, kCompletion };

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // offending field, "" when none
  std::string code;   // machine-readable code, "" when none
};
std::string error_body(const ApiError& e);

// What the parser needs from the server. tmpl may be null (model without a chat template and
// no built-in fallback: chat requests then fail with 400).
struct ApiContext {
  const llm::Tokenizer* tok = nullptr;
  const llm::ChatTemplate* tmpl = nullptr;
  int64_t n_ctx = 0;       // per request (slot) context
  std::string model_id;
  std::string model_path;  // the GGUF file (GET /props)
};

// Limits of the fields that multiply work: choices per prompt, prompts per completion request,
// choices in all, alternatives per token, logit_bias entries.
inline constexpr int64_t kMaxChoicesPerPrompt = 8;
inline constexpr int64_t kMaxPrompts = 16;
inline constexpr int64_t kMaxChoices = 16;
inline constexpr int64_t kMaxTopLogprobs = 20;
inline constexpr int64_t kMaxLogitBias = 1024;

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  GenParams gen;                             // sampling and limits; prompt = prompts[0]
  std::vector<std::vector<int32_t>> prompts; // one or more (a list on /v1/completions)
  int n = 1;                                 // choices per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  ToolSetup tools;             // tools offered (tools.active) and how replies carry calls
};

// The jobs of a request, in choice order: prompt 0's n choices, then prompt 1's... Choice j of a
// prompt is seeded with seed + j when the request has a seed, so the choices differ and a
// repeated request repeats them.
std::vector<GenParams> expand_choices(const ApiRequest& r);

// Parses and validates a request body. Returns false and fills `err` on any problem (never
// throws, whatever the body holds).
bool parse_request(Endpoint endpoint, std::string_view body, const ApiContext& ctx, ApiRequest* out, ApiError* err);

// "eos"/"stop" -> "stop", "length" -> "length" (what OpenAI clients expect).
std::string openai_finish_reason(const std::string& reason);

// Bodies of a finished request (non-streaming) and of stream chunks ("data: ...\n\n" lines).
struct ResponseInfo {
  std::string id;
  int64_t created = 0;
  std::string model;
};
// One choice's result. logprobs: one entry per output token, when the request asked for them.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;  // the scheduler's reason ("eos", "stop", "length")
  std::vector<llm::SampleLogprobs> logprobs;
  std::vector<ToolCall> tool_calls;  // when set, the reply is these calls (finish_reason "tool_calls")
};
// tok renders the tokens of logprobs (null when the request did not ask for them).
std::string completion_body(Endpoint endpoint, const ResponseInfo& info, std::span<const ChoiceResult> choices,
                            const llm::Tokenizer* tok, int64_t prompt_tokens, int64_t completion_tokens);
// One choice's piece of a stream. finish_reason "" for a content chunk; role: the first chat
// chunk of a choice (role, empty content). tok non-null: the chunk carries logprobs (those of
// `logprobs`, possibly none); text_offset: bytes of that choice's text before these tokens
// (/v1/completions' text_offset), advanced past them.
struct StreamPiece {
  int index = 0;
  std::string text;
  std::string finish_reason;
  bool role = false;
  std::span<const llm::SampleLogprobs> logprobs;
  std::span<const ToolCall> tool_calls;  // a chat delta with these calls
};
std::string stream_chunk(Endpoint endpoint, const ResponseInfo& info, const StreamPiece& piece,
                         const llm::Tokenizer* tok = nullptr, int64_t* text_offset = nullptr);
std::string usage_chunk(Endpoint endpoint, const ResponseInfo& info, int64_t prompt_tokens, int64_t completion_tokens);
std::string models_body(const std::string& model_id, int64_t created);

}  // namespace loom::serve
