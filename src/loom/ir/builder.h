// Builder: the C++ API for writing Loom IR (used by the op library and the kernel search).
// It appends instructions at an insertion point and infers result types from the op table.
// It never fails: a misuse (mismatched types, wrong arity) yields IR that verify() rejects with
// the offending instruction, so build first, then call verify().
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "loom/ir/ir.h"

namespace loom::ir {

class Builder {
 public:
  // Appends to the end of kernel.body. The kernel must outlive the builder.
  explicit Builder(Kernel& kernel) : k_(kernel), block_(&kernel.body) {}

  Kernel& kernel() { return k_; }
  Block* insertion_block() const { return block_; }
  void set_insertion_block(Block* block) { block_ = block; }

  Value* param(Type type, std::string name);
  // Sets a value's print name; returns it (for `b.name(b.add(x, y), "sum")`).
  static Value* name(Value* v, std::string name) {
    v->name = std::move(name);
    return v;
  }

  // Appends `op` with one result (type inferred when `result` is invalid) or none.
  Value* op(Op op, std::vector<Value*> operands, Type result = Type(), Mode mode = Mode::kNone);
  Inst* op_no_result(Op op, std::vector<Value*> operands, Mode mode = Mode::kNone);

  Value* const_int(Type type, int64_t v);
  Value* const_float(Type type, double v);
  Value* i32(int32_t v) { return const_int(Type::scalar(Scalar::kI32), v); }
  Value* i64(int64_t v) { return const_int(Type::scalar(Scalar::kI64), v); }
  Value* f32(double v) { return const_float(Type::scalar(Scalar::kF32), v); }

  Value* add(Value* a, Value* b) { return op(Op::kAdd, {a, b}); }
  Value* sub(Value* a, Value* b) { return op(Op::kSub, {a, b}); }
  Value* mul(Value* a, Value* b) { return op(Op::kMul, {a, b}); }
  Value* div(Value* a, Value* b) { return op(Op::kDiv, {a, b}); }
  Value* rem(Value* a, Value* b) { return op(Op::kRem, {a, b}); }
  Value* min(Value* a, Value* b) { return op(Op::kMin, {a, b}); }
  Value* max(Value* a, Value* b) { return op(Op::kMax, {a, b}); }
  Value* bit_and(Value* a, Value* b) { return op(Op::kAnd, {a, b}); }
  Value* bit_or(Value* a, Value* b) { return op(Op::kOr, {a, b}); }
  Value* bit_xor(Value* a, Value* b) { return op(Op::kXor, {a, b}); }
  Value* shl(Value* a, Value* b) { return op(Op::kShl, {a, b}); }
  Value* shr(Value* a, Value* b) { return op(Op::kShr, {a, b}); }
  Value* neg(Value* a) { return op(Op::kNeg, {a}); }
  Value* fma(Value* a, Value* b, Value* c) { return op(Op::kFma, {a, b, c}); }
  Value* unary(Op math, Value* a) { return op(math, {a}); }  // exp, sqrt, tanh, ...
  Value* cmp(Mode pred, Value* a, Value* b) { return op(Op::kCmp, {a, b}, Type(), pred); }
  Value* select(Value* c, Value* a, Value* b) { return op(Op::kSelect, {c, a, b}); }
  Value* convert(Value* v, Type to) { return op(Op::kConvert, {v}, to); }
  Value* bitcast(Value* v, Type to) { return op(Op::kBitcast, {v}, to); }
  Value* splat(Value* v, int lanes) { return op(Op::kSplat, {v}, Type::vector(v->type.elem(), lanes)); }
  Value* build(std::vector<Value*> lanes) { return op(Op::kBuild, std::move(lanes)); }
  Value* extract(Value* v, int lane);

  // Memory. `index` counts pointee elements; `type` defaults to the pointee scalar; `align` in
  // bytes, 0 for the element's natural alignment.
  Value* load(Value* ptr, Value* index, Type type = Type(), int align = 0);
  void store(Value* ptr, Value* index, Value* value, int align = 0);
  // A hint that ptr[index] will be read soon (ops.h: kPrefetch).
  void prefetch(Value* ptr, Value* index);
  Value* offset(Value* ptr, Value* index) { return op(Op::kOffset, {ptr, index}); }
  Value* atomic(Mode kind, Value* ptr, Value* index, Value* value) {
    return op(Op::kAtomic, {ptr, index, value}, Type(), kind);
  }
  Value* alloc_shared(Scalar elem, int64_t count);
  Value* alloc_local(Scalar elem, int64_t count);
  void barrier() { op_no_result(Op::kBarrier, {}); }

