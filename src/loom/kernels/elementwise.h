// Element-wise ops over flat f32 arrays (add, scale, softcap, swiglu, geglu) share one kernel
// shape: each thread maps `vec` consecutive elements, `per_thread` times; MapOp holds it.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "loom/kernels/op_list.h"
#include "loom/kernels/op_spec.h"

namespace loom::ir {
class Builder;
struct Value;
}  // namespace loom::ir

namespace loom::kernels {

// y[i] = f(x0[i], x1[i], ...) for i < n ("n" is the only dimension besides the op's floats).
// Ops whose strided_rows() is true also take n_rows rows of n values whose inputs lie x_row
// elements apart (the halves of ggml's fused GLU rows, views): y[r*n + i] = f(x0[r*x_row + i],
// ...); the output is dense. Without n_rows (or with n_rows 1 and no x_row) the kernel is the
// flat one.
// Schedule: threads (GPU block size; 1 on cpu), vec (elements per load), per_thread (vectors
// each thread maps; consecutive threads take consecutive vectors, so GPU loads coalesce).
class MapOp : public OpSpec {
 public:
  Status validate(const Shape& shape) const override;
  std::vector<ArgSpec> args(const Shape& shape) const override;
  Cost cost(const Shape& shape) const override;
  std::vector<Knob> schedule_space(const Shape& shape, ir::TargetKind target) const override;
  Schedule default_schedule(const Shape& shape, ir::TargetKind target) const override;
  Result<Generated> generate(const Shape& shape, const Schedule& schedule,
                             ir::TargetKind target) const override;
  void fill_inputs(const Shape& shape, std::mt19937_64& rng, std::span<HostArg> args) const override;
  Status reference(const Shape& shape, std::span<HostArg> args) const override;
  std::vector<Shape> test_shapes() const override;

 protected:
  virtual std::vector<std::string> inputs() const = 0;
  virtual double flops_per_element() const { return 1; }
  virtual Status validate_params(const Shape&) const { return Status(); }
  virtual std::vector<Shape> extra_params() const { return {Shape{}}; }  // float dims per test
  virtual bool strided_rows() const { return false; }
  // Builds y from the input vectors (f32 scalars or f32xvec), in IR.
  virtual ir::Value* apply(ir::Builder& b, const Shape& shape,
                           std::span<ir::Value* const> in) const = 0;
  // The same for one target (what generate calls); by default the target does not matter.
  virtual ir::Value* apply_on(ir::Builder& b, const Shape& shape, std::span<ir::Value* const> in,
                              ir::TargetKind) const {
    return apply(b, shape, in);
  }
  // The host definition on n elements.
  virtual void host(const Shape& shape, std::span<const float* const> in, float* y,
                    int64_t n) const = 0;
  virtual float input_range() const { return 4.0f; }  // inputs uniform in [-r, r)
};

// The accessors of these ops are declared in op_list.h (included above).

// Every op above, for tests that run them without the registry.
std::vector<const OpSpec*> elementwise_family_ops();

}  // namespace loom::kernels
