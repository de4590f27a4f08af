// Dead code elimination: removes instructions whose results are unused and that have no side
// effects (loads and allocations included; loops and ifs when nothing inside has side effects).
#include "loom/ir/passes/passes.h"
#include "loom/ir/passes/rewrite.h"

namespace loom::ir {
namespace {

bool removable(const Inst& i) {
  const OpInfo& info = i.info();
  if (info.has(kSideEffects) || info.has(kTerminator)) return false;
  if (info.has(kHasRegions)) {
    for (const Block& r : i.regions)
      if (passes::has_side_effects(r)) return false;
    return true;
  }
  return true;  // pure, reads memory, or allocates
}

// Removes dead instructions from b (backwards, so chains die in one sweep); updates uses.
bool sweep(Block& b, std::vector<int>& uses) {
  bool changed = false;
  std::vector<Inst*> kept;
  for (auto it = b.insts.rbegin(); it != b.insts.rend(); ++it) {
    Inst* i = *it;
    bool dead = removable(*i);
    for (const Value* r : i->results)
      if (uses[r->id] > 0) dead = false;
    if (dead) {
      for (const Value* v : i->operands) --uses[v->id];
      for (const Block& r : i->regions)
        walk(r, [&](const Inst* in) {
          for (const Value* v : in->operands) --uses[v->id];
        });
      changed = true;
      continue;
    }
    for (Block& r : i->regions) changed |= sweep(r, uses);
    kept.push_back(i);
  }
  b.insts.assign(kept.rbegin(), kept.rend());
  return changed;
}

// Drops loop-carried slots whose result and body argument are both unused (the value the yield
// passes on then feeds nothing, and dies in the sweep).
bool drop_unused_loop_slots(Kernel& k, std::vector<int>& uses) {
  bool changed = false;
  walk(k.body, [&](Inst* i) {
    if (i->op != Op::kFor) return;
    Block& body = i->regions[0];
    Inst* yield = !body.insts.empty() && body.insts.back()->op == Op::kYield ? body.insts.back() : nullptr;
    if (!yield) return;
    for (size_t s = i->results.size(); s-- > 0;) {
      Value* arg = body.args[s + 1];
      if (uses[i->results[s]->id] > 0 || uses[arg->id] > 0) continue;
      --uses[yield->operands[s]->id];
      --uses[i->operands[s + 3]->id];
      yield->operands.erase(yield->operands.begin() + static_cast<long>(s));
      i->operands.erase(i->operands.begin() + static_cast<long>(s + 3));
      body.args.erase(body.args.begin() + static_cast<long>(s + 1));
      i->results.erase(i->results.begin() + static_cast<long>(s));
      changed = true;
    }
    if (yield->operands.empty()) body.insts.pop_back();
  });
  return changed;
}

}  // namespace

bool eliminate_dead_code(Kernel& kernel) {
  bool any = false;
  for (int round = 0; round < 100; ++round) {
    std::vector<int> uses = passes::count_uses(kernel);
    bool changed = drop_unused_loop_slots(kernel, uses);
    changed |= sweep(kernel.body, uses);
    if (!changed) break;
    any = true;
  }
  return any;
}

}  // namespace loom::ir
