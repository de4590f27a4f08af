// Helpers shared by the non-matrix ops (see elementwise_util.h).
#include "loom/kernels/elementwise_util.h"

#include <algorithm>
#include <cstring>

#include "loom/gguf/quant.h"
#include "loom/ir/verifier.h"

namespace loom::kernels::elt {

int64_t dim_or(const Shape& shape, std::string_view name, int64_t fallback) {
  auto it = shape.dims.find(std::string(name));
  return it == shape.dims.end() ? fallback : it->second;
}

float f32_dim(const Shape& shape, std::string_view name) {
  const auto bits = static_cast<uint32_t>(dim_or(shape, name, 0));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void set_f32_dim(Shape& shape, std::string_view name, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  shape.dims[std::string(name)] = static_cast<int64_t>(bits);
}

Status require_dim(std::string_view op, const Shape& shape, std::string_view name, int64_t lo,
                   int64_t hi) {
  auto it = shape.dims.find(std::string(name));
  if (it == shape.dims.end()) return invalid_argument("{}: shape lacks '{}'", op, name);
  if (it->second < lo || it->second > hi)
    return invalid_argument("{}: {}={} outside [{}, {}]", op, name, it->second, lo, hi);
  return Status();
}

Shape make_shape(std::initializer_list<std::pair<const char*, int64_t>> ints,
                 std::initializer_list<std::pair<const char*, float>> floats) {
  Shape s;
  for (const auto& [k, v] : ints) s.dims[k] = v;
  for (const auto& [k, v] : floats) set_f32_dim(s, k, v);
  return s;
}

Status check_schedule(std::string_view op, const std::vector<Knob>& space, const Schedule& schedule) {
  for (const Knob& k : space) {
    auto it = schedule.find(k.name);
    if (it == schedule.end()) return invalid_argument("{}: schedule lacks knob '{}'", op, k.name);
    if (std::find(k.choices.begin(), k.choices.end(), it->second) == k.choices.end())
      return invalid_argument("{}: {}={} is outside the schedule space", op, k.name, it->second);
  }
  return Status();
}

std::vector<int64_t> dividing(int64_t n, std::initializer_list<int64_t> candidates) {
  std::vector<int64_t> out;
  for (int64_t c : candidates)
    if (c > 0 && n % c == 0) out.push_back(c);
  if (out.empty() || out.front() != 1) out.insert(out.begin(), 1);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool gpu_target(ir::TargetKind t) { return t != ir::TargetKind::kCpp; }

ArgSpec buffer_arg(std::string name, ArgRole role, int64_t elems, ir::Scalar elem) {
  ArgSpec a;
  a.name = std::move(name);
  a.kind = ArgKind::kBuffer;
  a.role = role;
  a.elem = elem;
  a.bytes = elems * ((ir::scalar_bits(elem) + 7) / 8);
  return a;
}

void size_buffers(const std::vector<ArgSpec>& specs, std::span<HostArg> args) {
  for (size_t i = 0; i < specs.size() && i < args.size(); ++i)
    if (specs[i].kind == ArgKind::kBuffer) args[i].bytes.resize(static_cast<size_t>(specs[i].bytes));
}

std::span<float> f32s(HostArg& a) {
  return {reinterpret_cast<float*>(a.bytes.data()), a.bytes.size() / 4};
}
std::span<const float> f32s(const HostArg& a) {
  return {reinterpret_cast<const float*>(a.bytes.data()), a.bytes.size() / 4};
}
std::span<uint16_t> f16s(HostArg& a) {
  return {reinterpret_cast<uint16_t*>(a.bytes.data()), a.bytes.size() / 2};
}
std::span<int32_t> i32s(HostArg& a) {
  return {reinterpret_cast<int32_t*>(a.bytes.data()), a.bytes.size() / 4};
}

void fill_uniform(std::mt19937_64& rng, std::span<float> out, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (float& x : out) x = d(rng);
  if (!out.empty() && std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }))
    out[0] = hi * 0.5f + lo * 0.5f + 0.25f;
}

void fill_uniform_f16(std::mt19937_64& rng, std::span<uint16_t> out, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (uint16_t& x : out) x = llm::fp32_to_fp16(d(rng));
  if (!out.empty() && std::all_of(out.begin(), out.end(), [](uint16_t x) { return (x & 0x7FFF) == 0; }))
    out[0] = llm::fp32_to_fp16(0.25f);
}

ir::Type global_ptr(ir::Scalar s) { return ir::Type::pointer(ir::AddrSpace::kGlobal, s); }
ir::Type f32_type(int lanes) { return ir::Type::of(ir::Scalar::kF32, lanes); }

namespace {
ir::Value* horizontal(ir::Builder& b, ir::Value* v, ir::Op op) {
  if (!v->type.is_vector()) return v;
  std::vector<ir::Value*> lanes;
  for (int l = 0; l < v->type.lanes(); ++l) lanes.push_back(b.extract(v, l));
  while (lanes.size() > 1) {
    std::vector<ir::Value*> next;
    const size_t half = lanes.size() / 2;
    for (size_t i = 0; i < half; ++i) next.push_back(b.op(op, {lanes[i], lanes[i + half]}));
    lanes = std::move(next);
  }
  return lanes[0];
}
}  // namespace

ir::Value* horizontal_sum(ir::Builder& b, ir::Value* v) { return horizontal(b, v, ir::Op::kAdd); }
ir::Value* horizontal_max(ir::Builder& b, ir::Value* v) { return horizontal(b, v, ir::Op::kMax); }

Status verify_generated(std::string_view op, const Generated& g, ir::TargetKind target) {
  Status s = ir::verify(g.module, target);
  if (!s.ok()) return std::move(s).with_context(fmt::format("generating {}", op));
  return Status();
}

}  // namespace loom::kernels::elt

