// The kernel store: the best kernel evolve found per (op, shape, device architecture, Loom
// version), in the evolve database. The engine asks it where it would otherwise take the op's
// default schedule:
//
//   auto sk = store::best_kernel(op.name(), shape, store::device_arch_of(dev.props()));
//   if (sk.ok() && *sk) inst = (*sk)->instantiate(op, shape, target);   // else default_schedule
//
// A stored schedule candidate applies to every shape of its shape class (the op's non-size
// dimensions, e.g. matvec with wtype=2, n_tokens=1): an exact shape match wins, else the class's
// best. Text candidates apply to their own shape class too (they are templates), IR text only
// where the shape instantiates. Lookups are in memory: the first one in a process reads the
// store's rows for this Loom version from the database file (opened read-only; a missing file
// means "no stored kernel"), so compiling a step plan makes no SQLite call per kernel. Kernels
// another process stores later are seen by the next process; put_kernel in this process drops
// the rows read, so its own later lookups see what it stored.
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
  // Where a lookup found it: the store file's path, or "shipped:<file>" (shipped.h).
  std::string origin;
  std::string id() const { return fmt::format("evolve-{}.{}", job, candidate); }
  // The kernel for `shape`: Loom IR (Instance::gen, to merge into the engine's module) or
  // C++/PTX/CUDA text (Instance::source and launches: a module of its own, loaded with
  // load_text_module, load.h).
  Result<Instance> instantiate(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind t) const;
  // Loom IR only (unimplemented for text kinds).
  Result<kernels::Generated> generate(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind t) const;
};

// Architecture key of a device for the store: "cpu:<cpu name>" or "cuda:<sm arch>:<name>".
std::string device_arch_of(const hrx::DeviceProps& p);
// "matvec|n_tokens=1,wtype=2": the op and its non-size dimensions.
std::string shape_class(std::string_view op, const kernels::Shape& shape);

// The best stored kernel (nullopt: none). db_path empty: $LOOM_EVOLVE_DB, else Db::default_path().
// LOOM_NO_KERNEL_STORE=1 turns the store off (returns nullopt). A file whose rows cannot be read
// is an error once per process; later lookups in it find nothing.
Result<std::optional<StoredKernel>> best_kernel(std::string_view op, const kernels::Shape& shape,
                                                std::string_view device_arch, const std::string& db_path = "");

// The stored and shipped kernels this process's plans use, in first-use order, for reports
// (`loom bench --json`'s "tuned_kernels"): the engine records each once per (op, shape, id).
struct KernelUse {
  std::string op, shape_key, id, origin;
  double speedup = 1;
};
void record_use(const StoredKernel& k, const std::string& shape_key);
std::vector<KernelUse> kernels_in_use();

// Writes (replaces) the row of k's op, shape, device architecture and Loom version.
Status put_kernel(Db& db, const StoredKernel& k);
Result<std::vector<StoredKernel>> list_kernels(Db& db);

}  // namespace loom::store
