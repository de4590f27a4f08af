// get_rows: embedding lookup. out[i] = dequantize(table row ids[i]); ids come from a device
// buffer (they change every step). One thread per 32-element chunk of an output row, with the
// reference dequantizers' arithmetic (llm::dequantize) operation for operation, so results are
// bit-identical.
#include <cstring>
#include <functional>

#include "loom/gguf/quant.h"
#include "loom/gguf/quant_blocks.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;

bool table_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0:
    case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q6_K:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

// kIq4nlValues[q] for a 4-bit index q (i32), as f32: a tree of selects on q's bits.
Value* iq4nl_value(Emit& b, Value* q) {
  std::vector<Value*> level;
  for (int v : llm::kIq4nlValues) level.push_back(b.f32(static_cast<float>(v)));
  for (int bit = 0; bit < 4; ++bit) {
    Value* set = b.cmp(Mode::kNe, b.andc(q, 1 << bit), b.i32(0));
    std::vector<Value*> next;
    for (size_t i = 0; i < level.size(); i += 2) next.push_back(b.select(set, level[i + 1], level[i]));
    level = std::move(next);
  }
  return level[0];
}

// Writes the 32 values of chunk `c` of a row (row base `wr`, u8) to out (f32 pointer).
void emit_chunk(Emit& b, GgmlType t, Value* wr, Value* c, Value* out) {
  auto u8 = [&](Value* off) { return b.convert(b.load_at(wr, off, ty::s(Scalar::kU8), 1), ty::i32); };
  auto each = [&](const std::function<Value*(Value* j)>& f) {
    b.for_loop(b.i32(0), b.i32(32), b.i32(1), {}, [&](Value* j, std::span<Value* const>) {
      b.store(out, j, f(j));
      return std::vector<Value*>{};
    });
  };
  switch (t) {
    case GgmlType::F32:
      each([&](Value* j) { return b.load_at(wr, b.mulc(b.add(b.mulc(c, 32), j), 4), ty::f32, 4); });
      return;
    case GgmlType::F16:
      each([&](Value* j) { return b.load_f16(wr, b.mulc(b.add(b.mulc(c, 32), j), 2)); });
      return;
    case GgmlType::BF16:  // the bits become the high half of an f32 (exact)
      each([&](Value* j) {
        Value* h = b.convert(b.load_at(wr, b.mulc(b.add(b.mulc(c, 32), j), 2), ty::s(Scalar::kU16), 2), ty::u32);
        return b.bitcast(b.shlc(h, 16), ty::f32);
      });
      return;
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: {
      const int bytes = t == GgmlType::Q4_0 ? 18 : t == GgmlType::Q4_1 ? 20 : t == GgmlType::Q5_0 ? 22
                      : t == GgmlType::Q5_1 ? 24 : 34;
      const bool has_m = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
      const bool q5 = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
      Value* base = b.mulc(c, bytes);
      Value* d = b.load_f16(wr, base);
      Value* m = has_m ? b.load_f16(wr, b.addc(base, 2)) : nullptr;
      Value* qh = q5 ? b.load_at(wr, b.addc(base, has_m ? 4 : 2), ty::u32, 2) : nullptr;
      const int qs = (has_m ? 4 : 2) + (q5 ? 4 : 0);
      each([&](Value* j) {
        Value* q;
        if (t == GgmlType::Q8_0) {
          q = b.convert(b.load_at(wr, b.add(b.addc(base, 2), j), ty::s(Scalar::kI8), 1), ty::i32);
          return b.mul(b.convert(q, ty::f32), d);
        }
        Value* hi_half = b.cmp(Mode::kGe, j, b.i32(16));
        Value* jj = b.select(hi_half, b.addc(j, -16), j);
        Value* byte = u8(b.add(b.addc(base, qs), jj));
        q = b.select(hi_half, b.shrc(byte, 4), b.andc(byte, 0xF));
        if (q5) {
          Value* bit = b.andc(b.shr(qh, b.convert(j, ty::u32)), 1);
          q = b.bit_or(q, b.shlc(b.convert(bit, ty::i32), 4));
        }
        if (has_m) return b.add(b.mul(b.convert(q, ty::f32), d), m);
        return b.mul(b.convert(b.addc(q, q5 ? -16 : -8), ty::f32), d);
      });
      return;
    }
    case GgmlType::Q4_K: {  // chunk c of 8 per super-block: group g = c/2, low (c even) or high nibbles
      Value* sb = b.shrc(c, 3);
      Value* cc = b.andc(c, 7);
      Value* base = b.mulc(sb, 144);
      Value* d = b.load_f16(wr, base);
      Value* dmin = b.load_f16(wr, b.addc(base, 2));
      // unpack_scale_min_k4(cc): j < 4 uses bytes j, j+4; else j+4, j-4, j.
      Value* lt4 = b.cmp(Mode::kLt, cc, b.i32(4));
      Value* sbase = b.addc(base, 4);
      Value* qj = u8(b.add(sbase, cc));
      Value* qj4 = u8(b.add(sbase, b.select(lt4, b.addc(cc, 4), b.addc(cc, 4))));
      Value* qjm4 = u8(b.add(sbase, b.select(lt4, cc, b.addc(cc, -4))));
      Value* sc = b.select(lt4, b.andc(qj, 63), b.bit_or(b.andc(qj4, 0xF), b.shlc(b.shrc(qjm4, 6), 4)));
      Value* mn = b.select(lt4, b.andc(qj4, 63), b.bit_or(b.shrc(qj4, 4), b.shlc(b.shrc(qj, 6), 4)));
      Value* d1 = b.mul(d, b.convert(sc, ty::f32));
      Value* m1 = b.mul(dmin, b.convert(mn, ty::f32));
      Value* qbase = b.add(b.addc(base, 16), b.mulc(b.shrc(cc, 1), 32));
      Value* high = b.cmp(Mode::kEq, b.andc(cc, 1), b.i32(1));
      each([&](Value* j) {
        Value* byte = u8(b.add(qbase, j));
        Value* q = b.select(high, b.shrc(byte, 4), b.andc(byte, 0xF));
        return b.sub(b.mul(d1, b.convert(q, ty::f32)), m1);
      });
      return;
    }
    case GgmlType::IQ4_NL: {  // x = d value[q], nibbles as Q4_0
      Value* base = b.mulc(c, 18);
      Value* d = b.load_f16(wr, base);
      each([&](Value* j) {
        Value* hi_half = b.cmp(Mode::kGe, j, b.i32(16));
        Value* byte = u8(b.add(b.addc(base, 2), b.andc(j, 15)));
        Value* q = b.select(hi_half, b.shrc(byte, 4), b.andc(byte, 0xF));
        return b.mul(d, iq4nl_value(b, q));
      });
      return;
    }
    case GgmlType::IQ4_XS: {  // chunk c of 8: sub-block s = c % 8 with its 6-bit scale
      Value* sb = b.shrc(c, 3);
      Value* s = b.andc(c, 7);
      Value* base = b.mulc(sb, 136);
      Value* d = b.load_f16(wr, base);
      Value* sh = b.convert(b.load_at(wr, b.addc(base, 2), ty::u16, 2), ty::i32);
      Value* lo = b.andc(b.shr(u8(b.add(b.addc(base, 4), b.shrc(s, 1))), b.mulc(b.andc(s, 1), 4)), 0xF);
      Value* hi = b.andc(b.shr(sh, b.mulc(s, 2)), 3);
      Value* dl = b.mul(d, b.convert(b.addc(b.bit_or(lo, b.shlc(hi, 4)), -32), ty::f32));
      Value* qbase = b.add(b.addc(base, 8), b.mulc(s, 16));
      each([&](Value* j) {
        Value* hi_half = b.cmp(Mode::kGe, j, b.i32(16));
        Value* byte = u8(b.add(qbase, b.andc(j, 15)));
        Value* q = b.select(hi_half, b.shrc(byte, 4), b.andc(byte, 0xF));
        return b.mul(dl, iq4nl_value(b, q));
      });
      return;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {  // chunk c of 8: half h = cc/4, shift 2k (k = cc%4), sub-blocks 8h+2k (+1)
      const bool q3 = t == GgmlType::Q3_K;
      Value* sb = b.shrc(c, 3);
      Value* cc = b.andc(c, 7);
      Value* h = b.shrc(cc, 2);
      Value* k = b.andc(cc, 3);
      Value* base = b.mulc(sb, q3 ? 110 : 84);
      Value* d = b.load_f16(wr, b.addc(base, q3 ? 108 : 80));
      Value* sub0 = b.add(b.mulc(h, 8), b.mulc(k, 2));
      Value* dl[2];
      Value* ml[2] = {nullptr, nullptr};
      for (int part = 0; part < 2; ++part) {
        Value* sub = b.addc(sub0, part);
        if (q3) {  // 6-bit scale offset by 32: low nibble in byte sub % 8, top bits in byte 8 + sub % 4
          Value* sbase = b.addc(base, 96);
          Value* lt8 = b.cmp(Mode::kLt, sub, b.i32(8));
          Value* lb = u8(b.add(sbase, b.andc(sub, 7)));
          Value* lo = b.select(lt8, b.andc(lb, 0xF), b.shrc(lb, 4));
          Value* hi = b.andc(b.shr(u8(b.add(b.addc(sbase, 8), b.andc(sub, 3))), b.mulc(b.shrc(sub, 2), 2)), 3);
          dl[part] = b.mul(d, b.convert(b.addc(b.bit_or(lo, b.shlc(hi, 4)), -32), ty::f32));
        } else {
          Value* sc = u8(b.add(base, sub));
          dl[part] = b.mul(d, b.convert(b.andc(sc, 0xF), ty::f32));
          ml[part] = b.mul(b.load_f16(wr, b.addc(base, 82)), b.convert(b.shrc(sc, 4), ty::f32));
        }
      }
      Value* qbase = b.add(b.addc(base, q3 ? 32 : 16), b.mulc(h, 32));
      Value* shift = b.mulc(k, 2);
      Value* hbit = b.add(b.mulc(h, 4), k);
      each([&](Value* l) {
        Value* second = b.cmp(Mode::kGe, l, b.i32(16));
        Value* q = b.andc(b.shr(u8(b.add(qbase, l)), shift), 3);
        if (q3) {
          Value* set = b.andc(b.shr(u8(b.add(base, l)), hbit), 1);
          q = b.sub(q, b.select(b.cmp(Mode::kNe, set, b.i32(0)), b.i32(0), b.i32(4)));
          return b.mul(b.select(second, dl[1], dl[0]), b.convert(q, ty::f32));
        }
        return b.sub(b.mul(b.select(second, dl[1], dl[0]), b.convert(q, ty::f32)), b.select(second, ml[1], ml[0]));
      });
      return;
    }
    case GgmlType::Q6_K: {  // chunk c of 8: half h = cc/4, quarter qq = cc%4
      Value* sb = b.shrc(c, 3);
      Value* cc = b.andc(c, 7);
      Value* base = b.mulc(sb, 210);
      Value* d = b.load_f16(wr, b.addc(base, 208));
      Value* h = b.shrc(cc, 2);
      Value* qq = b.andc(cc, 3);
      Value* ql = b.add(base, b.add(b.mulc(h, 64), b.mulc(b.andc(qq, 1), 32)));
      Value* qh = b.add(b.addc(base, 128), b.mulc(h, 32));
      Value* sc_base = b.add(b.addc(base, 192), b.add(b.mulc(h, 8), b.mulc(qq, 2)));
      Value* nib_hi = b.cmp(Mode::kGe, qq, b.i32(2));
      Value* hshift = b.mulc(qq, 2);
      each([&](Value* l) {
        Value* lb = u8(b.add(ql, l));
        Value* lo = b.select(nib_hi, b.shrc(lb, 4), b.andc(lb, 0xF));
        Value* hb = b.andc(b.shr(u8(b.add(qh, l)), hshift), 3);
        Value* q = b.addc(b.bit_or(lo, b.shlc(hb, 4)), -32);
        Value* s = b.convert(b.load_at(wr, b.add(sc_base, b.shrc(l, 4)), ty::s(Scalar::kI8), 1), ty::f32);
        return b.mul(b.mul(d, s), b.convert(q, ty::f32));
      });
      return;
    }
    default: return;
  }
}

class GetRowsOp final : public OpSpec {
 public:
  std::string_view name() const override { return "get_rows"; }
  std::string_view description() const override { return "embedding lookup: dequantized table rows by token id"; }

  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(GgmlType t, shape_type(s, "wtype"));
    if (!table_supported(t)) return invalid_argument("get_rows: table type {} is not supported", llm::ggml_type_name(t));
    LOOM_ASSIGN_OR_RETURN(int64_t n, s.get("n_in"));
    LOOM_ASSIGN_OR_RETURN(int64_t v, s.get("n_vocab"));
    LOOM_ASSIGN_OR_RETURN(int64_t ni, s.get("n_ids"));
    if (n <= 0 || n % 32 != 0) return invalid_argument("get_rows: n_in={} must be a multiple of 32", n);
    LOOM_RETURN_IF_ERROR(check_row(t, n, "n_in"));
    if (v <= 0 || v > (1 << 24)) return invalid_argument("get_rows: n_vocab={} out of range", v);
    if (ni <= 0 || ni > 65535) return invalid_argument("get_rows: n_ids={} out of range", ni);
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override {
    GgmlType t = static_cast<GgmlType>(s.at("wtype"));
    int64_t n = s.at("n_in"), v = s.at("n_vocab"), ni = s.at("n_ids");
    return {{"table", ArgKind::kBuffer, ArgRole::kInput, type_row_bytes(t, n) * v, Scalar::kU8},
            {"ids", ArgKind::kBuffer, ArgRole::kInput, ni * 4, Scalar::kI32},
            {"out", ArgKind::kBuffer, ArgRole::kOutput, ni * n * 4, Scalar::kF32}};
  }
  Cost cost(const Shape& s) const override {
    GgmlType t = static_cast<GgmlType>(s.at("wtype"));
    int64_t n = s.at("n_in"), ni = s.at("n_ids");
    return {static_cast<double>(ni * (type_row_bytes(t, n) + 4 + n * 4)), static_cast<double>(ni * n)};
  }
  Tolerance tolerance(const Shape&) const override { return {0, 0, true}; }
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind) const override {
    return {{"threads", {1, 32, 64, 128, 256}}};
  }
  Schedule default_schedule(const Shape&, ir::TargetKind t) const override {
    return {{"threads", t == ir::TargetKind::kCpp ? 1 : 64}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    GgmlType t = static_cast<GgmlType>(s.at("wtype"));
    const int64_t n = s.at("n_in"), v = s.at("n_vocab"), ni = s.at("n_ids"), threads = sch.at("threads");
    const int64_t chunks = n / 32, row_bytes = type_row_bytes(t, n);
    Generated g;
    std::string kname = fmt::format("get_rows_{}", llm::ggml_type_name(t));
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    Value* table = b.param(ty::gptr(Scalar::kU8), "table");
    Value* ids = b.param(ty::gptr(Scalar::kI32), "ids");
    Value* out = b.param(ty::gptr(Scalar::kF32), "out");
    Value* c = b.global_x();
    Value* i = b.block_id(Mode::kY);
    b.if_then_else(b.cmp(Mode::kLt, c, b.i32(static_cast<int32_t>(chunks))), {}, [&] {
      Value* id = b.load(ids, i);
      // Ids outside the vocabulary are clamped (the engine checks them on the host); a kernel
      // must never read outside its table.
      id = b.min(b.max(id, b.i32(0)), b.i32(static_cast<int32_t>(v - 1)));
      Value* wr = b.offset(table, b.mul(b.convert(id, ty::s(Scalar::kI64)), b.i64(row_bytes)));
      Value* o = b.offset(out, b.add(b.mul(i, b.i32(static_cast<int32_t>(n))), b.mulc(c, 32)));
      emit_chunk(b, t, wr, c, o);
      return std::vector<Value*>{};
    });
    KernelLaunch l;
    l.kernel = kname;
    l.grid = {static_cast<uint32_t>((chunks + threads - 1) / threads), static_cast<uint32_t>(ni), 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    l.args = {0, 1, 2};
    g.launches.push_back(l);
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    GgmlType t = static_cast<GgmlType>(s.at("wtype"));
    int64_t n = s.at("n_in"), v = s.at("n_vocab"), ni = s.at("n_ids");
    a[0].bytes.resize(static_cast<size_t>(type_row_bytes(t, n) * v));
    random_rows(rng, t, v, n, 1.0f, a[0].bytes.data());
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(v - 1));
    a[1].bytes.resize(static_cast<size_t>(ni * 4));
    for (int64_t j = 0; j < ni; ++j) {
      int32_t x = j == 0 ? static_cast<int32_t>(v - 1) : id(rng);  // the last row at least once
      std::memcpy(a[1].bytes.data() + j * 4, &x, 4);
    }
  }
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    GgmlType t = static_cast<GgmlType>(s.at("wtype"));
    int64_t n = s.at("n_in"), v = s.at("n_vocab"), ni = s.at("n_ids");
    llm::ref::WeightView wv{t, a[0].bytes.data(), n, v, static_cast<size_t>(type_row_bytes(t, n))};
    a[2].bytes.resize(static_cast<size_t>(ni * n * 4));
    return llm::ref::get_rows(wv, reinterpret_cast<const int32_t*>(a[1].bytes.data()), ni,
                              reinterpret_cast<float*>(a[2].bytes.data()));
  }
  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                       GgmlType::Q8_0})
      out.push_back({{{"n_in", 576}, {"n_vocab", 300}, {"n_ids", 3}, {"wtype", static_cast<int64_t>(t)}}});
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_XS})
      out.push_back({{{"n_in", 768}, {"n_vocab", 100}, {"n_ids", 4}, {"wtype", static_cast<int64_t>(t)}}});
    out.push_back({{{"n_in", 576}, {"n_vocab", 300}, {"n_ids", 3}, {"wtype", static_cast<int64_t>(GgmlType::IQ4_NL)}}});
    out.push_back({{{"n_in", 576}, {"n_vocab", 49152}, {"n_ids", 1}, {"wtype", 8}}});  // SmolLM2 (Q8_0)
    return out;
  }
};

}  // namespace

const OpSpec& get_rows_op() {
  static const GetRowsOp op;
  return op;
}

}  // namespace loom::kernels
