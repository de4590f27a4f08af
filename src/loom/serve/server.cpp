// cpp-httplib routes of `loom serve` (see server.h): request parsing goes through openai_api,
// generation through the Scheduler; streams are SSE written by a chunked content provider.
#include "loom/serve/server.h"

#ifndef LOOM_HAVE_HTTPLIB

namespace loom::serve {
Result<std::unique_ptr<Server>> Server::create(Scheduler&, Metrics&, ApiContext, ServerOptions) {
  return unimplemented("this build of loom has no HTTP server (cpp-httplib was not linked: build with "
                       "LOOM_HAVE_HTTPLIB and -lcpp-httplib)");
}
}  // namespace loom::serve

#else

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

namespace loom::serve {
namespace {

// What the log line of the request being served on this thread says beyond method, path and
// status. httplib runs a request's handler, its content provider and its logger on one thread.
struct RequestNote {
  double start = 0.0;
  std::string detail;
};
thread_local RequestNote t_note;

bool same_secret(const std::string& a, const std::string& b) {
  // Length leaks, content does not: compare every byte.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

ApiError api_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/"})
    if (path == known) return path;
  return "other";
}

class HttpServer final : public Server {
 public:
  HttpServer(Scheduler& scheduler, Metrics& metrics, ApiContext ctx, ServerOptions options)
      : sched_(scheduler), metrics_(metrics), ctx_(std::move(ctx)), opt_(std::move(options)) {}

