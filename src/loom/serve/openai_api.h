// The OpenAI-compatible request and response shapes: validation of chat/completions bodies into
// GenParams (chat template + tokenizer), response bodies, SSE chunks, errors. No HTTP here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "loom/serve/scheduler.h"
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

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  GenParams gen;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

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
std::string completion_body(Endpoint endpoint, const ResponseInfo& info, const std::string& text,
                            const std::string& finish_reason, int64_t prompt_tokens, int64_t completion_tokens);
// finish_reason "" for a content chunk; role_chunk: the first chat chunk (role, empty content).
std::string stream_chunk(Endpoint endpoint, const ResponseInfo& info, const std::string& text,
                         const std::string& finish_reason, bool role_chunk = false);
std::string usage_chunk(Endpoint endpoint, const ResponseInfo& info, int64_t prompt_tokens, int64_t completion_tokens);
std::string models_body(const std::string& model_id, int64_t created);

}  // namespace loom::serve
