// The routes of `loom serve` (see server.h) on the asynchronous HTTP server of http.h: request
// parsing goes through openai_api, generation through the Scheduler; a non-streaming answer is
// a deferred response, a stream is SSE pulled from the Job whenever it notifies.
#include "loom/serve/server.h"

#include <signal.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include <fmt/format.h>

#include "loom/serve/embeddings_api.h"
#include "loom/serve/http.h"
#include "loom/serve/llama_api.h"

namespace loom::serve {
namespace {

bool same_secret(const std::string& a, const std::string& b) {
  // Length leaks, content does not: compare every byte.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

bool bearer_matches(const std::string& authorization, const std::string& key) {
  // "Bearer KEY": the scheme is case-insensitive (RFC 7235), the credentials are not.
  const size_t sp = authorization.find(' ');
  if (sp == std::string::npos) return false;
  const std::string scheme = authorization.substr(0, sp);
  if (scheme.size() != 6) return false;
  for (size_t i = 0; i < 6; ++i)
    if (std::tolower(static_cast<unsigned char>(scheme[i])) != "bearer"[i]) return false;
  size_t start = sp;
  while (start < authorization.size() && authorization[start] == ' ') ++start;
  return same_secret(authorization.substr(start), key);
}

namespace {

ApiError api_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

HttpResponse error_response(const ApiError& e, std::string detail = "") {
  HttpResponse r;
  r.status = e.status;
  r.body = error_body(e);
  r.log_detail = std::move(detail);
  return r;
}

// The log line's details; for several choices the first one's slot and timing, all tokens.
std::string job_note(const std::vector<std::shared_ptr<Job>>& jobs, int64_t n_prompt, const std::string& reason,
                     bool stream) {
  const Job& job = *jobs[0];
  const double ttft = job.first_token > 0 ? (job.first_token - job.arrival) * 1e3 : -1.0;
  int64_t gen = 0;
  for (const auto& j : jobs) gen += j->n_generated.load();
  return fmt::format("prompt={} reused={} gen={} ttft={:.1f}ms finish={} slot={}{}{}", n_prompt, job.n_reused, gen, ttft,
                     reason.empty() ? "-" : reason, job.slot, jobs.size() > 1 ? fmt::format(" choices={}", jobs.size()) : "",
                     stream ? " stream" : "");
}

std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/health", "/metrics", "/",
                            "/props", "/slots", "/tokenize", "/detokenize"})
    if (path == known) return path;
  return "other";
}

// What a response being produced from a request's Jobs (one per choice) needs, for both kinds
// below.
struct JobOutput {
  std::vector<std::shared_ptr<Job>> jobs;
  Endpoint ep;
  ResponseInfo info;
  int64_t n_prompt;                 // prompt tokens, each prompt counted once
  const llm::Tokenizer* logprobs;   // renders logprobs; null when the request has none
  bool tools = false;               // replies may be tool calls (parsed at the end, in `format`)
  ToolFormat format = ToolFormat::kGeneric;
  uint64_t seq = 0;                 // makes tool call ids distinct between responses
  void set_notify(const std::function<void()>& notify) {
    for (auto& j : jobs) j->set_notify(notify);
  }
  void cancel() {
    for (auto& j : jobs) j->cancel();
  }
  int64_t n_generated() const {
    int64_t n = 0;
    for (const auto& j : jobs) n += j->n_generated.load();
    return n;
  }
};

// The message of a Job that ended without a result ("" when it has one).
std::string failure_message(const Job::Update& u) {
  if (u.finish_reason == "error") return "Generation failed: " + u.error.to_string();
  if (u.finish_reason == "cancelled") return "The server shut down before the request finished.";
  return "";
}

// The whole response of a non-streaming request, once all its Jobs have finished.
class JobDeferred final : public HttpDeferred {
 public:
  explicit JobDeferred(JobOutput o) : o_(std::move(o)), results_(o_.jobs.size()), done_(o_.jobs.size(), false) {}
  void set_notify(std::function<void()> notify) override { o_.set_notify(notify); }
  void abort() override { o_.cancel(); }
  bool poll(HttpResponse* out) override {
    bool all = true;
    for (size_t i = 0; i < o_.jobs.size(); ++i) {
      if (done_[i]) continue;
      Job::Update u = o_.jobs[i]->poll();
      results_[i].text += u.text;
      for (auto& lp : u.logprobs) results_[i].logprobs.push_back(std::move(lp));
      if (u.finished) {
        done_[i] = true;
        results_[i].finish_reason = u.finish_reason;
        if (failure_.empty()) {
          failure_ = failure_message(u);
          failed_reason_ = u.finish_reason;
        }
      }
      all = all && done_[i];
    }
    if (!all) return false;
    const std::string reason = failure_.empty() ? results_[0].finish_reason : failed_reason_;
    const std::string detail = job_note(o_.jobs, o_.n_prompt, reason, false);
    if (!failure_.empty() && failed_reason_ == "cancelled") {
      *out = error_response(api_error(503, failure_, "server_error", "cancelled"), detail);
    } else if (!failure_.empty()) {
      *out = error_response(api_error(500, failure_, "server_error"), detail);
    } else {
      out->log_detail = detail;
      if (o_.tools) {
        for (size_t i = 0; i < results_.size(); ++i) {
          ToolOutput t = parse_tool_output(o_.format, results_[i].text, o_.seq * kMaxChoices + i);
          results_[i].text = std::move(t.content);
          results_[i].tool_calls = std::move(t.calls);
        }
      }
      out->body = completion_body(o_.ep, o_.info, results_, o_.logprobs, o_.n_prompt, o_.n_generated());
    }
    return true;
  }

