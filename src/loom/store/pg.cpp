// PostgreSQL connection and statements for the evolve database (see pg.h and db.h).
#include "loom/store/pg.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "loom/base/log.h"
#include "loom/base/options.h"

#if __has_include(<postgresql/libpq-fe.h>)
#include <postgresql/libpq-fe.h>
#define LOOM_HAVE_LIBPQ_HEADER 1
#endif

namespace loom::store {

#ifdef LOOM_HAVE_LIBPQ_HEADER
namespace {

// The libpq entry points used, typed by libpq-fe.h and resolved once.
struct Lib {
  std::string error;
  decltype(&PQconnectdb) connectdb = nullptr;
  decltype(&PQstatus) status = nullptr;
  decltype(&PQerrorMessage) error_message = nullptr;
  decltype(&PQfinish) finish = nullptr;
  decltype(&PQreset) reset = nullptr;
  decltype(&PQexec) exec = nullptr;
  decltype(&PQexecParams) exec_params = nullptr;
  decltype(&PQresultStatus) result_status = nullptr;
  decltype(&PQresultErrorMessage) result_error = nullptr;
  decltype(&PQresultErrorField) result_field = nullptr;
  decltype(&PQclear) clear = nullptr;
  decltype(&PQntuples) ntuples = nullptr;
  decltype(&PQgetvalue) getvalue = nullptr;
  decltype(&PQgetlength) getlength = nullptr;
  decltype(&PQgetisnull) getisnull = nullptr;
  decltype(&PQcmdTuples) cmd_tuples = nullptr;
  decltype(&PQsetNoticeProcessor) set_notice_processor = nullptr;
  decltype(&PQconninfoParse) conninfo_parse = nullptr;
  decltype(&PQconninfoFree) conninfo_free = nullptr;
  decltype(&PQfreemem) freemem = nullptr;
};

const Lib& lib() {
  static const Lib l = [] {
    Lib l;
    void* h = nullptr;
    for (const char* n : {"libpq.so.5", "libpq.so"})
      if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      l.error = "the PostgreSQL client library (libpq.so.5, Debian's libpq5) is not installed";
      return l;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      ok = ok && fn;
    };
    get(l.connectdb, "PQconnectdb");
    get(l.status, "PQstatus");
    get(l.error_message, "PQerrorMessage");
    get(l.finish, "PQfinish");
    get(l.reset, "PQreset");
    get(l.exec, "PQexec");
    get(l.exec_params, "PQexecParams");
    get(l.result_status, "PQresultStatus");
    get(l.result_error, "PQresultErrorMessage");
    get(l.result_field, "PQresultErrorField");
    get(l.clear, "PQclear");
    get(l.ntuples, "PQntuples");
    get(l.getvalue, "PQgetvalue");
    get(l.getlength, "PQgetlength");
    get(l.getisnull, "PQgetisnull");
    get(l.cmd_tuples, "PQcmdTuples");
    get(l.set_notice_processor, "PQsetNoticeProcessor");
    get(l.conninfo_parse, "PQconninfoParse");
    get(l.conninfo_free, "PQconninfoFree");
    get(l.freemem, "PQfreemem");
    if (!ok) l.error = "libpq.so.5 lacks the expected entry points";
    return l;
  }();
  return l;
}

PGconn* pc(const PgConn& c) { return static_cast<PGconn*>(c.conn); }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// postgresql://user:secret@host/db -> postgresql://user@host/db (messages, keys).
std::string without_password(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t at = url.find('@', scheme + 3), colon = url.find(':', scheme + 3);
  if (at == std::string::npos || colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon) + url.substr(at);
}

void quiet_notices(void*, const char*) {}  // "relation already exists, skipping" and the like

// Per session, after every (re)connection: notices off, and a transaction left idle for 10 s
// (its client frozen: SIGSTOP, a paused VM, a cut network) is ended by the server, so the rows
// it locked (a worker's lease in the making) go to other workers instead of waiting for it.
void setup_session(PgConn& c) {
  lib().set_notice_processor(pc(c), quiet_notices, nullptr);
  PGresult* r = lib().exec(pc(c), "SET client_min_messages = warning; SET idle_in_transaction_session_timeout = 10000");
  if (r) lib().clear(r);
}

// A failure that means the server or the connection went away (the statement may be sent again
// on a new connection), not an error of the statement.
bool connection_lost(const PgConn& c, const PGresult* r) {
  if (lib().status(pc(c)) == CONNECTION_BAD) return true;
  const char* state = r ? lib().result_field(r, PG_DIAG_SQLSTATE) : nullptr;
  if (!state) return r == nullptr;
  const std::string s(state);
  return s.rfind("08", 0) == 0 || s == "57P01" || s == "57P02" || s == "57P03";
}

std::string result_error(const PgConn& c, const PGresult* r) {
  std::string m = r ? lib().result_error(r) : "";
  if (m.empty()) m = lib().error_message(pc(c));
  return trim(m);
}

// Reconnects with backoff (0.2 s doubling to 5 s) for up to LOOM_EVOLVE_DB_RETRY_S seconds.
Status reconnect(PgConn& c, const std::string& why, bool first = false) {
  const double limit = opt::get_double(opt::Opt::kEvolveDbRetry);
  const auto t0 = std::chrono::steady_clock::now();
  double delay = 0.2;
  log_warn("database {}: {} ({}); {} for up to {:.0f} s", c.display, first ? "cannot connect" : "connection lost", why,
           first ? "trying again" : "reconnecting", limit);
  while (true) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited >= limit)
      return unavailable("lost the connection to the database {} and could not reconnect in {:.0f} s ({}); what was "
                         "committed is kept", c.display, waited, trim(lib().error_message(pc(c))));
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(delay, limit - waited)));
    delay = std::min(delay * 2, 5.0);
    lib().reset(pc(c));
    if (lib().status(pc(c)) == CONNECTION_OK) {
      setup_session(c);
      log_warn("database {}: reconnected after {:.1f} s", c.display,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      return Status();
    }
  }
}