namespace loom::kernels::elt {

using ir::Value;

void RowLayout::emit(ir::Builder& b, const RowBody& body) {
  tid_ = b.thread_id(ir::Mode::kX);
  Value* bid = b.block_id(ir::Mode::kX);
  Value* first_row = b.mul(bid, b.i32(rows_per_block));
  if (!gpu) {
    b.for_loop(b.i32(0), b.i32(rows_per_block), b.i32(1), {}, [&](Value* r, std::span<Value* const>) {
      Value* row = b.add(first_row, r);
      b.if_then_else(b.cmp(ir::Mode::kLt, row, b.i32(static_cast<int32_t>(n_rows))), {}, [&] {
        body({row, b.i32(0), b.i32(1), b.const_int(ir::Type::scalar(ir::Scalar::kI1), 1)});
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
    return;
  }
  const int row_threads = 32 * warps_per_row;
  Value* local = b.div(tid_, b.i32(row_threads));
  Value* row = b.add(first_row, local);
  Value* live = b.cmp(ir::Mode::kLt, row, b.i32(static_cast<int32_t>(n_rows)));
  Value* clamped = b.min(row, b.i32(static_cast<int32_t>(n_rows - 1)));
  body({clamped, b.rem(tid_, b.i32(row_threads)), b.i32(row_threads), live});
}

Value* RowLayout::reduce(ir::Builder& b, Value* v, ir::Op op) {
  if (!gpu) return v;
  Value* w = b.warp_reduce(op == ir::Op::kMax ? ir::Mode::kMax : ir::Mode::kAdd, v);
  if (warps_per_row == 1) return w;
  Value* smem = b.alloc_shared(ir::Scalar::kF32, int64_t{rows_per_block} * warps_per_row);
  Value* warp = b.div(tid_, b.i32(32));  // = local row * warps_per_row + warp within the row
  b.if_then_else(b.cmp(ir::Mode::kEq, b.rem(tid_, b.i32(32)), b.i32(0)), {}, [&] {
    b.store(smem, warp, w);
    return std::vector<Value*>{};
  });
  b.barrier();
  Value* base = b.mul(b.div(tid_, b.i32(32 * warps_per_row)), b.i32(warps_per_row));
  Value* acc = b.load(smem, base);
  for (int i = 1; i < warps_per_row; ++i) acc = b.op(op, {acc, b.load(smem, b.add(base, b.i32(i)))});
  return acc;
}

ir::Value* exp_ggml(ir::Builder& b, ir::Value* x) {
  using ir::Mode;
  const int lanes = x->type.lanes();
  const ir::Type ft = x->type, ut = ir::Type::of(ir::Scalar::kU32, lanes);
  auto c = [&](float v) { return lanes > 1 ? b.splat(b.f32(v), lanes) : b.f32(v); };
  auto cu = [&](uint32_t v) { return b.const_int(ut, v); };
  auto bits = [&](ir::Value* f) { return b.bitcast(f, ut); };
  auto flt = [&](ir::Value* u) { return b.bitcast(u, ft); };
  ir::Value* r = c(0x1.8p23f);
  ir::Value* z = b.fma(x, c(0x1.715476p+0f), r);
  ir::Value* n = b.sub(z, r);
  ir::Value* nn = b.neg(n);
  ir::Value* bb = b.fma(nn, c(0x1.7f7d1cp-20f), b.fma(nn, c(0x1.62e4p-1f), x));
  ir::Value* e = b.shl(bits(z), cu(23));
  ir::Value* k = flt(b.add(e, cu(0x3f800000u)));
  ir::Value* u = b.mul(bb, bb);
  ir::Value* j = b.fma(b.fma(b.fma(c(0x1.0e4020p-7f), bb, c(0x1.573e2ep-5f)), u, b.fma(c(0x1.555e66p-3f), bb, c(0x1.fffdb6p-2f))),
                       u, b.mul(c(0x1.ffffecp-1f), bb));
  ir::Value* normal = b.fma(j, k, k);
  // |n| > 126: the scale 2^n is split in two factors (s1 * s2) so that neither overflows.
  ir::Value* g = b.select(b.cmp(Mode::kLe, n, c(0.0f)), cu(0x82000000u), cu(0u));
  ir::Value* s1 = flt(b.add(g, cu(0x7f000000u)));
  ir::Value* s2 = flt(b.sub(e, g));
  ir::Value* an = b.unary(ir::Op::kAbs, n);
  ir::Value* big = b.select(b.cmp(Mode::kGt, an, c(192.0f)), b.mul(s1, s1), b.mul(b.fma(s2, j, s2), s1));
  return b.select(b.cmp(Mode::kGt, an, c(126.0f)), big, normal);
}

}  // namespace loom::kernels::elt
