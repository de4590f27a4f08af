// Element-wise ops (add, scale, softcap) on the MapOp kernel shape, add_bias and gather_rows.
#include "loom/kernels/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {

using elt::dim_or;
using ir::Scalar;
using ir::Type;
using ir::Value;

// ---- MapOp ----------------------------------------------------------------------------------

namespace {
// Rows of a strided MapOp: n_rows (1 when absent) and the input row stride (n when absent).
int64_t map_rows(const Shape& s) { return dim_or(s, "n_rows", 1); }
int64_t map_x_row(const Shape& s) { return dim_or(s, "x_row", dim_or(s, "n", 0)); }
bool map_strided(const Shape& s) { return s.dims.count("n_rows") || s.dims.count("x_row"); }
// What vector widths must divide: n, and the input row stride when rows are strided.
int64_t map_vec_base(const Shape& s) {
  const int64_t n = dim_or(s, "n", 1);
  return map_strided(s) ? std::gcd(n, std::max<int64_t>(1, map_x_row(s))) : n;
}
}  // namespace

Status MapOp::validate(const Shape& shape) const {
  LOOM_RETURN_IF_ERROR(elt::require_dim(name(), shape, "n", 1, int64_t{1} << 30));
  if (map_strided(shape)) {
    if (!strided_rows()) return invalid_argument("{}: takes no n_rows / x_row", name());
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), shape, "n_rows", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), shape, "x_row", dim_or(shape, "n", 1), int64_t{1} << 30));
    if ((map_rows(shape) - 1) * map_x_row(shape) + dim_or(shape, "n", 0) > (int64_t{1} << 30) ||
        map_rows(shape) * dim_or(shape, "n", 0) > (int64_t{1} << 30))
      return invalid_argument("{}: more than 2^30 elements", name());
  }
  return validate_params(shape);
}

std::vector<ArgSpec> MapOp::args(const Shape& shape) const {
  const int64_t n = dim_or(shape, "n", 0), rows = map_rows(shape);
  const int64_t in_n = (rows - 1) * map_x_row(shape) + n;
  std::vector<ArgSpec> a;
  for (const std::string& in : inputs()) a.push_back(elt::buffer_arg(in, ArgRole::kInput, in_n, Scalar::kF32));
  a.push_back(elt::buffer_arg("y", ArgRole::kOutput, rows * n, Scalar::kF32));
  return a;
}

Cost MapOp::cost(const Shape& shape) const {
  const double n = static_cast<double>(dim_or(shape, "n", 0) * map_rows(shape));
  return {n * 4.0 * static_cast<double>(inputs().size() + 1), n * flops_per_element()};
}

std::vector<Knob> MapOp::schedule_space(const Shape& shape, ir::TargetKind target) const {
  const int64_t n = map_vec_base(shape);
  if (!elt::gpu_target(target))
    return {{"threads", {1}}, {"vec", elt::dividing(n, {4, 8, 16})}, {"per_thread", {16, 64, 256, 1024}}};
  return {{"threads", {64, 128, 256, 512}}, {"vec", elt::dividing(n, {2, 4})}, {"per_thread", {1, 2, 4, 8}}};
}

Schedule MapOp::default_schedule(const Shape& shape, ir::TargetKind target) const {
  const int64_t n = map_vec_base(shape);
  auto widest = [&](std::initializer_list<int64_t> c) { return elt::dividing(n, c).back(); };
  if (!elt::gpu_target(target)) return {{"threads", 1}, {"vec", widest({4, 8})}, {"per_thread", 64}};
  return {{"threads", 256}, {"vec", widest({2, 4})}, {"per_thread", 1}};
}

