// Region instrumentation with cycle counters (see instrument.h).
#include "loom/ir/passes/instrument.h"

#include <algorithm>

namespace loom::ir {
namespace {

bool contains_store(const Inst* i) {
  bool found = false;
  if (i->op == Op::kStore) return true;
  for (const Block& r : i->regions) walk(r, [&](const Inst* x) { found = found || x->op == Op::kStore; });
  return found;
}

// The block holding the first `for` in program order (pre-order), else the first store.
Block* find_block(Block& b, Op op) {
  for (Inst* i : b.insts) {
    if (i->op == op) return &b;
    for (Block& r : i->regions)
      if (Block* f = find_block(r, op)) return f;
  }
  return nullptr;
}

class Emit {
 public:
  Emit(Kernel& k, std::vector<Inst*>& out) : k_(k), out_(out) {}
  Value* inst(Op op, std::vector<Value*> operands, Type type, Mode mode = Mode::kNone) {
    Inst* i = k_.new_inst(op);
    i->mode = mode;
    i->operands = std::move(operands);
    if (type.is_value()) {
      Value* r = k_.new_value(type);
      r->def = i;
      i->results.push_back(r);
    }
    out_.push_back(i);
    return i->result();
  }
  Value* clock() { return inst(Op::kClock, {}, Type::scalar(Scalar::kI32)); }
  Value* i32(int64_t v) {
    Inst* i = k_.new_inst(Op::kConst);
    i->lit = make_literal(Scalar::kI32, 0, v);
    Value* r = k_.new_value(Type::scalar(Scalar::kI32));
    r->def = i;
    i->results.push_back(r);
    out_.push_back(i);
    return r;
  }
  Value* bin(Op op, Value* a, Value* b) { return inst(op, {a, b}, a->type); }

 private:
  Kernel& k_;
  std::vector<Inst*>& out_;
};

}  // namespace

std::string_view instrument_region_name(int region) {
  static constexpr std::string_view kNames[kInstrumentRegions] = {"loads", "main loop", "reduction", "stores"};
  return region >= 0 && region < kInstrumentRegions ? kNames[region] : "?";
}

Result<InstrumentInfo> instrument_regions(Kernel& k, size_t param_index) {
  InstrumentInfo info;
  Block* b = find_block(k.body, Op::kFor);
  info.has_loop = b != nullptr;
  if (!b) {
    bool any = false;
    walk(k.body, [&](const Inst* i) { any = any || i->op == Op::kStore; });
    if (!any) return invalid_argument("kernel @{} has no store to instrument", k.name);
    // The block whose top-level instructions (or their regions) hold the first store.
    b = &k.body;
    while (true) {
      Inst* holder = nullptr;
      for (Inst* i : b->insts)
        if (contains_store(i)) {
          holder = i;
          break;
        }
      if (!holder || holder->op == Op::kStore) break;
      Block* next = nullptr;
      for (Block& r : holder->regions) {
        bool has = false;
        walk(r, [&](const Inst* x) { has = has || x->op == Op::kStore; });
        if (has) {
          next = &r;
          break;
        }
      }
      if (!next) break;
      b = next;
    }
  }
  param_index = std::min(param_index, k.params.size());
  Value* prof = k.new_value(Type::pointer(AddrSpace::kGlobal, Scalar::kI32), "loom_prof");
  k.params.insert(k.params.begin() + static_cast<std::ptrdiff_t>(param_index), prof);
  info.prof_param = param_index;

  std::vector<Inst*>& insts = b->insts;
  const bool has_yield = !insts.empty() && insts.back()->op == Op::kYield;
  const size_t end = insts.size() - (has_yield ? 1 : 0);
  size_t loop = end, store = end;
  for (size_t i = 0; i < end; ++i)
    if (info.has_loop && insts[i]->op == Op::kFor) {
      loop = i;
      break;
    }
  for (size_t i = info.has_loop ? loop + 1 : 0; i < end; ++i)
    if (contains_store(insts[i])) {
      store = i;
      break;
    }

  std::vector<Inst*> out;
  Emit e(k, out);
  Value* t0 = e.clock();
  Value *t1 = nullptr, *t2 = nullptr, *t3 = nullptr;
  for (size_t i = 0; i < end; ++i) {
    if (info.has_loop && i == loop) t1 = e.clock();
    if (i == store) t3 = e.clock();
    out.push_back(insts[i]);
    if (info.has_loop && i == loop) t2 = e.clock();
  }
  if (!t3) t3 = e.clock();
  Value* t4 = e.clock();
  if (!info.has_loop) t1 = t2 = t3;  // loop and reduction measure nothing
  Value* d[kInstrumentRegions] = {e.bin(Op::kSub, t1, t0), e.bin(Op::kSub, t2, t1), e.bin(Op::kSub, t3, t2),
                                  e.bin(Op::kSub, t4, t3)};
  // Thread 0 of the block adds its deltas to the block's slots.
  Value* tx = e.inst(Op::kThreadId, {}, Type::scalar(Scalar::kI32), Mode::kX);
  Value* ty = e.inst(Op::kThreadId, {}, Type::scalar(Scalar::kI32), Mode::kY);
  Value* tz = e.inst(Op::kThreadId, {}, Type::scalar(Scalar::kI32), Mode::kZ);
  Value* tsum = e.bin(Op::kAdd, e.bin(Op::kAdd, tx, ty), tz);
  Value* first = e.inst(Op::kCmp, {tsum, e.i32(0)}, Type::scalar(Scalar::kI1), Mode::kEq);
  Inst* guard = k.new_inst(Op::kIf);
  guard->operands = {first};
  guard->regions.resize(2);
  out.push_back(guard);
  {
    std::vector<Inst*>& then = guard->regions[0].insts;
    Emit g(k, then);
    Value* bx = g.inst(Op::kBlockId, {}, Type::scalar(Scalar::kI32), Mode::kX);
    Value* by = g.inst(Op::kBlockId, {}, Type::scalar(Scalar::kI32), Mode::kY);
    Value* bz = g.inst(Op::kBlockId, {}, Type::scalar(Scalar::kI32), Mode::kZ);
    Value* gx = g.inst(Op::kGridDim, {}, Type::scalar(Scalar::kI32), Mode::kX);
    Value* gy = g.inst(Op::kGridDim, {}, Type::scalar(Scalar::kI32), Mode::kY);
    Value* lin = g.bin(Op::kAdd, bx, g.bin(Op::kMul, gx, g.bin(Op::kAdd, by, g.bin(Op::kMul, gy, bz))));
    Value* base = g.bin(Op::kMul, lin, g.i32(kInstrumentRegions));
    for (int r = 0; r < kInstrumentRegions; ++r) {
      Value* idx = g.bin(Op::kAdd, base, g.i32(r));
      Value* old = g.inst(Op::kLoad, {prof, idx}, Type::scalar(Scalar::kI32));
      g.inst(Op::kStore, {prof, idx, g.bin(Op::kAdd, old, d[r])}, Type());
    }
  }
  if (has_yield) out.push_back(insts.back());
  insts = std::move(out);
  return info;
}

}  // namespace loom::ir
