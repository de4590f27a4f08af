// Full unrolling of `for` loops with a constant trip count: the body is copied once per
// iteration with the induction variable replaced by a constant and the carried values threaded
// through; folding and CSE then simplify the copies.
#include "loom/ir/passes/passes.h"
#include "loom/ir/passes/rewrite.h"

namespace loom::ir {
namespace {

class Unroller {
 public:
  Unroller(Kernel& k, UnrollLimits limits) : k_(k), limits_(limits), repl_(k) {}

  bool run() {
    block(k_.body);
    if (changed_) repl_.apply(k_.body);
    return changed_;
  }

 private:
  void block(Block& b) {
    std::vector<Inst*> out;
    for (Inst* i : b.insts) {
      for (Block& r : i->regions) block(r);  // inner loops first
      if (i->op == Op::kFor && unroll(*i, out)) {
        changed_ = true;
        continue;
      }
      out.push_back(i);
    }
    b.insts = std::move(out);
  }

  bool unroll(Inst& loop, std::vector<Inst*>& out) {
    auto trips = passes::constant_trip_count(loop);
    if (!trips || *trips > static_cast<uint64_t>(limits_.max_trip_count)) return false;
    Block& body = loop.regions[0];
    if (static_cast<int64_t>(*trips) * passes::count_insts(body) > limits_.max_unrolled_insts) return false;
    // The body may use results of inner loops unrolled just before (their replacements are
    // pending until run() ends); the copies must use the unrolled values, not the removed loops'.
    repl_.apply(body);
    const Value* iv = body.args[0];
    const Type iv_type = iv->type;
    const int64_t lo = loop.operands[0]->def->lit.i, step = loop.operands[2]->def->lit.i;
    std::vector<Value*> carried(loop.operands.begin() + 3, loop.operands.end());
    for (auto& v : carried) v = repl_.get(v);
    std::vector<Value*> map(k_.num_values(), nullptr);
    for (uint64_t t = 0; t < *trips; ++t) {
      Inst* c = k_.new_inst(Op::kConst, loop.loc);
      c->lit = make_literal(iv_type.elem(), 0, static_cast<int64_t>(static_cast<uint64_t>(lo) + t * static_cast<uint64_t>(step)));
      Value* civ = k_.new_value(iv_type, iv->name);
      civ->def = c;
      c->results.push_back(civ);
      out.push_back(c);
      if (map.size() < k_.num_values()) map.resize(k_.num_values(), nullptr);
      map[iv->id] = civ;
      for (size_t a = 1; a < body.args.size(); ++a) map[body.args[a]->id] = carried[a - 1];
      carried = passes::clone_block(k_, body, map, out, false);
    }
    for (size_t r = 0; r < loop.results.size(); ++r) repl_.replace(loop.results[r], carried[r]);
    return true;
  }

  Kernel& k_;
  UnrollLimits limits_;
  passes::Replacements repl_;
  bool changed_ = false;
};

}  // namespace

bool unroll_loops(Kernel& kernel, UnrollLimits limits) { return Unroller(kernel, limits).run(); }

}  // namespace loom::ir