Result<Generated> MapOp::generate(const Shape& shape, const Schedule& schedule,
                                  ir::TargetKind target) const {
  LOOM_RETURN_IF_ERROR(validate(shape));
  LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(shape, target), schedule));
  const int64_t n = dim_or(shape, "n", 0);
  const int threads = static_cast<int>(schedule.at("threads"));
  const int vec = static_cast<int>(schedule.at("vec"));
  const int per_thread = static_cast<int>(schedule.at("per_thread"));
  const int64_t n_vec = n / vec;
  const bool strided = map_strided(shape);

  Generated g;
  ir::Kernel* k = g.module.add_kernel(std::string(name()));
  ir::Builder b(*k);
  std::vector<Value*> in_ptrs;
  for (const std::string& in : inputs()) in_ptrs.push_back(b.param(elt::global_ptr(Scalar::kF32), in));
  Value* y = b.param(elt::global_ptr(Scalar::kF32), "y");
  Value* tid = b.thread_id(ir::Mode::kX);
  Value* bid = b.block_id(ir::Mode::kX);
  Value* first = b.mul(bid, b.i32(per_thread));
  // Strided rows: block row r reads its inputs from r * x_row, writes y from r * n.
  Value* row = strided ? b.block_id(ir::Mode::kY) : nullptr;
  Value* in_base = strided ? b.mul(row, b.i32(static_cast<int32_t>(map_x_row(shape)))) : nullptr;
  Value* out_base = strided ? b.mul(row, b.i32(static_cast<int32_t>(n))) : nullptr;
  const Type vt = elt::f32_type(vec);
  b.for_loop(b.i32(0), b.i32(per_thread), b.i32(1), {}, [&](Value* it, std::span<Value* const>) {
    Value* iv = b.add(b.mul(b.add(first, it), b.i32(threads)), tid);
    b.if_then_else(b.cmp(ir::Mode::kLt, iv, b.i32(static_cast<int32_t>(n_vec))), {}, [&] {
      Value* e = b.mul(iv, b.i32(vec));
      Value* ei = strided ? b.add(in_base, e) : e;
      Value* eo = strided ? b.add(out_base, e) : e;
      std::vector<Value*> xs;
      for (Value* p : in_ptrs) xs.push_back(b.load(p, ei, vt, 4 * vec));
      b.store(y, eo, apply_on(b, shape, xs, target), 4 * vec);
      return std::vector<Value*>{};
    });
    return std::vector<Value*>{};
  });
  const int64_t per_block = int64_t{threads} * per_thread;
  KernelLaunch l;
  l.kernel = std::string(name());
  l.grid = {static_cast<uint32_t>((n_vec + per_block - 1) / per_block), static_cast<uint32_t>(map_rows(shape)), 1};
  l.block = {static_cast<uint32_t>(threads), 1, 1};
  for (int i = 0; i <= static_cast<int>(in_ptrs.size()); ++i) l.args.push_back(i);
  g.launches.push_back(l);
  LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, target));
  return g;
}

void MapOp::fill_inputs(const Shape& shape, std::mt19937_64& rng, std::span<HostArg> args) const {
  elt::size_buffers(this->args(shape), args);
  const float r = input_range();
  for (size_t i = 0; i < inputs().size(); ++i) elt::fill_uniform(rng, elt::f32s(args[i]), -r, r);
}

Status MapOp::reference(const Shape& shape, std::span<HostArg> args) const {
  const int64_t n = dim_or(shape, "n", 0), x_row = map_x_row(shape);
  for (int64_t r = 0; r < map_rows(shape); ++r) {
    std::vector<const float*> in;
    for (size_t i = 0; i < inputs().size(); ++i) in.push_back(elt::f32s(args[i]).data() + r * x_row);
    host(shape, in, elt::f32s(args[inputs().size()]).data() + r * n, n);
  }
  return Status();
}

std::vector<Shape> MapOp::test_shapes() const {
  std::vector<Shape> out;
  // 1 and 7 (no vector width divides), SmolLM2 rows (576, 1536 x 3 tokens), Llama-3-8B FFN.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{576}, int64_t{4608}, int64_t{14336}}) {
    for (const Shape& p : extra_params()) {
      Shape s = p;
      s.dims["n"] = n;
      out.push_back(s);
    }
  }
  if (strided_rows()) {
    // ggml's fused GLU halves: rows of 2n values, each half read in place (a row no vector
    // width divides, and 3 rows of Llama-3-8B-like halves), and a view of every third row part.
    for (auto [rows, n, x_row] : {std::array<int64_t, 3>{7, 5, 10}, {3, 1536, 3072}, {4, 128, 384}}) {
      for (const Shape& p : extra_params()) {
        Shape s = p;
        s.dims["n"] = n;
        s.dims["n_rows"] = rows;
        s.dims["x_row"] = x_row;
        out.push_back(s);
      }
    }
  }
  return out;
}

