// The kernel store as the engine reads it: one read of the table per process (lookups after it
// make no SQLite call), read-only (an older file is read as it is, not migrated), and stored text
// kernels loaded through store::load_text_module.
#include "loom/store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "loom/base/version.h"
#include "loom/store/db.h"
#include "loom/store/load.h"

namespace loom::store {
namespace {

std::string temp_db(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() / fmt::format("loom-store-{}-{}.db", tag, ::getpid());
  std::filesystem::remove(p);
  return p.string();
}

const kernels::Shape kShape = *kernels::Shape::parse("n_in=576,n_out=1536,n_tokens=1,wtype=2");

StoredKernel matvec_kernel(const std::string& arch, int64_t rows_per_block) {
  StoredKernel k;
  k.op = "matvec";
  k.shape_key = kShape.key();
  k.shape_class = shape_class("matvec", kShape);
  k.device_arch = arch;
  k.loom_version = std::string(loom_version());
  k.cand.knobs = {{"rows_per_block", rows_per_block}};
  k.speedup = 1.2;
  return k;
}

void raw_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

TEST(KernelStore, TableIsReadOnceAndPutKernelRereadsIt) {
  const std::string path = temp_db("once");
  auto db = Db::open(path);
  ASSERT_TRUE(db.ok()) << db.status().to_string();
  ASSERT_TRUE(put_kernel(*db, matvec_kernel("cpu:a", 8)).ok());
  auto a = best_kernel("matvec", kShape, "cpu:a", path);
  ASSERT_TRUE(a.ok() && a->has_value()) << (a.ok() ? "none" : a.status().to_string());
  // A row written behind the store's back (another process would do this) is not seen: the
  // table was read once.
  StoredKernel b = matvec_kernel("cpu:b", 16);
  raw_sql(path, fmt::format("INSERT INTO kernels(op, shape_key, shape_class, device_arch, loom_version, body, speedup) "
                            "VALUES ('matvec', '{}', '{}', 'cpu:b', '{}', '{}', 1.5)",
                            b.shape_key, b.shape_class, b.loom_version, b.cand.body()));
  auto before = best_kernel("matvec", kShape, "cpu:b", path);
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE(before->has_value());
  // put_kernel in this process drops what was read: the next lookup reads the file again.
  ASSERT_TRUE(put_kernel(*db, matvec_kernel("cpu:c", 4)).ok());
  auto after = best_kernel("matvec", kShape, "cpu:b", path);
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ((*after)->cand.knobs.at("rows_per_block"), 16);
  EXPECT_EQ((*after)->seq, -1);
  std::filesystem::remove(path);
}

TEST(KernelStore, OlderFilesAreReadAsTheyAre) {
  // No kernels table at all: no stored kernel, no error, and the file is not given the schema.
  const std::string none = temp_db("none");
  raw_sql(none, "CREATE TABLE other(x INTEGER)");
  auto r = best_kernel("matvec", kShape, "cpu:a", none);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->has_value());
  auto ro = Db::open_readonly(none);
  ASSERT_TRUE(ro.ok());
  EXPECT_FALSE(ro->prepare("SELECT id FROM jobs").ok()) << "a reader must not create evolve's tables";
  std::filesystem::remove(none);
  // A kernels table from before the seq column.
  const std::string old = temp_db("old");
  StoredKernel k = matvec_kernel("cpu:a", 8);
  raw_sql(old, fmt::format("CREATE TABLE kernels(op TEXT, shape_key TEXT, shape_class TEXT, device_arch TEXT, "
                           "loom_version TEXT, body TEXT, kind TEXT, speedup REAL, median_us REAL, baseline_us REAL, "
                           "job INTEGER, candidate INTEGER, created REAL); "
                           "INSERT INTO kernels(op, shape_key, shape_class, device_arch, loom_version, body, speedup) "
                           "VALUES ('matvec', '{}', '{}', 'cpu:a', '{}', '{}', 1.3)",
                           k.shape_key, k.shape_class, k.loom_version, k.cand.body()));
  auto o = best_kernel("matvec", kShape, "cpu:a", old);
  ASSERT_TRUE(o.ok() && o->has_value()) << (o.ok() ? "none" : o.status().to_string());
  EXPECT_EQ((*o)->seq, -1);
  std::filesystem::remove(old);
}

TEST(KernelStore, ExactShapeBeatsTheClassThenSpeedup) {
  const std::string path = temp_db("order");
  auto db = Db::open(path);
  ASSERT_TRUE(db.ok());
  StoredKernel cls = matvec_kernel("cpu:a", 2);
  cls.shape_key = "n_in=1536,n_out=576,n_tokens=1,wtype=2";
  cls.speedup = 3.0;
  StoredKernel slow = cls;
  slow.shape_key = "n_in=64,n_out=64,n_tokens=1,wtype=2";
  slow.cand.knobs = {{"rows_per_block", 32}};
  slow.speedup = 2.0;
  ASSERT_TRUE(put_kernel(*db, cls).ok());
  ASSERT_TRUE(put_kernel(*db, slow).ok());
  auto by_class = best_kernel("matvec", kShape, "cpu:a", path);
  ASSERT_TRUE(by_class.ok() && by_class->has_value());
  EXPECT_EQ((*by_class)->cand.knobs.at("rows_per_block"), 2) << "the class's best speed-up";
  ASSERT_TRUE(put_kernel(*db, matvec_kernel("cpu:a", 8)).ok());
  auto exact = best_kernel("matvec", kShape, "cpu:a", path);
  ASSERT_TRUE(exact.ok() && exact->has_value());
  EXPECT_EQ((*exact)->cand.knobs.at("rows_per_block"), 8) << "an exact shape wins over a faster class member";
  std::filesystem::remove(path);
}

TEST(KernelStore, TextKernelsLoadThroughOnePath) {
  Candidate c;
  c.kind = CandKind::kCpp;
  c.source = R"(// launch store_fill grid=1,1,1 block=1,1,1 args=0 scalars=i32:${n_out}
extern "C" void store_fill(void* const* args, const LoomLaunchDims*) {
  float* y = *static_cast<float* const*>(args[0]);
  y[0] = static_cast<float>(*static_cast<const int*>(args[1]));
}
)";
  const kernels::OpSpec* op = kernels::find_op("matvec");
  ASSERT_NE(op, nullptr);
  auto inst = instantiate(c, *op, kShape, ir::TargetKind::kCpp);
  ASSERT_TRUE(inst.ok()) << inst.status().to_string();
  EXPECT_TRUE(is_text_kind(inst->kind));
  auto dev = hrx::Device::open("cpu");
  ASSERT_TRUE(dev.ok());
  auto m = load_text_module(*dev, *inst);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->kernel("store_fill").ok());
  Instance ir;
  ir.kind = CandKind::kIr;
  EXPECT_FALSE(load_text_module(*dev, ir).ok()) << "Loom IR compiles with hrx::Module::compile";
  Instance ptx;
  ptx.kind = CandKind::kPtx;
  EXPECT_FALSE(load_text_module(*dev, ptx).ok()) << "PTX needs a cuda device";
}

}  // namespace
}  // namespace loom::store
