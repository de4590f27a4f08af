// The evolve database: a move-only connection and statement over SQLite (one file, the default)
// or PostgreSQL (a server several machines share: `--db postgresql://...`), and the one schema
// of both, with its version and upgrades. Callers write one SQL text for both engines: SQLite's
// numbered placeholders (?1, ?2) and its spelling of the few functions used (julianday('now'));
// the PostgreSQL side rewrites the placeholders and defines those functions, and `FOR UPDATE
// [SKIP LOCKED]` is dropped for SQLite (whose write transactions already exclude each other).
//
// Threading: one Db per thread. Never used in a forked evaluation child: the child returns its
// result over a pipe and the parent writes it.
//
// PostgreSQL connections survive a server restart: a statement outside a transaction that fails
// because the connection is gone is sent again after a reconnect, with backoff, for up to
// LOOM_EVOLVE_DB_RETRY_S seconds (default 60); then, and for a failure inside a transaction
// (which the server has rolled back), the error is `unavailable`. Nothing committed is lost.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace loom::store {

class Stmt;
struct PgConn;
struct PgStmt;

enum class Engine { kSqlite, kPostgres };

// The schema version this build writes (table schema_version); older databases are upgraded
// when opened for writing, newer ones are refused.
inline constexpr int kSchemaVersion = 2;

// Unix seconds now, as SQL valid for both engines (the database server's clock: leases of
// workers on several hosts compare one clock).
inline constexpr std::string_view kSqlUnixNow = "((julianday('now') - 2440587.5) * 86400.0)";

class Db {
 public:
  Db();
  ~Db();
  Db(Db&& o) noexcept;
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Opens and makes sure the schema exists and is current. `path` is a file (parent directories
  // and the file are created) or a postgresql:// (postgres://) URL.
  static Result<Db> open(const std::string& path);
  // Opens an existing file for reading only: no directories, no file, no schema are created
  // (a reader such as the engine must not write the database evolve owns).
  static Result<Db> open_readonly(const std::string& path);
  // ~/.cache/loom/evolve.db (or $LOOM_CACHE_DIR/evolve.db).
  static std::string default_path();
  static bool is_url(std::string_view path);

  Status exec(std::string_view sql);
  Result<Stmt> prepare(std::string_view sql);
  int64_t last_insert_id();
  int64_t changes() const;  // rows changed by the last INSERT/UPDATE/DELETE
  // The file, or the URL without its password (for messages and keys).
  const std::string& path() const { return path_; }
  Engine engine() const { return pg_ ? Engine::kPostgres : Engine::kSqlite; }
  int schema_version();  // 0 when the table is missing (a file from before versions)

 private:
  friend class Transaction;
  Status migrate();
  sqlite3* db_ = nullptr;
  std::unique_ptr<PgConn> pg_;
  std::string path_;
};

// A prepared statement. bind(i, ...) is 1-based like SQLite; step() returns true while a row is
// available; column getters are 0-based.
class Stmt {
 public:
  Stmt();
  ~Stmt();
  Stmt(Stmt&& o) noexcept;
  Stmt& operator=(Stmt&& o) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::string_view v);
  Stmt& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind_null(int i);
  Result<bool> step();
  Status run();  // step to completion, ignoring rows
  Status reset();

  int64_t i64(int c) const;
  double f64(int c) const;
  std::string text(int c) const;
  bool is_null(int c) const;

 private:
  friend class Db;
  Stmt(sqlite3_stmt* s, sqlite3* db);
  sqlite3_stmt* s_ = nullptr;
  sqlite3* db_ = nullptr;
  std::unique_ptr<PgStmt> pg_;
};

// A write transaction (SQLite: BEGIN IMMEDIATE, the write lock taken at the start, so what it
// reads cannot change before it writes; PostgreSQL: BEGIN, with rows locked by the reads that
// say FOR UPDATE); rolled back on destruction unless committed.
class Transaction {
 public:
  static Result<Transaction> begin(Db& db);
  ~Transaction();
  Transaction(Transaction&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Status commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_ = nullptr;  // null once committed or rolled back
};

}  // namespace loom::store
