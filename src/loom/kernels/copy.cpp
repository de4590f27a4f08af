// copy: f32 values of a 4-d tensor read through any element strides (a transposed, permuted or
// sliced view) and written, in the same logical order, through the destination's strides as f32
// or f16 (rounded to nearest even, as ggml's): ggml's CONT and CPY.
// Shape: n0..n3 (the logical shape), s0..s3 (source strides in values), d0..d3 (destination
// strides in values; absent: dense), dtype (0 f32, 1 f16). Element (i0, i1, i2, i3) goes from
// x[sum i_k s_k] to y[sum i_k d_k]. One thread per element over the flat index.
#include <array>
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

class CopyOp final : public OpSpec {
 public:
  std::string_view name() const override { return "copy"; }
  std::string_view description() const override {
    return "y[i * d] = convert(x[i * s]) over a 4-d index (strided f32 source, strided f32/f16 destination): ggml's CONT, CPY";
  }

  static int64_t ne(const Shape& s, int k) { return s.at(fmt::format("n{}", k)); }
  static int64_t sstride(const Shape& s, int k) { return s.at(fmt::format("s{}", k)); }
  static int64_t dstride(const Shape& s, int k) {
    const std::string d = fmt::format("d{}", k);
    if (s.dims.count(d)) return s.at(d);
    int64_t st = 1;
    for (int j = 0; j < k; ++j) st *= ne(s, j);
    return st;
  }
  static int64_t total(const Shape& s) { return ne(s, 0) * ne(s, 1) * ne(s, 2) * ne(s, 3); }
  template <class F>
  static int64_t span(const Shape& s, F stride) {
    int64_t e = 1;
    for (int k = 0; k < 4; ++k) e += (ne(s, k) - 1) * stride(s, k);
    return e;
  }
  static bool f16(const Shape& s) { return s.at("dtype") == static_cast<int64_t>(GgmlType::F16); }

