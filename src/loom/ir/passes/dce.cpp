// Dead code elimination: removes instructions whose results are unused and that have no side
// effects (loads and allocations included; loops and ifs when nothing inside has side effects).
#include <unordered_set>

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

// Operands of `i` and of everything nested in its regions.
void push_all_operands(const Inst* i, std::vector<const Value*>& work) {
  for (const Value* v : i->operands) work.push_back(v);
  for (const Block& r : i->regions)
    walk(r, [&](const Inst* in) {
      for (const Value* v : in->operands) work.push_back(v);
    });
}

// Drops a loop's carried slots that nothing needs: a slot is live when its result is used, or
// when its body argument feeds (through the body) a side effect or the yield of a live slot. A
// dead accumulator (`%a2 = add %a, %x; yield %a2` with the result unused) goes with its slot.
bool drop_dead_slots(Inst* loop, std::vector<int>& uses, size_t num_values) {
  Block& body = loop->regions[0];
  Inst* yield = !body.insts.empty() && body.insts.back()->op == Op::kYield ? body.insts.back() : nullptr;
  if (!yield) return false;
  const size_t n = loop->results.size();
  std::vector<char> live(n);
  for (size_t s = 0; s < n; ++s) live[s] = uses[loop->results[s]->id] > 0;
  std::unordered_set<const Inst*> in_body(body.insts.begin(), body.insts.end());
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<char> reached(num_values, 0);
    std::vector<const Value*> work;
    for (const Inst* i : body.insts) {
      if (i == yield) {
        for (size_t s = 0; s < n; ++s)
          if (live[s]) work.push_back(yield->operands[s]);
      } else if (i->info().has(kSideEffects) || (i->info().has(kHasRegions) && !removable(*i))) {
        push_all_operands(i, work);
      }
    }
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      if (reached[v->id]) continue;
      reached[v->id] = 1;
      if (v->def && in_body.count(v->def)) push_all_operands(v->def, work);
    }
    for (size_t s = 0; s < n; ++s)
      if (!live[s] && reached[body.args[s + 1]->id]) live[s] = changed = true;
  }
  bool dropped = false;
  for (size_t s = n; s-- > 0;) {
    if (live[s]) continue;
    --uses[yield->operands[s]->id];
    --uses[loop->operands[s + 3]->id];
    yield->operands.erase(yield->operands.begin() + static_cast<long>(s));
    loop->operands.erase(loop->operands.begin() + static_cast<long>(s + 3));
    body.args.erase(body.args.begin() + static_cast<long>(s + 1));
    loop->results.erase(loop->results.begin() + static_cast<long>(s));
    dropped = true;
  }
  if (yield->operands.empty()) body.insts.pop_back();
  return dropped;
}

bool drop_unused_loop_slots(Kernel& k, std::vector<int>& uses) {
  bool changed = false;
  walk(k.body, [&](Inst* i) {
    if (i->op == Op::kFor) changed |= drop_dead_slots(i, uses, k.num_values());
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
