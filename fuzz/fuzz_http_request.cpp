// libFuzzer target: arbitrary bytes through the HTTP request parser that `loom serve` reads
// requests with (its limits included), and the body of a parsed request through the OpenAI
// request validation (JSON -> ApiRequest, chat template and tokenizer, schemas, grammars and
// tools, the body's bytes then walked through the request's grammar), the tool-call parsers,
// /v1/embeddings bodies,
// and llama-server's /tokenize and /detokenize bodies. Any crash, sanitizer
// report, hang or unbounded allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "loom/engine/grammar.h"
#include "loom/serve/embeddings_api.h"
#include "loom/serve/http.h"
#include "loom/serve/llama_api.h"
#include "loom/serve/openai_api.h"
#include "loom/serve/tool_calls.h"
#include "loom/text/chat_template.h"
#include "loom/text/tokenizer.h"

namespace {

using namespace loom;

// A small SentencePiece vocabulary: specials, the 256 byte tokens and a few pieces.
const llm::Tokenizer& tokenizer() {
  static const std::unique_ptr<llm::Tokenizer> tok = [] {
    llm::TokenizerMetadata m;
    m.model = "llama";
    auto add = [&](std::string text, int32_t type) {
      m.tokens.push_back(std::move(text));
      m.token_types.push_back(type);
      m.scores.push_back(-static_cast<float>(m.tokens.size()));
    };
    add("<unk>", 2);
    add("<s>", 3);
    add("</s>", 3);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      add(name, 6);
    }
    for (const char* piece : {"\u2581", "a", "e", "\u2581the", "user", "assistant", ":"}) add(piece, 1);
    m.unk_id = 0;
    m.bos_id = 1;
    m.eos_id = 2;
    auto t = llm::Tokenizer::create(std::move(m));
    if (!t.ok()) {
      std::fprintf(stderr, "fuzz_http_request: %s\n", t.status().to_string().c_str());
      std::abort();
    }
    return std::make_unique<llm::Tokenizer>(std::move(t).value());
  }();
  return *tok;
}

const llm::ChatTemplate& chat_template() {
  static const std::unique_ptr<llm::ChatTemplate> tmpl = [] {
    auto t = llm::ChatTemplate::from_source(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}",
        "<s>", "</s>");
    if (!t.ok()) std::abort();
    return std::make_unique<llm::ChatTemplate>(std::move(t).value());
  }();
  return *tmpl;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  serve::HttpLimits limits;
  limits.max_body_bytes = 1 << 16;
  limits.max_header_bytes = 1 << 12;
  serve::HttpRequest req;
  serve::HttpParseError perr;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!serve::parse_http_request(bytes, limits, &req, &perr)) {
    if (perr.status != 400 && perr.status != 413 && perr.status != 431) std::abort();
    return 0;
  }
  (void)req.header("Authorization");
  if (req.body.size() > limits.max_body_bytes) std::abort();  // the limit must hold
  serve::ApiContext ctx;
  ctx.tok = &tokenizer();
  ctx.tmpl = &chat_template();
  ctx.n_ctx = 64;
  ctx.model_id = "fuzz";
  for (serve::Endpoint ep : {serve::Endpoint::kChat, serve::Endpoint::kCompletion}) {
    serve::ApiRequest r;
    serve::ApiError err;
    if (serve::parse_request(ep, req.body, ctx, &r, &err)) {
      if (r.gen.prompt.empty() || static_cast<int64_t>(r.gen.prompt.size()) >= ctx.n_ctx) std::abort();
      for (const auto& p : r.prompts)
        if (p.empty() || static_cast<int64_t>(p.size()) >= ctx.n_ctx) std::abort();
      const auto jobs = serve::expand_choices(r);
      if (jobs.empty() || static_cast<int64_t>(jobs.size()) > serve::kMaxChoices) std::abort();
      if (r.gen.grammar) {  // the body's bytes walked through the request's own grammar
        llm::GrammarMatcher m(r.gen.grammar);
        for (char c : req.body) m.accept_bytes(std::string_view(&c, 1));
      }
    } else if (err.status < 400 || err.status > 499 || err.message.empty()) {
      std::abort();
    }
    (void)serve::error_body(err);
  }
  // The body as a reply: each tool-call format's parser takes any text.
  for (serve::ToolFormat f : {serve::ToolFormat::kGeneric, serve::ToolFormat::kHermes, serve::ToolFormat::kLlama3,
                              serve::ToolFormat::kMistral})
    (void)serve::parse_tool_output(f, req.body, 1);
  // /v1/embeddings bodies: inputs that fit the context, or a 4xx.
  {
    serve::EmbeddingRequest r;
    serve::ApiError err;
    if (serve::parse_embedding_request(req.body, ctx, /*n_embd=*/8, &r, &err)) {
      if (r.inputs.empty() || static_cast<int64_t>(r.inputs.size()) > serve::kMaxEmbeddingInputs) std::abort();
      for (const auto& in : r.inputs)
        if (in.empty() || static_cast<int64_t>(in.size()) > ctx.n_ctx) std::abort();
    } else if (err.status < 400 || err.status > 499 || err.message.empty()) {
      std::abort();
    }
  }
  // llama-server's /tokenize and /detokenize bodies: an answer or a 4xx, never a crash.
  for (auto* route : {&serve::tokenize_body, &serve::detokenize_body}) {
    std::string out;
    serve::ApiError err;
    if (!route(req.body, ctx, &out, &err) && (err.status < 400 || err.status > 499 || err.message.empty())) std::abort();
  }
  return 0;
}
