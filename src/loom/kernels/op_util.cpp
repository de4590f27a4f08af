// Helpers shared by the op generators (see op_util.h).
#include "loom/kernels/op_util.h"

#include <algorithm>

#include "loom/llm/quant.h"

namespace loom::kernels {

using ir::Scalar;
using ir::Type;
using ir::Value;

Value* Emit::lanes(Scalar e, std::initializer_list<int64_t> vals) {
  std::vector<Value*> vs;
  for (int64_t x : vals) vs.push_back(const_int(Type::scalar(e), x));
  return build(std::move(vs));
}

Value* Emit::load_at(Value* base_u8, Value* byte_off, Type type, int align) {
  Scalar e = type.elem();
  int eb = (ir::scalar_bits(e) + 7) / 8;
  Value* p = offset(base_u8, byte_off);
  const int bytes = eb * type.lanes();
  align = std::max(align, 1);
  if (align < eb) {
    // The IR's alignment is at least the element size: load narrower elements (as aligned as
    // the address is known to be) and reinterpret. GPUs fault on misaligned wide loads.
    Scalar narrow = align >= 2 ? Scalar::kU16 : Scalar::kU8;
    int nb = align >= 2 ? 2 : 1;
    int lanes = bytes / nb;
    if (lanes <= 16) {
      Value* np = narrow == Scalar::kU8 ? p : bitcast(p, Type::pointer(base_u8->type.addr_space(), narrow));
      return bitcast(load(np, i32(0), Type::of(narrow, lanes), nb), type);
    }
  }
  if (e != Scalar::kU8) p = bitcast(p, Type::pointer(base_u8->type.addr_space(), e));
  int a = std::min(std::max(align, eb), bytes);
  return load(p, i32(0), type, a);
}

void Emit::store_at(Value* base_u8, Value* byte_off, Value* value, int align) {
  Scalar e = value->type.elem();
  int eb = (ir::scalar_bits(e) + 7) / 8;
  Value* p = offset(base_u8, byte_off);
  if (e != Scalar::kU8) p = bitcast(p, Type::pointer(base_u8->type.addr_space(), e));
  int a = std::max(align, eb);
  a = std::min(a, eb * value->type.lanes());
  store(p, i32(0), value, a);
}

Value* Emit::load_f16(Value* base_u8, Value* byte_off) {
  Value* bits = load_at(base_u8, byte_off, Type::scalar(Scalar::kU16), 2);
  if (!cpu) return convert(bitcast(bits, Type::scalar(Scalar::kF16)), Type::scalar(Scalar::kF32));
  // Magnitude bits moved into f32 position read as 2^-112 times the half's value (subnormal
  // halves land on f32 subnormals), so one exact multiply by 2^112 finishes the conversion.
  Value* h = convert(bits, Type::scalar(Scalar::kU32));
  Value* mag = bitcast(shlc(andc(h, 0x7FFF), 13), Type::scalar(Scalar::kF32));
  Value* f = bitcast(mul(mag, f32(0x1p112)), Type::scalar(Scalar::kU32));
  return bitcast(bit_or(f, shlc(andc(h, 0x8000), 16)), Type::scalar(Scalar::kF32));
}

Value* Emit::int_to_f32(Value* v, bool small_range) {
  Type ft = v->type.with_elem(Scalar::kF32);
  if (!cpu) return convert(v, ft);
  // Exact for |x| < 2^22: the bits of 1.5 * 2^23 + x, minus 1.5 * 2^23. Wider values are split
  // into high and low 16 bits (each exact), joined with one rounding add (= convert's rounding).
  Type it = v->type;
  auto small = [&](Value* x) {
    Value* f = bitcast(add(x, c(it, 0x4B400000)), ft);
    return sub(f, cf(ft, 12582912.0));
  };
  if (small_range) return small(v);
  Value* hi = small(shrc(v, 16));
  Value* lo = small(andc(v, 0xFFFF));
  return add(mul(hi, cf(ft, 65536.0)), lo);
}

Value* Emit::global_x() {
  return add(mul(block_id(ir::Mode::kX), block_dim(ir::Mode::kX)), thread_id(ir::Mode::kX));
}

Status check_schedule(const std::vector<Knob>& space, const Schedule& s) {
  for (const auto& [name, value] : s) {
    auto it = std::find_if(space.begin(), space.end(), [&](const Knob& k) { return k.name == name; });
    if (it == space.end()) return invalid_argument("schedule knob '{}' is not in this op's space", name);
    if (std::find(it->choices.begin(), it->choices.end(), value) == it->choices.end())
      return invalid_argument("schedule knob {}={} is not one of its choices", name, value);
  }
  for (const Knob& k : space)
    if (!s.count(k.name)) return invalid_argument("schedule lacks knob '{}'", k.name);
  return Status();
}

int64_t knob(const Schedule& s, const std::string& name, int64_t fallback) {
  auto it = s.find(name);
  return it == s.end() ? fallback : it->second;
}

Result<llm::GgmlType> shape_type(const Shape& shape, std::string_view dim) {
  LOOM_ASSIGN_OR_RETURN(int64_t t, shape.get(dim));
  auto info = llm::ggml_type_info(static_cast<uint32_t>(t));
  if (t < 0 || !info) return invalid_argument("{}={} is not a ggml type number", dim, t);
  return info->type;
}

int64_t type_block_elems(llm::GgmlType type) {
  auto info = llm::ggml_type_info(static_cast<uint32_t>(type));
  return info ? info->block_elems : 1;
}

int64_t type_row_bytes(llm::GgmlType type, int64_t n) {
  auto info = llm::ggml_type_info(static_cast<uint32_t>(type));
  if (!info) return 0;
  return n / info->block_elems * info->block_bytes;
}

Status check_row(llm::GgmlType type, int64_t n, std::string_view what) {
  int64_t be = type_block_elems(type);
  if (n <= 0 || n % be != 0)
    return invalid_argument("{}={} must be a positive multiple of {}'s block ({} elements)", what, n,
                            llm::ggml_type_name(type), be);
  return Status();
}

std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void random_rows(std::mt19937_64& rng, llm::GgmlType type, int64_t rows, int64_t n, float amp,
                 uint8_t* dst) {
  const int64_t rb = type_row_bytes(type, n);
  std::vector<float> row;
  for (int64_t r = 0; r < rows; ++r) {
    row = random_floats(rng, static_cast<size_t>(n), -amp, amp);
    // Vary the magnitude per block so scales differ, as in real weights.
    std::uniform_real_distribution<float> mag(0.25f, 1.0f);
    for (int64_t b = 0; b < n; b += 32) {
      float m = mag(rng);
      for (int64_t i = b; i < std::min(n, b + 32); ++i) row[static_cast<size_t>(i)] *= m;
    }
    Status s = llm::quantize(type, row.data(), dst + r * rb, n);
    (void)s;  // finite input and a supported type: quantize cannot fail here
  }
}

}  // namespace loom::kernels
