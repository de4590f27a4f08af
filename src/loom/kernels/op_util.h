// Helpers shared by the op generators: short names for IR types, a builder wrapper with typed
// constants and byte-addressed loads (quantized blocks are byte layouts), schedule checks, and
// host-side helpers for random inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "loom/gguf/ggml_types.h"
#include "loom/ir/builder.h"
#include "loom/kernels/op_spec.h"

namespace loom::kernels {

namespace ty {
using ir::AddrSpace;
using ir::Scalar;
using ir::Type;
inline Type s(Scalar e) { return Type::scalar(e); }
inline Type v(Scalar e, int lanes) { return Type::of(e, lanes); }
inline Type gptr(Scalar e) { return Type::pointer(AddrSpace::kGlobal, e); }
inline const Type i32 = Type::scalar(Scalar::kI32);
inline const Type u32 = Type::scalar(Scalar::kU32);
inline const Type f32 = Type::scalar(Scalar::kF32);
inline const Type f16 = Type::scalar(Scalar::kF16);
inline const Type i64 = Type::scalar(Scalar::kI64);
inline const Type u16 = Type::scalar(Scalar::kU16);
}  // namespace ty

// A Builder with the conveniences every generator needs. Integer constants take the type of
// the value they combine with, so code reads like arithmetic on typed values.
class Emit : public ir::Builder {
 public:
  using ir::Builder::Builder;

  ir::Value* c(ir::Type t, int64_t v) { return const_int(t, v); }
  ir::Value* cf(ir::Type t, double v) { return const_float(t, v); }
  // A vector of distinct integer lane values (const only makes splats).
  ir::Value* lanes(ir::Scalar e, std::initializer_list<int64_t> vals);
  // x op constant of x's type.
  ir::Value* addc(ir::Value* x, int64_t k) { return add(x, c(x->type, k)); }
  ir::Value* mulc(ir::Value* x, int64_t k) { return mul(x, c(x->type, k)); }
  ir::Value* andc(ir::Value* x, int64_t k) { return bit_and(x, c(x->type, k)); }
  ir::Value* shrc(ir::Value* x, int64_t k) { return shr(x, c(x->type, k)); }
  ir::Value* shlc(ir::Value* x, int64_t k) { return shl(x, c(x->type, k)); }

  // Loads `type` (scalar or vector of `elem`) at byte offset `byte_off` (i32/i64) from a
  // byte pointer; `align` is the alignment the offset is known to have.
  ir::Value* load_at(ir::Value* base_u8, ir::Value* byte_off, ir::Type type, int align);
  void store_at(ir::Value* base_u8, ir::Value* byte_off, ir::Value* value, int align);
  // f16 bits (u16) at a byte offset -> f32. Exact for finite halves (block scales are finite).
  ir::Value* load_f16(ir::Value* base_u8, ir::Value* byte_off);
  // Integer lanes/scalars -> f32 (round to nearest even, as convert). small: |v| < 2^22.
  ir::Value* int_to_f32(ir::Value* v, bool small = false);

  // The cpp target: the C++ emitter turns vector convert into per-lane loops and its f16
  // conversion into a branchy integer routine, which GCC leaves scalar; generators for it use
  // branch-free forms built from operators that map to SIMD instructions.
  bool cpu = false;

  // Linear global thread index (block_id.x * block_dim.x + thread_id.x).
  ir::Value* global_x();

  // Emits `body` under `cond` (an if without results).
  void when(ir::Value* cond, const std::function<void()>& body);

  // Warp reductions (GPU targets: 32 lanes, shuffles). The butterfly sum of a double across
  // the warp (shuffled as two 32-bit halves): each step adds the same two values on both lanes,
  // so every lane ends with the same sum.
  ir::Value* warp_sum_f64(ir::Value* x);
  // The element of largest magnitude as a strict '>' scan in lane order finds it: (|m|, m) of a
  // lower range and a higher one, the higher wins only if larger.
  std::pair<ir::Value*, ir::Value*> merge_absmax(ir::Value* lo_a, ir::Value* lo_m, ir::Value* hi_a, ir::Value* hi_m);
  // merge_absmax across the warp's lanes by a butterfly (every lane ends with the warp's pair).
  std::pair<ir::Value*, ir::Value*> warp_absmax(ir::Value* am, ir::Value* mx, ir::Value* lane);
};

// invalid_argument unless every knob of `space` is set in `s` to one of its choices (and no
// other knob is present).
Status check_schedule(const std::vector<Knob>& space, const Schedule& s);
int64_t knob(const Schedule& s, const std::string& name, int64_t fallback);

// Weight/activation type from a shape dimension.
Result<llm::GgmlType> shape_type(const Shape& shape, std::string_view dim);
// Bytes of `n` elements of `type` (n a multiple of the block size).
int64_t type_row_bytes(llm::GgmlType type, int64_t n);
int64_t type_block_elems(llm::GgmlType type);

// Random helpers for fill_inputs: uniform floats in [lo, hi).
std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float lo, float hi);
// Special values for the inputs whose reference defines them (OpSpec::special_values): about
// a quarter of the elements of each such f32/f16 input or in/out buffer of `args` replaced by
// +-inf, NaNs (quiet, with payloads, negative), +-0.0, denormals (smallest, largest, negative),
// +-the smallest normal and +-the largest finite value; the first elements of two such buffers
// meet in every pair of them (short buffers hold at least a run of each). Returns how many
// buffers were changed.
int mix_special_values(const OpSpec& op, const Shape& shape, const std::vector<ArgSpec>& specs, std::mt19937_64& rng,
                       std::span<HostArg> args);

// A random row-major matrix of `rows` x `n` elements in `type` (quantized from random floats,
// so blocks have sane scales; random_block_rows' bytes for types without a quantizer), written into dst (type_row_bytes(type, n) * rows bytes).
void random_rows(std::mt19937_64& rng, llm::GgmlType type, int64_t rows, int64_t n, float amp,
                 uint8_t* dst);

// Random quantized rows written directly as valid block bytes: random quants, and per block
// (sub-block for the K formats) scales and mins drawn so that values spread over about
// [-amp, amp] with a magnitude factor in [0.25, 1] per 32 elements, centred like random_rows'
// quantized floats (outputs of the same order, so the ops' tolerances mean the same). Far faster
// than quantizing (the K quantizers search scales): for big matrices (evolve's input sets at
// Llama-3-8B shapes). Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS (random_rows
// also uses these for the IQ4 formats, which Loom cannot quantize); any other type goes
// through random_rows' quantizing path. Not the bytes random_rows gives for the same rng.
void random_block_rows(std::mt19937_64& rng, llm::GgmlType type, int64_t rows, int64_t n, float amp, uint8_t* dst);

// While one lives on this thread, random_rows writes random_block_rows' bytes instead of
// quantizing random floats. evolve's input sets use it (the ops' fill_inputs call random_rows);
// every other caller keeps random_rows' bytes. Nests; not shared between threads.
class ScopedFastRandomRows {
 public:
  ScopedFastRandomRows();
  ~ScopedFastRandomRows();
  ScopedFastRandomRows(const ScopedFastRandomRows&) = delete;
  ScopedFastRandomRows& operator=(const ScopedFastRandomRows&) = delete;

 private:
  bool prev_;
};

// The reference's block geometry, for validate(): k elements in blocks of `type`.
Status check_row(llm::GgmlType type, int64_t n, std::string_view what);

}  // namespace loom::kernels
