// Helpers shared by the op generators (see op_util.h).
#include "loom/kernels/op_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/gguf/quant.h"

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

int mix_special_values(const OpSpec& op, const Shape& shape, const std::vector<ArgSpec>& specs, std::mt19937_64& rng,
                       std::span<HostArg> args) {
  static constexpr uint32_t kF32[] = {
      0x7f800000, 0xff800000,              // +inf, -inf
      0x7fc00000, 0x7fc00123, 0xffc00000,  // quiet NaN, NaN with a payload, negative NaN
      0x00000000, 0x80000000,              // +0.0, -0.0
      0x00000001, 0x007fffff, 0x80000001,  // denormals: smallest, largest, negative
      0x00800000, 0x80800000,              // +-smallest normal
      0x7f7fffff, 0xff7fffff, 0x7f000000,  // +-largest finite, 2^127
  };
  static constexpr uint16_t kF16[] = {0x7c00, 0xfc00, 0x7e00, 0x7e01, 0xfe00, 0x0000, 0x8000, 0x0001,
                                      0x03ff, 0x8001, 0x0400, 0x8400, 0x7bff, 0xfbff, 0x7800};
  int changed = 0;
  for (size_t i = 0; i < specs.size() && i < args.size(); ++i) {
    const ArgSpec& s = specs[i];
    if (s.kind != ArgKind::kBuffer || (s.role != ArgRole::kInput && s.role != ArgRole::kInOut) ||
        (s.elem != Scalar::kF32 && s.elem != Scalar::kF16) || !op.special_values(shape, i))
      continue;
    std::vector<uint8_t>& b = args[i].bytes;
    const size_t es = s.elem == Scalar::kF32 ? 4 : 2, n = b.size() / es;
    const size_t kinds = s.elem == Scalar::kF32 ? std::size(kF32) : std::size(kF16);
    // The first kinds^2 elements: the first buffer cycles through the kinds, the second holds
    // each kind for `kinds` elements, so two inputs meet in every pair (-0.0 + -0.0, inf + -inf
    // ...); later buffers rotate the second's pattern.
    const size_t prefix = kinds * kinds, c = static_cast<size_t>(changed);
    std::uniform_int_distribution<size_t> pick(0, kinds - 1);
    std::bernoulli_distribution quarter(0.25);
    for (size_t j = 0; j < n; ++j) {
      size_t k;
      if (j < prefix) k = c == 0 ? j % kinds : (j / kinds + c - 1) % kinds;
      else if (quarter(rng)) k = pick(rng);
      else continue;
      if (es == 4) std::memcpy(&b[4 * j], &kF32[k], 4);
      else std::memcpy(&b[2 * j], &kF16[k], 2);
    }
    ++changed;
  }
  return changed;
}

