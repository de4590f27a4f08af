// The HTTP front of `loom serve`: OpenAI-compatible routes, SSE streaming, /metrics, /health,
// the chat page at /, API key, limits, one log line per request, and a draining shutdown.
// Built on cpp-httplib (Debian's libcpp-httplib); without it (LOOM_HAVE_HTTPLIB undefined)
// create() reports that this build has no HTTP server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/base/status.h"
#include "loom/serve/metrics.h"
#include "loom/serve/openai_api.h"
#include "loom/serve/scheduler.h"

namespace loom::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (see Server::port())
  std::string api_key;           // "": no key needed; else /v1/* want "Authorization: Bearer KEY"
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int http_threads = 0;          // 0: enough for every slot, the queue and some spare
  double drain_seconds = 30.0;   // SIGTERM: how long in-flight requests may take to finish
  bool log_requests = true;      // one line per request on stderr
};

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