  Status validate(const Shape& s) const override {
    for (const char* d : {"n0", "n1", "n2", "n3", "s0", "s1", "s2", "s3", "dtype"})
      if (!s.dims.count(d)) return invalid_argument("copy: shape lacks '{}'", d);
    for (int k = 0; k < 4; ++k) {
      if (ne(s, k) < 1 || ne(s, k) > (int64_t{1} << 30)) return invalid_argument("copy: n{}={} out of range", k, ne(s, k));
      if (sstride(s, k) < 0 || dstride(s, k) < 0) return invalid_argument("copy: negative stride");
    }
    if (total(s) > (int64_t{1} << 30)) return invalid_argument("copy: more than 2^30 values");
    if (span(s, sstride) > (int64_t{1} << 31) - 1 || span(s, dstride) > (int64_t{1} << 31) - 1)
      return invalid_argument("copy: source or destination spans 2^31 values or more");
    if (s.at("dtype") != static_cast<int64_t>(GgmlType::F32) && s.at("dtype") != static_cast<int64_t>(GgmlType::F16))
      return invalid_argument("copy: dtype={} (0: f32, 1: f16)", s.at("dtype"));
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& s) const override {
    return {elt::buffer_arg("x", ArgRole::kInput, span(s, sstride), Scalar::kF32),
            // In/out: values between the destination's strided elements keep theirs.
            elt::buffer_arg("y", ArgRole::kInOut, span(s, dstride), f16(s) ? Scalar::kF16 : Scalar::kF32)};
  }
  Cost cost(const Shape& s) const override {
    const double e = static_cast<double>(total(s));
    return {e * (4 + (f16(s) ? 2 : 4)), 0};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind t) const override {
    if (!elt::gpu_target(t)) return {{"threads", {1}}, {"per_thread", {256, 1024, 4096}}};
    return {{"threads", {64, 128, 256}}, {"per_thread", {1, 2, 4}}};
  }
  Schedule default_schedule(const Shape&, ir::TargetKind t) const override {
    if (!elt::gpu_target(t)) return {{"threads", 1}, {"per_thread", 1024}};
    return {{"threads", 128}, {"per_thread", 1}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    const int64_t threads = sch.at("threads"), per_thread = sch.at("per_thread"), n = total(s);
    auto c32 = [](Emit& b, int64_t v) { return b.i32(static_cast<int32_t>(v)); };
    Generated g;
    const std::string kname = fmt::format("copy_f32_{}", f16(s) ? "f16" : "f32");
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    Value* x = b.param(ty::gptr(Scalar::kF32), "x");
    Value* y = b.param(ty::gptr(f16(s) ? Scalar::kF16 : Scalar::kF32), "y");
    // Consecutive threads take consecutive elements (GPU loads of a dense source coalesce); a
    // block covers threads * per_thread of them.
    Value* first = b.mul(b.block_id(Mode::kX), c32(b, threads * per_thread));
    Value* tid = b.thread_id(Mode::kX);
    b.for_loop(b.i32(0), c32(b, per_thread), b.i32(1), {}, [&](Value* it, std::span<Value* const>) {
      Value* e = b.add(first, b.add(b.mul(it, c32(b, threads)), tid));
      b.if_then_else(b.cmp(Mode::kLt, e, c32(b, n)), {}, [&] {
        Value* src = b.i32(0);
        Value* dst = b.i32(0);
        Value* rest = e;
        for (int kd = 0; kd < 4; ++kd) {
          Value* i = kd < 3 ? b.rem(rest, c32(b, ne(s, kd))) : rest;
          if (kd < 3) rest = b.div(rest, c32(b, ne(s, kd)));
          if (ne(s, kd) == 1) continue;
          src = b.add(src, b.mul(i, c32(b, sstride(s, kd))));
          dst = b.add(dst, b.mul(i, c32(b, dstride(s, kd))));
        }
        Value* v = b.load(x, src);
        b.store(y, dst, f16(s) ? b.convert(v, ty::f16) : v);
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
    KernelLaunch l;
    l.kernel = kname;
    l.args = {0, 1};
    l.grid = {static_cast<uint32_t>((n + threads * per_thread - 1) / (threads * per_thread)), 1, 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    g.launches.push_back(l);
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    std::vector<float> x = random_floats(rng, static_cast<size_t>(span(s, sstride)), -4.0f, 4.0f);
    a[0].bytes.resize(x.size() * 4);
    std::memcpy(a[0].bytes.data(), x.data(), a[0].bytes.size());
    std::vector<float> d = random_floats(rng, static_cast<size_t>(span(s, dstride)), -4.0f, 4.0f);
    if (f16(s)) {
      a[1].bytes.resize(d.size() * 2);
      for (size_t i = 0; i < d.size(); ++i) {
        const uint16_t h = llm::fp32_to_fp16(d[i]);
        std::memcpy(a[1].bytes.data() + 2 * i, &h, 2);
      }
    } else {
      a[1].bytes.resize(d.size() * 4);
      std::memcpy(a[1].bytes.data(), d.data(), a[1].bytes.size());
    }
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const float* x = reinterpret_cast<const float*>(a[0].bytes.data());
    for (int64_t i3 = 0; i3 < ne(s, 3); ++i3)
      for (int64_t i2 = 0; i2 < ne(s, 2); ++i2)
        for (int64_t i1 = 0; i1 < ne(s, 1); ++i1)
          for (int64_t i0 = 0; i0 < ne(s, 0); ++i0) {
            const int64_t si = i0 * sstride(s, 0) + i1 * sstride(s, 1) + i2 * sstride(s, 2) + i3 * sstride(s, 3);
            const int64_t di = i0 * dstride(s, 0) + i1 * dstride(s, 1) + i2 * dstride(s, 2) + i3 * dstride(s, 3);
            if (f16(s)) {
              const uint16_t h = llm::fp32_to_fp16(x[si]);
              std::memcpy(a[1].bytes.data() + di * 2, &h, 2);
            } else {
              std::memcpy(a[1].bytes.data() + di * 4, &x[si], 4);
            }
          }
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    auto add = [&](std::array<int64_t, 4> n, std::array<int64_t, 4> st, GgmlType dt) {
      Shape s{{{"dtype", static_cast<int64_t>(dt)}}};
      for (int k = 0; k < 4; ++k) {
        s.dims[fmt::format("n{}", k)] = n[static_cast<size_t>(k)];
        s.dims[fmt::format("s{}", k)] = st[static_cast<size_t>(k)];
      }
      out.push_back(std::move(s));
      return &out.back();
    };
    add({10, 7, 1, 1}, {7, 1, 70, 70}, GgmlType::F32);            // a transposed [7, 10] matrix
    add({64, 5, 4, 1}, {1, 256, 64, 1280}, GgmlType::F32);        // permute(0, 2, 1, 3) of [64, 4, 5]
    add({64, 4, 3, 1}, {1, 64, 512, 1536}, GgmlType::F16);        // V heads of a fused QKV row, to f16
    add({3, 2, 5, 2}, {10, 1, 30, 2}, GgmlType::F32);             // a 4-d permutation, odd sizes
    Shape* v = add({128, 2, 3, 1}, {1, 128, 256, 768}, GgmlType::F32);  // into a strided destination
    v->dims["d0"] = 1;
    v->dims["d1"] = 128;
    v->dims["d2"] = 512;
    v->dims["d3"] = 1536;
    return out;
  }
};

}  // namespace

const OpSpec& copy_op() {
  static const CopyOp op;
  return op;
}

}  // namespace loom::kernels
