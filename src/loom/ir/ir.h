// Loom IR data structures: SSA values, instructions with nested regions (structured `for` and
// `if`), kernels and modules. A Kernel owns every Value and Inst created in it (arena); blocks
// hold non-owning pointers. Not thread-safe; a Kernel is built and transformed by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/ir/ops.h"
#include "loom/ir/types.h"

namespace loom::ir {

// 1-based line and column in the source text; line 0 means "made by the builder".
struct SourceLoc {
  uint32_t line = 0;
  uint32_t col = 0;
  bool known() const { return line != 0; }
};

// A constant's value. Integers hold the value sign-extended (signed types) or zero-extended
// (unsigned, i1) to 64 bits, already wrapped to the type's width; floats hold the value exactly
// representable in the type (f32/f16/bf16 constants are rounded when created).
struct Literal {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
  friend bool operator==(const Literal& a, const Literal& b);
};

struct Inst;

struct Value {
  Type type;
  std::string name;     // source or builder name without '%'; may be empty or repeat
  uint32_t id = 0;      // dense index within the kernel (for side tables in passes/emitters)
  Inst* def = nullptr;  // defining instruction; null for kernel params and region arguments
};

// A straight-line list of instructions with arguments (region arguments of `for`).
struct Block {
  std::vector<Value*> args;
  std::vector<Inst*> insts;
};

struct Inst {
  Op op = Op::kConst;
  Mode mode = Mode::kNone;
  std::vector<Value*> operands;
  std::vector<Value*> results;
  std::vector<Block> regions;  // for: {body}; if: {then, else}
  // extract: lane; load/store: alignment in bytes (0 = natural element alignment);
  // alloc_shared/alloc_local: element count.
  int64_t imm = 0;
  Literal lit;  // const only
  SourceLoc loc;

  const OpInfo& info() const { return op_info(op); }
  Value* result() const { return results.empty() ? nullptr : results[0]; }
};

class Kernel {
 public:
  Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  std::string name;
  std::vector<Value*> params;  // pointers and scalars, in launch-argument order
  // Launch bounds (0: none): every launch has at most max_threads threads per block, and the
  // code generator should leave room for min_blocks blocks per multiprocessor (PTX .maxntid /
  // .minnctapersm: ptxas caps the registers to fit). `bounds(T, B)` after the parameters.
  int max_threads = 0;
  int min_blocks = 0;
  Block body;
  SourceLoc loc;

  Value* new_value(Type type, std::string name = {});
  Inst* new_inst(Op op, SourceLoc loc = {});
  size_t num_values() const { return values_.size(); }

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Inst>> insts_;
};

struct Module {
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::string source_name;  // file name used in error locations ("<input>" when none)

  Kernel* add_kernel(std::string name);
  Kernel* find(std::string_view name) const;
};

// Visits every instruction of a block in program order, regions included (pre-order).
template <typename F>
void walk(const Block& block, F&& f) {
  for (Inst* inst : block.insts) {
    f(inst);
    for (const Block& r : inst->regions) walk(r, f);
  }
}

// A deep copy (new values and instructions, same names and locations).
Module clone_module(const Module& module);

// Shared memory. Up to kStaticSharedBytes a kernel's alloc_shared buffers are static (every
// target takes them as they are); above it, up to kMaxSharedBytes (Hopper's opt-in limit per
// block), a target places them in the block's dynamic shared memory, and every launch of the
// kernel must give it dynamic_shared_bytes() (the ptx target writes the figure into its text and
// HRX's PTX loader makes every launch of that kernel give it).
constexpr int64_t kStaticSharedBytes = 48 * 1024;
constexpr int64_t kMaxSharedBytes = 227 * 1024;
// The bytes one alloc_shared buffer takes: its size rounded up to 16 (every buffer's alignment).
int64_t alloc_shared_bytes(const Inst& alloc);
// The bytes of the kernel's alloc_shared buffers (alloc_shared_bytes summed).
int64_t shared_bytes(const Kernel& k);
// shared_bytes(k) when it is above kStaticSharedBytes, else 0.
int64_t dynamic_shared_bytes(const Kernel& k);

// Literal helpers shared by the parser, builder and constant folder.
// Wraps an integer to the width/signedness of `s` (i1: 0 or 1).
int64_t wrap_int(Scalar s, int64_t v);
// Rounds a double to the precision of float scalar `s` (f16/bf16 round to nearest even).
double round_float(Scalar s, double v);
Literal make_literal(Scalar s, double float_value, int64_t int_value);

// --- Printing (printer.cpp) ---
// Assigns each value of a kernel a unique printable name: its own when free, else a number.
class Namer {
 public:
  explicit Namer(const Kernel& kernel);
  const std::string& name(const Value* v) const;

 private:
  std::vector<std::string> names_;
};

std::string print(const Module& module);
std::string print(const Kernel& kernel);
// One instruction as it appears in the kernel text (the opening line only for region ops).
std::string print_inst(const Inst& inst, const Namer& namer);
std::string print_literal(const Literal& lit, Type type);

}  // namespace loom::ir
