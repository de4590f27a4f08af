// The kernel store: the best kernel evolve found per (op, shape, device architecture, Loom
// version), in the evolve database. The engine asks it where it would otherwise take the op's
// default schedule:
//
//   auto sk = store::best_kernel(op.name(), shape, store::device_arch_of(dev.props()));
//   if (sk.ok() && *sk) gen = (*sk)->generate(op, shape, target);   // else default_schedule
//
// A stored schedule candidate applies to every shape of its shape class (the op's non-size
// dimensions, e.g. matvec with wtype=2, n_tokens=1): an exact shape match wins, else the class's
// best. Text candidates apply to their own shape class too (they are templates), IR text only
// where the shape instantiates. Reads are cheap (one SQLite query); the database is opened
// read-only per call and a missing file means "no stored kernel".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/base/status.h"
#include "loom/store/candidate.h"
#include "loom/hrx/runtime.h"

namespace loom::store {

class Db;

struct StoredKernel {
  std::string op, shape_key, shape_class, device_arch, loom_version;
  Candidate cand;
  double speedup = 1, median_us = 0, baseline_us = 0;
  int64_t job = 0, candidate = 0;  // the job and candidates.id that found it
  int seq = -1;                     // the candidate's #seq in that job (-1: not known)
  std::string id() const { return fmt::format("evolve-{}.{}", job, candidate); }
  // The kernel for `shape`: Loom IR (Instance::gen, to merge into the engine's module) or
  // C++/PTX text (Instance::source and launches: a module of its own, loaded with
  // hrx::Module::load_shared_object / load_ptx; see cpp_source_for_cpu below).
  Result<Instance> instantiate(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind t) const;
  // Loom IR only (unimplemented for text kinds).
  Result<kernels::Generated> generate(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind t) const;
};

// Architecture key of a device for the store: "cpu:<cpu name>" or "cuda:<sm arch>:<name>".
std::string device_arch_of(const hrx::DeviceProps& p);
// "matvec|n_tokens=1,wtype=2": the op and its non-size dimensions.
std::string shape_class(std::string_view op, const kernels::Shape& shape);

// The best stored kernel (nullopt: none). db_path empty: $LOOM_EVOLVE_DB, else Db::default_path().
// LOOM_NO_KERNEL_STORE=1 turns the store off (returns nullopt).
Result<std::optional<StoredKernel>> best_kernel(std::string_view op, const kernels::Shape& shape,
                                                std::string_view device_arch, const std::string& db_path = "");

// A cpp Instance's source as the host compiler takes it (the launch-dimension struct prepended
// when the text does not define it): feed it to codegen::compile_shared_object.
std::string cpp_source_for_cpu(const Instance& inst);

Status put_kernel(Db& db, const StoredKernel& k);
Result<std::vector<StoredKernel>> list_kernels(Db& db);

}  // namespace loom::store
