// `loom serve`: an OpenAI-compatible HTTP server with continuous batching over --parallel
// sequence slots, /metrics, and a chat page at /. SIGTERM or Ctrl-C drains and exits.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "device_flags.h"
#include "gen_flags.h"
#include "option_flags.h"
#include "loom/base/file.h"
#include "loom/base/thread_pool.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/exec/hrx_backend.h"
#include "loom/model/model.h"
#include "loom/serve/metrics.h"
#include "loom/serve/scheduler.h"
#include "loom/serve/server.h"
#include "loom/text/chat_template.h"
#include "loom/text/tokenizer.h"

namespace loom::cli {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct ServeFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int64_t n_ctx = 4096;
  int n_threads = default_thread_count();
  DeviceFlags placement;  // --device and -ngl as given
  std::string device;     // what they resolve to; "": exec::default_device()
  int64_t n_batch = 512;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string api_key;
  size_t max_queue = 64;
  serve::HttpLimits limits;
  double drain_seconds = 30.0;
  bool quiet = false;
  bool prepare = true;  // build the step plans of likely batch sizes before listening
  std::string chat_template_file;  // a Jinja chat template replacing the model's
};

// Builds the step plans the first requests would otherwise wait for (HRX devices compile one
// per padded size): decode steps of 1, 2, 4, ... tokens (one per busy slot, each with its
// logits) up to --parallel, and a prompt step of each power-of-two size up to --batch-size with
// one row of logits (a lone request reading its prompt). Backends without plans build nothing.
Status prepare_steps(llm::Engine& engine, const ServeFlags& f, int64_t n_ctx) {
  std::vector<std::pair<int64_t, int64_t>> sizes;
  const int64_t max_tokens = std::min<int64_t>(f.n_batch, n_ctx);
  for (int64_t s = 1; s <= max_tokens; s *= 2) {
    sizes.emplace_back(s, s);
    if (s >= f.parallel) break;
  }
  for (int64_t t = 2; t <= max_tokens; t *= 2) sizes.emplace_back(t, 1);
  const double t0 = serve::now_seconds();
  int built = 0;
  for (const auto& [n_tokens, n_outputs] : sizes) {
    const double t1 = serve::now_seconds();
    LOOM_ASSIGN_OR_RETURN(bool b, engine.prepare(n_tokens, n_outputs));
    if (!b) continue;
    ++built;
    std::fprintf(stderr, "loom serve: prepared the step plan for %lld tokens, %lld outputs (%.1f s)\n",
                 static_cast<long long>(n_tokens), static_cast<long long>(n_outputs), serve::now_seconds() - t1);
    std::fflush(stderr);
  }
  if (built > 0)
    std::fprintf(stderr, "loom serve: %d step plans ready in %.1f s\n", built, serve::now_seconds() - t0);
  return Status();
}

Status serve(const ServeFlags& f) {
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(f.model));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Model> model, llm::Model::load(path));
  LOOM_ASSIGN_OR_RETURN(llm::Tokenizer tok, llm::Tokenizer::from_gguf(model->gguf()));
  auto tmpl_or = llm::ChatTemplate::from_gguf(model->gguf());
  if (!f.chat_template_file.empty()) {
    LOOM_ASSIGN_OR_RETURN(std::string source, read_file(f.chat_template_file));
    auto text_of = [&](llm::TokenId id) { return id == llm::kNoToken ? std::string() : tok.token_text(id); };
    tmpl_or = llm::ChatTemplate::from_source(source, text_of(tok.bos_id()), text_of(tok.eos_id()));
    if (!tmpl_or.ok()) return std::move(tmpl_or).status().with_context("reading --chat-template-file " + f.chat_template_file);
  }
  std::unique_ptr<llm::ChatTemplate> tmpl;
  if (tmpl_or.ok()) tmpl = std::make_unique<llm::ChatTemplate>(std::move(tmpl_or).value());
  else std::fprintf(stderr, "loom serve: no chat template (%s); /v1/chat/completions will refuse requests\n",
                    tmpl_or.status().to_string().c_str());

  llm::EngineOptions eo;
  eo.n_ctx = f.n_ctx;
  eo.n_threads = f.n_threads;
  eo.n_batch = f.n_batch;
  eo.n_seq = f.parallel;
  const llm::KvCacheTypes kv{*llm::ggml_type_from_name(f.cache_type_k), *llm::ggml_type_from_name(f.cache_type_v)};
  eo.make_backend = [device = f.device, threads = f.n_threads, kv]() { return exec::make_backend(device, threads, kv); };
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(*model, eo));
  if (f.prepare) LOOM_RETURN_IF_ERROR(prepare_steps(*engine, f, engine->n_ctx()));

  serve::Metrics metrics;
  serve::SchedulerOptions so;
  so.n_batch = f.n_batch;
  so.max_queue = f.max_queue;
  so.embed_threads = f.n_threads;
  serve::Scheduler scheduler(*engine, tok, metrics, so);

  serve::ApiContext ctx;
  ctx.tok = &tok;
  ctx.tmpl = tmpl.get();
  ctx.n_ctx = engine->n_ctx();
  ctx.model_id = std::filesystem::path(path).stem().string();
  ctx.model_path = path;

  serve::ServerOptions opt;
  opt.host = f.host;
  opt.port = f.port;
  opt.api_key = f.api_key.empty() ? loom::opt::get_string(loom::opt::Opt::kApiKey) : f.api_key;
  opt.limits = f.limits;
  opt.drain_seconds = f.drain_seconds;
  opt.log_requests = !f.quiet;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<serve::Server> server, serve::Server::create(scheduler, metrics, ctx, opt));

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::fprintf(stderr, "loom serve: %s on http://%s:%d (%d slots x %lld tokens, %d threads%s)\n",
               ctx.model_id.c_str(), f.host.c_str(), server->port(), f.parallel,
               static_cast<long long>(engine->n_ctx()), f.n_threads, opt.api_key.empty() ? "" : ", API key required");
  std::fflush(stderr);
  LOOM_RETURN_IF_ERROR(server->run(g_stop));
  std::fputs("loom serve: stopped\n", stderr);
  return Status();
}

}  // namespace

