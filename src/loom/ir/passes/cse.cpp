// Common subexpression elimination: pure instructions with equal keys in a dominating position
// (same block or an enclosing one, earlier) are merged. Scoped hash table over the regions.
#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "loom/ir/passes/passes.h"
#include "loom/ir/passes/rewrite.h"

namespace loom::ir {
namespace {

struct Key {
  Op op;
  Mode mode;
  int64_t imm;
  bool lit_float;
  int64_t lit_i;
  uint64_t lit_bits;
  std::string type;
  std::vector<uint32_t> operands;
  bool operator<(const Key& o) const {
    return std::tie(op, mode, imm, lit_float, lit_i, lit_bits, type, operands) <
           std::tie(o.op, o.mode, o.imm, o.lit_float, o.lit_i, o.lit_bits, o.type, o.operands);
  }
};

Key key_of(const Inst& i) {
  Key k{i.op, i.mode, i.imm, i.lit.is_float, i.lit.i, 0, i.results[0]->type.str(), {}};
  if (i.lit.is_float) std::memcpy(&k.lit_bits, &i.lit.f, sizeof(double));
  for (const Value* v : i.operands) k.operands.push_back(v->id);
  if (i.info().has(kCommutative) && k.operands.size() == 2 && k.operands[0] > k.operands[1])
    std::swap(k.operands[0], k.operands[1]);
  return k;
}

class Cse {
 public:
  explicit Cse(Kernel& k) : k_(k), repl_(k) {}

  bool run() {
    block(k_.body);
    if (!changed_) return false;
    repl_.apply(k_.body);
    return true;
  }

 private:
  void block(Block& b) {
    std::vector<Key> added;
    std::vector<Inst*> kept;
    for (Inst* i : b.insts) {
      repl_.apply(*i);
      const bool candidate = i->info().has(kPure) && !i->info().has(kConvergent) && i->results.size() == 1 &&
                             i->regions.empty();
      if (candidate) {
        Key key = key_of(*i);
        auto it = table_.find(key);
        if (it != table_.end()) {
          repl_.replace(i->results[0], it->second);
          changed_ = true;
          continue;  // dropped: its result now maps to the earlier one
        }
        table_.emplace(key, i->results[0]);
        added.push_back(std::move(key));
      }
      for (Block& r : i->regions) block(r);
      kept.push_back(i);
    }
    b.insts = std::move(kept);
    for (const Key& key : added) table_.erase(key);
  }

  Kernel& k_;
  passes::Replacements repl_;
  std::map<Key, Value*> table_;
  bool changed_ = false;
};

}  // namespace

bool eliminate_common_subexpressions(Kernel& kernel) { return Cse(kernel).run(); }

}  // namespace loom::ir