 private:
  JobOutput o_;
  std::vector<ChoiceResult> results_;
  std::vector<bool> done_;
  std::string failure_, failed_reason_;
};

// Server-sent events of a streaming request: chunks of each choice's text as it comes (with its
// index), a final chunk per choice, then usage (when asked) and [DONE] once all have ended. An
// SSE comment after a quiet half second finds out whether the client is still there (a failed
// write cancels the Jobs and frees their slots).
class JobStream final : public HttpStream {
 public:
  JobStream(JobOutput o, bool include_usage)
      : o_(std::move(o)),
        include_usage_(include_usage),
        done_(o_.jobs.size(), false),
        offsets_(o_.jobs.size(), 0),
        held_(o_.jobs.size()) {}
  void set_notify(std::function<void()> notify) override { o_.set_notify(notify); }
  void abort() override {
    o_.cancel();
    if (reason_.empty()) reason_ = "disconnected";
  }
  std::string idle_piece() const override { return ": keep-alive\n\n"; }
  std::string log_detail() const override { return job_note(o_.jobs, o_.n_prompt, reason_, true); }
  bool next(std::string* out) override {
    if (!started_) {
      started_ = true;
      if (o_.ep == Endpoint::kChat)
        for (size_t i = 0; i < o_.jobs.size(); ++i) *out += chunk(i, StreamPiece{static_cast<int>(i), "", "", true, {}});
    }
    bool all = true;
    for (size_t i = 0; i < o_.jobs.size() && failure_.empty(); ++i) {
      if (done_[i]) continue;
      Job::Update u = o_.jobs[i]->poll();
      if (o_.tools) {
        // Whether the reply is a call shows only at its end: hold the text until then.
        held_[i] += u.text;
        u.text.clear();
      }
      if (!u.text.empty() || (o_.logprobs && !u.logprobs.empty()))
        *out += chunk(i, StreamPiece{static_cast<int>(i), u.text, "", false, u.logprobs});
      if (!u.finished) {
        all = false;
        continue;
      }
      done_[i] = true;
      if (reason_.empty() || i == 0) reason_ = u.finish_reason;
      failure_ = failure_message(u);
      std::string finish = u.finish_reason;
      if (failure_.empty() && o_.tools) {
        ToolOutput t = parse_tool_output(o_.format, held_[i], o_.seq * kMaxChoices + i);
        if (!t.content.empty()) *out += chunk(i, StreamPiece{static_cast<int>(i), t.content, "", false, {}});
        if (!t.calls.empty()) {
          StreamPiece p{static_cast<int>(i), "", "", false, {}};
          p.tool_calls = t.calls;
          *out += chunk(i, p);
          finish = "tool_calls";
        }
      }
      if (failure_.empty()) *out += chunk(i, StreamPiece{static_cast<int>(i), "", finish, false, {}});
    }
    if (!failure_.empty()) {
      // One choice failed: the others are of no use without it.
      o_.cancel();
      *out += "data: " + error_body(api_error(500, failure_, "server_error")) + "\n\n";
    } else if (!all) {
      return false;
    } else if (include_usage_) {
      *out += usage_chunk(o_.ep, o_.info, o_.n_prompt, o_.n_generated());
    }
    *out += "data: [DONE]\n\n";
    return true;
  }

