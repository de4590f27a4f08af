// `loom kernels list|show|export|import|shipped`: the kernel store (best kernel per op, shape class,
// device architecture and Loom version) that evolve fills and the engine reads.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "option_flags.h"
#include "loom/store/db.h"
#include "loom/store/kernel_json.h"
#include "loom/store/shipped.h"
#include "loom/store/store.h"
#include "loom/evolve/store_names.h"
#include "loom/ir/ir.h"
#include "loom/kernels/op_spec.h"

namespace loom::cli {
namespace {

using namespace loom::evolve;

struct KernelsFlags {
  std::string db, id, file, out;
  bool json = false;
};

Result<Db> open_db(const KernelsFlags& f) {
  std::string path = f.db;
  if (path.empty()) path = opt::get_string(opt::Opt::kEvolveDb);
  if (path.empty()) path = Db::default_path();
  return Db::open(path);
}


Status list_cmd(const KernelsFlags& f) {
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  LOOM_ASSIGN_OR_RETURN(auto ks, list_kernels(db));
  if (ks.empty()) std::printf("no stored kernels in %s\n", db.path().c_str());
  // The timings are those of the job's winner record (`loom evolve status JOB` prints the same).
  for (const StoredKernel& k : ks)
    std::printf("%-14s %-8s {%s} on %s (loom %s): %.2fx, %.1f us vs %.1f us; job %lld %s; %s\n", k.id().c_str(),
                k.op.c_str(), k.shape_key.c_str(), k.device_arch.c_str(), k.loom_version.c_str(), k.speedup, k.median_us,
                k.baseline_us, static_cast<long long>(k.job), k.seq >= 0 ? fmt::format("#{}", k.seq).c_str() : "#?",
                k.cand.summary().c_str());
  return Status();
}

Status show_cmd(const KernelsFlags& f) {
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  LOOM_ASSIGN_OR_RETURN(auto ks, list_kernels(db));
  for (const StoredKernel& k : ks) {
    if (k.id() != f.id) continue;
    std::printf("%s\n", store::kernel_json(k).dump(2).c_str());
    const kernels::OpSpec* op = kernels::find_op(k.op);
    auto shape = kernels::Shape::parse(k.shape_key);
    if (op && shape.ok()) {
      auto g = k.generate(*op, *shape, k.device_arch.rfind("cuda", 0) == 0 ? ir::TargetKind::kPtx : ir::TargetKind::kCpp);
      if (g.ok()) std::printf("%s", ir::print(g->module).c_str());
      else if (k.cand.kind != CandKind::kSchedule) std::printf("%s\n", k.cand.source.c_str());
    }
    return Status();
  }
  return not_found("no stored kernel '{}' (see `loom kernels list`)", f.id);
}

Status export_cmd(const KernelsFlags& f) {
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  LOOM_ASSIGN_OR_RETURN(auto ks, list_kernels(db));
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const StoredKernel& k : ks) arr.push_back(store::kernel_json(k));
  const std::string text = arr.dump(2) + "\n";
  if (f.out.empty() || f.out == "-") {
    std::printf("%s", text.c_str());
    return Status();
  }
  std::ofstream o(f.out);
  if (!(o << text)) return unavailable("cannot write {}", f.out);
  std::printf("exported %zu kernels to %s\n", ks.size(), f.out.c_str());
  return Status();
}

// The kernels compiled into this binary (data/kernels/*.json) and the key this CPU looks them up
// under; GPUs use "cuda:<sm arch>" ("amdgpu:<gfx arch>").
Status shipped_cmd(const KernelsFlags& f) {
  using store::ShippedFile, store::shipped_files, store::shipped_arch_of, store::shipped_json;
  LOOM_ASSIGN_OR_RETURN(const std::vector<ShippedFile>* files, shipped_files());
  hrx::DeviceProps cpu;
  cpu.driver = hrx::DriverKind::kCpu;
  const std::string here = shipped_arch_of(cpu);
  if (f.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const ShippedFile& sf : *files) arr.push_back(nlohmann::ordered_json::parse(shipped_json(sf)));
    std::printf("%s\n", nlohmann::ordered_json{{"cpu_key", here}, {"files", arr}}.dump(2).c_str());
    return Status();
  }
  std::printf("this CPU's key: %s\n", here.c_str());
  if (files->empty()) std::printf("no shipped kernels in this build\n");
  for (const ShippedFile& sf : *files) {
    std::printf("%s: %s, %zu kernels, searched on %s at %s (%s)%s\n", sf.name.c_str(), sf.device_arch.c_str(),
                sf.kernels.size(), sf.searched_on.c_str(), sf.commit.c_str(), sf.date.c_str(),
                sf.device_arch == here ? "; used on this CPU" : "");
    for (const StoredKernel& k : sf.kernels)
      std::printf("  %-14s %-10s {%s}: %.2fx, %.1f us vs %.1f us; %s\n", k.id().c_str(), k.op.c_str(),
                  k.shape_key.c_str(), k.speedup, k.median_us, k.baseline_us, k.cand.summary().c_str());
  }
  return Status();
}

