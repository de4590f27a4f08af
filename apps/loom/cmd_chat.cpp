// `loom chat`: interactive multi-turn chat with the model's own chat template. Reads one user
// message per line (a terminal or a pipe), streams replies, and reuses the KV cache of the
// conversation's unchanged prefix on every turn. /exit, end of input or Ctrl-C end it.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "gen_flags.h"
#include "loom/base/options.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/engine/session.h"
#include "loom/model/model.h"
#include "loom/text/chat_template.h"
#include "loom/text/tokenizer.h"

namespace loom::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

// SIGINT without SA_RESTART: a blocked read of stdin returns, so Ctrl-C ends the chat at once.
struct SigintGuard {
  struct sigaction old {};
  SigintGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old);
  }
  ~SigintGuard() { sigaction(SIGINT, &old, nullptr); }
};

struct ChatFlags {
  GenFlags gen;
  std::string system;
  int64_t n_predict = -1;
};

// The prompt ids of the rendered conversation. Templates usually write the BOS token as text;
// add the BOS id only when the model wants one and the text does not already start with it.
Result<std::vector<int32_t>> tokenize_chat(const llm::Tokenizer& tok, const std::string& text) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode(text, /*add_special=*/false, /*parse_special=*/true));
  if (tok.add_bos() && tok.bos_id() != llm::kNoToken && (ids.empty() || ids[0] != tok.bos_id()))
    ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

Status chat(const ChatFlags& f) {
  SigintGuard guard;
  LOOM_RETURN_IF_ERROR(f.gen.sampling().validate());
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(f.gen.model));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Model> model, llm::Model::load(path));
  LOOM_ASSIGN_OR_RETURN(llm::Tokenizer tok, llm::Tokenizer::from_gguf(model->gguf()));
  auto tmpl_or = llm::ChatTemplate::from_gguf(model->gguf());
  if (!tmpl_or.ok()) return std::move(tmpl_or).status().with_context("model " + path + " cannot chat");
  const llm::ChatTemplate tmpl = std::move(tmpl_or).value();
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(*model, f.gen.engine()));
  llm::Sampler sampler(f.gen.sampling(), model->config().n_vocab);

  const bool tty = isatty(STDIN_FILENO) == 1;
  if (tty)
    std::fprintf(stderr, "loom chat: %s (context %lld tokens). Type /exit or press Ctrl-D to quit, /reset to forget.\n",
                 model->config().name.empty() ? path.c_str() : model->config().name.c_str(),
                 static_cast<long long>(engine->n_ctx()));

  std::vector<llm::ChatMessage> messages;
  if (!f.system.empty()) messages.push_back({"system", f.system});
  std::string line;
  while (!g_interrupted.load()) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;  // end of input, or Ctrl-C while reading
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.resize(f.system.empty() ? 0 : 1);
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    auto text = tmpl.render(messages, /*add_generation_prompt=*/true);
    if (!text.ok()) return std::move(text).status().with_context("rendering the chat template");
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, tokenize_chat(tok, *text));
    if (static_cast<int64_t>(prompt.size()) >= engine->n_ctx()) {
      std::fprintf(stderr, "loom: the conversation (%zu tokens) no longer fits in the context of %lld tokens; "
                           "use /reset or a larger -c\n", prompt.size(), static_cast<long long>(engine->n_ctx()));
      messages.pop_back();
      continue;
    }
    llm::GenerateOptions opts = f.gen.generate_options();
    opts.max_tokens = f.n_predict;
    auto on_text = [](std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    LOOM_ASSIGN_OR_RETURN(llm::GenerateResult r, llm::generate(*engine, tok, sampler, prompt, opts, on_text, &g_interrupted));
    std::fputc('\n', stdout);
    std::fflush(stdout);
    messages.push_back({"assistant", r.text});
    if (tty || opt::get_bool(opt::Opt::kChatStats))
      std::fprintf(stderr, "[%zu tokens, %.1f tok/s; prompt %lld new + %lld cached]\n", r.tokens.size(), r.gen_tps(),
                   static_cast<long long>(r.n_prompt - r.n_reused), static_cast<long long>(r.n_reused));
    if (r.stop_reason == "context")
      std::fprintf(stderr, "loom: the context is full; use /reset or a larger -c\n");
  }
  if (g_interrupted.load()) std::fputc('\n', stderr);
  return Status();
}

}  // namespace

LOOM_COMMAND(kChat, "chat", "chat with a model using its chat template (stdin may be a pipe)", [](CLI::App& app) -> Action {
  auto f = std::make_shared<ChatFlags>();
  add_gen_flags(app, f->gen);
  app.add_option("--system", f->system, "system message at the start of the conversation");
  app.add_option("-n,--n-predict", f->n_predict, "at most this many tokens per reply (-1: until the end of the reply)")
      ->capture_default_str();
  return [f] {
    Status s = chat(*f);
    return s.ok() ? 0 : report(s);
  };
});

}  // namespace loom::cli
