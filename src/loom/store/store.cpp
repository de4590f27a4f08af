// The kernel store (see store.h).
#include "loom/store/store.h"

#include <cstdlib>
#include <filesystem>

#include "loom/base/version.h"
#include "loom/store/db.h"

namespace loom::store {

// What a C++ candidate may use without declaring it: the launch dimensions of cpu_abi.h.
const std::string_view kCppPrelude = R"(#include <cstdint>
#include <cstring>
#include <cmath>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
struct LoomLaunchDims { uint32_t grid[3]; uint32_t block[3]; uint64_t block_begin; uint64_t block_end; };
)";

namespace {

bool is_size_dim(const std::string& name, int64_t v) {
  return v >= 2 && name.find("type") == std::string::npos && name.find("_f32") == std::string::npos &&
         name.rfind("has_", 0) != 0 && name != "mode" && name != "n_tokens" && name != "add";
}

constexpr std::string_view kCols =
    "op, shape_key, shape_class, device_arch, loom_version, body, speedup, median_us, baseline_us, job, candidate, seq";

Result<StoredKernel> row(Stmt& s) {
  StoredKernel k;
  k.op = s.text(0);
  k.shape_key = s.text(1);
  k.shape_class = s.text(2);
  k.device_arch = s.text(3);
  k.loom_version = s.text(4);
  LOOM_ASSIGN_OR_RETURN(k.cand, Candidate::from_body(s.text(5)));
  k.speedup = s.f64(6);
  k.median_us = s.f64(7);
  k.baseline_us = s.f64(8);
  k.job = s.i64(9);
  k.candidate = s.i64(10);
  k.seq = s.is_null(11) ? -1 : static_cast<int>(s.i64(11));
  return k;
}

}  // namespace

std::string device_arch_of(const hrx::DeviceProps& p) {
  if (p.driver == hrx::DriverKind::kCuda) return fmt::format("cuda:{}:{}", p.arch, p.name);
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

std::string cpp_source_for_cpu(const Instance& inst) {
  if (inst.source.find("LoomLaunchDims {") != std::string::npos) return inst.source;
  return std::string(kCppPrelude) + inst.source;
}

Result<std::optional<StoredKernel>> best_kernel(std::string_view op, const kernels::Shape& shape,
                                                std::string_view device_arch, const std::string& db_path) {
  if (const char* off = std::getenv("LOOM_NO_KERNEL_STORE"); off && *off && std::string(off) != "0")
    return std::optional<StoredKernel>();
  std::string path = db_path;
  if (path.empty()) {
    const char* env = std::getenv("LOOM_EVOLVE_DB");
    path = env && *env ? env : Db::default_path();
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<StoredKernel>();
  LOOM_ASSIGN_OR_RETURN(Db db, Db::open(path));
  LOOM_ASSIGN_OR_RETURN(
      Stmt s, db.prepare(fmt::format("SELECT {} FROM kernels WHERE op = ?1 AND device_arch = ?2 AND loom_version = ?3 "
                                     "AND (shape_key = ?4 OR shape_class = ?5) ORDER BY (shape_key = ?4) DESC, speedup DESC",
                                     kCols)));
  s.bind(1, op).bind(2, device_arch).bind(3, loom_version()).bind(4, shape.key()).bind(5, shape_class(op, shape));
  LOOM_ASSIGN_OR_RETURN(bool has, s.step());
  if (!has) return std::optional<StoredKernel>();
  LOOM_ASSIGN_OR_RETURN(StoredKernel k, row(s));
  return std::optional<StoredKernel>(std::move(k));
}

Status put_kernel(Db& db, const StoredKernel& k) {
  LOOM_ASSIGN_OR_RETURN(
      Stmt s, db.prepare(fmt::format("INSERT OR REPLACE INTO kernels({}, kind, created) VALUES "
                                     "(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,julianday('now'))",
                                     kCols)));
  s.bind(1, k.op).bind(2, k.shape_key).bind(3, k.shape_class).bind(4, k.device_arch).bind(5, k.loom_version);
  s.bind(6, k.cand.body()).bind(7, k.speedup).bind(8, k.median_us).bind(9, k.baseline_us).bind(10, k.job);
  s.bind(11, k.candidate).bind(12, k.seq).bind(13, cand_kind_name(k.cand.kind));
  return s.run();
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
