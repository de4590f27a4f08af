// The one op table of Loom IR. Each row names an op, its operand count, the type rule the
// verifier applies (and the parser/builder use to infer result types), its modifiers, flags and
// the targets where it is legal. Printer, parser, verifier, passes and emitters all read it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom::ir {

enum class TargetKind : uint8_t { kPtx, kCpp, kAmdgpu };
std::string_view target_kind_name(TargetKind t);
std::optional<TargetKind> parse_target_kind(std::string_view name);

// How operand and result types relate (checked by the verifier; see type_rules.cpp).
enum class TypeRule : uint8_t {
  kSame,        // all operands one type (of the category), result that type
  kCmp,         // two operands of one type -> i1 with their lanes
  kSelect,      // (i1 cond [lanes match or scalar], T, T) -> T
  kConvert,     // numeric conversion, lanes kept; result type explicit
  kBitcast,     // same total bits, or pointer -> pointer in one address space; explicit
  kConst,       // literal; result type explicit, vectors are splats
  kSplat,       // scalar -> vector of it; explicit
  kBuild,       // n scalars -> vector of n lanes
  kExtract,     // vector, lane (immediate) -> element
  kLoad,        // (ptr, index) -> pointee elem with any lane count; explicit or scalar
  kStore,       // (ptr, index, value)
  kPrefetch,    // (ptr<global|constant, T>, index): no result
  kOffset,      // (ptr, index) -> same ptr type, moved by index elements
  kAtomic,      // (ptr, index, value) -> old value (scalar pointee type)
  kAlloc,       // -> ptr<shared|local, T>, count elements (immediate)
  kSpecial,     // -> i32 (thread/block indices and sizes, lane id)
  kShuffle,     // (32-bit scalar, i32 lane/delta/mask) -> same
  kWarpReduce,  // 32-bit scalar -> same
  kDot4,        // (i32 packed 4 x i8, same, i32 acc) -> i32; lane-wise on i32xN
  kConcat,      // (vector T x N, vector T x N) -> T x 2N: lanes of a, then lanes of b
  kMma,         // (f16x8 A, f16x4 B, f32x4 C) -> f32x4, or packed s8 (i32x4 A, i32x2 B, i32x4 C) -> i32x4
  kLdmatrix,    // (ptr<shared, f16>, i32 index) -> f16x8: four 8x8 f16 matrices, fragment order (also
                // ldmatrix_t: the same four transposed, an mma B fragment of a row-major K x N tile)
  kCpAsync,     // (ptr<shared, T>, index, ptr<global|constant, T>, index), bytes (immediate 4, 8, 16): no result
  kCpAsyncWait, // no operands, pending groups (immediate 0..8): no result
  kWgmma,       // (ptr<shared, f16> A, index, ptr<shared, f16> B, index, f32xN C) -> f32xN; strides (immediate)
                // (wgmma_rs: (u32x4 A, ptr<shared, f16> B, index, f32xN C) -> f32xN)
  kAmxTile,     // no operands: a tile register and its shape, or three tiles (immediate): no result
  kAmxMem,      // (ptr, index, stride in bytes): a tile register and its shape (immediate): no result
  kFor,         // (lo, hi, step, inits...) -> types of inits; region(iv, iters...)
  kIf,          // (i1) -> explicit types; regions then, else
  kYield,       // values returned by the enclosing region
  kNone,        // no operands, no results
};

// Rules of ops that define no value (stores, copies, barriers, waits, yields).
constexpr bool rule_has_no_result(TypeRule r) {
  return r == TypeRule::kStore || r == TypeRule::kPrefetch || r == TypeRule::kNone || r == TypeRule::kYield || r == TypeRule::kCpAsync ||
         r == TypeRule::kCpAsyncWait || r == TypeRule::kAmxTile || r == TypeRule::kAmxMem;
}

// Operand categories for kSame.
enum class Category : uint8_t { kAny, kNum, kIntOrBool, kInt, kFloat, kFloatNo64 };

// Modifier sets an op accepts after a dot ("cmp.lt", "thread_id.x").
enum class ModeSet : uint8_t { kNone, kCmp, kDim, kShuffle, kReduce, kAtomic };
enum class Mode : uint8_t {
  kNone, kEq, kNe, kLt, kLe, kGt, kGe, kX, kY, kZ, kIdx, kXor, kDown, kUp, kAdd, kMax, kMin,
};
std::string_view mode_name(Mode m);
bool mode_in_set(Mode m, ModeSet set);
std::optional<Mode> parse_mode(std::string_view text, ModeSet set);

