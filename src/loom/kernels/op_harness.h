// Runs an op's generated kernels on a device and checks them against the op's reference: the
// engine of tests/ops (differential tests) and `loom ops test|bench`.
//
// Device access goes through OpDevice, the one seam between the op library and a runtime: HRX
// devices ("cpu", "cuda", "cuda:N": hrx::Module::compile, device buffers, one stream), and
// "cpu-direct", which bypasses HRX (codegen's compile_cpu_module + launch_cpu on a ThreadPool)
// to tell runtime problems from kernel problems and to time kernels without runtime overhead.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/kernels/op_spec.h"

namespace loom::kernels {

// A device that can compile a Generated module and run its launches on buffers. Not
// thread-safe; one user at a time.
class OpDevice {
 public:
  virtual ~OpDevice() = default;
  // An HRX device spec, or "cpu-direct" (threads: its pool's OS threads, 0 = default).
  static Result<std::unique_ptr<OpDevice>> open(const std::string& name, int threads = 0);
  // Names of the devices this build can open here, with a reason for each that it cannot.
  static std::vector<std::pair<std::string, std::string>> missing_devices();

  virtual std::string name() const = 0;
  virtual ir::TargetKind target() const = 0;

  // A compiled module, ready to launch many times.
  class Program {
   public:
    virtual ~Program() = default;
    // Runs every launch in order on `buffers` (one device pointer/address per op argument;
    // ignored for scalars) and waits for completion.
    virtual Status run(const std::vector<void*>& buffers) = 0;
  };
  virtual Result<std::unique_ptr<Program>> compile(const Generated& g, const std::vector<ArgSpec>& args) = 0;
};

// Result of one differential check.
struct CheckResult {
  bool passed = false;
  std::string message;  // first mismatch / guard damage / error, with the seed
  double max_abs_err = 0;
  double max_rel_err = 0;
};

// Fills inputs with `seed`, runs the reference, runs the op's kernels for `schedule` on `dev`
// with guard bytes (a canary pattern) before and after every buffer, and compares outputs
// under the op's tolerance. Errors of generation/compilation come back in message too.
CheckResult check_op(const OpSpec& op, const Shape& shape, const Schedule& schedule, OpDevice& dev,
                     uint64_t seed);

// A schedule drawn uniformly from the space (each knob independently).
Schedule random_schedule(const std::vector<Knob>& space, std::mt19937_64& rng);

// Median and spread of the kernel time of one launch sequence (after `warmup` runs).
struct BenchResult {
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  int reps = 0;
};
Result<BenchResult> bench_op(const OpSpec& op, const Shape& shape, const Schedule& schedule, OpDevice& dev,
                             int warmup, int reps);

}  // namespace loom::kernels
