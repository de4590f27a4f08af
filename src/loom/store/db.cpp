// SQLite wrapper and schema (see db.h).
#include "loom/store/db.h"

#include <filesystem>

#include <sqlite3.h>

#include "loom/base/file.h"

namespace loom::store {
namespace {

// Every table evolve uses. Timings are microseconds, bandwidths GB/s, times seconds.
constexpr std::string_view kSchema = R"SQL(
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY, op TEXT, shape TEXT, device TEXT, device_arch TEXT, strategy TEXT,
  synth TEXT, seed INTEGER, budget TEXT, config TEXT, loom_version TEXT, status TEXT,
  created REAL, elapsed_s REAL DEFAULT 0, baseline_us REAL, best_candidate INTEGER,
  confirmed_speedup REAL, regions TEXT, confirmed_us REAL, confirmed_baseline_us REAL,
  confirmed_rounds INTEGER, stored_kernel TEXT, reason TEXT, lease_host TEXT, lease_pid INTEGER,
  lease_start TEXT, heartbeat REAL);
CREATE TABLE IF NOT EXISTS candidates(
  id INTEGER PRIMARY KEY, job INTEGER, seq INTEGER, parent INTEGER, synth TEXT, kind TEXT,
  hash TEXT, body TEXT, diff TEXT, status TEXT, reason TEXT, median_us REAL, p10_us REAL,
  p90_us REAL, reps INTEGER, speedup REAL, gbps REAL, frac_peak REAL, diagnosis TEXT,
  eval_s REAL, at_s REAL, island INTEGER DEFAULT 0, confirmed_speedup REAL, UNIQUE(job, seq));
CREATE INDEX IF NOT EXISTS candidates_job ON candidates(job, seq);
CREATE TABLE IF NOT EXISTS device_peaks(
  device_arch TEXT PRIMARY KEY, read_gbps REAL, method TEXT, measured REAL);
CREATE TABLE IF NOT EXISTS kernels(
  op TEXT, shape_key TEXT, shape_class TEXT, device_arch TEXT, loom_version TEXT, body TEXT,
  kind TEXT, speedup REAL, median_us REAL, baseline_us REAL, job INTEGER, candidate INTEGER,
  created REAL, seq INTEGER DEFAULT -1, PRIMARY KEY(op, shape_key, device_arch, loom_version));
CREATE TABLE IF NOT EXISTS skills(
  op_family TEXT, device_kind TEXT, knob TEXT, value INTEGER, gains REAL DEFAULT 0,
  uses INTEGER DEFAULT 0, wins INTEGER DEFAULT 0, PRIMARY KEY(op_family, device_kind, knob, value));
CREATE VIRTUAL TABLE IF NOT EXISTS documents USING fts5(path, title, body);
CREATE TABLE IF NOT EXISTS llm_calls(
  id INTEGER PRIMARY KEY, job INTEGER, seq INTEGER, prompt TEXT, reply TEXT, error TEXT, at REAL);
)SQL";

// Columns that files made by older versions lack (also in kSchema, for new files).
constexpr std::string_view kAddedColumns[] = {
    "jobs ADD COLUMN regions TEXT",
    "jobs ADD COLUMN confirmed_us REAL",
    "jobs ADD COLUMN confirmed_baseline_us REAL",
    "jobs ADD COLUMN confirmed_rounds INTEGER",
    "jobs ADD COLUMN stored_kernel TEXT",
    "jobs ADD COLUMN reason TEXT",
    "jobs ADD COLUMN lease_host TEXT",
    "jobs ADD COLUMN lease_pid INTEGER",
    "jobs ADD COLUMN lease_start TEXT",
    "jobs ADD COLUMN heartbeat REAL",
    "candidates ADD COLUMN confirmed_speedup REAL",
    "kernels ADD COLUMN seq INTEGER DEFAULT -1",
};

}  // namespace

Db::~Db() {
  if (db_) sqlite3_close_v2(db_);
}
Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = o.db_;
    path_ = std::move(o.path_);
    o.db_ = nullptr;
  }
  return *this;
}

std::string Db::default_path() { return cache_dir() + "/evolve.db"; }

Result<Db> Db::open(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  Db d;
  d.path_ = path;
  if (sqlite3_open_v2(path.c_str(), &d.db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    std::string msg = d.db_ ? sqlite3_errmsg(d.db_) : "out of memory";
    return unavailable("cannot open database {}: {}", path, msg);
  }
  sqlite3_busy_timeout(d.db_, 10000);
  LOOM_RETURN_IF_ERROR(d.exec(kSchema).with_context("creating the evolve schema in " + path));
  // Columns added after the first schema (files from older versions gain them; "duplicate
  // column" means the file has them already).
  for (std::string_view col : kAddedColumns) (void)d.exec(fmt::format("ALTER TABLE {}", col));
  return d;
}

Result<Db> Db::open_readonly(const std::string& path) {
  Db d;
  d.path_ = path;
  if (sqlite3_open_v2(path.c_str(), &d.db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string msg = d.db_ ? sqlite3_errmsg(d.db_) : "out of memory";
    return unavailable("cannot open database {} for reading: {}", path, msg);
  }
  sqlite3_busy_timeout(d.db_, 10000);
  return d;
}

Status Db::exec(std::string_view sql) {
  char* err = nullptr;
  std::string s(sql);
  if (sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    return internal_error("sqlite: {}", m);
  }
  return Status();
}

Result<Stmt> Db::prepare(std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s, nullptr) != SQLITE_OK)
    return internal_error("sqlite prepare: {} ({})", sqlite3_errmsg(db_), sql);
  return Stmt(s, db_);
}

int64_t Db::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }
int64_t Db::changes() const { return sqlite3_changes(db_); }

Result<Transaction> Transaction::begin(Db& db) {
  LOOM_RETURN_IF_ERROR(db.exec("BEGIN IMMEDIATE"));
  return Transaction(&db);
}
Transaction::~Transaction() {
  if (db_) (void)db_->exec("ROLLBACK");
}
Status Transaction::commit() {
  Status s = db_->exec("COMMIT");
  if (!s.ok()) (void)db_->exec("ROLLBACK");
  db_ = nullptr;
  return s;
}

Stmt::~Stmt() {
  if (s_) sqlite3_finalize(s_);
}
Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    if (s_) sqlite3_finalize(s_);
    s_ = o.s_;
    db_ = o.db_;
    o.s_ = nullptr;
  }
  return *this;
}
Stmt& Stmt::bind(int i, int64_t v) {
  sqlite3_bind_int64(s_, i, v);
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  sqlite3_bind_double(s_, i, v);
  return *this;
}
Stmt& Stmt::bind(int i, std::string_view v) {
  sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::bind_null(int i) {
  sqlite3_bind_null(s_, i);
  return *this;
}
Result<bool> Stmt::step() {
  int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return internal_error("sqlite step: {}", sqlite3_errmsg(db_));
}
Status Stmt::run() {
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool row, step());
    if (!row) break;
  }
  return reset();
}
Status Stmt::reset() {
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
  return Status();
}
int64_t Stmt::i64(int c) const { return sqlite3_column_int64(s_, c); }
double Stmt::f64(int c) const { return sqlite3_column_double(s_, c); }
std::string Stmt::text(int c) const {
  const unsigned char* t = sqlite3_column_text(s_, c);
  return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(s_, c))) : "";
}
bool Stmt::is_null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }

}  // namespace loom::store