 private:
  std::string chunk(size_t i, const StreamPiece& piece) {
    return stream_chunk(o_.ep, o_.info, piece, o_.logprobs, &offsets_[i]);
  }

  JobOutput o_;
  bool include_usage_;
  bool started_ = false;
  std::vector<bool> done_;
  std::vector<int64_t> offsets_;
  std::vector<std::string> held_;  // text held back while tools may be called
  std::string reason_, failure_;
};

// The response of an embeddings request, once its Job has finished.
class EmbedDeferred final : public HttpDeferred {
 public:
  EmbedDeferred(std::shared_ptr<Job> job, std::string model, bool base64)
      : job_(std::move(job)), model_(std::move(model)), base64_(base64) {}
  void set_notify(std::function<void()> notify) override { job_->set_notify(std::move(notify)); }
  void abort() override { job_->cancel(); }
  bool poll(HttpResponse* out) override {
    Job::Update u = job_->poll();
    if (!u.finished) return false;
    const std::string detail = fmt::format("inputs={} tokens={} finish={}", job_->embeddings.size(), job_->n_prompt,
                                           u.finish_reason);
    const std::string failure = failure_message(u);
    if (u.finish_reason == "cancelled") {
      *out = error_response(api_error(503, failure, "server_error", "cancelled"), detail);
    } else if (!failure.empty()) {
      *out = error_response(api_error(500, failure, "server_error"), detail);
    } else {
      out->log_detail = detail;
      out->body = embedding_body(model_, job_->embeddings, base64_, job_->n_prompt);
    }
    return true;
  }

 private:
  std::shared_ptr<Job> job_;
  std::string model_;
  bool base64_;
};

class LoomServer final : public Server {
 public:
  LoomServer(Scheduler& scheduler, Metrics& metrics, ApiContext ctx, ServerOptions options)
      : sched_(scheduler), metrics_(metrics), ctx_(std::move(ctx)), opt_(std::move(options)) {}

  Status init() {
    LOOM_ASSIGN_OR_RETURN(http_, HttpServer::bind(opt_.host, opt_.port, opt_.limits,
                                                  [this](const HttpRequest& req) { return route(req); },
                                                  [this](const HttpLogEntry& e) { log(e); }));
    return Status();
  }

  int port() const override { return http_->port(); }

  Status run(const std::atomic<bool>& stop) override {
    http_->start(opt_.http_threads > 0 ? opt_.http_threads : 2);
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Drain: refuse new work, let in-flight requests finish up to the deadline.
    sched_.begin_drain();
    metrics_.draining = true;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(opt_.drain_seconds * 1e3));
    const bool idle = sched_.wait_idle(deadline);
    if (!idle) std::fputs("loom serve: drain deadline passed; cancelling the requests still running\n", stderr);
    sched_.stop();
    // Give the I/O threads a moment to write the last chunks of the streams that just ended.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    http_->stop();
    return Status();
  }

