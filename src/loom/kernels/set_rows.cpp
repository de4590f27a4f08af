// set_rows: rows of f32 values written into chosen rows of a destination (f32 or f16), the
// inverse of get_rows and ggml's SET_ROWS (a KV cache's write of a step's keys and values):
// dst[batch][ids[row]] = convert(x[batch][row]). Batched: x and dst have b2 x b3 batches of
// n_rows and n_dst rows; the ids are [i3][i2][n_rows] and batch (p2, p3) reads ids batch
// (p2 % i2, p3 % i3), as ggml broadcasts them. Rows the ids do not name keep their values; an
// id outside 0..n_dst-1 writes nothing. One thread per element; conversion to f16 rounds to
// nearest even, as ggml's does. Optional x_row, x_b2, x_b3: x's rows and batches lie that many
// values apart (a view, e.g. V of a fused QKV row; defaults dense).
#include <algorithm>
#include <cstring>

#include "loom/gguf/quant.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels {
namespace {

using ir::Mode;
using ir::Scalar;
using ir::Value;
using llm::GgmlType;

class SetRowsOp final : public OpSpec {
 public:
  std::string_view name() const override { return "set_rows"; }
  std::string_view description() const override {
    return "dst rows chosen by i32/i64 ids = f32 rows converted to dst's type (f32, f16): ggml's SET_ROWS";
  }

  Status validate(const Shape& s) const override {
    for (const char* d : {"n", "n_rows", "n_dst", "b2", "b3", "i2", "i3", "itype", "dtype"})
      if (!s.dims.count(d)) return invalid_argument("set_rows: shape lacks '{}'", d);
    const int64_t n = s.at("n"), nr = s.at("n_rows"), nd = s.at("n_dst"), b2 = s.at("b2"), b3 = s.at("b3");
    const int64_t i2 = s.at("i2"), i3 = s.at("i3");
    if (n < 1 || n > (1 << 24) || nr < 1 || nd < 1 || nd > (1 << 24))
      return invalid_argument("set_rows: n={} n_rows={} n_dst={} out of range", n, nr, nd);
    if (b2 < 1 || b3 < 1 || i2 < 1 || i3 < 1 || b2 % i2 || b3 % i3)
      return invalid_argument("set_rows: batches {}x{} must be multiples of the ids' {}x{}", b2, b3, i2, i3);
    if (nr * b2 * b3 > 65535) return invalid_argument("set_rows: {} rows in all (at most 65535)", nr * b2 * b3);
    if (n * nd * b2 * b3 > (int64_t{1} << 31)) return invalid_argument("set_rows: destination too large");
    if (s.at("itype") != static_cast<int64_t>(GgmlType::I32) && s.at("itype") != static_cast<int64_t>(GgmlType::I64))
      return invalid_argument("set_rows: itype={} (26: i32, 27: i64)", s.at("itype"));
    if (s.at("dtype") != static_cast<int64_t>(GgmlType::F32) && s.at("dtype") != static_cast<int64_t>(GgmlType::F16))
      return invalid_argument("set_rows: dtype={} (0: f32, 1: f16)", s.at("dtype"));
    if (strided(s)) {
      const int64_t xr = x_row(s), x2 = x_b2(s), x3 = x_b3(s);
      if (xr < n || x2 < 0 || x3 < 0 || x_elems(s) > (int64_t{1} << 31))
        return invalid_argument("set_rows: x strides {}, {}, {} for rows of {}", xr, x2, x3, n);
    }
    return Status();
  }

  static bool strided(const Shape& s) { return s.dims.count("x_row") || s.dims.count("x_b2") || s.dims.count("x_b3"); }
  static int64_t x_row(const Shape& s) { return s.dims.count("x_row") ? s.at("x_row") : s.at("n"); }
  static int64_t x_b2(const Shape& s) { return s.dims.count("x_b2") ? s.at("x_b2") : x_row(s) * s.at("n_rows"); }
  static int64_t x_b3(const Shape& s) { return s.dims.count("x_b3") ? s.at("x_b3") : x_b2(s) * s.at("b2"); }
  // Values x spans: the last row of the last batch, plus one row.
  static int64_t x_elems(const Shape& s) {
    if (!strided(s)) return s.at("n") * s.at("n_rows") * s.at("b2") * s.at("b3");
    return (s.at("n_rows") - 1) * x_row(s) + (s.at("b2") - 1) * x_b2(s) + (s.at("b3") - 1) * x_b3(s) + s.at("n");
  }

