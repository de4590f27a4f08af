// The op library's contract. An OpSpec describes one op (what the engine launches, what evolve
// searches): its arguments, its reference, its cost, its schedule space, and a generator that
// writes Loom IR for one shape, one schedule and one target.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::kernels {

// The static shape of one launch: named integer dimensions ("n_in", "n_out", "n_tokens",
// "head_dim", "wtype" as a GgmlType number ...). Everything a generator may bake into the code
// is here; values that change from step to step (token ids, positions, n_kv) are NOT part of
// a shape: kernels read them from device buffers, so one captured graph replays every step.
struct Shape {
  std::map<std::string, int64_t> dims;

  // The value of a dimension; an internal error names the missing one.
  Result<int64_t> get(std::string_view name) const;
  int64_t at(std::string_view name) const;  // asserts presence (for generators after validate)
  // Canonical text "n_in=576,n_out=1536,wtype=3": the key of the kernel store.
  std::string key() const;
  static Result<Shape> parse(std::string_view key);
};

// One tunable of the schedule space (threads per block, rows per block, vector width, unroll,
// split-K, staging through shared memory ...) with the values it may take.
struct Knob {
  std::string name;
  std::vector<int64_t> choices;
  // The choices that change the order or rounding of float operations against the op's
  // reference (an exact search, `loom evolve run --exact`, drops them).
  std::vector<int64_t> inexact = {};
};
using Schedule = std::map<std::string, int64_t>;
std::string schedule_key(const Schedule& s);  // "rows_per_block=4,threads=128"

// Knob values that replace an op's default schedule, from $LOOM_SCHEDULE
// ("op:knob=v,knob=v;op2:knob=v"; read at the first call), for tuning by hand without a rebuild.
// Knobs not named keep their default. An empty map when the op is not named; an error when the
// variable cannot be parsed. Thread-safe.
Result<Schedule> schedule_override(std::string_view op);
// Replaces the override table with `text` (same syntax; empty: no overrides) and returns the
// text it replaced, so a caller (a test, a tuning tool) can put it back. A text that does not
// parse is kept too: schedule_override then returns its error.
std::string set_schedule_overrides(std::string text);

// Bytes moved to and from memory and floating-point (or integer dot) operations of one launch,
// counted by the op's definition (compulsory traffic), not by what a kernel happens to do.
struct Cost {
  double bytes = 0;
  double flops = 0;
};

// A kernel argument as the op sees it. Buffers are device memory; their size in bytes follows
// from the shape. Scalars are passed by value and must be shape-constant (see Shape).
enum class ArgKind : uint8_t { kBuffer, kI32, kI64, kF32 };
enum class ArgRole : uint8_t { kInput, kOutput, kInOut, kScratch };
struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::kBuffer;
  ArgRole role = ArgRole::kInput;
  int64_t bytes = 0;       // buffers: size for this shape
  ir::Scalar elem = ir::Scalar::kF32;  // buffers: element type as the reference reads it
                                       // (u8 for quantized blocks), for tolerance checks
};

// A launch of one kernel of the generated module. `args` index into OpSpec::args(shape) for
// buffers; scalar arguments are appended from `scalars` in the kernel's parameter order as
// written by the generator (kernel params = the op's buffers it uses, then its scalars).
struct KernelLaunch {
  std::string kernel;                 // name inside Generated::module
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  std::vector<int> args;              // op argument indices, in kernel parameter order
  std::vector<int64_t> scalars;       // literal scalar values (i32/i64 by parameter type)
};

// What a generator returns: one module and the launches (in order) that compute the op.
// Multi-kernel ops (split-K attention: partials then combine) use a kScratch argument.
struct Generated {
  ir::Module module;
  std::vector<KernelLaunch> launches;
};

// Host memory of one argument for the reference and the differential tests.
struct HostArg {
  std::vector<uint8_t> bytes;  // buffers (empty for scalars)
  int64_t scalar_i = 0;        // kI32/kI64
  float scalar_f = 0;          // kF32
};

// How far a kernel's output may be from the reference: |got - want| <= atol + rtol * |want|
// per element, or for quantized/integer outputs exact equality (exact = true). Where a kernel
// legitimately reorders a long float sum, the tolerance says so; a wrong kernel is far outside.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  bool exact = false;
};

class OpSpec {
 public:
  virtual ~OpSpec() = default;
  virtual std::string_view name() const = 0;          // "matvec", "rms_norm", "rope_kv" ...
  virtual std::string_view description() const = 0;  // one line for `loom evolve ops`

  // Checks a shape for this op (names, ranges, divisibility); invalid_argument otherwise.
  virtual Status validate(const Shape& shape) const = 0;
  virtual std::vector<ArgSpec> args(const Shape& shape) const = 0;
  virtual Cost cost(const Shape& shape) const = 0;
  virtual Tolerance tolerance(const Shape& shape) const = 0;

  // The knobs for this shape on this target; default_schedule is always inside the space and
  // is what the engine uses when the kernel store has no better kernel.
  virtual std::vector<Knob> schedule_space(const Shape& shape, ir::TargetKind target) const = 0;
  virtual Schedule default_schedule(const Shape& shape, ir::TargetKind target) const = 0;
  // Loom IR for the shape and schedule; invalid_argument for a schedule outside the space.
  virtual Result<Generated> generate(const Shape& shape, const Schedule& schedule,
                                     ir::TargetKind target) const = 0;

  // Fills the inputs (and in/out buffers) with fresh random data valid for the op: never all
  // zeros; quantized blocks with sane scales; ids/positions in range.
  virtual void fill_inputs(const Shape& shape, std::mt19937_64& rng,
                           std::span<HostArg> args) const = 0;
  // Whether the reference defines the result for every value of float input `arg` (an index
  // into args()), IEEE special values included: infinities, NaN, -0.0, denormals and the
  // format's extremes. Where it does, evolve's judge adds a trial whose inputs mix those in
  // (kernels::mix_special_values) and a kernel must match the reference there too. False by
  // default: most ops' references are only meant for the finite ranges fill_inputs draws from.
  virtual bool special_values(const Shape& /*shape*/, size_t /*arg*/) const { return false; }
  // Computes the outputs on the host from the inputs: the definition every kernel is checked
  // against (calls llm::ref where the engine's reference op exists).
  virtual Status reference(const Shape& shape, std::span<HostArg> args) const = 0;

  // Shapes the differential tests run (small and real: SmolLM2-135M and Llama-3-8B rows).
  virtual std::vector<Shape> test_shapes() const = 0;
};

// The registry of built-in ops, in op_registry.cpp. It lists every op explicitly (each op's
// .cpp defines an accessor such as `const OpSpec& matvec_op();`, declared in op_list.h): a
// self-registering object in a static library would be dropped by the linker.
const OpSpec* find_op(std::string_view name);
const std::vector<const OpSpec*>& all_ops();

}  // namespace loom::kernels
