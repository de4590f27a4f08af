// POST /v1/embeddings in OpenAI's shapes: validation of the body into token lists, and the
// response body (floats, or base64 of little-endian float32 as the openai client asks by default).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/serve/openai_api.h"

namespace loom::serve {

inline constexpr int64_t kMaxEmbeddingInputs = 64;

struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;  // non-empty, each non-empty and at most ctx.n_ctx tokens
  bool base64 = false;                       // encoding_format "base64"
};

// `input`: a string, an array of strings, an array of token ids, or an array of such arrays (at
// most kMaxEmbeddingInputs). Strings are tokenized as /v1/completions tokenizes a prompt.
// `dimensions`, when given, must be the model's n_embd (no truncation). Never throws; false and
// `err` (a 4xx) on any problem.
bool parse_embedding_request(std::string_view body, const ApiContext& ctx, int64_t n_embd, EmbeddingRequest* out,
                             ApiError* err);

std::string embedding_body(const std::string& model, std::span<const std::vector<float>> embeddings, bool base64,
                           int64_t prompt_tokens);

}  // namespace loom::serve
