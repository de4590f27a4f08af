// argmax over rows of logits: the first index of the largest value (llama.cpp's greedy sampler
// keeps the lowest index on ties). One block per row: each thread scans a strided slice, then
// thread 0 combines the per-thread winners from shared memory in thread order.
#include <cmath>
#include <cstring>

#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::Mode;
using ir::Scalar;
using ir::Value;

class ArgmaxOp final : public OpSpec {
 public:
  std::string_view name() const override { return "argmax"; }
  std::string_view description() const override { return "index of the largest logit per row (ties: lowest)"; }

  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(int64_t n, s.get("n"));
    LOOM_ASSIGN_OR_RETURN(int64_t rows, s.get("n_rows"));
    if (n <= 0 || n > (int64_t{1} << 28)) return invalid_argument("argmax: n={} out of range", n);
    if (rows <= 0 || rows > 65535) return invalid_argument("argmax: n_rows={} out of range", rows);
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    int64_t n = s.at("n"), rows = s.at("n_rows");
    return {{"x", ArgKind::kBuffer, ArgRole::kInput, n * rows * 4, Scalar::kF32},
            {"idx", ArgKind::kBuffer, ArgRole::kOutput, rows * 4, Scalar::kI32}};
  }
  Cost cost(const Shape& s) const override {
    int64_t n = s.at("n"), rows = s.at("n_rows");
    return {static_cast<double>(n * rows * 4 + rows * 4), static_cast<double>(n * rows)};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind) const override {
    return {{"threads", {1, 32, 64, 128, 256, 512}}};
  }
  Schedule default_schedule(const Shape&, ir::TargetKind t) const override {
    return {{"threads", t == ir::TargetKind::kCpp ? 1 : 256}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    const int64_t n = s.at("n"), rows = s.at("n_rows"), threads = sch.at("threads");
    Generated g;
    ir::Kernel* k = g.module.add_kernel("argmax_rows");
    Emit b(*k);
    Value* x = b.param(ty::gptr(Scalar::kF32), "x");
    Value* out = b.param(ty::gptr(Scalar::kI32), "idx");
    Value* sv = b.alloc_shared(Scalar::kF32, threads);
    Value* si = b.alloc_shared(Scalar::kI32, threads);
    Value* row = b.block_id(Mode::kX);
    Value* tid = b.thread_id(Mode::kX);
    Value* xr = b.offset(x, b.mul(row, b.i32(static_cast<int32_t>(n))));
    // Threads past n start from -inf at index n, which never wins (strict > below).
    auto best = b.for_loop(tid, b.i32(static_cast<int32_t>(n)), b.i32(static_cast<int32_t>(threads)),
                           {b.f32(-INFINITY), b.i32(static_cast<int32_t>(n))},
                           [&](Value* i, std::span<Value* const> it) {
                             Value* v = b.load(xr, i);
                             Value* gt = b.cmp(Mode::kGt, v, it[0]);
                             return std::vector<Value*>{b.select(gt, v, it[0]), b.select(gt, i, it[1])};
                           });
    b.store(sv, tid, best[0]);
    b.store(si, tid, best[1]);
    b.barrier();
    b.if_then_else(b.cmp(Mode::kEq, tid, b.i32(0)), {}, [&] {
      auto fin = b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(threads)), b.i32(1),
                            {b.f32(-INFINITY), b.i32(static_cast<int32_t>(n))},
                            [&](Value* t, std::span<Value* const> it) {
                              Value* v = b.load(sv, t);
                              Value* i = b.load(si, t);
                              Value* gt = b.cmp(Mode::kGt, v, it[0]);
                              Value* tie = b.bit_and(b.cmp(Mode::kEq, v, it[0]), b.cmp(Mode::kLt, i, it[1]));
                              Value* take = b.bit_or(gt, tie);
                              return std::vector<Value*>{b.select(take, v, it[0]), b.select(take, i, it[1])};
                            });
      // All-(-inf) or NaN rows: index 0, as the reference's scan gives.
      Value* none = b.cmp(Mode::kGe, fin[1], b.i32(static_cast<int32_t>(n)));
      b.store(out, row, b.select(none, b.i32(0), fin[1]));
      return std::vector<Value*>{};
    });
    KernelLaunch l;
    l.kernel = "argmax_rows";
    l.grid = {static_cast<uint32_t>(rows), 1, 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    l.args = {0, 1};
    g.launches.push_back(l);
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    int64_t n = s.at("n"), rows = s.at("n_rows");
    std::vector<float> v = random_floats(rng, static_cast<size_t>(n * rows), -10.0f, 10.0f);
    // Ties: copy each row's maximum to a later position (the first must win), and in some rows
    // to an earlier one too.
    for (int64_t r = 0; r < rows; ++r) {
      float* xr = v.data() + r * n;
      int64_t m = llm::ref::argmax(xr, n);
      std::uniform_int_distribution<int64_t> pos(0, n - 1);
      int64_t p = pos(rng);
      xr[std::max(p, m)] = xr[m];
      if (r % 2) xr[std::min(p, m)] = xr[m];
    }
    a[0].bytes.resize(v.size() * 4);
    std::memcpy(a[0].bytes.data(), v.data(), a[0].bytes.size());
  }
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    int64_t n = s.at("n"), rows = s.at("n_rows");
    const float* x = reinterpret_cast<const float*>(a[0].bytes.data());
    a[1].bytes.resize(static_cast<size_t>(rows * 4));
    for (int64_t r = 0; r < rows; ++r) {
      int32_t i = static_cast<int32_t>(llm::ref::argmax(x + r * n, n));
      std::memcpy(a[1].bytes.data() + r * 4, &i, 4);
    }
    return Status();
  }
  std::vector<Shape> test_shapes() const override {
    return {{{{"n", 1}, {"n_rows", 1}}},
            {{{"n", 1000}, {"n_rows", 3}}},
            {{{"n", 49152}, {"n_rows", 1}}},
            {{{"n", 262144}, {"n_rows", 2}}}};
  }
};

}  // namespace

const OpSpec& argmax_op() {
  static const ArgmaxOp op;
  return op;
}

}  // namespace loom::kernels
