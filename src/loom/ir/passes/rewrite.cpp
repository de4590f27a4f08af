// Use counting and region cloning for the passes.
#include "loom/ir/passes/rewrite.h"

namespace loom::ir::passes {

std::vector<int> count_uses(const Kernel& k) {
  std::vector<int> uses(k.num_values(), 0);
  walk(k.body, [&](const Inst* i) {
    for (const Value* v : i->operands) ++uses[v->id];
  });
  return uses;
}

bool rewrite_blocks(Kernel& k, const std::function<bool(Inst*, std::vector<Inst*>&)>& fn) {
  bool changed = false;
  std::vector<Block*> work = {&k.body};
  while (!work.empty()) {
    Block* blk = work.back();
    work.pop_back();
    std::vector<Inst*> out;
    for (Inst* i : blk->insts) {
      for (Block& r : i->regions) work.push_back(&r);
      changed |= fn(i, out);
    }
    blk->insts = std::move(out);
  }
  return changed;
}

bool has_side_effects(const Block& b) {
  bool any = false;
  walk(b, [&](const Inst* i) {
    if (i->info().has(kSideEffects)) any = true;
  });
  return any;
}

int count_insts(const Block& b) {
  int n = 0;
  walk(b, [&](const Inst*) { ++n; });
  return n;
}

namespace {
Value* mapped(const std::vector<Value*>& map, Value* v) { return v->id < map.size() && map[v->id] ? map[v->id] : v; }

Value* fresh(Kernel& k, const Value* like, std::vector<Value*>& map) {
  Value* v = k.new_value(like->type, like->name);
  if (map.size() < k.num_values()) map.resize(k.num_values(), nullptr);
  map[like->id] = v;
  return v;
}
}  // namespace

std::vector<Value*> clone_block(Kernel& k, const Block& src, std::vector<Value*>& map, std::vector<Inst*>& out,
                                bool keep_yield) {
  std::vector<Value*> yields;
  for (const Inst* i : src.insts) {
    if (i->op == Op::kYield && !keep_yield) {
      for (Value* v : i->operands) yields.push_back(mapped(map, v));
      continue;
    }
    Inst* c = k.new_inst(i->op, i->loc);
    c->mode = i->mode;
    c->imm = i->imm;
    c->lit = i->lit;
    for (Value* v : i->operands) c->operands.push_back(mapped(map, v));
    c->regions.resize(i->regions.size());
    for (size_t r = 0; r < i->regions.size(); ++r) {
      for (const Value* a : i->regions[r].args) c->regions[r].args.push_back(fresh(k, a, map));
      clone_block(k, i->regions[r], map, c->regions[r].insts, true);
    }
    for (const Value* res : i->results) {
      Value* v = fresh(k, res, map);
      v->def = c;
      c->results.push_back(v);
    }
    out.push_back(c);
  }
  return yields;
}

}  // namespace loom::ir::passes

namespace loom::ir {

Module clone_module(const Module& module) {
  Module out;
  out.source_name = module.source_name;
  for (const auto& k : module.kernels) {
    Kernel* c = out.add_kernel(k->name);
    c->loc = k->loc;
    c->max_threads = k->max_threads;
    c->min_blocks = k->min_blocks;
    std::vector<Value*> map(k->num_values(), nullptr);
    for (const Value* p : k->params) {
      Value* v = c->new_value(p->type, p->name);
      c->params.push_back(v);
      map[p->id] = v;
    }
    passes::clone_block(*c, k->body, map, c->body.insts, true);
  }
  return out;
}

}  // namespace loom::ir
