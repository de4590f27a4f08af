// The mixture-of-experts ops around the expert mat-vecs (matvec_id, in matvec.cpp):
//   moe_route: per row of router logits, softmax, the n_used largest probabilities (descending,
//              the lower index first on ties) and their weights, renormalized over the chosen
//              ones where asked (llm::ref::moe_route);
//   moe_sum:   the chosen experts' outputs weighted and summed in slot order (llm::ref::moe_sum).
// On the cpp target both do the reference's arithmetic operation for operation (ggml's exp
// polynomial, its 8-element groups summed in float and the groups in double), so the engine's
// cpu driver stays bit-identical to the reference backend. On GPU targets a warp shares a row
// of moe_route: each lane takes every 32nd group of 8, the lanes' double sums meet in a butterfly.
#include <cmath>
#include <cstring>

#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::Mode;
using ir::Scalar;
using ir::Value;

constexpr int64_t kMaxUsed = 64;  // slots are unrolled in the generated code

class MoeRouteOp final : public OpSpec {
 public:
  std::string_view name() const override { return "moe_route"; }
  std::string_view description() const override {
    return "router: softmax of each row's expert logits, top n_used ids and (renormalized) weights";
  }
  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(int64_t rows, s.get("n_rows"));
    LOOM_ASSIGN_OR_RETURN(int64_t ne, s.get("n_expert"));
    LOOM_ASSIGN_OR_RETURN(int64_t nu, s.get("n_used"));
    LOOM_ASSIGN_OR_RETURN(int64_t norm, s.get("norm"));
    if (rows < 1 || rows > 65535) return invalid_argument("moe_route: n_rows={} (1..65535)", rows);
    if (ne < 1 || ne > 4096) return invalid_argument("moe_route: n_expert={} (1..4096)", ne);
    if (nu < 1 || nu > ne || nu > kMaxUsed)
      return invalid_argument("moe_route: n_used={} (1..min(n_expert, {}))", nu, kMaxUsed);
    if (norm != 0 && norm != 1) return invalid_argument("moe_route: norm={} (0|1)", norm);
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t rows = s.at("n_rows"), ne = s.at("n_expert"), nu = s.at("n_used");
    return {{"logits", ArgKind::kBuffer, ArgRole::kInput, rows * ne * 4, Scalar::kF32},
            {"ids", ArgKind::kBuffer, ArgRole::kOutput, rows * nu * 4, Scalar::kI32},
            {"w", ArgKind::kBuffer, ArgRole::kOutput, rows * nu * 4, Scalar::kF32}};
  }
  Cost cost(const Shape& s) const override {
    const double rows = static_cast<double>(s.at("n_rows")), ne = static_cast<double>(s.at("n_expert")),
                 nu = static_cast<double>(s.at("n_used"));
    return {rows * (ne + 2 * nu) * 4, rows * ne * (4 + nu)};
  }
  // cpp: the reference's operations. GPU: the groups' double sums in another order (below
  // float rounding of the weights in practice).
  Tolerance tolerance(const Shape&) const override { return {1e-7, 1e-6, false}; }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind t) const override {
    if (t == ir::TargetKind::kCpp) return {{"lanes", {1}}};
    return {{"lanes", {32}}};
  }
  Schedule default_schedule(const Shape&, ir::TargetKind t) const override {
    return {{"lanes", t == ir::TargetKind::kCpp ? 1 : 32}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    const int64_t ne = s.at("n_expert"), nu = s.at("n_used"), rows = s.at("n_rows");
    const bool norm = s.at("norm") != 0;
    const int32_t lanes = static_cast<int32_t>(sch.at("lanes"));
    const ir::Type f32 = ty::f32, f64 = ty::s(Scalar::kF64);
    Generated g;
    ir::Kernel* k = g.module.add_kernel("moe_route");
    Emit b(*k);
    Value* logits = b.param(ty::gptr(Scalar::kF32), "logits");
    Value* ids = b.param(ty::gptr(Scalar::kI32), "ids");
    Value* w = b.param(ty::gptr(Scalar::kF32), "w");
    Value* row = b.block_id(Mode::kX);
    Value* lane = lanes > 1 ? b.thread_id(Mode::kX) : b.i32(0);
    Value* x = b.offset(logits, b.mul(row, b.i32(static_cast<int32_t>(ne))));
    Value* n = b.i32(static_cast<int32_t>(ne));
    auto butterfly = [&](Value* v, ir::Op op) {
      for (int o = lanes / 2; o >= 1; o /= 2) v = b.op(op, {v, b.shfl(Mode::kXor, v, b.i32(o))});
      return v;
    };
    // The row's maximum (ggml: a '>' scan; max of finite values in any order is the same).
    auto mx = b.for_loop(lane, n, b.i32(lanes), {b.f32(-INFINITY)}, [&](Value* i, std::span<Value* const> it) {
      return std::vector<Value*>{b.max(it[0], b.load(x, i))};
    });
    Value* m = lanes > 1 ? butterfly(mx[0], ir::Op::kMax) : mx[0];
    auto e_of = [&](Value* i) { return elt::exp_ggml(b, b.sub(b.load(x, i), m)); };
    // Groups of 8 in row order: halves added, then pairs, in float; group sums in double.
    const int32_t n_groups = static_cast<int32_t>((ne + 7) / 8);
    auto sm = b.for_loop(lane, b.i32(n_groups), b.i32(lanes), {b.const_float(f64, 0.0)},
                         [&](Value* gi, std::span<Value* const> it) {
                           Value* v[8];
                           for (int l = 0; l < 8; ++l) {
                             Value* i = b.add(b.mul(gi, b.i32(8)), b.i32(l));
                             if ((ne % 8) == 0) {
                               v[l] = e_of(i);
                             } else {
                               Value* in = b.cmp(Mode::kLt, i, n);
                               v[l] = b.select(in, e_of(b.select(in, i, b.i32(0))), b.f32(0.0));
                             }
                           }
                           Value* a[4];
                           for (int l = 0; l < 4; ++l) a[l] = b.add(v[l + 4], v[l]);
                           Value* grp = b.add(b.add(a[0], a[2]), b.add(a[1], a[3]));
                           return std::vector<Value*>{b.add(it[0], b.convert(grp, f64))};
                         });
    Value* sum = lanes > 1 ? b.warp_sum_f64(sm[0]) : sm[0];
    Value* inv = b.convert(b.div(b.const_float(f64, 1.0), sum), f32);
    auto p_of = [&](Value* i) { return b.mul(e_of(i), inv); };
    // Slot j: the best entry ranked after slot j-1's in (p descending, index ascending) order.
    std::vector<Value*> wp, wi;
    for (int64_t j = 0; j < nu; ++j) {
      auto best = b.for_loop(lane, n, b.i32(lanes), {b.f32(-1.0), n}, [&](Value* i, std::span<Value* const> it) {
        Value* p = p_of(i);
        Value* take = b.cmp(Mode::kGt, p, it[0]);
        if (j > 0) {
          Value* after = b.bit_or(b.cmp(Mode::kLt, p, wp.back()),
                                  b.bit_and(b.cmp(Mode::kEq, p, wp.back()), b.cmp(Mode::kGt, i, wi.back())));
          take = b.bit_and(take, after);
        }
        return std::vector<Value*>{b.select(take, p, it[0]), b.select(take, i, it[1])};
      });
      Value* bp = best[0];
      Value* bi = best[1];
      for (int o = lanes / 2; o >= 1; o /= 2) {
        Value* op = b.shfl(Mode::kXor, bp, b.i32(o));
        Value* oi = b.shfl(Mode::kXor, bi, b.i32(o));
        Value* take = b.bit_or(b.cmp(Mode::kGt, op, bp), b.bit_and(b.cmp(Mode::kEq, op, bp), b.cmp(Mode::kLt, oi, bi)));
        bp = b.select(take, op, bp);
        bi = b.select(take, oi, bi);
      }
      // Nothing ranked (NaN probabilities): expert 0, as the reference.
      Value* none = b.cmp(Mode::kGe, bi, n);
      bp = b.select(none, p_of(b.i32(0)), bp);
      bi = b.select(none, b.i32(0), bi);
      wp.push_back(bp);
      wi.push_back(bi);
    }
    if (norm) {
      Value* total = b.const_float(f64, 0.0);
      for (Value* v : wp) total = b.add(total, b.convert(v, f64));
      Value* sf = b.max(b.convert(total, f32), b.f32(6.103515625e-5));
      for (Value*& v : wp) v = b.div(v, sf);
    }
    Value* base = b.mul(row, b.i32(static_cast<int32_t>(nu)));
    b.when(b.cmp(Mode::kEq, lane, b.i32(0)), [&] {
      for (int64_t j = 0; j < nu; ++j) {
        Value* at = b.add(base, b.i32(static_cast<int32_t>(j)));
        b.store(ids, at, wi[static_cast<size_t>(j)]);
        b.store(w, at, wp[static_cast<size_t>(j)]);
      }
    });
    KernelLaunch l;
    l.kernel = "moe_route";
    l.grid = {static_cast<uint32_t>(rows), 1, 1};
    l.block = {static_cast<uint32_t>(lanes), 1, 1};
    l.args = {0, 1, 2};
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, target));
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    const int64_t rows = s.at("n_rows"), ne = s.at("n_expert");
    auto x = elt::f32s(a[0]);
    elt::fill_uniform(rng, x, -4.0f, 4.0f);
    // Ties: in odd rows two entries (one maybe among the best) share a value; the lower index
    // must come first.
    std::uniform_int_distribution<int64_t> pick(0, ne - 1);
    for (int64_t r = 1; r < rows && ne > 1; r += 2) {
      const int64_t i = pick(rng), j = pick(rng);
      x[static_cast<size_t>(r * ne + std::max(i, j))] = x[static_cast<size_t>(r * ne + std::min(i, j))];
    }
  }
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    llm::ref::moe_route(elt::f32s(a[0]).data(), s.at("n_rows"), s.at("n_expert"), s.at("n_used"), s.at("norm") != 0,
                        elt::i32s(a[1]).data(), elt::f32s(a[2]).data());
    return Status();
  }
  std::vector<Shape> test_shapes() const override {
    auto sh = [](int64_t rows, int64_t ne, int64_t nu, int64_t norm) {
      return Shape{{{"n_rows", rows}, {"n_expert", ne}, {"n_used", nu}, {"norm", norm}}};
    };
    return {sh(1, 8, 2, 1), sh(5, 8, 2, 1), sh(3, 60, 4, 0), sh(1, 128, 8, 1), sh(7, 128, 8, 1), sh(2, 4, 4, 1)};
  }
};

