// IR rewrites of evolve's search space (see rewrites.h).
#include "loom/store/rewrites.h"

#include "loom/ir/passes/rewrite.h"

namespace loom::store {
namespace {

using ir::Block;
using ir::Inst;
using ir::Op;
using ir::Value;

bool contains_loop(const Block& b) {
  bool any = false;
  ir::walk(b, [&](const Inst* i) {
    if (i->op == Op::kFor) any = true;
  });
  return any;
}

Value* make_const(ir::Kernel& k, ir::Type t, int64_t v, std::vector<Inst*>& out) {
  Inst* c = k.new_inst(Op::kConst);
  c->lit = ir::make_literal(t.elem(), 0, v);
  Value* r = k.new_value(t);
  r->def = c;
  c->results.push_back(r);
  out.push_back(c);
  return r;
}

// The loop `loop` unrolled by `factor` (its trip count is a multiple of it), appended to out.
void unroll_one(ir::Kernel& k, Inst* loop, int factor, std::vector<Inst*>& out) {
  const Block& body = loop->regions[0];
  const Value* iv = body.args[0];
  const int64_t step = loop->operands[2]->def->lit.i;
  Value* wide = make_const(k, loop->operands[2]->type, step * factor, out);
  Inst* nl = k.new_inst(Op::kFor, loop->loc);
  nl->operands = loop->operands;
  nl->operands[2] = wide;
  nl->regions.resize(1);
  Block& nb = nl->regions[0];
  Value* niv = k.new_value(iv->type, iv->name);
  nb.args.push_back(niv);
  std::vector<Value*> carried;
  for (size_t a = 1; a < body.args.size(); ++a) {
    Value* na = k.new_value(body.args[a]->type, body.args[a]->name);
    nb.args.push_back(na);
    carried.push_back(na);
  }
  std::vector<Value*> map(k.num_values(), nullptr);
  for (int j = 0; j < factor; ++j) {
    Value* ivj = niv;
    if (j > 0) {
      Value* off = make_const(k, iv->type, step * j, nb.insts);
      Inst* add = k.new_inst(Op::kAdd);
      add->operands = {niv, off};
      ivj = k.new_value(iv->type);
      ivj->def = add;
      add->results.push_back(ivj);
      nb.insts.push_back(add);
    }
    if (map.size() < k.num_values()) map.resize(k.num_values(), nullptr);
    map[iv->id] = ivj;
    for (size_t a = 1; a < body.args.size(); ++a) map[body.args[a]->id] = carried[a - 1];
    carried = ir::passes::clone_block(k, body, map, nb.insts, false);
  }
  if (!carried.empty()) {
    Inst* y = k.new_inst(Op::kYield);
    y->operands = carried;
    nb.insts.push_back(y);
  }
  nl->results = loop->results;  // the old results now come from the new loop
  for (Value* r : nl->results) r->def = nl;
  out.push_back(nl);
}

int unroll_block(ir::Kernel& k, Block& b, int factor) {
  int n = 0;
  std::vector<Inst*> out;
  for (Inst* i : b.insts) {
    for (Block& r : i->regions) n += unroll_block(k, r, factor);
    if (i->op == Op::kFor && !contains_loop(i->regions[0])) {
      auto trips = ir::passes::constant_trip_count(*i);
      if (trips && *trips >= static_cast<uint64_t>(factor) && *trips % static_cast<uint64_t>(factor) == 0) {
        unroll_one(k, i, factor, out);
        ++n;
        continue;
      }
    }
    out.push_back(i);
  }
  b.insts = std::move(out);
  return n;
}

int split_block(ir::Kernel& k, Block& b, int min_lanes) {
  int n = 0;
  std::vector<Inst*> out;
  for (Inst* i : b.insts) {
    for (Block& r : i->regions) n += split_block(k, r, min_lanes);
    if (i->op == Op::kFma && i->result()->type.is_vector() && i->result()->type.lanes() >= min_lanes) {
      Inst* mul = k.new_inst(Op::kMul, i->loc);
      mul->operands = {i->operands[0], i->operands[1]};
      Value* m = k.new_value(i->result()->type);
      m->def = mul;
      mul->results.push_back(m);
      out.push_back(mul);
      Inst* add = k.new_inst(Op::kAdd, i->loc);
      add->operands = {m, i->operands[2]};
      add->results = i->results;
      add->results[0]->def = add;
      out.push_back(add);
      ++n;
      continue;
    }
    out.push_back(i);
  }
  b.insts = std::move(out);
  return n;
}

}  // namespace

int unroll_inner_loops(ir::Kernel& k, int factor) {
  if (factor < 2) return 0;
  return unroll_block(k, k.body, factor);
}

int split_vector_fma(ir::Kernel& k, int min_lanes) { return split_block(k, k.body, min_lanes); }

}  // namespace loom::store