  static bool ids64(const Shape& s) { return s.at("itype") == static_cast<int64_t>(GgmlType::I64); }
  static bool f16(const Shape& s) { return s.at("dtype") == static_cast<int64_t>(GgmlType::F16); }

  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t n = s.at("n"), batches = s.at("b2") * s.at("b3");
    return {elt::buffer_arg("x", ArgRole::kInput, x_elems(s), Scalar::kF32),
            elt::buffer_arg("ids", ArgRole::kInput, s.at("n_rows") * s.at("i2") * s.at("i3"),
                            ids64(s) ? Scalar::kI64 : Scalar::kI32),
            elt::buffer_arg("dst", ArgRole::kInOut, n * s.at("n_dst") * batches, f16(s) ? Scalar::kF16 : Scalar::kF32)};
  }
  Cost cost(const Shape& s) const override {
    const double e = static_cast<double>(s.at("n") * s.at("n_rows") * s.at("b2") * s.at("b3"));
    return {e * (4 + (f16(s) ? 2 : 4)), e};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind) const override { return {{"threads", {32, 64, 128, 256}}}; }
  Schedule default_schedule(const Shape&, ir::TargetKind) const override { return {{"threads", 128}}; }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    const int64_t n = s.at("n"), nr = s.at("n_rows"), nd = s.at("n_dst"), b2 = s.at("b2"), b3 = s.at("b3");
    const int64_t i2 = s.at("i2"), i3 = s.at("i3"), threads = sch.at("threads");
    auto i32c = [](Emit& b, int64_t v) { return b.i32(static_cast<int32_t>(v)); };
    Generated g;
    const std::string kname = fmt::format("set_rows_{}_{}", f16(s) ? "f16" : "f32", ids64(s) ? "i64" : "i32");
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    Value* x = b.param(ty::gptr(Scalar::kF32), "x");
    Value* ids = b.param(ty::gptr(ids64(s) ? Scalar::kI64 : Scalar::kI32), "ids");
    Value* dst = b.param(ty::gptr(f16(s) ? Scalar::kF16 : Scalar::kF32), "dst");
    Value* c = b.global_x();
    Value* row = b.block_id(Mode::kY);  // over all batches: row + n_rows (p2 + b2 p3)
    b.if_then_else(b.cmp(Mode::kLt, c, i32c(b, n)), {}, [&] {
      Value* r = b.rem(row, i32c(b, nr));
      Value* q = b.div(row, i32c(b, nr));
      Value* p2 = b.rem(q, i32c(b, b2));
      Value* p3 = b.div(q, i32c(b, b2));
      Value* ib = b.add(b.rem(p2, i32c(b, i2)), b.mul(b.rem(p3, i32c(b, i3)), i32c(b, i2)));
      Value* id = b.load(ids, b.add(r, b.mul(ib, i32c(b, nr))));
      // In range as i64 first (an i64 id past 2^31 must not wrap into range).
      Value* id64 = ids64(s) ? id : b.convert(id, ty::i64);
      Value* ok = b.bit_and(b.cmp(Mode::kLe, b.i64(0), id64), b.cmp(Mode::kLt, id64, b.i64(nd)));
      b.if_then_else(ok, {}, [&] {
        Value* drow = b.add(b.convert(id64, ty::i32), b.mul(q, i32c(b, nd)));
        Value* xi = strided(s) ? b.add(b.add(b.mul(r, i32c(b, x_row(s))), b.mul(p2, i32c(b, x_b2(s)))),
                                       b.add(b.mul(p3, i32c(b, x_b3(s))), c))
                               : b.add(b.mul(row, i32c(b, n)), c);
        Value* v = b.load(x, xi);
        b.store(dst, b.add(b.mul(drow, i32c(b, n)), c), f16(s) ? b.convert(v, ty::f16) : v);
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
    KernelLaunch l;
    l.kernel = kname;
    l.args = {0, 1, 2};
    l.grid = {static_cast<uint32_t>((n + threads - 1) / threads), static_cast<uint32_t>(nr * b2 * b3), 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    g.launches.push_back(l);
    return g;
  }

  // Distinct ids per ids batch (ggml leaves repeated ids' order undefined), one of them past
  // the destination's end when there is room to show that it writes nothing.
  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    const int64_t n = s.at("n"), nr = s.at("n_rows"), nd = s.at("n_dst"), batches = s.at("b2") * s.at("b3");
    std::vector<float> x = random_floats(rng, static_cast<size_t>(x_elems(s)), -4.0f, 4.0f);
    a[0].bytes.resize(x.size() * 4);
    std::memcpy(a[0].bytes.data(), x.data(), a[0].bytes.size());
    const int64_t nid = s.at("i2") * s.at("i3"), isz = ids64(s) ? 8 : 4;
    a[1].bytes.resize(static_cast<size_t>(nr * nid * isz));
    for (int64_t bi = 0; bi < nid; ++bi) {
      std::vector<int64_t> perm(static_cast<size_t>(std::max(nd, nr)));
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);  // ids >= nd: outside
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t v = perm[static_cast<size_t>(r)];
        const int32_t v32 = static_cast<int32_t>(v);
        std::memcpy(a[1].bytes.data() + (bi * nr + r) * isz, isz == 8 ? static_cast<const void*>(&v) : &v32, static_cast<size_t>(isz));
      }
    }
    std::vector<float> d = random_floats(rng, static_cast<size_t>(n * nd * batches), -4.0f, 4.0f);
    if (f16(s)) {
      a[2].bytes.resize(d.size() * 2);
      for (size_t i = 0; i < d.size(); ++i) {
        const uint16_t h = llm::fp32_to_fp16(d[i]);
        std::memcpy(a[2].bytes.data() + 2 * i, &h, 2);
      }
    } else {
      a[2].bytes.resize(d.size() * 4);
      std::memcpy(a[2].bytes.data(), d.data(), a[2].bytes.size());
    }
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const int64_t n = s.at("n"), nr = s.at("n_rows"), nd = s.at("n_dst"), b2 = s.at("b2"), b3 = s.at("b3");
    const int64_t i2 = s.at("i2"), i3 = s.at("i3"), isz = ids64(s) ? 8 : 4;
    const float* x = reinterpret_cast<const float*>(a[0].bytes.data());
    for (int64_t p3 = 0; p3 < b3; ++p3)
      for (int64_t p2 = 0; p2 < b2; ++p2)
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t at = r + nr * ((p2 % i2) + i2 * (p3 % i3));
          int64_t id = 0;
          if (isz == 8) {
            std::memcpy(&id, a[1].bytes.data() + at * 8, 8);
          } else {
            int32_t v;
            std::memcpy(&v, a[1].bytes.data() + at * 4, 4);
            id = v;
          }
          if (id < 0 || id >= nd) continue;
          const int64_t src = r * x_row(s) + p2 * x_b2(s) + p3 * x_b3(s), dstr = (id + nd * (p2 + b2 * p3)) * n;
          for (int64_t c = 0; c < n; ++c) {
            if (f16(s)) {
              const uint16_t h = llm::fp32_to_fp16(x[src + c]);
              std::memcpy(a[2].bytes.data() + (dstr + c) * 2, &h, 2);
            } else {
              std::memcpy(a[2].bytes.data() + (dstr + c) * 4, &x[src + c], 4);
            }
          }
        }
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    auto add = [&](int64_t n, int64_t nr, int64_t nd, int64_t b2, int64_t b3, int64_t i2, int64_t i3, GgmlType it,
                   GgmlType dt) {
      out.push_back({{{"n", n}, {"n_rows", nr}, {"n_dst", nd}, {"b2", b2}, {"b3", b3}, {"i2", i2}, {"i3", i3},
                      {"itype", static_cast<int64_t>(it)}, {"dtype", static_cast<int64_t>(dt)}}});
    };
    for (GgmlType dt : {GgmlType::F32, GgmlType::F16})
      for (GgmlType it : {GgmlType::I32, GgmlType::I64}) {
        add(256, 7, 11, 1, 1, 1, 1, it, dt);  // 7 of 11 rows written
        add(33, 3, 2, 2, 3, 1, 3, it, dt);    // more rows than the destination: some ids outside
      }
    add(64 * 8, 5, 1024, 1, 1, 1, 1, GgmlType::I64, GgmlType::F16);  // a KV cache's step of 5 tokens
    // V of a fused QKV row (rows 3 x 128 values apart), and a view of half of each batch's rows.
    add(128, 5, 64, 1, 1, 1, 1, GgmlType::I64, GgmlType::F16);
    out.back().dims["x_row"] = 384;
    add(33, 2, 5, 2, 3, 1, 3, GgmlType::I64, GgmlType::F32);
    out.back().dims["x_b2"] = 33 * 4;
    out.back().dims["x_b3"] = 33 * 4 * 2;
    return out;
  }
};

}  // namespace

const OpSpec& set_rows_op() {
  static const SetRowsOp op;
  return op;
}

}  // namespace loom::kernels