namespace {

thread_local bool t_fast_random_rows = false;

void quantized_random_rows(std::mt19937_64& rng, llm::GgmlType type, int64_t rows, int64_t n, float amp,
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

// Random bits for random_block_rows: whole 64-bit draws, cut into bytes.
class Bits {
 public:
  explicit Bits(std::mt19937_64& rng) : rng_(rng) {}
  void fill(uint8_t* p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
      const uint64_t v = rng_();
      std::memcpy(p, &v, 8);
    }
    if (n) {
      const uint64_t v = rng_();
      std::memcpy(p, &v, n);
    }
  }
  // Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(rng_() >> 40) * (1.0f / 16777216.0f); }
  float sign() { return (rng_() >> 63) ? -1.0f : 1.0f; }

 private:
  std::mt19937_64& rng_;
};

void put_f16(uint8_t* p, float v) {
  const uint16_t h = llm::fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// 6-bit scales and mins of Q4_K/Q5_K into their 12 packed bytes (the layout of
// unpack_scale_min_k4: j < 4 in the low 6 bits of bytes j and j + 4, j >= 4 split between the
// nibbles of byte j + 4 and the top 2 bits of bytes j - 4 and j).
void pack_scale_min_k4(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

// One block of `type` at p; false when the type has no direct generator.
bool random_block(Bits& b, llm::GgmlType type, float amp, uint8_t* p) {
  using llm::GgmlType;
  switch (type) {
    case GgmlType::Q4_0: {  // x = d (q - 8)
      put_f16(p, b.sign() * amp * b.uniform(0.25f, 1.0f) / 8);
      b.fill(p + 2, 16);
      return true;
    }
    case GgmlType::Q4_1: {  // x = d q + m
      const float a = amp * b.uniform(0.25f, 1.0f);
      put_f16(p, 2 * a / 15);
      put_f16(p + 2, -a);
      b.fill(p + 4, 16);
      return true;
    }
    case GgmlType::Q5_0: {  // x = d (q - 16)
      put_f16(p, b.sign() * amp * b.uniform(0.25f, 1.0f) / 16);
      b.fill(p + 2, 20);
      return true;
    }
    case GgmlType::Q5_1: {
      const float a = amp * b.uniform(0.25f, 1.0f);
      put_f16(p, 2 * a / 31);
      put_f16(p + 2, -a);
      b.fill(p + 4, 20);
      return true;
    }
    case GgmlType::Q8_0: {  // x = d q, q in -127..127 (as the quantizer gives)
      put_f16(p, amp * b.uniform(0.25f, 1.0f) / 127);
      b.fill(p + 2, 32);
      for (int i = 2; i < 34; ++i)
        if (p[i] == 0x80) p[i] = 0x81;
      return true;
    }
    case GgmlType::Q2_K: {  // x = d (sc & 15) q - dmin (sc >> 4), q in 0..3: centred when lo = hi
      for (int s = 0; s < 16; s += 2) {
        const auto v = static_cast<uint8_t>(std::lround(15 * b.uniform(0.25f, 1.0f)));
        p[s] = p[s + 1] = static_cast<uint8_t>(v | (v << 4));
      }
      b.fill(p + 16, 64);
      put_f16(p + 80, 2 * amp / (3 * 15));
      put_f16(p + 82, amp / 15);
      return true;
    }
    case GgmlType::Q3_K: {  // x = d (scale - 32)(q - 4): any 6-bit scales are centred
      b.fill(p, 32 + 64 + 12);
      put_f16(p + 108, amp / (4 * 32));
      return true;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {  // x = d sc q - dmin mn: centred with sc = mn, d = 2 dmin / qmax
      const float qmax = type == GgmlType::Q4_K ? 15.0f : 31.0f;
      uint8_t sc[8];
      for (uint8_t& v : sc) v = static_cast<uint8_t>(std::lround(63 * b.uniform(0.25f, 1.0f)));
      put_f16(p, 2 * amp / (qmax * 63));
      put_f16(p + 2, amp / 63);
      pack_scale_min_k4(sc, sc, p + 4);
      b.fill(p + 16, type == GgmlType::Q4_K ? 128 : 32 + 128);
      return true;
    }
    case GgmlType::IQ4_NL: {  // x = d value[q], values in -127..113
      put_f16(p, b.sign() * amp * b.uniform(0.25f, 1.0f) / 127);
      b.fill(p + 2, 16);
      return true;
    }
    case GgmlType::IQ4_XS: {  // x = d (scale - 32) value[q]: scales near +-16 or so, any sign
      b.fill(p + 2, 2 + 4 + 128);
      put_f16(p, amp / (32 * 127));
      return true;
    }
    case GgmlType::Q6_K: {  // x = d scale (q - 32)
      b.fill(p, 128 + 64);
      for (int s = 0; s < 16; s += 2) {
        const auto v = static_cast<int8_t>(b.sign() * std::lround(127 * b.uniform(0.25f, 1.0f)));
        p[192 + s] = p[192 + s + 1] = static_cast<uint8_t>(v);
      }
      put_f16(p + 208, amp / (32 * 127));
      return true;
    }
    default: return false;
  }
}

}  // namespace

void random_block_rows(std::mt19937_64& rng, llm::GgmlType type, int64_t rows, int64_t n, float amp, uint8_t* dst) {
  using llm::GgmlType;
  const auto info = llm::ggml_type_info(static_cast<uint32_t>(type));
  bool direct = false;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,
                     GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS})
    direct = direct || t == type;
  Bits b(rng);
  if (!direct || !info || n % info->block_elems != 0) {
    quantized_random_rows(rng, type, rows, n, amp, dst);
    return;
  }
  const int64_t blocks = rows * (n / info->block_elems);
  for (int64_t i = 0; i < blocks; ++i) random_block(b, type, amp, dst + i * info->block_bytes);
}

ScopedFastRandomRows::ScopedFastRandomRows() : prev_(t_fast_random_rows) { t_fast_random_rows = true; }
ScopedFastRandomRows::~ScopedFastRandomRows() { t_fast_random_rows = prev_; }

void random_rows(std::mt19937_64& rng, llm::GgmlType type, int64_t rows, int64_t n, float amp,
                 uint8_t* dst) {
  // Formats Loom reads but does not write (the codebook ones) get random valid blocks.
  if (t_fast_random_rows || !llm::can_quantize(type)) {
    random_block_rows(rng, type, rows, n, amp, dst);
    return;
  }
  quantized_random_rows(rng, type, rows, n, amp, dst);
}

void Emit::when(ir::Value* cond, const std::function<void()>& body) {
  if_then_else(cond, {}, [&] {
    body();
    return std::vector<ir::Value*>{};
  });
}

ir::Value* Emit::warp_sum_f64(ir::Value* x) {
  using ir::Scalar;
  const ir::Type u64 = ir::Type::scalar(Scalar::kU64), u32 = ir::Type::scalar(Scalar::kU32),
                 f64 = ir::Type::scalar(Scalar::kF64);
  for (int32_t off = 16; off >= 1; off /= 2) {
    ir::Value* bits = bitcast(x, u64);
    ir::Value* lo = shfl(ir::Mode::kXor, convert(bits, u32), i32(off));
    ir::Value* hi = shfl(ir::Mode::kXor, convert(shr(bits, const_int(u64, 32)), u32), i32(off));
    ir::Value* other = bit_or(shl(convert(hi, u64), const_int(u64, 32)), convert(lo, u64));
    x = add(x, bitcast(other, f64));
  }
  return x;
}

std::pair<ir::Value*, ir::Value*> Emit::merge_absmax(ir::Value* lo_a, ir::Value* lo_m, ir::Value* hi_a,
                                                     ir::Value* hi_m) {
  ir::Value* gt = cmp(ir::Mode::kGt, hi_a, lo_a);
  return {select(gt, hi_a, lo_a), select(gt, hi_m, lo_m)};
}

std::pair<ir::Value*, ir::Value*> Emit::warp_absmax(ir::Value* am, ir::Value* mx, ir::Value* lane) {
  for (int32_t off = 1; off <= 16; off *= 2) {
    ir::Value* oa = shfl(ir::Mode::kXor, am, i32(off));
    ir::Value* om = shfl(ir::Mode::kXor, mx, i32(off));
    ir::Value* upper = cmp(ir::Mode::kNe, bit_and(lane, i32(off)), i32(0));
    auto [na, nm] = merge_absmax(select(upper, oa, am), select(upper, om, mx), select(upper, am, oa), select(upper, mx, om));
    am = na;
    mx = nm;
  }
  return {am, mx};
}

}  // namespace loom::kernels