namespace {

// ---- add, scale, softcap --------------------------------------------------------------------

class AddOp final : public MapOp {
 public:
  std::string_view name() const override { return "add"; }
  std::string_view description() const override { return "y = a + b (residual add)"; }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  // One IEEE add per element: defined for every input value.
  bool special_values(const Shape&, size_t arg) const override { return arg < 2; }

 protected:
  std::vector<std::string> inputs() const override { return {"a", "b"}; }
  Value* apply(ir::Builder& b, const Shape&, std::span<Value* const> in) const override {
    return b.add(in[0], in[1]);
  }
  void host(const Shape&, std::span<const float* const> in, float* y, int64_t n) const override {
    llm::ref::add(in[0], in[1], y, n);
  }
};

class ScaleOp final : public MapOp {
 public:
  std::string_view name() const override { return "scale"; }
  std::string_view description() const override { return "y = x * s (s: shape float s_f32)"; }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  bool special_values(const Shape&, size_t arg) const override { return arg == 0; }

 protected:
  std::vector<std::string> inputs() const override { return {"x"}; }
  Status validate_params(const Shape& shape) const override {
    if (!shape.dims.count("s_f32")) return invalid_argument("scale: shape lacks s_f32");
    return Status();
  }
  std::vector<Shape> extra_params() const override {
    return {elt::make_shape({}, {{"s_f32", 0.125f}}), elt::make_shape({}, {{"s_f32", 24.0f}})};
  }
  Value* apply(ir::Builder& b, const Shape& shape, std::span<Value* const> in) const override {
    Value* s = b.f32(elt::f32_dim(shape, "s_f32"));
    if (in[0]->type.is_vector()) s = b.splat(s, in[0]->type.lanes());
    return b.mul(in[0], s);
  }
  void host(const Shape& shape, std::span<const float* const> in, float* y, int64_t n) const override {
    llm::ref::scale(in[0], elt::f32_dim(shape, "s_f32"), y, n);
  }
};

class SoftcapOp final : public MapOp {
 public:
  std::string_view name() const override { return "softcap"; }
  std::string_view description() const override {
    return "y = cap * tanh(x / cap) (logit soft-capping; cap: shape float cap_f32)";
  }
  // tanh: libm on cpu, a polynomial/exp2 form on GPUs (relative error ~1e-6).
  Tolerance tolerance(const Shape&) const override { return {2e-6, 4e-6, false}; }

