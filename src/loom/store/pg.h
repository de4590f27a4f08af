// PostgreSQL for the evolve database (db.h): libpq loaded at run time (dlopen of libpq.so.5, so
// one binary runs where libpq is not installed and only `--db postgresql://` then needs it), one
// connection with reconnection and backoff, and statements that take db.h's SQLite spelling.
// Internal to the store part.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::store {

struct PgConn {
  void* conn = nullptr;  // PGconn*
  std::string url;       // as given (libpq reads it)
  std::string display;   // without the password
  int64_t changes = 0;   // rows of the last INSERT/UPDATE/DELETE
  bool in_transaction = false;
  ~PgConn();
};

enum class PgType { kUnknown, kInt8, kFloat8 };

struct PgStmt {
  PgConn* conn = nullptr;
  std::string sql;  // with $N placeholders
  std::vector<std::optional<std::string>> params;
  std::vector<PgType> types;
  void* result = nullptr;  // PGresult*
  int row = -1, rows = 0;
  bool done = false;
  ~PgStmt();
};

Result<std::unique_ptr<PgConn>> pg_connect(const std::string& url);
Status pg_exec(PgConn& c, std::string_view sql);
Status pg_begin(PgConn& c);
int64_t pg_last_insert_id(PgConn& c);
std::unique_ptr<PgStmt> pg_prepare(PgConn& c, std::string_view sqlite_sql);
void pg_bind(PgStmt& s, int i, std::optional<std::string> v, PgType t);
std::string pg_double_text(double v);
Result<bool> pg_step(PgStmt& s);
void pg_reset(PgStmt& s);
int64_t pg_i64(const PgStmt& s, int c);
double pg_f64(const PgStmt& s, int c);
std::string pg_text(const PgStmt& s, int c);
bool pg_is_null(const PgStmt& s, int c);
// SQLite's placeholders (?N, ?) as PostgreSQL's ($N), outside quoted text (for tests).
std::string pg_placeholders(std::string_view sql);

}  // namespace loom::store
