// The asynchronous HTTP/1.1 server behind `loom serve` (see http.h). One strand per connection;
// the deadlines are the stream's expiry, set once per phase (head, body, each write) and not
// renewed by partial reads, which is what makes them deadlines rather than idle timeouts.
#include "loom/serve/http.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "loom/serve/openai_api.h"

namespace loom::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, name)) return v;
  return "";
}

namespace {

using Parser = bhttp::request_parser<bhttp::string_body>;

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1e3));
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void configure(Parser& p, const HttpLimits& lim) {
  p.header_limit(static_cast<std::uint32_t>(std::min<size_t>(lim.max_header_bytes, UINT32_MAX)));
  p.body_limit(static_cast<std::uint64_t>(lim.max_body_bytes));
}

// The status a parse error is answered with.
HttpParseError parse_error(const beast::error_code& ec) {
  if (ec == bhttp::error::body_limit) return {413, "The request body is too large."};
  if (ec == bhttp::error::header_limit) return {431, "The request head is too large."};
  return {400, "Malformed HTTP request: " + ec.message() + "."};
}

void fill(const Parser& p, HttpRequest* out) {
  const auto& m = p.get();
  out->method = std::string(m.method_string());
  out->target = std::string(m.target());
  out->path = out->target.substr(0, out->target.find('?'));
  out->headers.clear();
  for (const auto& f : m) out->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  out->body = m.body();
}

// Errors in the shape the rest of the server answers with (openai_api's error_body).
std::string json_error(int status, const std::string& message, const std::string& code) {
  ApiError e;
  e.status = status;
  e.message = message;
  e.type = status >= 500 ? "server_error" : "invalid_request_error";
  e.code = code;
  return error_body(e);
}

// Open connections in total and per address, shared by the acceptor and the sessions.
struct Census {
  std::mutex mu;
  int total = 0;
  std::map<std::string, int> per_addr;

  bool admit(const std::string& addr, const HttpLimits& lim) {
    std::lock_guard<std::mutex> lk(mu);
    int& n = per_addr[addr];
    if (total >= lim.max_connections || n >= lim.max_connections_per_client) {
      if (n == 0) per_addr.erase(addr);
      return false;
    }
    ++n;
    ++total;
    return true;
  }
  void release(const std::string& addr) {
    std::lock_guard<std::mutex> lk(mu);
    --total;
    auto it = per_addr.find(addr);
    if (it != per_addr.end() && --it->second <= 0) per_addr.erase(it);
  }
};