 protected:
  std::vector<std::string> inputs() const override { return {"x"}; }
  double flops_per_element() const override { return 3; }
  float input_range() const override { return 60.0f; }
  Status validate_params(const Shape& shape) const override {
    if (!(elt::f32_dim(shape, "cap_f32") > 0.0f)) return invalid_argument("softcap: cap_f32 must be > 0");
    return Status();
  }
  std::vector<Shape> extra_params() const override {
    return {elt::make_shape({}, {{"cap_f32", 30.0f}})};
  }
  Value* apply(ir::Builder& b, const Shape& shape, std::span<Value* const> in) const override {
    const float cap = elt::f32_dim(shape, "cap_f32");
    Value* inv = b.f32(1.0f / cap);
    Value* c = b.f32(cap);
    if (in[0]->type.is_vector()) {
      inv = b.splat(inv, in[0]->type.lanes());
      c = b.splat(c, in[0]->type.lanes());
    }
    // tanh one lane at a time: on the cpp target a scalar tanh is libm's, as the reference's
    // (the emitter's vector tanh is a polynomial a few ulp away), so the cpu kernels stay
    // bit-identical to it; GPUs evaluate tanh per lane either way.
    Value* z = b.mul(in[0], inv);
    Value* t;
    if (z->type.is_vector()) {
      std::vector<Value*> lanes;
      for (int i = 0; i < z->type.lanes(); ++i) lanes.push_back(b.unary(ir::Op::kTanh, b.extract(z, i)));
      t = b.build(lanes);
    } else {
      t = b.unary(ir::Op::kTanh, z);
    }
    return b.mul(t, c);
  }
  void host(const Shape& shape, std::span<const float* const> in, float* y, int64_t n) const override {
    llm::ref::softcap(in[0], elt::f32_dim(shape, "cap_f32"), y, n);
  }
};

// ---- add_bias, mul_rows ------------------------------------------------------------------------
// y[r, :] = x[r, :] op b: one vector of n values combined with every row: add_bias (attention
// q/k/v biases) and mul_rows (a norm's weight, as ggml's broadcast MUL applies it). A 2-D grid,
// one row per block row, as gather_rows; each thread handles `vec` floats. The same float add or
// multiply as ggml's broadcast ADD / MUL, so the result is exact on every target.
class RowBroadcastOp final : public OpSpec {
 public:
  explicit RowBroadcastOp(bool mul) : mul_(mul) {}
  std::string_view name() const override { return mul_ ? "mul_rows" : "add_bias"; }
  std::string_view description() const override {
    return mul_ ? "y[r] = x[r] * b (f32 rows of n values, each multiplied by one vector of n)"
                : "y[r] = x[r] + b (f32 rows of n values, one bias vector of n added to each)";
  }
  Status validate(const Shape& s) const override {
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_rows", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n", 1, int64_t{1} << 30));
    if (s.dims.at("n_rows") * s.dims.at("n") > (int64_t{1} << 30))
      return invalid_argument("{}: more than 2^30 elements", name());
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t r = dim_or(s, "n_rows", 0), n = dim_or(s, "n", 0);
    return {elt::buffer_arg("x", ArgRole::kInput, r * n, Scalar::kF32),
            elt::buffer_arg("b", ArgRole::kInput, n, Scalar::kF32),
            elt::buffer_arg("y", ArgRole::kOutput, r * n, Scalar::kF32)};
  }
  Cost cost(const Shape& s) const override {
    const double r = static_cast<double>(dim_or(s, "n_rows", 0)), n = static_cast<double>(dim_or(s, "n", 0));
    return {(2.0 * r + 1.0) * n * 4.0, r * n};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  bool special_values(const Shape&, size_t arg) const override { return arg < 2; }
  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    const int64_t n = dim_or(s, "n", 1);
    if (!elt::gpu_target(t)) return {{"threads", {1}}, {"vec", elt::dividing(n, {4, 8})}};
    return {{"threads", {64, 128, 256}}, {"vec", elt::dividing(n, {2, 4})}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    auto space = schedule_space(s, t);
    return {{"threads", elt::gpu_target(t) ? 128 : 1}, {"vec", space[1].choices.back()}};
  }
  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int64_t n = s.dims.at("n"), n_rows = s.dims.at("n_rows");
    const int threads = static_cast<int>(sch.at("threads")), vec = static_cast<int>(sch.at("vec"));
    const int64_t n_vec = n / vec;
    Generated g;
    const std::string kname(name());
    ir::Kernel* k = g.module.add_kernel(kname);
    ir::Builder b(*k);
    Value* x = b.param(elt::global_ptr(Scalar::kF32), "x");
    Value* bias = b.param(elt::global_ptr(Scalar::kF32), "b");
    Value* y = b.param(elt::global_ptr(Scalar::kF32), "y");
    Value* base = b.mul(b.block_id(ir::Mode::kY), b.i32(static_cast<int32_t>(n)));
    Value* tid = b.thread_id(ir::Mode::kX);
    Value* c0 = b.mul(b.block_id(ir::Mode::kX), b.i32(threads));
    // On the cpu (one thread per block) a block walks its whole row.
    const int64_t per_thread = elt::gpu_target(t) ? 1 : n_vec;
    const Type vt = elt::f32_type(vec);
    b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(per_thread)), b.i32(1), {},
               [&](Value* it, std::span<Value* const>) {
                 Value* v = b.add(b.add(c0, tid), b.mul(it, b.i32(threads)));
                 b.if_then_else(b.cmp(ir::Mode::kLt, v, b.i32(static_cast<int32_t>(n_vec))), {}, [&] {
                   Value* e = b.mul(v, b.i32(vec));
                   Value* xv = b.load(x, b.add(base, e), vt, 4 * vec);
                   Value* bv = b.load(bias, e, vt, 4 * vec);
                   b.store(y, b.add(base, e), mul_ ? b.mul(xv, bv) : b.add(xv, bv), 4 * vec);
                   return std::vector<Value*>{};
                 });
                 return std::vector<Value*>{};
               });
    KernelLaunch l;
    l.kernel = kname;
    l.grid = {elt::gpu_target(t) ? static_cast<uint32_t>((n_vec + threads - 1) / threads) : 1u,
              static_cast<uint32_t>(n_rows), 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    l.args = {0, 1, 2};
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
    return g;
  }
  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> args) const override {
    elt::size_buffers(this->args(s), args);
    elt::fill_uniform(rng, elt::f32s(args[0]), -4.0f, 4.0f);
    elt::fill_uniform(rng, elt::f32s(args[1]), -1.0f, 1.0f);
  }
  Status reference(const Shape& s, std::span<HostArg> args) const override {
    const int64_t rows = s.dims.at("n_rows"), n = s.dims.at("n");
    const float* x = elt::f32s(args[0]).data();
    const float* bias = elt::f32s(args[1]).data();
    float* y = elt::f32s(args[2]).data();
    for (int64_t r = 0; r < rows; ++r) {
      if (!mul_) {
        llm::ref::add(x + r * n, bias, y + r * n, n);
        continue;
      }
      for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * bias[i];
    }
    return Status();
  }
  std::vector<Shape> test_shapes() const override {
    // One decode row of Qwen2.5-0.5B's q (896), a prompt of its k/v rows (128), Qwen2.5-7B's q
    // (3584) over 5 tokens, and a row no vector width divides.
    // mul_rows: SmolLM2's norm weight over 7 rows, and one long row (a same-shape MUL).
    if (mul_)
      return {elt::make_shape({{"n_rows", 7}, {"n", 576}}), elt::make_shape({{"n_rows", 1}, {"n", 4099}}),
              elt::make_shape({{"n_rows", 3}, {"n", 13}})};
    return {elt::make_shape({{"n_rows", 1}, {"n", 896}}), elt::make_shape({{"n_rows", 33}, {"n", 128}}),
            elt::make_shape({{"n_rows", 5}, {"n", 3584}}), elt::make_shape({{"n_rows", 3}, {"n", 13}})};
  }

 private:
  bool mul_;
};