enum OpFlag : uint16_t {
  kPure = 1 << 0,         // no side effects, result depends only on operands: CSE and DCE
  kCommutative = 1 << 1,  // first two operands may swap (CSE canonicalizes)
  kReadsMemory = 1 << 2,  // removable when unused, never merged
  kSideEffects = 1 << 3,  // never removed or merged
  kAllocates = 1 << 4,    // distinct storage per instruction: removable, never merged
  kHasRegions = 1 << 5,
  kTerminator = 1 << 6,
  kConvergent = 1 << 7,   // whole warp/block must reach it together (barrier, shuffles)
};

enum TargetMask : uint8_t { kOnPtx = 1, kOnCpp = 2, kOnAmdgpu = 4, kOnAll = 7 };

// X(enum, text, operands (-1: variadic), rule, category, modes, flags, targets)
#define LOOM_IR_OPS(X)                                                                         \
  X(kConst, "const", 0, kConst, kAny, kNone, kPure, kOnAll)                                    \
  X(kAdd, "add", 2, kSame, kNum, kNone, kPure | kCommutative, kOnAll)                          \
  X(kSub, "sub", 2, kSame, kNum, kNone, kPure, kOnAll)                                         \
  X(kMul, "mul", 2, kSame, kNum, kNone, kPure | kCommutative, kOnAll)                          \
  X(kDiv, "div", 2, kSame, kNum, kNone, kPure, kOnAll)                                         \
  X(kRem, "rem", 2, kSame, kInt, kNone, kPure, kOnAll)                                         \
  X(kMin, "min", 2, kSame, kNum, kNone, kPure | kCommutative, kOnAll)                          \
  X(kMax, "max", 2, kSame, kNum, kNone, kPure | kCommutative, kOnAll)                          \
  X(kAnd, "and", 2, kSame, kIntOrBool, kNone, kPure | kCommutative, kOnAll)                    \
  X(kOr, "or", 2, kSame, kIntOrBool, kNone, kPure | kCommutative, kOnAll)                      \
  X(kXor, "xor", 2, kSame, kIntOrBool, kNone, kPure | kCommutative, kOnAll)                    \
  X(kShl, "shl", 2, kSame, kInt, kNone, kPure, kOnAll)                                         \
  X(kShr, "shr", 2, kSame, kInt, kNone, kPure, kOnAll)                                         \
  X(kNeg, "neg", 1, kSame, kNum, kNone, kPure, kOnAll)                                         \
  X(kAbs, "abs", 1, kSame, kNum, kNone, kPure, kOnAll)                                         \
  X(kNot, "not", 1, kSame, kIntOrBool, kNone, kPure, kOnAll)                                   \
  X(kFma, "fma", 3, kSame, kFloat, kNone, kPure, kOnAll)                                       \
  X(kExp, "exp", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                   \
  X(kExp2, "exp2", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                 \
  X(kLog, "log", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                   \
  X(kSqrt, "sqrt", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                 \
  X(kRsqrt, "rsqrt", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                               \
  X(kTanh, "tanh", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                 \
  X(kSin, "sin", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                   \
  X(kCos, "cos", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                   \
  X(kErf, "erf", 1, kSame, kFloatNo64, kNone, kPure, kOnAll)                                   \
  X(kCmp, "cmp", 2, kCmp, kAny, kCmp, kPure, kOnAll)                                           \
  X(kSelect, "select", 3, kSelect, kAny, kNone, kPure, kOnAll)                                 \
  X(kConvert, "convert", 1, kConvert, kAny, kNone, kPure, kOnAll)                              \
  X(kBitcast, "bitcast", 1, kBitcast, kAny, kNone, kPure, kOnAll)                              \
  X(kSplat, "splat", 1, kSplat, kAny, kNone, kPure, kOnAll)                                    \
  X(kBuild, "build", -1, kBuild, kAny, kNone, kPure, kOnAll)                                   \
  X(kExtract, "extract", 1, kExtract, kAny, kNone, kPure, kOnAll)                              \
  X(kLoad, "load", 2, kLoad, kAny, kNone, kReadsMemory, kOnAll)                                \
  X(kStore, "store", 3, kStore, kAny, kNone, kSideEffects, kOnAll)                             \
  X(kOffset, "offset", 2, kOffset, kAny, kNone, kPure, kOnAll)                                 \
  /* a hint that the element at ptr + index will be read soon: no effect on any value, never  */ \
  /* faults (an address past the buffer is allowed); cpp: into the caches (prefetcht0); the   */ \
  /* GPU targets drop it (their many warps hide memory latency)                              */ \
  X(kPrefetch, "prefetch", 2, kPrefetch, kAny, kNone, kSideEffects, kOnAll)                    \
  X(kAtomic, "atomic", 3, kAtomic, kAny, kAtomic, kSideEffects, kOnAll)                        \
  X(kAllocShared, "alloc_shared", 0, kAlloc, kAny, kNone, kAllocates, kOnAll)                  \
  X(kAllocLocal, "alloc_local", 0, kAlloc, kAny, kNone, kAllocates, kOnAll)                    \
  X(kBarrier, "barrier", 0, kNone, kAny, kNone, kSideEffects | kConvergent, kOnAll)            \
  X(kThreadId, "thread_id", 0, kSpecial, kAny, kDim, kPure, kOnAll)                            \
  X(kBlockId, "block_id", 0, kSpecial, kAny, kDim, kPure, kOnAll)                              \
  X(kBlockDim, "block_dim", 0, kSpecial, kAny, kDim, kPure, kOnAll)                            \
  X(kGridDim, "grid_dim", 0, kSpecial, kAny, kDim, kPure, kOnAll)                              \
  X(kLaneId, "lane_id", 0, kSpecial, kAny, kNone, kPure, kOnPtx | kOnAmdgpu)                   \
  /* the low 32 bits of a cycle counter (%clock on ptx, rdtsc on cpp): deltas wrap mod 2^32 */ \
  X(kClock, "clock", 0, kSpecial, kAny, kNone, kSideEffects, kOnPtx | kOnCpp)                  \
  X(kShuffle, "shfl", 2, kShuffle, kAny, kShuffle, kPure | kConvergent, kOnPtx | kOnAmdgpu)    \
  X(kWarpReduce, "warp_reduce", 1, kWarpReduce, kAny, kReduce, kPure | kConvergent,            \
    kOnPtx | kOnAmdgpu)                                                                        \
  X(kDot4, "dot4", 3, kDot4, kAny, kNone, kPure, kOnAll)                                       \
  X(kConcat, "concat", 2, kConcat, kAny, kNone, kPure, kOnAll)                                 \
  X(kMma, "mma", 3, kMma, kAny, kNone, kPure | kConvergent, kOnPtx)                            \
  /* lane l names row l % 8 of matrix l / 8 (8 halves at ptr + index); lane l receives row   */ \
  /* l / 4, halves 2 (l % 4) and 2 (l % 4) + 1 of matrix j in result lanes 2j and 2j + 1     */ \
  X(kLdmatrix, "ldmatrix", 2, kLdmatrix, kAny, kNone, kReadsMemory | kConvergent, kOnPtx)      \
  X(kLdmatrixT, "ldmatrix_t", 2, kLdmatrix, kAny, kNone, kReadsMemory | kConvergent, kOnPtx)   \
  /* asynchronous copies global -> shared (PTX cp.async, sm_80): a copy is issued, groups of   */ \
  /* copies are committed, and cp_async_wait N waits until at most N committed groups are    */ \
  /* still in flight; other threads see the data after the wait and a barrier. Targets       */ \
  /* without them run each copy at once as a load and a store (commit and wait do nothing).   */ \
  X(kCpAsync, "cp_async", 4, kCpAsync, kAny, kNone, kSideEffects, kOnAll)                      \
  X(kCpAsyncCommit, "cp_async_commit", 0, kNone, kAny, kNone, kSideEffects, kOnAll)            \
  X(kCpAsyncWait, "cp_async_wait", 0, kCpAsyncWait, kAny, kNone, kSideEffects, kOnAll)         \
  /* Hopper's warpgroup MMA (PTX wgmma.mma_async, sm_90a), issued by the 4 warps of a warpgroup */ \
  /* together: C + A B^T for A = 64 rows x 16 k at a[ai] and B = 2N rows x 16 k at b[bi] (C has */ \
  /* N f32 lanes per thread), both f16 in shared memory as 8 x 8 core matrices (8 rows of 16    */ \
  /* contiguous bytes), the next core along k `lbo` bytes on and along the rows `sbo` bytes on   */ \
  /* (imm = lbo | sbo << 32). Thread t of the warpgroup holds C lanes 4j + i at row            */ \
  /* 16 (t / 32) + (t % 32) / 4 + 8 (i / 2), column 8j + 2 (t % 4) + i % 2. It runs            */ \
  /* asynchronously: wgmma_fence before it (after the last writes of its registers),           */ \
  /* wgmma_commit after, and wgmma_wait N before its result is read (N: groups left pending);   */ \
  /* shared memory written by ordinary stores needs fence_async_shared before the barrier.     */ \
  X(kWgmma, "wgmma", 5, kWgmma, kAny, kNone, kSideEffects | kConvergent, kOnPtx)              \
  /* wgmma_rs: the same with A from registers, u32x4 per thread: four f16 pairs (low half at */ \
  /* the lower k) of warp w's rows 16w + g and 16w + g + 8, g = lane / 4, at k 2q, 2q + 1 and */ \
  /* 2q + 8, 2q + 9, q = lane % 4, in the order (g, 2q), (g + 8, 2q), (g, 2q + 8),           */ \
  /* (g + 8, 2q + 8). Built before the wgmma_fence; unchanged until wgmma_wait says done.    */ \
  X(kWgmmaRs, "wgmma_rs", 4, kWgmma, kAny, kNone, kSideEffects | kConvergent, kOnPtx)         \
  X(kWgmmaFence, "wgmma_fence", 0, kNone, kAny, kNone, kSideEffects | kConvergent, kOnPtx)      \
  X(kWgmmaCommit, "wgmma_commit", 0, kNone, kAny, kNone, kSideEffects | kConvergent, kOnPtx)    \
  X(kWgmmaWait, "wgmma_wait", 0, kCpAsyncWait, kAny, kNone, kSideEffects | kConvergent, kOnPtx) \
  X(kFenceAsyncShared, "fence_async_shared", 0, kNone, kAny, kNone, kSideEffects, kOnPtx)       \
  /* Intel AMX (cpp, on hosts with AMX-TILE/-INT8/-BF16): eight tile registers 0..7 of up to    */ \
  /* 16 rows x 64 bytes, each used with one shape (rows, bytes per row) in a kernel, from which */ \
  /* the emitter builds the tile configuration at kernel entry. amx_load/amx_store move a tile  */ \
  /* between its rows and memory at ptr + index, row r at `stride` bytes times r on;           */ \
  /* amx_dp_i8 C, A, B: C (M x N i32) += A (M x 4K signed bytes) B (K x 4N signed bytes, four   */ \
  /* consecutive k of one column per i32), amx_dp_bf16 the same with pairs of bf16 into f32.    */ \
  /* imm: tile | rows << 8 | bytes << 16 (zero, load, store); c | a << 8 | b << 16 (dp).        */ \
  X(kAmxZero, "amx_zero", 0, kAmxTile, kAny, kNone, kSideEffects, kOnCpp)                      \
  X(kAmxLoad, "amx_load", 3, kAmxMem, kAny, kNone, kSideEffects, kOnCpp)                       \
  X(kAmxStore, "amx_store", 3, kAmxMem, kAny, kNone, kSideEffects, kOnCpp)                     \
  X(kAmxDpI8, "amx_dp_i8", 0, kAmxTile, kAny, kNone, kSideEffects, kOnCpp)                     \
  X(kAmxDpBf16, "amx_dp_bf16", 0, kAmxTile, kAny, kNone, kSideEffects, kOnCpp)                 \
  X(kFor, "for", -1, kFor, kAny, kNone, kHasRegions, kOnAll)                                   \
  X(kIf, "if", 1, kIf, kAny, kNone, kHasRegions, kOnAll)                                       \
  X(kYield, "yield", -1, kYield, kAny, kNone, kTerminator, kOnAll)

enum class Op : uint8_t {
#define LOOM_IR_OP_ENUM(e, ...) e,
  LOOM_IR_OPS(LOOM_IR_OP_ENUM)
#undef LOOM_IR_OP_ENUM
};

struct OpInfo {
  std::string_view name;
  int num_operands;  // -1: variadic
  TypeRule rule;
  Category category;
  ModeSet modes;
  uint16_t flags;
  uint8_t targets;  // TargetMask bits

  bool has(OpFlag f) const { return (flags & f) != 0; }
  bool legal_on(TargetKind t) const { return (targets & (1u << static_cast<int>(t))) != 0; }
};

const OpInfo& op_info(Op op);
inline std::string_view op_name(Op op) { return op_info(op).name; }
std::optional<Op> parse_op(std::string_view name);
int num_ops();

}  // namespace loom::ir
