// Shared machinery of the passes: a value replacement map applied to every operand, use counts,
// and region cloning.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "loom/ir/ir.h"

namespace loom::ir::passes {

// Maps values to their replacements (chains are followed); apply() rewrites all operands.
class Replacements {
 public:
  explicit Replacements(const Kernel& k) : to_(k.num_values(), nullptr) {}
  void replace(const Value* from, Value* to) {
    if (from->id >= to_.size()) to_.resize(from->id + 1, nullptr);
    to_[from->id] = to;
  }
  Value* get(Value* v) const {
    for (int guard = 0; v && v->id < to_.size() && to_[v->id] && guard < 1 << 20; ++guard) v = to_[v->id];
    return v;
  }
  void apply(Inst& inst) const {
    for (Value*& v : inst.operands) v = get(v);
  }
  void apply(Block& b) const {
    for (Inst* i : b.insts) {
      apply(*i);
      for (Block& r : i->regions) apply(r);
    }
  }
  bool empty() const {
    for (const Value* v : to_)
      if (v) return false;
    return true;
  }

 private:
  std::vector<Value*> to_;
};

// Rebuilds the instruction list of every block of the kernel (nested regions included): for each
// instruction `fn(inst, out)` appends to `out` the instructions that take its place (itself, none
// or new ones) and returns whether it replaced it. Returns whether any was replaced.
bool rewrite_blocks(Kernel& k, const std::function<bool(Inst* inst, std::vector<Inst*>& out)>& fn);

// Trip count of a `for` whose bounds and step are constants (step > 0), else nullopt.
std::optional<uint64_t> constant_trip_count(const Inst& loop);

// Number of operand uses of every value in the kernel.
std::vector<int> count_uses(const Kernel& k);

// Whether anything inside the block (recursively) has side effects.
bool has_side_effects(const Block& b);

// Number of instructions in the block, nested regions included.
int count_insts(const Block& b);

// Appends to `out` copies of `src`'s instructions with operands mapped through `map` (indexed by
// value id; unmapped values are used as they are). Results and region arguments of the copies
// are new values, recorded in `map`. A final yield is copied when keep_yield, else left out and
// its mapped operands returned.
std::vector<Value*> clone_block(Kernel& k, const Block& src, std::vector<Value*>& map, std::vector<Inst*>& out,
                                bool keep_yield);

}  // namespace loom::ir::passes
