// SQLite access for evolve: a move-only connection and statement, and the schema of the one
// database file that holds jobs, candidates, device peaks, the kernel store, documents and skills.
//
// Threading: one Db per thread (SQLite serialized mode is not assumed). Never used in a forked
// evaluation child: the child returns its result over a pipe and the parent writes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace loom::store {

class Stmt;

class Db {
 public:
  Db() = default;
  ~Db();
  Db(Db&& o) noexcept : db_(o.db_), path_(std::move(o.path_)) { o.db_ = nullptr; }
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Opens (creating parent directories and the file) and makes sure the schema exists.
  static Result<Db> open(const std::string& path);
  // Opens an existing file for reading only: no directories, no file, no schema are created
  // (a reader such as the engine must not write the database evolve owns).
  static Result<Db> open_readonly(const std::string& path);
  // ~/.cache/loom/evolve.db (or $LOOM_CACHE_DIR/evolve.db).
  static std::string default_path();

  Status exec(std::string_view sql);
  Result<Stmt> prepare(std::string_view sql);
  int64_t last_insert_id() const;
  int64_t changes() const;  // rows changed by the last INSERT/UPDATE/DELETE
  const std::string& path() const { return path_; }
  sqlite3* raw() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// A prepared statement. bind(i, ...) is 1-based like SQLite; step() returns true while a row is
// available; column getters are 0-based.
class Stmt {
 public:
  Stmt() = default;
  ~Stmt();
  Stmt(Stmt&& o) noexcept : s_(o.s_), db_(o.db_) { o.s_ = nullptr; }
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
  Stmt(sqlite3_stmt* s, sqlite3* db) : s_(s), db_(db) {}
  sqlite3_stmt* s_ = nullptr;
  sqlite3* db_ = nullptr;
};

// A write transaction (BEGIN IMMEDIATE: the write lock is taken at the start, so what it reads
// cannot change before it writes); rolled back on destruction unless committed.
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