  Value* thread_id(Mode dim) { return op(Op::kThreadId, {}, Type(), dim); }
  Value* block_id(Mode dim) { return op(Op::kBlockId, {}, Type(), dim); }
  Value* block_dim(Mode dim) { return op(Op::kBlockDim, {}, Type(), dim); }
  Value* grid_dim(Mode dim) { return op(Op::kGridDim, {}, Type(), dim); }
  Value* lane_id() { return op(Op::kLaneId, {}); }
  Value* shfl(Mode kind, Value* v, Value* lane) { return op(Op::kShuffle, {v, lane}, Type(), kind); }
  Value* warp_reduce(Mode kind, Value* v) { return op(Op::kWarpReduce, {v}, Type(), kind); }
  // Lane-wise on i32xN: each lane is acc + the four signed byte products of a and b.
  Value* dot4(Value* a, Value* b, Value* acc) { return op(Op::kDot4, {a, b, acc}); }
  // The lanes of a, then those of b (one vector type; 2N <= 16 lanes).
  Value* concat(Value* a, Value* b) { return op(Op::kConcat, {a, b}); }
  Value* mma(Value* a, Value* b, Value* c) { return op(Op::kMma, {a, b, c}); }
  Value* ldmatrix(Value* shared_f16, Value* index) { return op(Op::kLdmatrix, {shared_f16, index}); }
  // Asynchronous copy of `bytes` (4, 8, 16) from src[si] to dst[di] (shared), its group's commit
  // and the wait until at most `pending` committed groups are in flight (see ops.h).
  void cp_async(Value* dst, Value* di, Value* src, Value* si, int bytes);
  void cp_async_commit();
  void cp_async_wait(int pending);
  // Hopper warpgroup MMA (see Op::kWgmma): c + A B^T, strides lbo / sbo in bytes.
  Value* wgmma(Value* a, Value* ai, Value* b, Value* bi, Value* c, int64_t lbo, int64_t sbo);
  // The same with the A fragment in registers (u32x4 of f16 pairs, see Op::kWgmmaRs).
  Value* wgmma_rs(Value* a, Value* b, Value* bi, Value* c, int64_t lbo, int64_t sbo);
  void wgmma_fence();
  void wgmma_commit();
  void wgmma_wait(int pending);
  void fence_async_shared();
  Value* ldmatrix_t(Value* shared_f16, Value* index) { return op(Op::kLdmatrixT, {shared_f16, index}); }
  // Intel AMX tiles (see Op::kAmxZero): tile t of `rows` rows x `bytes` bytes; load/store row r
  // at ptr + index + r * stride bytes; dp: c += a b (kAmxDpI8 or kAmxDpBf16).
  void amx_zero(int t, int rows, int bytes);
  void amx_load(int t, int rows, int bytes, Value* ptr, Value* index, Value* stride);
  void amx_store(int t, int rows, int bytes, Value* ptr, Value* index, Value* stride);
  void amx_dp(Op dp, int c, int a, int b);

  // Structured control flow. The callbacks build the region with this builder (its insertion
  // point is moved into the region and restored after) and return the values to yield.
  using ForBody = std::function<std::vector<Value*>(Value* iv, std::span<Value* const> iters)>;
  using IfBody = std::function<std::vector<Value*>()>;
  // for iv in [lo, hi) step `step`, carrying `inits`; returns the final carried values.
  std::vector<Value*> for_loop(Value* lo, Value* hi, Value* step, std::vector<Value*> inits, const ForBody& body);
  std::vector<Value*> if_then_else(Value* cond, std::vector<Type> result_types, const IfBody& then_body,
                                   const IfBody& else_body = {});

 private:
  Inst* append(Op op, std::vector<Value*> operands, Mode mode);
  Value* result(Inst* inst, Type type);
  void build_region(Block& region, const std::function<std::vector<Value*>()>& body);

  Kernel& k_;
  Block* block_;
};

}  // namespace loom::ir
