// The kernel store (see store.h).
#include "loom/store/store.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "loom/base/options.h"
#include "loom/base/version.h"
#include "loom/store/db.h"

namespace loom::store {

namespace {

bool is_size_dim(const std::string& name, int64_t v) {
  return v >= 2 && name.find("type") == std::string::npos && name.find("_f32") == std::string::npos &&
         name.rfind("has_", 0) != 0 && name != "mode" && name != "n_tokens" && name != "add";
}

constexpr std::string_view kCols =
    "op, shape_key, shape_class, device_arch, loom_version, body, speedup, median_us, baseline_us, job, candidate, seq";

// A row with its candidate body still text: the table is read whole, and a body is parsed only
// when its row is the one a lookup picks.
struct Row {
  StoredKernel k;  // cand not yet set
  std::string body;
};

Row raw_row(Stmt& s) {
  Row r;
  StoredKernel& k = r.k;
  k.op = s.text(0);
  k.shape_key = s.text(1);
  k.shape_class = s.text(2);
  k.device_arch = s.text(3);
  k.loom_version = s.text(4);
  r.body = s.text(5);
  k.speedup = s.f64(6);
  k.median_us = s.f64(7);
  k.baseline_us = s.f64(8);
  k.job = s.i64(9);
  k.candidate = s.i64(10);
  k.seq = s.is_null(11) ? -1 : static_cast<int>(s.i64(11));
  return r;
}

Result<StoredKernel> row(Stmt& s) {
  Row r = raw_row(s);
  LOOM_ASSIGN_OR_RETURN(r.k.cand, Candidate::from_body(r.body));
  return std::move(r.k);
}

// The rows of this Loom version, per database file, as this process first read them.
using Table = std::vector<Row>;
std::mutex g_tables_mu;
std::map<std::string, std::shared_ptr<const Table>> g_tables;

// Read-only, so an older file is read as it is (Db::open would add what it lacks): a file without
// the kernels table has no stored kernel, and one whose rows predate `seq` gives -1 for it.
Result<Table> read_table(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(Db db, Db::open_readonly(path));
  LOOM_ASSIGN_OR_RETURN(Stmt cols, db.prepare("SELECT name FROM pragma_table_info('kernels')"));
  bool any = false, has_seq = false;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, cols.step());
    if (!has) break;
    any = true;
    has_seq = has_seq || cols.text(0) == "seq";
  }
  if (!any) return Table();
  std::string sel(kCols);
  if (!has_seq) sel = sel.substr(0, sel.rfind("seq")) + "-1";
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare(fmt::format("SELECT {} FROM kernels WHERE loom_version = ?1", sel)));
  s.bind(1, loom_version());
  Table t;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) break;
    t.push_back(raw_row(s));
  }
  return t;
}

// The table of `path`, read on first use. A file that cannot be read gives its error once and
// an empty table from then on (the engine warns once, not once per kernel).
Result<std::shared_ptr<const Table>> table_of(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_tables_mu);
  if (auto it = g_tables.find(path); it != g_tables.end()) return it->second;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return g_tables[path] = std::make_shared<const Table>();
  Result<Table> t = read_table(path);
  g_tables[path] = std::make_shared<const Table>(t.ok() ? std::move(t).value() : Table());
  if (!t.ok()) return std::move(t).status().with_context("reading the kernel store " + path);
  return g_tables[path];
}

}  // namespace

std::string device_arch_of(const hrx::DeviceProps& p) {
  if (p.driver == hrx::DriverKind::kCuda) return fmt::format("cuda:{}:{}", p.arch, p.name);
  if (p.driver == hrx::DriverKind::kAmdgpu) return fmt::format("amdgpu:{}:{}", p.arch, p.name);
  return fmt::format("cpu:{}", p.name);
}

std::string shape_class(std::string_view op, const kernels::Shape& shape) {
  std::string out(op);
  out += "|";
  bool first = true;
  for (const auto& [n, v] : shape.dims) {
    if (is_size_dim(n, v)) continue;
    out += fmt::format("{}{}={}", first ? "" : ",", n, v);
    first = false;
  }
  return out;
}

Result<Instance> StoredKernel::instantiate(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind t) const {
  return store::instantiate(cand, op, shape, t);
}

