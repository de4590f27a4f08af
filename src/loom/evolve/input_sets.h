// evolve's input sets: one trial's inputs and reference outputs, made by the op or read back
// from the job's pool directory (EvalOptions::pool_dir), and the per-phase clock of an evaluation.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/evolve/evaluator.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {

// Seconds per phase of one evaluation, in first-use order, and how its input sets were made.
// Not thread-safe (one evaluation, one thread).
class Phases {
 public:
  void add(const std::string& name, double seconds);
  // "compile 0.08s, inputs 0.79s, ... (input sets: 1 made, 5 from the pool)"
  std::string str() const;
  int made = 0, pooled = 0;  // the trials' and held-out shapes' sets
  int timing = 0;            // the timing images' sets (counted apart: one per image when small)

 private:
  std::vector<std::pair<std::string, double>> v_;
};

// Adds the time from construction to destruction to one phase.
class Lap {
 public:
  Lap(Phases& p, std::string name) : p_(p), name_(std::move(name)), t0_(std::chrono::steady_clock::now()) {}
  ~Lap() { p_.add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count()); }
  Lap(const Lap&) = delete;
  Lap& operator=(const Lap&) = delete;

 private:
  Phases& p_;
  std::string name_;
  std::chrono::steady_clock::time_point t0_;
};

// One set of inputs and the reference's outputs for them (ref: empty for pure inputs, which
// compare() never reads there).
struct InputSet {
  std::vector<kernels::HostArg> in, ref;
};

// Inputs for (shape, seed) from op.fill_inputs and the reference's outputs for them. A pooled
// set (pooled and opt.pool_dir set) is read from opt.pool_dir when a file there names this op,
// shape and seed, else made and written there (temporary name + rename: parallel workers never
// read half a file; a failed write only costs the next evaluation the time to make it again).
// Times go to `ph` ("inputs", "reference"). Errors: the reference's. With `specials`, the
// inputs whose reference defines special values hold them (kernels::mix_special_values).
// Without `reference` the set holds inputs only (ref empty; a pooled file's answers are dropped
// after reading, and a set made here is not written to the pool): the timing's sets, whose
// answers the judge computes only after a launch on them returned.
Result<InputSet> input_set(const kernels::OpSpec& op, const kernels::Shape& shape,
                           const std::vector<kernels::ArgSpec>& specs, uint64_t seed, bool pooled,
                           const EvalOptions& opt, Phases& ph, bool specials = false, bool reference = true);

}  // namespace loom::evolve