Status import_cmd(const KernelsFlags& f) {
  std::ifstream in(f.file);
  if (!in) return not_found("cannot read {}", f.file);
  std::stringstream ss;
  ss << in.rdbuf();
  auto arr = nlohmann::json::parse(ss.str(), nullptr, false);
  if (arr.is_discarded() || !arr.is_array()) return data_loss("{}: not a JSON array of kernels (see `loom kernels export`)", f.file);
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  int n = 0;
  for (const auto& j : arr) {
    LOOM_ASSIGN_OR_RETURN(StoredKernel k, store::kernel_from_json(j, fmt::format("{}: kernel {}", f.file, n)));
    if (k.device_arch.empty()) return data_loss("{}: kernel {} lacks device_arch", f.file, n);
    LOOM_RETURN_IF_ERROR(put_kernel(db, k));
    ++n;
  }
  std::printf("imported %d kernels into %s\n", n, db.path().c_str());
  return Status();
}

LOOM_COMMAND(kKernels, "kernels", "The kernel store that evolve fills and the engine uses: list, show, export, import, shipped",
             [](CLI::App& sub) -> Action {
               auto f = std::make_shared<KernelsFlags>();
               auto which = std::make_shared<std::string>();
               sub.require_subcommand(1);
               bind_option(sub.add_option("--db", f->db, "database (default $LOOM_EVOLVE_DB or ~/.cache/loom/evolve.db)"),
                           opt::Opt::kEvolveDb);
               sub.add_subcommand("list", "stored kernels")->callback([which] { *which = "list"; });
               auto* show = sub.add_subcommand("show", "one stored kernel with its IR");
               show->add_option("id", f->id, "kernel id (evolve-JOB.CANDIDATE)")->required();
               show->callback([which] { *which = "show"; });
               auto* exp = sub.add_subcommand("export", "all stored kernels as JSON");
               exp->add_option("-o,--output", f->out, "file (default stdout)");
               exp->callback([which] { *which = "export"; });
               auto* imp = sub.add_subcommand("import", "add kernels from an exported JSON file");
               imp->add_option("file", f->file, "JSON file from `loom kernels export`")->required();
               imp->callback([which] { *which = "import"; });
               auto* shp = sub.add_subcommand("shipped", "the kernels that ship with Loom (data/kernels), per device key");
               shp->add_flag("--json", f->json, "as JSON");
               shp->callback([which] { *which = "shipped"; });
               return [f, which]() -> int {
                 Status s = *which == "list" ? list_cmd(*f) : *which == "show" ? show_cmd(*f)
                          : *which == "export" ? export_cmd(*f) : *which == "shipped" ? shipped_cmd(*f) : import_cmd(*f);
                 return s.ok() ? 0 : report(s);
               };
             });

}  // namespace
}  // namespace loom::cli