// ---- gather_rows ------------------------------------------------------------------------------
// out[i, :] = x[rows[i], :]: keeps the rows whose logits the step wants. Row indices come from a
// device buffer; each thread copies `vec` floats.
class GatherRowsOp final : public OpSpec {
 public:
  std::string_view name() const override { return "gather_rows"; }
  std::string_view description() const override {
    return "out[i] = x[rows[i]] (f32 rows; indices from a buffer)";
  }
  Status validate(const Shape& s) const override {
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_rows", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_cols", 1, int64_t{1} << 24));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_out", 1, int64_t{1} << 24));
    if (s.dims.at("n_rows") * s.dims.at("n_cols") > (int64_t{1} << 30))
      return invalid_argument("gather_rows: more than 2^30 elements");
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t r = dim_or(s, "n_rows", 0), c = dim_or(s, "n_cols", 0), o = dim_or(s, "n_out", 0);
    return {elt::buffer_arg("x", ArgRole::kInput, r * c, Scalar::kF32),
            elt::buffer_arg("rows", ArgRole::kInput, o, Scalar::kI32),
            elt::buffer_arg("out", ArgRole::kOutput, o * c, Scalar::kF32)};
  }
  Cost cost(const Shape& s) const override {
    const double c = static_cast<double>(dim_or(s, "n_cols", 0)), o = static_cast<double>(dim_or(s, "n_out", 0));
    return {o * (4.0 + 8.0 * c), 0};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    const int64_t c = dim_or(s, "n_cols", 1);
    if (!elt::gpu_target(t)) return {{"threads", {1}}, {"vec", elt::dividing(c, {4, 8})}};
    return {{"threads", {64, 128, 256}}, {"vec", elt::dividing(c, {2, 4})}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    auto space = schedule_space(s, t);
    return {{"threads", elt::gpu_target(t) ? 128 : 1}, {"vec", space[1].choices.back()}};
  }
  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int64_t cols = s.dims.at("n_cols"), n_out = s.dims.at("n_out");
    const int threads = static_cast<int>(sch.at("threads")), vec = static_cast<int>(sch.at("vec"));
    const int64_t n_vec = cols / vec;
    Generated g;
    ir::Kernel* k = g.module.add_kernel("gather_rows");
    ir::Builder b(*k);
    Value* x = b.param(elt::global_ptr(Scalar::kF32), "x");
    Value* rows = b.param(elt::global_ptr(Scalar::kI32), "rows");
    Value* out = b.param(elt::global_ptr(Scalar::kF32), "out");
    Value* i = b.block_id(ir::Mode::kY);
    Value* src = b.load(rows, i);
    Value* base_in = b.mul(src, b.i32(static_cast<int32_t>(cols)));
    Value* base_out = b.mul(i, b.i32(static_cast<int32_t>(cols)));
    Value* tid = b.thread_id(ir::Mode::kX);
    Value* c0 = b.mul(b.block_id(ir::Mode::kX), b.i32(threads));
    // On the cpu (one thread per block) a block walks its whole row.
    const int64_t per_thread = elt::gpu_target(t) ? 1 : n_vec;
    b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(per_thread)), b.i32(1), {},
               [&](Value* it, std::span<Value* const>) {
                 Value* v = b.add(b.add(c0, tid), b.mul(it, b.i32(threads)));
                 b.if_then_else(b.cmp(ir::Mode::kLt, v, b.i32(static_cast<int32_t>(n_vec))), {}, [&] {
                   Value* e = b.mul(v, b.i32(vec));
                   Value* val = b.load(x, b.add(base_in, e), elt::f32_type(vec), 4 * vec);
                   b.store(out, b.add(base_out, e), val, 4 * vec);
                   return std::vector<Value*>{};
                 });
                 return std::vector<Value*>{};
               });
    KernelLaunch l;
    l.kernel = "gather_rows";
    l.grid = {elt::gpu_target(t) ? static_cast<uint32_t>((n_vec + threads - 1) / threads) : 1u,
              static_cast<uint32_t>(n_out), 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    l.args = {0, 1, 2};
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
    return g;
  }
  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> args) const override {
    elt::size_buffers(this->args(s), args);
    elt::fill_uniform(rng, elt::f32s(args[0]), -2.0f, 2.0f);
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(s.dims.at("n_rows") - 1));
    for (int32_t& r : elt::i32s(args[1])) r = d(rng);
  }
  Status reference(const Shape& s, std::span<HostArg> args) const override {
    const int64_t rows = s.dims.at("n_rows"), cols = s.dims.at("n_cols");
    auto x = elt::f32s(args[0]);
    auto idx = elt::i32s(args[1]);
    auto out = elt::f32s(args[2]);
    for (size_t i = 0; i < idx.size(); ++i) {
      if (idx[i] < 0 || idx[i] >= rows) return out_of_range("gather_rows: row {} of {}", idx[i], rows);
      std::copy_n(x.begin() + idx[i] * cols, cols, out.begin() + static_cast<int64_t>(i) * cols);
    }
    return Status();
  }
  std::vector<Shape> test_shapes() const override {
    return {elt::make_shape({{"n_rows", 7}, {"n_cols", 49152}, {"n_out", 1}}),
            elt::make_shape({{"n_rows", 33}, {"n_cols", 576}, {"n_out", 5}}),
            elt::make_shape({{"n_rows", 4}, {"n_cols", 13}, {"n_out", 4}})};
  }
};

}  // namespace

const OpSpec& add_op() {
  static const AddOp op;
  return op;
}
const OpSpec& scale_op() {
  static const ScaleOp op;
  return op;
}
const OpSpec& softcap_op() {
  static const SoftcapOp op;
  return op;
}
const OpSpec& add_bias_op() {
  static const RowBroadcastOp op(/*mul=*/false);
  return op;
}
const OpSpec& mul_rows_op() {
  static const RowBroadcastOp op(/*mul=*/true);
  return op;
}
const OpSpec& gather_rows_op() {
  static const GatherRowsOp op;
  return op;
}

std::vector<const OpSpec*> elementwise_family_ops() {
  return {&add_op(),     &add_bias_op(),     &mul_rows_op(),     &scale_op(),        &softcap_op(),      &swiglu_op(),
          &geglu_op(),   &gather_rows_op(),  &rms_norm_op(),     &add_rms_norm_op(),
          &softmax_op(), &rope_kv_op(),      &rope_op(),      &attention_decode_op(), &attention_prompt_op(), &rms_norm_q8_op()};
}

}  // namespace loom::kernels