 private:
  void log(const HttpLogEntry& e) {
    if (e.method != "-") metrics_.count_request(endpoint_label(e.path), e.status);
    if (!opt_.log_requests) return;
    std::string line = fmt::format("loom serve: {} \"{} {}\" {} {:.1f}ms{}{}\n", e.peer, e.method, e.path,
                                   e.status, e.ms, e.detail.empty() ? "" : " ", e.detail);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }

  HttpResponse route(const HttpRequest& req) {
    const std::string& p = req.path;
    // llama-server's routes tell about the model and the slots: the key guards them as /v1/*.
    const bool llama_route = p == "/props" || p == "/slots" || p == "/tokenize" || p == "/detokenize";
    if (!opt_.api_key.empty() && (p.rfind("/v1/", 0) == 0 || llama_route)) {
      const std::string auth = req.header("Authorization");
      if (auth.empty())
        return error_response(api_error(401, "Missing API key (send 'Authorization: Bearer KEY').",
                                        "invalid_request_error", "invalid_api_key"));
      if (!bearer_matches(auth, opt_.api_key))
        return error_response(api_error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"));
    }
    const bool get = req.method == "GET" || req.method == "HEAD";
    if (p == "/v1/chat/completions" || p == "/v1/completions") {
      if (req.method != "POST") {
        HttpResponse r = error_response(api_error(405, "Use POST for this endpoint.", "invalid_request_error", "method_not_allowed"));
        r.headers.emplace_back("Allow", "POST");
        return r;
      }
      return generate(p == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletion, req);
    }
    if (p == "/v1/embeddings") {
      if (req.method != "POST") {
        HttpResponse r = error_response(api_error(405, "Use POST for this endpoint.", "invalid_request_error", "method_not_allowed"));
        r.headers.emplace_back("Allow", "POST");
        return r;
      }
      return embeddings(req);
    }
    if (llama_route) return llama(req);
    HttpResponse r;
    if (p == "/" && get) {
      r.content_type = "text/html; charset=utf-8";
      r.body = chat_page_html();
    } else if (p == "/favicon.ico" && get) {
      r.status = 204;
      r.content_type.clear();
    } else if (p == "/health" && get) {
      if (metrics_.draining.load()) {
        r.status = 503;
        r.body = R"({"status":"draining"})";
      } else {
        r.body = fmt::format(R"({{"status":"ok","slots_busy":{},"slots_total":{},"queue_depth":{}}})",
                             metrics_.slots_busy.load(), metrics_.slots_total.load(), metrics_.queue_depth.load());
      }
    } else if (p == "/metrics" && get) {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_.prometheus_text();
    } else if (p == "/v1/models" && get) {
      r.body = models_body(ctx_.model_id, started_);
    } else if (p == "/" || p == "/favicon.ico" || p == "/health" || p == "/metrics" || p == "/v1/models") {
      r = error_response(api_error(405, "Method not allowed.", "invalid_request_error", "method_not_allowed"));
      r.headers.emplace_back("Allow", "GET");
    } else {
      r = error_response(api_error(404, "Unknown endpoint: " + req.method + " " + p, "invalid_request_error", "not_found"));
    }
    return r;
  }

  // GET /props, GET /slots, POST /tokenize, POST /detokenize (llama_api.h).
  HttpResponse llama(const HttpRequest& req) {
    const std::string& p = req.path;
    const bool post = p == "/tokenize" || p == "/detokenize";
    const std::string want = post ? "POST" : "GET";
    if (req.method != want && !(want == "GET" && req.method == "HEAD")) {
      HttpResponse r = error_response(api_error(405, "Use " + want + " for this endpoint.", "invalid_request_error",
                                                "method_not_allowed"));
      r.headers.emplace_back("Allow", want);
      return r;
    }
    HttpResponse r;
    if (p == "/props") {
      r.body = props_body(ctx_, sched_.n_slots());
    } else if (p == "/slots") {
      r.body = slots_body(sched_.slot_infos(), sched_.n_ctx());
    } else {
      ApiError err;
      const bool ok = p == "/tokenize" ? tokenize_body(req.body, ctx_, &r.body, &err)
                                       : detokenize_body(req.body, ctx_, &r.body, &err);
      if (!ok) return error_response(err, "error=" + (err.code.empty() ? std::string("invalid_request") : err.code));
    }
    return r;
  }

  HttpResponse embeddings(const HttpRequest& req) {
    EmbeddingRequest r;
    ApiError err;
    if (!parse_embedding_request(req.body, ctx_, sched_.n_embd(), &r, &err))
      return error_response(err, "error=" + (err.code.empty() ? std::string("invalid_request") : err.code));
    auto job_or = sched_.submit_embeddings(std::move(r.inputs));
    if (!job_or.ok()) return rejected(job_or.status());
    HttpResponse res;
    res.deferred = std::make_shared<EmbedDeferred>(std::move(job_or).value(), ctx_.model_id, r.base64);
    return res;
  }

  // A request the scheduler did not queue: a full queue, a drain, or a bad request.
  static HttpResponse rejected(const Status& s) {
    HttpResponse res;
    if (s.code() == StatusCode::kResourceExhausted) {
      res = error_response(api_error(503, "The server is busy (request queue full); retry shortly.", "server_error",
                                     "queue_full"), "rejected");
      res.headers.emplace_back("Retry-After", "1");
    } else if (s.code() == StatusCode::kUnavailable) {
      res = error_response(api_error(503, "The server is shutting down.", "server_error", "shutting_down"), "rejected");
      res.headers.emplace_back("Retry-After", "5");
    } else {
      res = error_response(api_error(400, s.to_string(), "invalid_request_error"), "rejected");
    }
    return res;
  }

  HttpResponse generate(Endpoint ep, const HttpRequest& req) {
    ApiRequest r;
    ApiError err;
    if (!parse_request(ep, req.body, ctx_, &r, &err))
      return error_response(err, "error=" + (err.code.empty() ? std::string("invalid_request") : err.code));
    int64_t n_prompt = 0;
    for (const auto& p : r.prompts) n_prompt += static_cast<int64_t>(p.size());
    const llm::Tokenizer* logprobs = r.gen.logprobs >= 0 ? ctx_.tok : nullptr;
    auto job_or = sched_.submit_all(expand_choices(r));
    if (!job_or.ok()) return rejected(job_or.status());
    std::vector<std::shared_ptr<Job>> jobs = std::move(job_or).value();
    ResponseInfo info;
    info.id = fmt::format("{}-{}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", next_id_.fetch_add(1));
    info.created = static_cast<int64_t>(std::time(nullptr));
    info.model = ctx_.model_id;
    HttpResponse res;
    JobOutput out{std::move(jobs), ep, info, n_prompt, logprobs};
    out.tools = r.tools.active;
    out.format = r.tools.format;
    out.seq = next_id_.load();
    if (!r.stream) {
      res.deferred = std::make_shared<JobDeferred>(std::move(out));
      return res;
    }
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.headers.emplace_back("X-Accel-Buffering", "no");
    res.stream = std::make_shared<JobStream>(std::move(out), r.include_usage);
    return res;
  }

  Scheduler& sched_;
  Metrics& metrics_;
  ApiContext ctx_;
  ServerOptions opt_;
  std::unique_ptr<HttpServer> http_;
  int64_t started_ = static_cast<int64_t>(std::time(nullptr));
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace

Result<std::unique_ptr<Server>> Server::create(Scheduler& scheduler, Metrics& metrics, ApiContext ctx,
                                               ServerOptions options) {
  // A client that goes away makes send() fail; without this a write to its socket could raise
  // SIGPIPE and end the process.
  signal(SIGPIPE, SIG_IGN);
  auto s = std::make_unique<LoomServer>(scheduler, metrics, std::move(ctx), std::move(options));
  LOOM_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<Server>(std::move(s));
}

}  // namespace loom::serve