// Sends with `send` until it succeeds, fails for a reason of its own, or the connection cannot
// be made again. Inside a transaction a lost connection is an error at once (the server rolled
// it back; the caller's transaction is gone).
template <class Send>
Result<PGresult*> run(PgConn& c, std::string_view what, Send send) {
  while (true) {
    PGresult* r = send();
    const ExecStatusType st = r ? lib().result_status(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
      const char* n = lib().cmd_tuples(r);
      if (n && *n) c.changes = std::strtoll(n, nullptr, 10);
      return r;
    }
    const std::string err = result_error(c, r);
    const bool lost = connection_lost(c, r);
    if (r) lib().clear(r);
    if (!lost) return internal_error("postgresql: {} ({})", err, what.substr(0, 200));
    if (c.in_transaction)
      return unavailable("lost the connection to the database {} inside a transaction ({}); it was rolled back",
                         c.display, err);
    LOOM_RETURN_IF_ERROR(reconnect(c, err));
  }
}

}  // namespace

PgConn::~PgConn() {
  if (conn) lib().finish(pc(*this));
}
PgStmt::~PgStmt() {
  if (result) lib().clear(static_cast<PGresult*>(result));
}

Result<std::unique_ptr<PgConn>> pg_connect(const std::string& url) {
  if (!lib().error.empty()) return unavailable("{}: `--db {}` needs it", lib().error, without_password(url));
  auto c = std::make_unique<PgConn>();
  c->url = url;
  c->display = without_password(url);
  // A malformed URL is the caller's error at once, not a server to wait for.
  char* err = nullptr;
  PQconninfoOption* parsed = lib().conninfo_parse(url.c_str(), &err);
  if (!parsed) {
    std::string m = err ? trim(err) : "out of memory";
    if (err) lib().freemem(err);
    return invalid_argument("--db {}: {}", c->display, m);
  }
  lib().conninfo_free(parsed);
  c->conn = lib().connectdb(url.c_str());
  if (!c->conn) return unavailable("cannot connect to the database {}: out of memory", c->display);
  if (lib().status(pc(*c)) != CONNECTION_OK) {
    // The server may be starting (a worker launched beside it): the same backoff as a lost one.
    LOOM_RETURN_IF_ERROR(reconnect(*c, trim(lib().error_message(pc(*c))), true).with_context("connecting to " + c->display));
  }
  setup_session(*c);
  return c;
}

Status pg_exec(PgConn& c, std::string_view sql) {
  const std::string s(sql);
  LOOM_ASSIGN_OR_RETURN(PGresult * r, run(c, sql, [&] { return lib().exec(pc(c), s.c_str()); }));
  lib().clear(r);
  return Status();
}

Status pg_begin(PgConn& c) {
  LOOM_RETURN_IF_ERROR(pg_exec(c, "BEGIN"));
  c.in_transaction = true;
  return Status();
}

int64_t pg_last_insert_id(PgConn& c) {
  auto r = run(c, "SELECT lastval()", [&] { return lib().exec(pc(c), "SELECT lastval()"); });
  if (!r.ok()) return 0;
  const int64_t id = lib().ntuples(*r) > 0 ? std::strtoll(lib().getvalue(*r, 0, 0), nullptr, 10) : 0;
  lib().clear(*r);
  return id;
}