struct Shared {
  HttpLimits limits;
  HttpHandler handler;
  HttpLogger logger;
  Census census;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared, std::string addr, std::string peer)
      : stream_(std::move(socket)), timer_(stream_.get_executor()), sh_(shared), addr_(std::move(addr)),
        peer_(std::move(peer)) {}

  ~Session() {
    if (stream_src_ && !stream_done_) stream_src_->abort();
    if (deferred_) deferred_->abort();
    if (stream_src_) stream_src_->set_notify(nullptr);
    if (deferred_) deferred_->set_notify(nullptr);
    if (log_pending_) log(0, stream_src_ ? stream_src_->log_detail() + " aborted" : "aborted");
    sh_.census.release(addr_);
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_head(); });
  }

 private:
  void read_head() {
    parser_.emplace();
    configure(*parser_, sh_.limits);
    stream_.expires_after(ms(sh_.limits.header_seconds));
    bhttp::async_read_header(stream_, buf_, *parser_, beast::bind_front_handler(&Session::on_head, shared_from_this()));
  }

  void on_head(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec, /*in_head=*/true);
    start_ms_ = now_ms();
    req_ = HttpRequest{};
    fill(*parser_, &req_);
    log_pending_ = true;
    // A chunked body's size is not known: hold room for the largest allowed one (address space,
    // touched only as bytes arrive) so that growing it never needs a second, larger copy.
    if (parser_->chunked()) parser_->get().body().reserve(std::min<size_t>(sh_.limits.max_body_bytes, 64u << 20));
    if (!parser_->is_done() && beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      stream_.expires_after(ms(sh_.limits.write_seconds));
      net::async_write(stream_, net::buffer(kContinue), [self = shared_from_this()](beast::error_code e, size_t) {
        if (e) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(ms(sh_.limits.body_seconds));
    bhttp::async_read(stream_, buf_, *parser_, beast::bind_front_handler(&Session::on_body, shared_from_this()));
  }

  void on_body(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec, /*in_head=*/false);
    fill(*parser_, &req_);
    keep_alive_ = parser_->get().keep_alive();
    parser_.reset();
    HttpResponse res;
    try {
      res = sh_.handler(req_);
    } catch (const std::exception& e) {
      res = HttpResponse{};
      res.status = 500;
      res.body = json_error(500, "Internal error.", "internal_error");
      res.log_detail = std::string("exception: ") + e.what();
    }
    respond(std::move(res));
  }

  // A request that could not be read: answer what went wrong when there is an answer, then
  // close. Silence (the client closed, or a keep-alive connection idled out) just closes.
  void on_read_error(const beast::error_code& ec, bool in_head) {
    const bool nothing_read = in_head && buf_.size() == 0 && !parser_->got_some();
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || (ec == beast::error::timeout && nothing_read) ||
        ec == bhttp::error::partial_message) {
      if (log_pending_) log(0, "client closed or timed out mid-request (" + ec.message() + ")");
      return close();
    }
    keep_alive_ = false;
    HttpResponse res;
    if (ec == beast::error::timeout) {
      res.status = 408;
      res.body = json_error(408, in_head ? "The request head did not arrive in time." : "The request body did not arrive in time.",
                            "request_timeout");
    } else {
      const HttpParseError pe = parse_error(ec);
      res.status = pe.status;
      res.body = json_error(pe.status, pe.message,
                            pe.status == 413 ? "payload_too_large" : pe.status == 431 ? "header_too_large" : "bad_request");
    }
    if (!log_pending_) {
      start_ms_ = now_ms();
      log_pending_ = true;
      // The request line may have been read before the error (an oversized Content-Length).
      const auto& m = parser_->get();
      req_.method = m.method_string().empty() ? "-" : std::string(m.method_string());
      req_.path = m.target().empty() ? "-" : std::string(m.target().substr(0, m.target().find('?')));
    }
    res.log_detail = ec.message();
    linger_after_ = true;  // the client may still be sending: read and drop it before closing
    respond(std::move(res));
  }

  void respond(HttpResponse res) {
    if (res.deferred) {
      deferred_ = std::move(res.deferred);
      detail_ = res.log_detail;
      deferred_->set_notify(notifier([](Session& s) { s.on_deferred(); }));
      watch_close();
      return;
    }
    if (res.stream) return begin_stream(std::move(res));
    write_whole(std::move(res));
  }

  // A callback for producers on other threads: run `fn` on this session's strand. It holds the
  // session (nothing else may while it waits for a deferred answer); every path that ends the
  // response removes it again, which breaks the cycle.
  template <typename Fn>
  std::function<void()> notifier(Fn fn) {
    auto self = shared_from_this();
    auto ex = stream_.get_executor();
    return [self, ex, fn] { net::post(ex, [self, fn] { fn(*self); }); };
  }

  // While a deferred answer is being computed, a read finds out whether the client went away
  // (its job is then cancelled and its slot freed). Bytes of a pipelined next request are kept.
  void watch_close() {
    watching_ = true;
    stream_.expires_never();
    stream_.async_read_some(buf_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->buf_.commit(n);
      if (!self->watching_ || ec == net::error::operation_aborted) return;
      if (ec) {
        self->watching_ = false;
        if (self->deferred_) self->deferred_->abort();
        return;
      }
      if (self->buf_.size() > self->sh_.limits.max_header_bytes) return;  // stop reading; answer first
      self->watch_close();
    });
  }

  void on_deferred() {
    if (!deferred_) return;
    HttpResponse res;
    if (!deferred_->poll(&res)) return;
    deferred_->set_notify(nullptr);
    deferred_.reset();
    if (watching_) {
      watching_ = false;
      beast::error_code ec;
      stream_.socket().cancel(ec);
    }
    if (!detail_.empty() && res.log_detail.empty()) res.log_detail = detail_;
    write_whole(std::move(res));
  }

  void add_headers(bhttp::fields& f, const HttpResponse& res) {
    f.set(bhttp::field::server, "loom");
    for (const auto& [k, v] : res.headers) f.set(k, v);
  }

  void write_whole(HttpResponse res) {
    auto msg = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(res.status), 11);
    add_headers(*msg, res);
    if (!res.content_type.empty()) msg->set(bhttp::field::content_type, res.content_type);
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive_ && !linger_after_);
    msg->prepare_payload();
    status_ = res.status;
    detail_ = res.log_detail;
    // Logged as the answer leaves, so that the line is there when the client has the answer.
    log(status_, detail_);
    stream_.expires_after(ms(sh_.limits.write_seconds));
    bhttp::async_write(stream_, *msg, [self = shared_from_this(), msg](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->after_response(msg->keep_alive());
    });
  }

  void after_response(bool keep) {
    if (keep) return read_head();
    if (linger_after_) return linger();
    close();
  }

  // ---- chunked streams -------------------------------------------------------------------
  void begin_stream(HttpResponse res) {
    stream_src_ = std::move(res.stream);
    status_ = res.status;
    auto hdr = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(res.status), 11);
    add_headers(*hdr, res);
    hdr->set(bhttp::field::content_type, res.content_type);
    hdr->chunked(true);
    hdr->keep_alive(keep_alive_);
    auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*hdr);
    writing_ = true;
    stream_.expires_after(ms(sh_.limits.write_seconds));
    bhttp::async_write_header(stream_, *sr, [self = shared_from_this(), hdr, sr](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->stream_failed(ec);
      self->stream_src_->set_notify(self->notifier([](Session& s) {
        s.timer_.cancel();
        s.pump();
      }));
      self->pump();
    });
  }

  void pump() {
    if (writing_ || stream_done_ || !stream_src_) return;
    std::string piece;
    const bool done = stream_src_->next(&piece);
    if (piece.empty() && !done) {
      timer_.expires_after(std::chrono::milliseconds(stream_src_->idle_ms()));
      timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (ec || self->writing_ || self->stream_done_) return;
        self->write_chunk(self->stream_src_->idle_piece(), false);
      });
      return;
    }
    write_chunk(std::move(piece), done);
  }

  void write_chunk(std::string piece, bool last) {
    out_.clear();
    if (!piece.empty()) out_ = fmt::format("{:x}\r\n", piece.size()) + piece + "\r\n";
    if (last) {
      out_ += "0\r\n\r\n";
      stream_done_ = true;
      log(status_, stream_src_->log_detail());
    }
    if (out_.empty()) return pump();
    writing_ = true;
    stream_.expires_after(ms(sh_.limits.write_seconds));
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->stream_failed(ec);
      if (!self->stream_done_) return self->pump();
      self->stream_src_->set_notify(nullptr);
      self->after_response(self->keep_alive_);
    });
  }

  void stream_failed(const beast::error_code& ec) {
    stream_done_ = true;
    stream_src_->abort();
    stream_src_->set_notify(nullptr);
    log(status_, stream_src_->log_detail() + " (client gone: " + ec.message() + ")");
    close();
  }

  // ---- closing ---------------------------------------------------------------------------
  // After an error answered mid-body: stop sending, then read and drop what the client still
  // sends for a bounded time, so that it reads our answer instead of a connection reset.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(5));
    drain();
  }
  void drain() {
    stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  void close() {
    timer_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  void log(int status, const std::string& detail) {
    if (!log_pending_) return;
    log_pending_ = false;
    if (!sh_.logger) return;
    HttpLogEntry e{peer_, req_.method, req_.path, status, now_ms() - start_ms_, detail};
    sh_.logger(e);
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  Shared& sh_;
  std::string addr_, peer_;
  beast::flat_buffer buf_;
  std::optional<Parser> parser_;
  HttpRequest req_;
  bool keep_alive_ = false, linger_after_ = false, log_pending_ = false, watching_ = false;
  double start_ms_ = 0.0;
  int status_ = 0;
  std::string detail_;
  std::shared_ptr<HttpDeferred> deferred_;
  std::shared_ptr<HttpStream> stream_src_;
  bool writing_ = false, stream_done_ = false;
  std::string out_;
  std::array<char, 16384> discard_{};
};

// A connection over the caps gets this and is closed.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  explicit Refusal(tcp::socket s) : stream_(std::move(s)) {}
  void start() {
    static const std::string body = json_error(503, "Too many open connections; retry shortly.", "too_many_connections");
    text_ = fmt::format("HTTP/1.1 503 Service Unavailable\r\nServer: loom\r\nRetry-After: 1\r\nContent-Type: "
                        "application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                        body.size(), body);
    stream_.expires_after(std::chrono::seconds(2));
    net::async_write(stream_, net::buffer(text_), [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ec;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      self->stream_.close();
    });
  }

 private:
  beast::tcp_stream stream_;
  std::string text_;
};

class BeastServer final : public HttpServer {
 public:
  BeastServer(HttpLimits limits, HttpHandler handler, HttpLogger logger) : acceptor_(ioc_) {
    sh_.limits = limits;
    sh_.handler = std::move(handler);
    sh_.logger = std::move(logger);
  }
  ~BeastServer() override { stop(); }

  Status bind(const std::string& host, int port) {
    beast::error_code ec;
    tcp::endpoint ep;
    net::ip::address addr = net::ip::make_address(host, ec);
    if (!ec) {
      ep = tcp::endpoint(addr, static_cast<unsigned short>(port));
    } else {
      tcp::resolver resolver(ioc_);
      auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
      if (ec || results.empty()) return invalid_argument("cannot resolve host '{}': {}", host, ec.message());
      ep = results.begin()->endpoint();
    }
    acceptor_.open(ep.protocol(), ec);
    if (ec) return unavailable("cannot open a socket for {}:{}: {}", host, port, ec.message());
    // Reuse an address in TIME_WAIT, but never share a port another process listens on.
    acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    acceptor_.bind(ep, ec);
    if (ec == net::error::address_in_use)
      return unavailable("cannot listen on {}:{}: address in use (another server is listening there)", host, port);
    if (ec) return unavailable("cannot listen on {}:{}: {}", host, port, ec.message());
    acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return unavailable("cannot listen on {}:{}: {}", host, port, ec.message());
    port_ = acceptor_.local_endpoint().port();
    raise_fd_limit();
    // Request bodies of up to the limit come and go on several I/O threads: a fixed threshold
    // keeps glibc from raising it after the first one, so every large body is its own mapping
    // and goes back to the system once answered (instead of staying in each thread's arena).
    mallopt(M_MMAP_THRESHOLD, 256 << 10);
    return Status();
  }

  int port() const override { return port_; }

  void start(int threads) override {
    accept();
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  void stop() override {
    if (stopped_.exchange(true)) return;
    ioc_.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    beast::error_code ec;
    acceptor_.close(ec);
  }

 private:
  // Every connection is a descriptor: allow enough of them for the caps (up to the hard limit).
  void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    const rlim_t want = static_cast<rlim_t>(sh_.limits.max_connections) + 128;
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  void accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // Out of descriptors or similar: try again shortly instead of spinning.
        auto t = std::make_shared<net::steady_timer>(ioc_, std::chrono::milliseconds(50));
        t->async_wait([this, t](beast::error_code) { accept(); });
        return;
      }
      beast::error_code pe;
      const tcp::endpoint remote = socket.remote_endpoint(pe);
      const std::string addr = pe ? "?" : remote.address().to_string();
      const std::string peer = pe ? "?" : fmt::format("{}:{}", addr, remote.port());
      if (sh_.census.admit(addr, sh_.limits)) {
        std::make_shared<Session>(std::move(socket), sh_, addr, peer)->start();
      } else {
        if (sh_.logger) sh_.logger(HttpLogEntry{peer, "-", "-", 503, 0.0, "refused: too many open connections"});
        std::make_shared<Refusal>(std::move(socket))->start();
      }
      accept();
    });
  }

  Shared sh_;  // outlives the io_context, whose destruction ends the sessions that use it
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::bind(const std::string& host, int port, HttpLimits limits,
                                                     HttpHandler handler, HttpLogger logger) {
  auto s = std::make_unique<BeastServer>(limits, std::move(handler), std::move(logger));
  LOOM_RETURN_IF_ERROR(s->bind(host, port));
  return std::unique_ptr<HttpServer>(std::move(s));
}

bool parse_http_request(std::string_view bytes, const HttpLimits& limits, HttpRequest* out, HttpParseError* err) {
  Parser p;
  configure(p, limits);
  p.eager(true);
  beast::error_code ec;
  size_t used = 0;
  while (!p.is_done() && used < bytes.size()) {
    const size_t n = p.put(net::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == bhttp::error::need_more) break;
    if (ec) {
      *err = parse_error(ec);
      return false;
    }
    if (n == 0) break;
    used += n;
  }
  if (!p.is_done()) {
    p.put_eof(ec);
    if (ec || !p.is_done()) {
      *err = {400, "Incomplete HTTP request."};
      return false;
    }
  }
  fill(p, out);
  return true;
}

}  // namespace loom::serve
