// Validation of /v1/embeddings bodies and their responses (see embeddings_api.h).
#include "loom/serve/embeddings_api.h"

#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace loom::serve {

using nlohmann::json;

namespace {

ApiError bad(std::string param, std::string message, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string base64_of(const std::vector<float>& v) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  // float32 little-endian, as OpenAI sends it (this code runs on little-endian hosts only).
  std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    out.push_back(abc[(w >> 18) & 63]);
    out.push_back(abc[(w >> 12) & 63]);
    out.push_back(n > 1 ? abc[(w >> 6) & 63] : '=');
    out.push_back(n > 2 ? abc[w & 63] : '=');
  }
  return out;
}

// One input: a string or a non-empty array of token ids.
bool one_input(const json& v, const ApiContext& ctx, const std::string& param, std::vector<int32_t>* ids,
               ApiError* err) {
  if (v.is_string()) {
    auto enc = ctx.tok->encode(v.get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    if (!enc.ok()) {
      *err = bad(param, "tokenizing the input failed: " + enc.status().to_string(), "invalid_value");
      return false;
    }
    *ids = std::move(enc).value();
  } else if (v.is_array()) {
    for (const json& t : v) {
      if (!t.is_number_integer()) {
        *err = bad(param, "an input must be a string or an array of token ids", "invalid_type");
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
  } else {
    *err = bad(param, "an input must be a string or an array of token ids", "invalid_type");
    return false;
  }
  if (ids->empty()) {
    *err = bad(param, "an input has no tokens", "invalid_value");
    return false;
  }
  if (static_cast<int64_t>(ids->size()) > ctx.n_ctx) {
    *err = bad(param, fmt::format("an input has {} tokens; this server's context is {} tokens", ids->size(), ctx.n_ctx),
               "context_length_exceeded");
    return false;
  }
  return true;
}

bool parse_fields(const json& body, const ApiContext& ctx, int64_t n_embd, EmbeddingRequest* out, ApiError* err) {
  if (!body.is_object()) {
    *err = bad("", "the request body must be a JSON object", "invalid_type");
    return false;
  }
  static const std::set<std::string, std::less<>> known = {"input", "model", "encoding_format", "dimensions", "user"};
  for (const auto& [key, value] : body.items()) {
    if (!known.count(key)) {
      *err = bad(key, fmt::format("Unrecognized request argument supplied: {}", key), "unknown_parameter");
      return false;
    }
  }
  auto model = body.find("model");
  if (model != body.end() && !model->is_null() && !model->is_string()) {
    *err = bad("model", "'model' must be a string", "invalid_type");
    return false;
  }
  auto fmt_it = body.find("encoding_format");
  if (fmt_it != body.end() && !fmt_it->is_null()) {
    if (!fmt_it->is_string() || (*fmt_it != "float" && *fmt_it != "base64")) {
      *err = bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"", "invalid_value");
      return false;
    }
    out->base64 = *fmt_it == "base64";
  }
  auto dims = body.find("dimensions");
  if (dims != body.end() && !dims->is_null() &&
      !(dims->is_number_integer() && !dims->is_boolean() && dims->get<int64_t>() == n_embd)) {
    *err = bad("dimensions", fmt::format("this model's embeddings have {} dimensions; 'dimensions' can only be {}",
                                         n_embd, n_embd), "invalid_value");
    return false;
  }
  auto in = body.find("input");
  if (in == body.end() || in->is_null()) {
    *err = bad("input", "'input' is required", "missing_required_parameter");
    return false;
  }
  const bool list = in->is_array() && !in->empty() && ((*in)[0].is_string() || (*in)[0].is_array());
  if (!list) {
    out->inputs.emplace_back();
    return one_input(*in, ctx, "input", &out->inputs.back(), err);
  }
  if (static_cast<int64_t>(in->size()) > kMaxEmbeddingInputs) {
    *err = bad("input", fmt::format("'input' takes at most {} items (got {})", kMaxEmbeddingInputs, in->size()),
               "invalid_value");
    return false;
  }
  for (const json& item : *in) {
    if (!item.is_string() && !item.is_array()) {
      *err = bad("input", "a list of inputs holds strings or arrays of token ids", "invalid_type");
      return false;
    }
    out->inputs.emplace_back();
    if (!one_input(item, ctx, "input", &out->inputs.back(), err)) return false;
  }
  return true;
}

}  // namespace

bool parse_embedding_request(std::string_view body_text, const ApiContext& ctx, int64_t n_embd, EmbeddingRequest* out,
                             ApiError* err) {
  try {
    json body = json::parse(body_text.begin(), body_text.end(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      *err = bad("", "the request body is not valid JSON", "invalid_json");
      return false;
    }
    EmbeddingRequest r;
    if (!parse_fields(body, ctx, n_embd, &r, err)) return false;
    *out = std::move(r);
    return true;
  } catch (const std::exception& e) {
    *err = bad("", std::string("malformed request: ") + e.what(), "invalid_value");
    return false;
  }
}

std::string embedding_body(const std::string& model, std::span<const std::vector<float>> embeddings, bool base64,
                           int64_t prompt_tokens) {
  json j;
  j["object"] = "list";
  j["data"] = json::array();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    json e{{"object", "embedding"}, {"index", i}};
    if (base64) e["embedding"] = base64_of(embeddings[i]);
    else e["embedding"] = embeddings[i];
    j["data"].push_back(std::move(e));
  }
  j["model"] = model;
  j["usage"] = json{{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace loom::serve