Result<kernels::Generated> StoredKernel::generate(const kernels::OpSpec& op, const kernels::Shape& shape,
                                                  ir::TargetKind t) const {
  LOOM_ASSIGN_OR_RETURN(Instance inst, store::instantiate(cand, op, shape, t));
  if (inst.kind != CandKind::kSchedule && inst.kind != CandKind::kIr)
    return unimplemented("stored kernel {} is {} text, which cannot merge into a Loom IR module", id(),
                         cand_kind_name(inst.kind));
  return std::move(inst.gen);
}

Result<std::optional<StoredKernel>> best_kernel(std::string_view op, const kernels::Shape& shape,
                                                std::string_view device_arch, const std::string& db_path) {
  if (opt::get_bool(opt::Opt::kNoKernelStore)) return std::optional<StoredKernel>();
  std::string path = db_path;
  if (path.empty()) path = opt::get_string(opt::Opt::kEvolveDb);
  if (path.empty()) path = Db::default_path();
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<const Table> t, table_of(path));
  // An exact shape match first, then the best speedup in the shape class.
  const std::string key = shape.key(), cls = shape_class(op, shape);
  const Row* best = nullptr;
  for (const Row& r : *t) {
    if (r.k.op != op || r.k.device_arch != device_arch || (r.k.shape_key != key && r.k.shape_class != cls)) continue;
    if (!best) {
      best = &r;
      continue;
    }
    const bool exact = r.k.shape_key == key, best_exact = best->k.shape_key == key;
    if (exact != best_exact ? exact : r.k.speedup > best->k.speedup) best = &r;
  }
  if (!best) return std::optional<StoredKernel>();
  StoredKernel k = best->k;
  k.origin = path;
  LOOM_ASSIGN_OR_RETURN(k.cand, Candidate::from_body(best->body));
  return std::optional<StoredKernel>(std::move(k));
}

namespace {
std::mutex g_uses_mu;
std::vector<KernelUse> g_uses;
}  // namespace

void record_use(const StoredKernel& k, const std::string& shape_key) {
  std::lock_guard<std::mutex> lock(g_uses_mu);
  for (const KernelUse& u : g_uses)
    if (u.op == k.op && u.shape_key == shape_key && u.id == k.id() && u.origin == k.origin) return;
  g_uses.push_back({k.op, shape_key, k.id(), k.origin, k.speedup});
}

std::vector<KernelUse> kernels_in_use() {
  std::lock_guard<std::mutex> lock(g_uses_mu);
  return g_uses;
}

Status put_kernel(Db& db, const StoredKernel& k) {
  LOOM_ASSIGN_OR_RETURN(
      Stmt s, db.prepare(fmt::format("INSERT INTO kernels({}, kind, created) VALUES "
                                     "(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,julianday('now')) "
                                     "ON CONFLICT(op, shape_key, device_arch, loom_version) DO UPDATE SET "
                                     "shape_class = excluded.shape_class, body = excluded.body, speedup = excluded.speedup, "
                                     "median_us = excluded.median_us, baseline_us = excluded.baseline_us, job = excluded.job, "
                                     "candidate = excluded.candidate, seq = excluded.seq, kind = excluded.kind, "
                                     "created = excluded.created",
                                     kCols)));
  s.bind(1, k.op).bind(2, k.shape_key).bind(3, k.shape_class).bind(4, k.device_arch).bind(5, k.loom_version);
  s.bind(6, k.cand.body()).bind(7, k.speedup).bind(8, k.median_us).bind(9, k.baseline_us).bind(10, k.job);
  s.bind(11, k.candidate).bind(12, k.seq).bind(13, cand_kind_name(k.cand.kind));
  LOOM_RETURN_IF_ERROR(s.run());
  std::lock_guard<std::mutex> lock(g_tables_mu);
  g_tables.clear();  // read again on the next lookup, with this row
  return Status();
}

Result<std::vector<StoredKernel>> list_kernels(Db& db) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare(fmt::format("SELECT {} FROM kernels ORDER BY op, shape_key, device_arch", kCols)));
  std::vector<StoredKernel> out;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) break;
    LOOM_ASSIGN_OR_RETURN(StoredKernel k, row(s));
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace loom::store