Result<bool> pg_step(PgStmt& s) {
  if (s.done) pg_reset(s);  // SQLite runs a finished statement again on the next step
  if (!s.result) {
    std::vector<const char*> values(s.params.size());
    std::vector<Oid> types(s.params.size());
    for (size_t i = 0; i < s.params.size(); ++i) {
      values[i] = s.params[i] ? s.params[i]->c_str() : nullptr;
      types[i] = s.types[i] == PgType::kInt8 ? 20 : s.types[i] == PgType::kFloat8 ? 701 : 0;  // int8, float8, inferred
    }
    LOOM_ASSIGN_OR_RETURN(PGresult * r, run(*s.conn, s.sql, [&] {
                            return lib().exec_params(pc(*s.conn), s.sql.c_str(), static_cast<int>(values.size()),
                                                     types.data(), values.data(), nullptr, nullptr, 0);
                          }));
    s.result = r;
    s.rows = lib().ntuples(r);
    s.row = -1;
  }
  if (++s.row < s.rows) return true;
  s.done = true;
  return false;
}

void pg_reset(PgStmt& s) {
  if (s.result) lib().clear(static_cast<PGresult*>(s.result));
  s.result = nullptr;
  s.row = -1;
  s.rows = 0;
  s.done = false;
}

int64_t pg_i64(const PgStmt& s, int c) {
  if (pg_is_null(s, c)) return 0;
  const char* v = lib().getvalue(static_cast<const PGresult*>(s.result), s.row, c);
  if (v[0] == 't' && v[1] == 0) return 1;  // booleans
  const char* end = nullptr;
  const long long i = std::strtoll(v, const_cast<char**>(&end), 10);
  if (end && *end == '.') return static_cast<int64_t>(std::strtod(v, nullptr));
  return i;
}
double pg_f64(const PgStmt& s, int c) {
  if (pg_is_null(s, c)) return 0;
  return std::strtod(lib().getvalue(static_cast<const PGresult*>(s.result), s.row, c), nullptr);
}
std::string pg_text(const PgStmt& s, int c) {
  if (pg_is_null(s, c)) return "";
  const auto* r = static_cast<const PGresult*>(s.result);
  return std::string(lib().getvalue(r, s.row, c), static_cast<size_t>(lib().getlength(r, s.row, c)));
}
bool pg_is_null(const PgStmt& s, int c) {
  return !s.result || s.row < 0 || s.row >= s.rows || lib().getisnull(static_cast<const PGresult*>(s.result), s.row, c);
}

#else  // built without libpq-fe.h

PgConn::~PgConn() = default;
PgStmt::~PgStmt() = default;
Result<std::unique_ptr<PgConn>> pg_connect(const std::string&) {
  return unimplemented("this loom was built without PostgreSQL support (libpq-dev was not installed)");
}
Status pg_exec(PgConn&, std::string_view) { return unimplemented("no PostgreSQL support"); }
Status pg_begin(PgConn&) { return unimplemented("no PostgreSQL support"); }
int64_t pg_last_insert_id(PgConn&) { return 0; }
Result<bool> pg_step(PgStmt&) { return unimplemented("no PostgreSQL support"); }
void pg_reset(PgStmt&) {}
int64_t pg_i64(const PgStmt&, int) { return 0; }
double pg_f64(const PgStmt&, int) { return 0; }
std::string pg_text(const PgStmt&, int) { return ""; }
bool pg_is_null(const PgStmt&, int) { return true; }

#endif

std::unique_ptr<PgStmt> pg_prepare(PgConn& c, std::string_view sqlite_sql) {
  auto s = std::make_unique<PgStmt>();
  s->conn = &c;
  s->sql = pg_placeholders(sqlite_sql);
  return s;
}

void pg_bind(PgStmt& s, int i, std::optional<std::string> v, PgType t) {
  if (i < 1) return;
  if (s.params.size() < static_cast<size_t>(i)) {
    s.params.resize(static_cast<size_t>(i));
    s.types.resize(static_cast<size_t>(i), PgType::kUnknown);
  }
  s.params[static_cast<size_t>(i - 1)] = std::move(v);
  s.types[static_cast<size_t>(i - 1)] = t;
}

std::string pg_double_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);
}

std::string pg_placeholders(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 8);
  int next = 1;
  char quote = 0;
  for (size_t i = 0; i < sql.size(); ++i) {
    const char ch = sql[i];
    if (quote) {
      out += ch;
      if (ch == quote) quote = 0;
      continue;
    }
    if (ch == '\'' || ch == '"') {
      quote = ch;
      out += ch;
      continue;
    }
    if (ch != '?') {
      out += ch;
      continue;
    }
    size_t j = i + 1;
    while (j < sql.size() && std::isdigit(static_cast<unsigned char>(sql[j]))) ++j;
    if (j > i + 1) {
      out += '$';
      out += sql.substr(i + 1, j - i - 1);
      next = std::max(next, std::atoi(std::string(sql.substr(i + 1, j - i - 1)).c_str()) + 1);
      i = j - 1;
    } else {
      out += fmt::format("${}", next++);
    }
  }
  return out;
}

}  // namespace loom::store