  Status init() {
    const int threads = opt_.http_threads > 0 ? opt_.http_threads : std::max(32, 3 * sched_.n_slots() + 16);
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr_.set_payload_max_length(opt_.max_body_bytes);
    svr_.set_keep_alive_timeout(2);
    svr_.set_read_timeout(30);
    svr_.set_write_timeout(30);
    svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      t_note = RequestNote{now_seconds(), ""};
      if (!opt_.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
        const std::string auth = req.get_header_value("Authorization");
        const std::string want = "Bearer " + opt_.api_key;
        if (auth.empty() || !same_secret(auth, want)) {
          send_error(res, api_error(401, auth.empty() ? "Missing API key (send 'Authorization: Bearer KEY')."
                                                      : "Incorrect API key provided.",
                                    "invalid_request_error", "invalid_api_key"));
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.is_chunked_content_provider_) return;
      switch (res.status) {
        case 404: send_error(res, api_error(404, "Unknown endpoint: " + req.method + " " + req.path, "invalid_request_error", "not_found")); break;
        case 413: send_error(res, api_error(413, "The request body is too large.", "invalid_request_error", "payload_too_large")); break;
        case 405: send_error(res, api_error(405, "Method not allowed.", "invalid_request_error", "method_not_allowed")); break;
        default: send_error(res, api_error(res.status, "Bad request.", "invalid_request_error")); break;
      }
    });
    svr_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, api_error(500, "Internal error: " + what, "server_error"));
    });
    svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics_.count_request(endpoint_label(req.path), res.status);
      if (!opt_.log_requests) return;
      const double ms = t_note.start > 0 ? (now_seconds() - t_note.start) * 1e3 : 0.0;
      std::string line = fmt::format("loom serve: {}:{} \"{} {}\" {} {:.1f}ms{}{}\n", req.remote_addr, req.remote_port,
                                     req.method, req.path, res.status, ms, t_note.detail.empty() ? "" : " ",
                                     t_note.detail);
      std::fwrite(line.data(), 1, line.size(), stderr);
    });

    svr_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(chat_page_html(), "text/html; charset=utf-8");
    });
    svr_.Get("/favicon.ico", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (metrics_.draining.load()) {
        res.status = 503;
        res.set_content(R"({"status":"draining"})", "application/json");
        return;
      }
      res.set_content(fmt::format(R"({{"status":"ok","slots_busy":{},"slots_total":{},"queue_depth":{}}})",
                                  metrics_.slots_busy.load(), metrics_.slots_total.load(), metrics_.queue_depth.load()),
                      "application/json");
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
    });
    svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(models_body(ctx_.model_id, started_), "application/json");
    });
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
      const Endpoint ep = std::string(path) == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletion;
      svr_.Post(path, [this, ep](const httplib::Request& req, httplib::Response& res) { generate(ep, req, res); });
      auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
        res.set_header("Allow", "POST");
        send_error(res, api_error(405, "Use POST for this endpoint.", "invalid_request_error", "method_not_allowed"));
      };
      svr_.Get(path, not_allowed);
      svr_.Put(path, not_allowed);
      svr_.Delete(path, not_allowed);
    }
    const bool bound = opt_.port == 0 ? (port_ = svr_.bind_to_any_port(opt_.host)) > 0
                                      : svr_.bind_to_port(opt_.host, opt_.port);
    if (!bound) return unavailable("cannot listen on {}:{} (in use, or not an address of this machine)", opt_.host, opt_.port);
    if (opt_.port != 0) port_ = opt_.port;
    return Status();
  }

  int port() const override { return port_; }

  Status run(const std::atomic<bool>& stop) override {
    std::atomic<bool> listening_ended{false};
    std::thread listener([this, &listening_ended] {
      svr_.listen_after_bind();
      listening_ended = true;
    });
    while (!stop.load() && !listening_ended.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Drain: refuse new work, let in-flight requests finish up to the deadline.
    sched_.begin_drain();
    metrics_.draining = true;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(opt_.drain_seconds * 1e3));
    const bool idle = sched_.wait_idle(deadline);
    if (!idle) std::fputs("loom serve: drain deadline passed; cancelling the requests still running\n", stderr);
    sched_.stop();
    // Give the HTTP threads a moment to write the last chunks of the streams that just ended.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    svr_.stop();
    listener.join();
    return Status();
  }

 private:
  void generate(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
    ApiRequest r;
    ApiError err;
    if (!parse_request(ep, req.body, ctx_, &r, &err)) {
      t_note.detail = "error=" + (err.code.empty() ? std::string("invalid_request") : err.code);
      send_error(res, err);
      return;
    }
    const int64_t n_prompt = static_cast<int64_t>(r.gen.prompt.size());
    auto job_or = sched_.submit(std::move(r.gen));
    if (!job_or.ok()) {
      const Status& s = job_or.status();
      if (s.code() == StatusCode::kResourceExhausted) {
        res.set_header("Retry-After", "1");
        send_error(res, api_error(503, "The server is busy (request queue full); retry shortly.", "server_error",
                                  "queue_full"));
      } else if (s.code() == StatusCode::kUnavailable) {
        res.set_header("Retry-After", "5");
        send_error(res, api_error(503, "The server is shutting down.", "server_error", "shutting_down"));
      } else {
        send_error(res, api_error(400, s.to_string(), "invalid_request_error"));
      }
      t_note.detail = "rejected";
      return;
    }
    std::shared_ptr<Job> job = std::move(job_or).value();
    ResponseInfo info;
    info.id = fmt::format("{}-{}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", next_id_.fetch_add(1));
    info.created = static_cast<int64_t>(std::time(nullptr));
    info.model = ctx_.model_id;
    auto note = [job, n_prompt, stream = r.stream](const std::string& reason) {
      const double ttft = job->first_token > 0 ? (job->first_token - job->arrival) * 1e3 : -1.0;
      return fmt::format("prompt={} reused={} gen={} ttft={:.1f}ms finish={} slot={}{}", n_prompt, job->n_reused,
                         job->n_generated.load(), ttft, reason, job->slot, stream ? " stream" : "");
    };

    if (!r.stream) {
      std::string text;
      Job::Update u;
      do {
        u = job->wait(std::chrono::milliseconds(1000));
        text += u.text;
      } while (!u.finished);
      t_note.detail = note(u.finish_reason);
      if (u.finish_reason == "error") {
        send_error(res, api_error(500, "Generation failed: " + u.error.to_string(), "server_error"));
        return;
      }
      if (u.finish_reason == "cancelled") {
        send_error(res, api_error(503, "The server shut down before the request finished.", "server_error", "cancelled"));
        return;
      }
      res.set_content(completion_body(ep, info, text, u.finish_reason, n_prompt, job->n_generated.load()),
                      "application/json");
      return;
    }

    struct StreamState {
      bool started = false, ended = false;
    };
    auto state = std::make_shared<StreamState>();
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, state, ep, info, n_prompt, include_usage = r.include_usage, note](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!state->started) {
            state->started = true;
            if (ep == Endpoint::kChat && !write(stream_chunk(ep, info, "", "", /*role_chunk=*/true))) {
              job->cancel();
              return false;
            }
          }
          Job::Update u = job->wait(std::chrono::milliseconds(500));
          bool ok = true;
          if (!u.text.empty()) ok = write(stream_chunk(ep, info, u.text, ""));
          // Nothing new for a while (queued, or a long prompt): an SSE comment finds out whether
          // the client is still there.
          else if (!u.finished) ok = write(": keep-alive\n\n");
          if (!ok) {
            job->cancel();  // the client went away: its slot is freed before the next step
            t_note.detail = note("disconnected");
            return false;
          }
          if (u.finished) {
            state->ended = true;
            t_note.detail = note(u.finish_reason);
            if (u.finish_reason == "error" || u.finish_reason == "cancelled") {
              ApiError e = api_error(500, u.finish_reason == "error" ? "Generation failed: " + u.error.to_string()
                                                                     : "The server shut down before the request finished.",
                                     "server_error");
              write("data: " + error_body(e) + "\n\n");
            } else {
              write(stream_chunk(ep, info, "", u.finish_reason));
              if (include_usage) write(usage_chunk(ep, info, n_prompt, job->n_generated.load()));
            }
            write("data: [DONE]\n\n");
            sink.done();
          }
          return true;
        },
        [job, state](bool success) {
          if (!success || !state->ended) job->cancel();
        });
  }

  Scheduler& sched_;
  Metrics& metrics_;
  ApiContext ctx_;
  ServerOptions opt_;
  httplib::Server svr_;
  int port_ = 0;
  int64_t started_ = static_cast<int64_t>(std::time(nullptr));
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace

Result<std::unique_ptr<Server>> Server::create(Scheduler& scheduler, Metrics& metrics, ApiContext ctx,
                                               ServerOptions options) {
  // A client that goes away makes send() fail; without this it would raise SIGPIPE and end the
  // process (httplib sends without MSG_NOSIGNAL).
  signal(SIGPIPE, SIG_IGN);
  auto s = std::make_unique<HttpServer>(scheduler, metrics, std::move(ctx), std::move(options));
  LOOM_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<Server>(std::move(s));
}

}  // namespace loom::serve

#endif  // LOOM_HAVE_HTTPLIB
