// A small HTTP/1.1 server for `loom serve`, on Boost.Beast: every connection is asynchronous
// (no thread per connection), and every limit holds whatever the framing: body size enforced
// while reading (Content-Length and chunked alike), deadlines for a request head and a body,
// caps on connections in total and per client address, and an exclusive port.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"

namespace loom::serve {

struct HttpLimits {
  size_t max_body_bytes = 1 << 20;     // larger bodies get 413, at whatever point they cross it
  size_t max_header_bytes = 16 << 10;  // request line + headers; larger get 431
  double header_seconds = 10.0;        // a whole request head (also the keep-alive idle time)
  double body_seconds = 30.0;          // a whole request body
  double write_seconds = 30.0;         // each write to a client that does not read
  int max_connections = 512;           // open connections in total; more get 503 and are closed
  int max_connections_per_client = 256;  // open connections from one address
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string peer;    // "address:port" of the client

  // The first header of that name (case-insensitive), "" when absent.
  std::string header(std::string_view name) const;
};

// A response body that arrives later. The server calls set_notify() once; the producer calls
// that function (from any thread) whenever poll()/next() may have something new. After abort()
// the producer may drop its work: the client went away or the write deadline passed.
class HttpDeferred;
class HttpStream;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string log_detail;  // appended to the request's log line
  // At most one of these: the whole response later, or a chunked body (the status and headers
  // above are sent at once, then every piece as it comes).
  std::shared_ptr<HttpDeferred> deferred;
  std::shared_ptr<HttpStream> stream;
};

class HttpDeferred {
 public:
  virtual ~HttpDeferred() = default;
  virtual void set_notify(std::function<void()> notify) = 0;
  // True once the response is ready (filled into *out); never blocks.
  virtual bool poll(HttpResponse* out) = 0;
  virtual void abort() = 0;
};

class HttpStream {
 public:
  virtual ~HttpStream() = default;
  virtual void set_notify(std::function<void()> notify) = 0;
  // Appends what is new to *out; true once the body is complete (*out then holds its end).
  virtual bool next(std::string* out) = 0;
  // Sent after `idle_ms` without a piece, so that a client that went away is noticed.
  virtual std::string idle_piece() const = 0;
  virtual int idle_ms() const { return 500; }
  virtual void abort() = 0;
  // Appended to the log line when the stream ends (or is aborted).
  virtual std::string log_detail() const = 0;
};

// One line per request after its response was written (or given up): status 0 = no response.
struct HttpLogEntry {
  std::string peer, method, path;
  int status = 0;
  double ms = 0.0;
  std::string detail;
};

// Runs on an I/O thread; must not block (hand long work to a deferred or a stream).
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;
using HttpLogger = std::function<void(const HttpLogEntry&)>;

class HttpServer {
 public:
  // Binds host:port (port 0: any free one) with SO_REUSEADDR and without SO_REUSEPORT, so a
  // port that another process listens on is an error ("address in use").
  static Result<std::unique_ptr<HttpServer>> bind(const std::string& host, int port, HttpLimits limits,
                                                  HttpHandler handler, HttpLogger logger);
  virtual ~HttpServer() = default;
  virtual int port() const = 0;
  // Starts accepting on `threads` I/O threads (returns at once).
  virtual void start(int threads) = 0;
  // Closes the listener and every connection, and joins the I/O threads. Idempotent.
  virtual void stop() = 0;
};

// The request parser the server uses, with the same limits, over a complete byte string (for
// the fuzz target and tests). An error carries the status the server answers it with: 400,
// 413 or 431.
struct HttpParseError {
  int status = 400;
  std::string message;
};
bool parse_http_request(std::string_view bytes, const HttpLimits& limits, HttpRequest* out, HttpParseError* err);

}  // namespace loom::serve