class MoeSumOp final : public OpSpec {
 public:
  std::string_view name() const override { return "moe_sum"; }
  std::string_view description() const override {
    return "y[r] = sum over slots j in order of x[r, j] * w[r, j]: the chosen experts' outputs, weighted";
  }
  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(int64_t rows, s.get("n_rows"));
    LOOM_ASSIGN_OR_RETURN(int64_t nu, s.get("n_used"));
    LOOM_ASSIGN_OR_RETURN(int64_t n, s.get("n"));
    if (rows < 1 || n < 1 || rows * n > (int64_t{1} << 30)) return invalid_argument("moe_sum: {} rows of {}", rows, n);
    if (nu < 1 || nu > kMaxUsed) return invalid_argument("moe_sum: n_used={} (1..{})", nu, kMaxUsed);
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t rows = s.at("n_rows"), nu = s.at("n_used"), n = s.at("n");
    return {{"x", ArgKind::kBuffer, ArgRole::kInput, rows * nu * n * 4, Scalar::kF32},
            {"w", ArgKind::kBuffer, ArgRole::kInput, rows * nu * 4, Scalar::kF32},
            {"y", ArgKind::kBuffer, ArgRole::kOutput, rows * n * 4, Scalar::kF32}};
  }
  Cost cost(const Shape& s) const override {
    const double rows = static_cast<double>(s.at("n_rows")), nu = static_cast<double>(s.at("n_used")),
                 n = static_cast<double>(s.at("n"));
    return {rows * (nu * n + nu + n) * 4, rows * n * 2 * nu};
  }
  // Each product rounded, then added in order, on every target.
  Tolerance tolerance(const Shape&) const override { return {0, 0, false}; }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind t) const override {
    if (t == ir::TargetKind::kCpp) return {{"per_thread", {256, 1024, 4096}}};
    return {{"threads", {128, 256}}};
  }
  Schedule default_schedule(const Shape&, ir::TargetKind t) const override {
    if (t == ir::TargetKind::kCpp) return {{"per_thread", 1024}};
    return {{"threads", 256}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    const int64_t rows = s.at("n_rows"), nu = s.at("n_used"), n = s.at("n");
    const int64_t total = rows * n;
    Generated g;
    ir::Kernel* k = g.module.add_kernel("moe_sum");
    Emit b(*k);
    Value* x = b.param(ty::gptr(Scalar::kF32), "x");
    Value* w = b.param(ty::gptr(Scalar::kF32), "w");
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    auto element = [&](Value* idx) {
      Value* r = b.div(idx, b.i32(static_cast<int32_t>(n)));
      Value* c = b.rem(idx, b.i32(static_cast<int32_t>(n)));
      Value* xr = b.add(b.mul(r, b.i32(static_cast<int32_t>(nu * n))), c);
      Value* wr = b.mul(r, b.i32(static_cast<int32_t>(nu)));
      Value* acc = nullptr;
      for (int64_t j = 0; j < nu; ++j) {
        Value* prod = b.mul(b.load(x, b.add(xr, b.i32(static_cast<int32_t>(j * n)))),
                            b.load(w, b.add(wr, b.i32(static_cast<int32_t>(j)))));
        acc = acc ? b.add(acc, prod) : prod;
      }
      b.store(y, idx, acc);
    };
    KernelLaunch l;
    l.kernel = "moe_sum";
    l.args = {0, 1, 2};
    if (target == ir::TargetKind::kCpp) {
      const int64_t per = sch.at("per_thread");
      Value* lo = b.mul(b.block_id(Mode::kX), b.i32(static_cast<int32_t>(per)));
      Value* hi = b.min(b.add(lo, b.i32(static_cast<int32_t>(per))), b.i32(static_cast<int32_t>(total)));
      b.for_loop(lo, hi, b.i32(1), {}, [&](Value* i, std::span<Value* const>) {
        element(i);
        return std::vector<Value*>{};
      });
      l.grid = {static_cast<uint32_t>((total + per - 1) / per), 1, 1};
      l.block = {1, 1, 1};
    } else {
      const int64_t threads = sch.at("threads");
      Value* i = b.global_x();
      b.when(b.cmp(Mode::kLt, i, b.i32(static_cast<int32_t>(total))), [&] { element(i); });
      l.grid = {static_cast<uint32_t>((total + threads - 1) / threads), 1, 1};
      l.block = {static_cast<uint32_t>(threads), 1, 1};
    }
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, target));
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    elt::fill_uniform(rng, elt::f32s(a[0]), -2.0f, 2.0f);
    elt::fill_uniform(rng, elt::f32s(a[1]), 0.0f, 1.0f);
  }
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    llm::ref::moe_sum(elt::f32s(a[0]).data(), elt::f32s(a[1]).data(), s.at("n_rows"), s.at("n_used"), s.at("n"),
                      elt::f32s(a[2]).data());
    return Status();
  }
  std::vector<Shape> test_shapes() const override {
    auto sh = [](int64_t rows, int64_t nu, int64_t n) { return Shape{{{"n_rows", rows}, {"n_used", nu}, {"n", n}}}; };
    return {sh(1, 2, 256), sh(3, 1, 100), sh(1, 8, 2048), sh(5, 8, 2048)};
  }
};

}  // namespace

const OpSpec& moe_route_op() {
  static const MoeRouteOp op;
  return op;
}
const OpSpec& moe_sum_op() {
  static const MoeSumOp op;
  return op;
}

}  // namespace loom::kernels
