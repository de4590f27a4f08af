// llama-server's own routes, in its request and response shapes, for clients and launchers
// written against it: GET /props, GET /slots, POST /tokenize ({"content"} -> {"tokens"}) and
// POST /detokenize ({"tokens"} -> {"content"}). No HTTP here; errors are ApiErrors (4xx).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/serve/openai_api.h"
#include "loom/serve/scheduler.h"

namespace loom::serve {

// {"default_generation_settings", "total_slots", "model_path", "chat_template", "bos_token",
// "eos_token", "modalities", "build_info"}.
std::string props_body(const ApiContext& ctx, int n_slots);
// An array with one object per slot: id, n_ctx, is_processing, params, next_token, plus Loom's
// n_cached (KV cells the slot keeps for prefix reuse) and n_prompt_tokens.
std::string slots_body(const std::vector<SlotInfo>& slots, int64_t n_ctx);

// {"content": string, "add_special": bool = false, "parse_special": bool = true,
//  "with_pieces": bool = false} -> {"tokens": [id...]} or, with pieces, {"tokens": [{"id",
// "piece"}...]} (a piece that is not valid UTF-8 is given as its byte values). Never throws.
bool tokenize_body(std::string_view body, const ApiContext& ctx, std::string* out, ApiError* err);
// {"tokens": [id...]} -> {"content": string}; ids outside the vocabulary are a 400.
bool detokenize_body(std::string_view body, const ApiContext& ctx, std::string* out, ApiError* err);

}  // namespace loom::serve
