// Helpers shared by the non-matrix ops (norms, rope, attention, softmax, gating, element-wise):
// shape and schedule access, float parameters kept in shapes, host-side fills and IR snippets.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/ir/builder.h"
#include "loom/kernels/op_spec.h"

namespace loom::kernels::elt {

// ---- Shapes and schedules ------------------------------------------------------------------
// Float parameters that a kernel bakes in (eps, rope base, attention scale, soft-cap) are shape
// dimensions holding the IEEE bits of the f32 value, under a name ending in "_f32"
// ("eps_f32=925353388" is 1e-5f): exact, and part of the kernel store's key like any dimension.

// The dimension's value, or `fallback` when absent.
int64_t dim_or(const Shape& shape, std::string_view name, int64_t fallback);
float f32_dim(const Shape& shape, std::string_view name);  // 0 when absent
void set_f32_dim(Shape& shape, std::string_view name, float value);
// invalid_argument naming the op and dimension unless lo <= value <= hi (and present).
Status require_dim(std::string_view op, const Shape& shape, std::string_view name, int64_t lo,
                   int64_t hi);
// A shape from "name=value" pairs, where floats are given through `floats`.
Shape make_shape(std::initializer_list<std::pair<const char*, int64_t>> ints,
                 std::initializer_list<std::pair<const char*, float>> floats = {});

// invalid_argument unless every knob of `space` has a value in `schedule` among its choices.
Status check_schedule(std::string_view op, const std::vector<Knob>& space, const Schedule& schedule);
// Divisors of n among the candidates (for vector widths): never empty, 1 at least.
std::vector<int64_t> dividing(int64_t n, std::initializer_list<int64_t> candidates);

bool gpu_target(ir::TargetKind t);  // ptx and amdgpu: warps of 32 lanes, shuffles, barriers

// ---- Arguments and host data ---------------------------------------------------------------
ArgSpec buffer_arg(std::string name, ArgRole role, int64_t elems, ir::Scalar elem);

// Sizes every buffer argument's bytes to its spec (fill_inputs starts with this: the harness
// hands over empty HostArgs). Scalars are left alone.
void size_buffers(const std::vector<ArgSpec>& specs, std::span<HostArg> args);

// Typed views of host buffers (sizes from the byte count).
std::span<float> f32s(HostArg& a);
std::span<const float> f32s(const HostArg& a);
std::span<uint16_t> f16s(HostArg& a);
std::span<int32_t> i32s(HostArg& a);

// Fills with uniform values in [lo, hi) (f32) or their f16 roundings; never all zeros.
void fill_uniform(std::mt19937_64& rng, std::span<float> out, float lo, float hi);
void fill_uniform_f16(std::mt19937_64& rng, std::span<uint16_t> out, float lo, float hi);

// ---- IR helpers ----------------------------------------------------------------------------
ir::Type global_ptr(ir::Scalar s);
ir::Type f32_type(int lanes = 1);
// Sum of the lanes of a vector (pairwise tree), the value itself for a scalar.
ir::Value* horizontal_sum(ir::Builder& b, ir::Value* v);
ir::Value* horizontal_max(ir::Builder& b, ir::Value* v);
// exp(x) exactly as ggml's vectorized CPU code (and llm::ref::expf_ggml) computes it: a
// polynomial with fma, bit-for-bit the reference's result on every target (f32, any lanes).
ir::Value* exp_ggml(ir::Builder& b, ir::Value* x);
// Verifies a generated module for its target, naming the op on failure.
Status verify_generated(std::string_view op, const Generated& g, ir::TargetKind target);

}  // namespace loom::kernels::elt

namespace loom::kernels::elt {

// Row-wise kernels (rms_norm, softmax): how rows map to blocks and threads.
//  cpu: one thread per block, `rows_per_block` rows walked in a loop; a reduction is the
//       thread's own value.
//  gpu: `rows_per_block` rows per block, each row on `warps_per_row` warps; a reduction is a
//       warp reduction plus, with several warps per row, a round through shared memory (the
//       barrier stays at the kernel's top level: rows past the end compute on the last row and
//       skip their stores).
struct RowLayout {
  bool gpu = false;
  int rows_per_block = 1;
  int warps_per_row = 1;
  int64_t n_rows = 0;

  // The layout a row op's schedule picks: rows_per_block, and on GPUs warps_per_row; n_rows
  // from the shape.
  static RowLayout of(const Shape& s, const Schedule& sch, ir::TargetKind t) {
    RowLayout r;
    r.gpu = gpu_target(t);
    r.rows_per_block = static_cast<int>(sch.at("rows_per_block"));
    r.warps_per_row = r.gpu ? static_cast<int>(sch.at("warps_per_row")) : 1;
    r.n_rows = s.dims.at("n_rows");
    return r;
  }

  int threads() const { return gpu ? 32 * warps_per_row * rows_per_block : 1; }
  uint32_t blocks() const {
    return static_cast<uint32_t>((n_rows + rows_per_block - 1) / rows_per_block);
  }
  // Per-thread code for one row: `row` is the row (clamped on gpu), `first`/`stride` the
  // thread's first element-vector index and step within the row, `live` an i1 that guards
  // stores (always true on cpu).
  struct Row {
    ir::Value* row;
    ir::Value* first;
    ir::Value* stride;
    ir::Value* live;
  };
  using RowBody = std::function<void(const Row&)>;
  void emit(ir::Builder& b, const RowBody& body);
  // Sum/max of `v` (a thread's f32 partial) over the threads of the row.
  ir::Value* reduce(ir::Builder& b, ir::Value* v, ir::Op op);

 private:
  ir::Value* tid_ = nullptr;
};

}  // namespace loom::kernels::elt
