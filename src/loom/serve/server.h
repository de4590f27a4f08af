// The HTTP front of `loom serve`: OpenAI-compatible routes, SSE streaming, /metrics, /health,
// the chat page at /, API key, limits, one log line per request, and a draining shutdown.
// Built on the asynchronous HTTP server of http.h (Boost.Beast), so that no client, however
// slow or numerous, can keep /health, /metrics or the 503 back-pressure from answering.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/base/status.h"
#include "loom/serve/http.h"
#include "loom/serve/metrics.h"
#include "loom/serve/openai_api.h"
#include "loom/serve/scheduler.h"

namespace loom::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (see Server::port())
  std::string api_key;           // "": no key needed; else /v1/* want "Authorization: Bearer KEY"
  HttpLimits limits;             // body and head sizes, deadlines, connection caps
  int http_threads = 0;          // I/O threads (0: 2); they never wait for generation
  double drain_seconds = 30.0;   // SIGTERM: how long in-flight requests may take to finish
  bool log_requests = true;      // one line per request on stderr
};

// True when an Authorization header value is "Bearer KEY" for this key (the scheme in any case).
bool bearer_matches(const std::string& authorization, const std::string& key);

// The chat page served at / (HTML + JS, no external resources).
const char* chat_page_html();

class Server {
 public:
  // Binds the port. The scheduler, metrics and ctx's tokenizer/template must outlive the server.
  static Result<std::unique_ptr<Server>> create(Scheduler& scheduler, Metrics& metrics, ApiContext ctx,
                                                ServerOptions options);
  virtual ~Server() = default;
  virtual int port() const = 0;
  // Serves until `stop` becomes true (polled), then drains: new requests get 503, in-flight ones
  // finish (up to drain_seconds; the rest are cancelled), and the listener closes.
  virtual Status run(const std::atomic<bool>& stop) = 0;
};

}  // namespace loom::serve
