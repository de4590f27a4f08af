// Builder implementation: instruction creation with op-table type inference.
#include "loom/ir/builder.h"

#include "loom/ir/type_rules.h"

namespace loom::ir {

Value* Builder::param(Type type, std::string name) {
  Value* v = k_.new_value(type, std::move(name));
  k_.params.push_back(v);
  return v;
}

Inst* Builder::append(Op op, std::vector<Value*> operands, Mode mode) {
  Inst* inst = k_.new_inst(op);
  inst->operands = std::move(operands);
  inst->mode = mode;
  block_->insts.push_back(inst);
  return inst;
}

Value* Builder::result(Inst* inst, Type type) {
  Value* r = k_.new_value(type);
  r->def = inst;
  inst->results.push_back(r);
  return r;
}

Value* Builder::op(Op op, std::vector<Value*> operands, Type type, Mode mode) {
  Inst* inst = append(op, std::move(operands), mode);
  if (!type.valid()) {
    std::vector<Type> ts;
    for (const Value* v : inst->operands) ts.push_back(v ? v->type : Type());
    type = infer_result_type(op, ts);
  }
  return result(inst, type);
}

Inst* Builder::op_no_result(Op op, std::vector<Value*> operands, Mode mode) {
  return append(op, std::move(operands), mode);
}

Value* Builder::const_int(Type type, int64_t v) {
  Inst* inst = append(Op::kConst, {}, Mode::kNone);
  inst->lit = make_literal(type.elem(), static_cast<double>(v), v);
  return result(inst, type);
}

Value* Builder::const_float(Type type, double v) {
  Inst* inst = append(Op::kConst, {}, Mode::kNone);
  inst->lit = make_literal(type.elem(), v, static_cast<int64_t>(v));
  return result(inst, type);
}

Value* Builder::extract(Value* v, int lane) {
  Value* r = op(Op::kExtract, {v});
  r->def->imm = lane;
  return r;
}

Value* Builder::load(Value* ptr, Value* index, Type type, int align) {
  Value* r = op(Op::kLoad, {ptr, index}, type);
  r->def->imm = align;
  return r;
}

void Builder::store(Value* ptr, Value* index, Value* value, int align) {
  op_no_result(Op::kStore, {ptr, index, value})->imm = align;
}

void Builder::prefetch(Value* ptr, Value* index) { op_no_result(Op::kPrefetch, {ptr, index}); }

void Builder::cp_async(Value* dst, Value* di, Value* src, Value* si, int bytes) {
  op_no_result(Op::kCpAsync, {dst, di, src, si})->imm = bytes;
}

void Builder::cp_async_commit() { op_no_result(Op::kCpAsyncCommit, {}); }

void Builder::cp_async_wait(int pending) { op_no_result(Op::kCpAsyncWait, {})->imm = pending; }

Value* Builder::wgmma(Value* a, Value* ai, Value* b, Value* bi, Value* c, int64_t lbo, int64_t sbo) {
  Value* r = op(Op::kWgmma, {a, ai, b, bi, c});
  r->def->imm = lbo | (sbo << 32);
  return r;
}
Value* Builder::wgmma_rs(Value* a, Value* b, Value* bi, Value* c, int64_t lbo, int64_t sbo) {
  Value* r = op(Op::kWgmmaRs, {a, b, bi, c});
  r->def->imm = lbo | (sbo << 32);
  return r;
}
void Builder::wgmma_fence() { op_no_result(Op::kWgmmaFence, {}); }
void Builder::wgmma_commit() { op_no_result(Op::kWgmmaCommit, {}); }
void Builder::wgmma_wait(int pending) { op_no_result(Op::kWgmmaWait, {})->imm = pending; }
void Builder::fence_async_shared() { op_no_result(Op::kFenceAsyncShared, {}); }

namespace {
int64_t amx_tile_imm(int t, int rows, int bytes) {
  return int64_t{t} | (int64_t{rows} << 8) | (int64_t{bytes} << 16);
}
}  // namespace
void Builder::amx_zero(int t, int rows, int bytes) { op_no_result(Op::kAmxZero, {})->imm = amx_tile_imm(t, rows, bytes); }
void Builder::amx_load(int t, int rows, int bytes, Value* ptr, Value* index, Value* stride) {
  op_no_result(Op::kAmxLoad, {ptr, index, stride})->imm = amx_tile_imm(t, rows, bytes);
}
void Builder::amx_store(int t, int rows, int bytes, Value* ptr, Value* index, Value* stride) {
  op_no_result(Op::kAmxStore, {ptr, index, stride})->imm = amx_tile_imm(t, rows, bytes);
}
void Builder::amx_dp(Op dp, int c, int a, int b) {
  op_no_result(dp, {})->imm = int64_t{c} | (int64_t{a} << 8) | (int64_t{b} << 16);
}

Value* Builder::alloc_shared(Scalar elem, int64_t count) {
  Value* r = op(Op::kAllocShared, {}, Type::pointer(AddrSpace::kShared, elem));
  r->def->imm = count;
  return r;
}

Value* Builder::alloc_local(Scalar elem, int64_t count) {
  Value* r = op(Op::kAllocLocal, {}, Type::pointer(AddrSpace::kLocal, elem));
  r->def->imm = count;
  return r;
}

void Builder::build_region(Block& region, const std::function<std::vector<Value*>()>& body) {
  Block* saved = block_;
  block_ = &region;
  std::vector<Value*> yields = body ? body() : std::vector<Value*>{};
  if (!yields.empty()) append(Op::kYield, std::move(yields), Mode::kNone);
  block_ = saved;
}

std::vector<Value*> Builder::for_loop(Value* lo, Value* hi, Value* step, std::vector<Value*> inits,
                                      const ForBody& body) {
  std::vector<Value*> operands = {lo, hi, step};
  operands.insert(operands.end(), inits.begin(), inits.end());
  Inst* inst = append(Op::kFor, std::move(operands), Mode::kNone);
  inst->regions.resize(1);
  Block& region = inst->regions[0];
  region.args.push_back(k_.new_value(lo ? lo->type : Type(), "i"));
  for (Value* init : inits) region.args.push_back(k_.new_value(init ? init->type : Type()));
  Value* iv = region.args[0];
  std::vector<Value*> iters(region.args.begin() + 1, region.args.end());
  build_region(region, [&] { return body(iv, iters); });
  std::vector<Value*> results;
  for (Value* init : inits) results.push_back(result(inst, init ? init->type : Type()));
  return results;
}

std::vector<Value*> Builder::if_then_else(Value* cond, std::vector<Type> result_types, const IfBody& then_body,
                                          const IfBody& else_body) {
  Inst* inst = append(Op::kIf, {cond}, Mode::kNone);
  inst->regions.resize(2);
  build_region(inst->regions[0], then_body);
  build_region(inst->regions[1], else_body);
  std::vector<Value*> results;
  for (Type t : result_types) results.push_back(result(inst, t));
  return results;
}

}  // namespace loom::ir