LOOM_COMMAND(kServe, "serve", "OpenAI-compatible HTTP server with continuous batching and a chat page", [](CLI::App& app) -> Action {
  auto f = std::make_shared<ServeFlags>();
  bind_option(app.add_option("-m,--model", f->model, "GGUF file or a known model name (smollm2, gemma3: see loom pull); default: $LOOM_MODEL or SmolLM2-135M-Instruct"),
              opt::Opt::kModel);
  app.add_option("--host", f->host, "address to listen on")->capture_default_str();
  app.add_option("--port", f->port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  // CLI11 takes one letter after a single dash: main() rewrites llama-server's "-np" to "--parallel".
  app.add_option("--parallel", f->parallel, "sequence slots: requests decoded together in one batched step")
      ->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("-c,--ctx,--ctx-size", f->n_ctx, "context per slot in tokens (capped at the model's; 0: the model's)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  // What llama-server launchers pass: Loom always renders the model's own Jinja chat template and
  // always serves /metrics, so both flags are accepted and change nothing.
  app.add_flag("--jinja")
      ->description("accepted for llama-server launchers: the model's Jinja chat template is always used")
      ->group("llama-server compatibility");
  app.add_flag("--metrics")->description("accepted for llama-server launchers: /metrics is always served")
      ->group("llama-server compatibility");
  app.add_option("--chat-template-file", f->chat_template_file,
                 "a Jinja chat template to use instead of the model's (llama-server's flag)")
      ->check(CLI::ExistingFile);
  bind_option(app.add_option("-t,--threads", f->n_threads, "CPU threads")->capture_default_str()->check(CLI::Range(1, 1024)),
              opt::Opt::kThreads);
  add_device_flags(app, f->placement);
  app.add_option("-b,--batch-size", f->n_batch, "tokens per batched step (decode tokens + prompt chunks)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  add_cache_type_flags(app, f->cache_type_k, f->cache_type_v);
  bind_option(app.add_option("--api-key", f->api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: $LOOM_API_KEY)"),
              opt::Opt::kApiKey);
  app.add_option("--max-queue", f->max_queue, "requests that may wait for a slot; more get 503")->capture_default_str();
  app.add_option("--max-body", f->limits.max_body_bytes, "largest request body in bytes, however it is framed; larger get 413")
      ->capture_default_str()->check(CLI::Range(size_t{1}, size_t{1} << 34));
  app.add_option("--header-timeout", f->limits.header_seconds,
                 "seconds a client has to send a whole request head (also the keep-alive idle time); later: 408 or close")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  app.add_option("--body-timeout", f->limits.body_seconds, "seconds a client has to send a whole request body; later: 408")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  app.add_option("--max-connections", f->limits.max_connections, "open connections in total; more get 503 and are closed")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-connections-per-client", f->limits.max_connections_per_client,
                 "open connections from one client address; more get 503 and are closed")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--drain-timeout", f->drain_seconds, "seconds in-flight requests get to finish after SIGTERM")
      ->capture_default_str();
  app.add_flag("-q,--quiet", f->quiet, "no log line per request");
  app.add_flag("!--no-prepare", f->prepare,
               "do not build the step plans of likely batch sizes before listening (HRX devices then compile each on first use)");
  return [f] {
    f->device = f->placement.resolve();
    Status s = serve(*f);
    return s.ok() ? 0 : report(s);
  };
});

}  // namespace loom::cli
