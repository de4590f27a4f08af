// The one SQL text both engines of the evolve database take: SQLite's placeholders rewritten for
// PostgreSQL (outside quoted text), row locks dropped for SQLite, ids from INSERT ... RETURNING,
// and the schema version of a fresh file. (The PostgreSQL server itself: tests/py/test_evolve_pg.py.)
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "loom/store/db.h"
#include "loom/store/pg.h"

namespace loom::store {
namespace {

TEST(EvolveDb, PlaceholdersForPostgres) {
  EXPECT_EQ(pg_placeholders("SELECT a FROM t WHERE id = ?1 AND b = ?12"), "SELECT a FROM t WHERE id = $1 AND b = $12");
  EXPECT_EQ(pg_placeholders("INSERT INTO t VALUES (?, ?, ?)"), "INSERT INTO t VALUES ($1, $2, $3)");
  EXPECT_EQ(pg_placeholders("SELECT '?1', \"a?\" FROM t WHERE x = ?2"), "SELECT '?1', \"a?\" FROM t WHERE x = $2");
  EXPECT_EQ(pg_placeholders("UPDATE t SET a = ?2 WHERE id = ?1 AND c = ?"), "UPDATE t SET a = $2 WHERE id = $1 AND c = $3");
}

TEST(EvolveDb, OneTextForSqlite) {
  const std::string path = (std::filesystem::temp_directory_path() / ("loom-db-test-" + std::to_string(::getpid()) + ".db")).string();
  {
    auto db = Db::open(path);
    ASSERT_TRUE(db.ok()) << db.status().to_string();
    EXPECT_EQ(db->engine(), Engine::kSqlite);
    EXPECT_EQ(db->schema_version(), kSchemaVersion);
    auto ins = db->prepare("INSERT INTO evaluations(job, kind, seq, device_arch, status) VALUES (?1, 'eval', ?2, 'cpu:x', "
                           "'pending') RETURNING id");
    ASSERT_TRUE(ins.ok()) << ins.status().to_string();
    ins->bind(1, int64_t{7}).bind(2, 3);
    auto row = ins->step();
    ASSERT_TRUE(row.ok() && *row);
    const int64_t id = ins->i64(0);
    EXPECT_GT(id, 0);
    ASSERT_TRUE(ins->reset().ok());
    auto tx = Transaction::begin(*db);
    ASSERT_TRUE(tx.ok());
    auto sel = db->prepare(std::string("SELECT id FROM evaluations WHERE status = 'pending' AND lease_until IS NULL AND ") +
                           "created IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED");
    ASSERT_TRUE(sel.ok()) << sel.status().to_string();
    auto got = sel->step();
    ASSERT_TRUE(got.ok() && *got);
    EXPECT_EQ(sel->i64(0), id);
    ASSERT_TRUE(sel->reset().ok());
    auto upd = db->prepare(std::string("UPDATE evaluations SET lease_until = ") + std::string(kSqlUnixNow) + " + ?2 WHERE id = ?1");
    ASSERT_TRUE(upd.ok());
    ASSERT_TRUE(upd->bind(1, id).bind(2, 30.0).run().ok());
    EXPECT_EQ(db->changes(), 1);
    ASSERT_TRUE(tx->commit().ok());
    auto chk = db->prepare(std::string("SELECT lease_until - ") + std::string(kSqlUnixNow) + " FROM evaluations WHERE id = ?1");
    ASSERT_TRUE(chk.ok());
    chk->bind(1, id);
    auto c = chk->step();
    ASSERT_TRUE(c.ok() && *c);
    EXPECT_NEAR(chk->f64(0), 30.0, 2.0);  // the deadline is in unix seconds on the database's clock
  }
  auto again = Db::open(path);  // opening a current file applies nothing
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->schema_version(), kSchemaVersion);
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
}

}  // namespace
}  // namespace loom::store
