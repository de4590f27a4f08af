// llama-server's /props, /slots, /tokenize and /detokenize (see llama_api.h).
#include "loom/serve/llama_api.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/base/version.h"

namespace loom::serve {

using nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiError bad(std::string param, std::string message, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

// The body as a JSON object whose keys are all in `allowed`; else a 400 in *err.
bool parse_object(std::string_view text, const std::set<std::string, std::less<>>& allowed, json* out, ApiError* err) {
  *out = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    *err = bad("", "the request body is not valid JSON", "invalid_json");
    return false;
  }
  if (!out->is_object()) {
    *err = bad("", "the request body must be a JSON object", "invalid_type");
    return false;
  }
  for (const auto& [key, value] : out->items()) {
    if (allowed.count(key)) continue;
    *err = bad(key, fmt::format("Unrecognized request argument supplied: {}", key), "unknown_parameter");
    return false;
  }
  return true;
}

bool get_flag(const json& body, const char* key, bool fallback, bool* out, ApiError* err) {
  *out = fallback;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    *err = bad(key, fmt::format("'{}' must be true or false", key), "invalid_type");
    return false;
  }
  *out = it->get<bool>();
  return true;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

// A float setting as the user wrote it (0.05, not 0.05000000074505806): its shortest decimal
// form, read back as a double.
double shortest(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

json sampling_json(const SlotInfo& s) {
  const llm::SamplerParams& p = s.sampling;
  return {{"temperature", shortest(p.temp)},   {"top_k", p.top_k},
          {"top_p", shortest(p.top_p)},        {"min_p", shortest(p.min_p)},
          {"repeat_penalty", shortest(p.repeat_penalty)}, {"repeat_last_n", p.repeat_last_n},
          {"frequency_penalty", shortest(p.frequency_penalty)}, {"presence_penalty", shortest(p.presence_penalty)},
          {"seed", p.seed == llm::SamplerParams::kRandomSeed ? json(-1) : json(p.seed)},
          {"n_predict", s.max_tokens}};
}

}  // namespace

std::string props_body(const ApiContext& ctx, int n_slots) {
  const llm::Tokenizer& tok = *ctx.tok;
  auto special = [&](llm::TokenId id) { return id == llm::kNoToken ? std::string() : std::string(tok.token_to_piece(id)); };
  SlotInfo defaults;
  json settings = {{"id", 0}, {"n_ctx", ctx.n_ctx}, {"is_processing", false}, {"params", sampling_json(defaults)}};
  json j = {{"default_generation_settings", settings},
            {"total_slots", n_slots},
            {"model_path", ctx.model_path},
            {"model_alias", ctx.model_id},
            {"chat_template", ctx.tmpl ? ctx.tmpl->source() : std::string()},
            {"bos_token", special(tok.bos_id())},
            {"eos_token", special(tok.eos_id())},
            {"n_vocab", tok.vocab_size()},
            {"modalities", {{"vision", false}, {"audio", false}}},
            {"build_info", fmt::format("loom {} ({})", loom_version(), git_commit())}};
  return dump(j);
}

std::string slots_body(const std::vector<SlotInfo>& slots, int64_t n_ctx) {
  json arr = json::array();
  for (const SlotInfo& s : slots) {
    const int64_t remain = s.max_tokens < 0 ? -1 : std::max<int64_t>(0, s.max_tokens - s.n_decoded);
    arr.push_back({{"id", s.id},
                   {"n_ctx", n_ctx},
                   {"is_processing", s.busy},
                   {"params", sampling_json(s)},
                   {"next_token", {{"has_next_token", s.busy}, {"n_decoded", s.n_decoded}, {"n_remain", remain}}},
                   {"n_prompt_tokens", s.n_prompt},
                   {"n_cached", s.n_cached}});
  }
  return dump(arr);
}

bool tokenize_body(std::string_view text, const ApiContext& ctx, std::string* out, ApiError* err) {
  try {
    json body;
    if (!parse_object(text, {"content", "add_special", "parse_special", "with_pieces"}, &body, err)) return false;
    auto content = body.find("content");
    if (content == body.end() || !content->is_string()) {
      *err = bad("content", "'content' must be a string (the text to tokenize)", content == body.end() ? "missing" : "invalid_type");
      return false;
    }
    bool add_special, parse_special, with_pieces;
    if (!get_flag(body, "add_special", false, &add_special, err) ||
        !get_flag(body, "parse_special", true, &parse_special, err) ||
        !get_flag(body, "with_pieces", false, &with_pieces, err))
      return false;
    auto ids = ctx.tok->encode(content->get_ref<const std::string&>(), add_special, parse_special);
    if (!ids.ok()) {
      *err = bad("content", "cannot tokenize: " + ids.status().to_string(), "invalid_value");
      return false;
    }
    json tokens = json::array();
    for (llm::TokenId id : *ids) {
      if (!with_pieces) {
        tokens.push_back(id);
        continue;
      }
      const std::string_view piece = ctx.tok->token_to_piece(id);
      json p = json::array();
      if (valid_utf8(piece)) p = std::string(piece);
      else
        for (char c : piece) p.push_back(static_cast<unsigned char>(c));
      tokens.push_back({{"id", id}, {"piece", p}});
    }
    *out = dump(json{{"tokens", tokens}});
    return true;
  } catch (const std::exception& e) {
    *err = bad("", fmt::format("the request could not be read: {}", e.what()), "invalid_request");
    return false;
  }
}

bool detokenize_body(std::string_view text, const ApiContext& ctx, std::string* out, ApiError* err) {
  try {
    json body;
    if (!parse_object(text, {"tokens"}, &body, err)) return false;
    auto tokens = body.find("tokens");
    if (tokens == body.end() || !tokens->is_array()) {
      *err = bad("tokens", "'tokens' must be an array of token ids", tokens == body.end() ? "missing" : "invalid_type");
      return false;
    }
    const int64_t n_vocab = ctx.tok->vocab_size();
    std::vector<llm::TokenId> ids;
    ids.reserve(tokens->size());
    for (size_t i = 0; i < tokens->size(); ++i) {
      const json& t = (*tokens)[i];
      if (!t.is_number_integer()) {
        *err = bad("tokens", fmt::format("tokens[{}] is not an integer token id", i), "invalid_type");
        return false;
      }
      const bool negative = t.is_number_integer() && !t.is_number_unsigned() && t.get<int64_t>() < 0;
      if (negative || t.get<uint64_t>() >= static_cast<uint64_t>(n_vocab)) {
        *err = bad("tokens", fmt::format("tokens[{}] = {} is outside the vocabulary [0, {})", i, t.dump(), n_vocab),
                   "invalid_value");
        return false;
      }
      ids.push_back(static_cast<llm::TokenId>(t.get<int64_t>()));
    }
    auto content = ctx.tok->decode(ids);
    if (!content.ok()) {
      *err = bad("tokens", "cannot detokenize: " + content.status().to_string(), "invalid_value");
      return false;
    }
    *out = dump(json{{"content", *content}});
    return true;
  } catch (const std::exception& e) {
    *err = bad("", fmt::format("the request could not be read: {}", e.what()), "invalid_request");
    return false;
  }
}

}  // namespace loom::serve
