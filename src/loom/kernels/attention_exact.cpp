// The cpu target's exact attention (see attention_exact.h): the reference's arithmetic in IR.
#include "loom/kernels/attention_exact.h"

#include <cfloat>
#include <string_view>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise_util.h"

namespace loom::kernels {

using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;

bool attention_exact_fits(const Shape& s) {
  const int64_t D = elt::dim_or(s, "head_dim", 0), n_ctx = elt::dim_or(s, "n_ctx", 0);
  return D > 0 && D % 32 == 0 && (n_ctx + 33 * D) * 4 <= (int64_t{1} << 20);
}

Result<Generated> attention_exact_cpu(const Shape& s, const std::vector<ArgSpec>& args) {
  if (!attention_exact_fits(s)) return invalid_argument("attention: the exact cpu kernel does not fit this shape");
  const int32_t T = static_cast<int32_t>(s.dims.at("n_tokens")), H = static_cast<int32_t>(s.dims.at("n_head"));
  const int32_t HK = static_cast<int32_t>(s.dims.at("n_head_kv")), D = static_cast<int32_t>(s.dims.at("head_dim"));
  const int32_t G = H / HK, n_ctx = static_cast<int32_t>(s.dims.at("n_ctx"));
  const int32_t swa = static_cast<int32_t>(s.dims.at("n_swa"));
  const bool multi_seq = s.dims.at("n_seq") > 1;
  const float scale = elt::f32_dim(s, "scale_f32"), cap = elt::f32_dim(s, "softcap_f32");
  const int32_t row_stride = HK * D;

  Generated g;
  ir::Kernel* k = g.module.add_kernel("attention_exact");
  ir::Builder b(*k);
  const Type fp = elt::global_ptr(Scalar::kF32), ip = elt::global_ptr(Scalar::kI32), hp = elt::global_ptr(Scalar::kF16);
  Value* qbuf = b.param(fp, "q");
  Value* pos_buf = b.param(ip, "pos");
  Value* seq_buf = multi_seq ? b.param(ip, "seq") : nullptr;
  Value* kc = b.param(hp, "k_cache");
  Value* vc = b.param(hp, "v_cache");
  Value* out = b.param(fp, "out");
  auto i32 = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
  const Type v8 = Type::of(Scalar::kF32, 8), h8 = Type::of(Scalar::kF16, 8), f64 = Type::scalar(Scalar::kF64);
  std::vector<Value*> none;
  auto body = [&](auto f) {
    return [f](Value* iv, std::span<Value* const> it) -> std::vector<Value*> { return f(iv, it); };
  };

  Value* h = b.block_id(Mode::kX);
  Value* tok = b.block_id(Mode::kY);
  Value* hk = b.div(h, i32(G));
  Value* pos = b.load(pos_buf, tok);
  Value* base = multi_seq ? b.mul(b.load(seq_buf, tok), i32(n_ctx)) : i32(0);
  Value* j0 = swa > 0 ? b.max(i32(0), b.sub(pos, i32(swa - 1))) : i32(0);
  Value* j1 = b.add(pos, i32(1));
  Value* n = b.sub(j1, j0);
  Value* qf = b.alloc_local(Scalar::kF32, D);
  Value* sc = b.alloc_local(Scalar::kF32, n_ctx);
  Value* acc = b.alloc_local(Scalar::kF32, int64_t{32} * D);
  Value* qsrc = b.mul(b.add(b.mul(tok, i32(H)), h), i32(D));
  Value* kv_head = b.mul(hk, i32(D));

  // q rounded to fp16 (the reference converts it once per head).
  b.for_loop(i32(0), i32(D), i32(8), none, body([&](Value* d, std::span<Value* const>) {
    b.store(qf, d, b.convert(b.convert(b.load(qbuf, b.add(qsrc, d), v8, 32), h8), v8), 32);
    return std::vector<Value*>{};
  }));
  // Scores: ggml's f16 dot (4 x 8 fma lanes per 32 values, combined in a fixed order).
  Value* zero8 = b.const_float(v8, 0.0);
  Value* m = b.for_loop(j0, j1, i32(1), {b.f32(-FLT_MAX)}, body([&](Value* j, std::span<Value* const> it) {
    Value* krow = b.add(b.mul(b.add(base, j), i32(row_stride)), kv_head);
    auto a = b.for_loop(i32(0), i32(D), i32(32), {zero8, zero8, zero8, zero8},
                        body([&](Value* i, std::span<Value* const> ai) {
                          std::vector<Value*> next;
                          for (int q = 0; q < 4; ++q) {
                            Value* e = b.add(i, i32(8 * q));
                            Value* kx = b.convert(b.load(kc, b.add(krow, e), h8, 16), v8);
                            next.push_back(b.fma(kx, b.load(qf, e, v8, 32), ai[static_cast<size_t>(q)]));
                          }
                          return next;
                        }));
    Value* a0 = b.add(b.add(a[0], a[2]), b.add(a[1], a[3]));
    Value* t[4];
    for (int l = 0; l < 4; ++l) t[l] = b.add(b.extract(a0, l), b.extract(a0, l + 4));
    Value* sj = b.add(b.add(t[0], t[1]), b.add(t[2], t[3]));
    if (cap > 0.0f) sj = b.mul(b.unary(ir::Op::kTanh, b.mul(sj, b.f32(1.0f / cap))), b.f32(cap));
    sj = b.mul(sj, b.f32(scale));
    b.store(sc, b.sub(j, j0), sj);
    return std::vector<Value*>{b.max(it[0], sj)};
  }))[0];
  // exp(s - max) with ggml's exp, eight scores a vector (the polynomial is lane-wise, so a
  // vector gives each lane the scalar's bits), the last n % 8 one at a time.
  Value* n8 = b.bit_and(n, i32(~7));
  Value* m8 = b.splat(m, 8);
  b.for_loop(i32(0), n8, i32(8), none, body([&](Value* j, std::span<Value* const>) {
    b.store(sc, j, elt::exp_ggml(b, b.sub(b.load(sc, j, v8, 4), m8)), 4);
    return std::vector<Value*>{};
  }));
  b.for_loop(n8, n, i32(1), none, body([&](Value* j, std::span<Value* const>) {
    b.store(sc, j, elt::exp_ggml(b, b.sub(b.load(sc, j), m)));
    return std::vector<Value*>{};
  }));
  // The sum: groups of 8 aligned as in ggml's row (index j0 first), halves added, then pairs, in
  // float; the groups' sums added in double, in order. A group the cells only partly cover (the
  // first and the last) reads its lanes one by one with zeros outside; the full groups between
  // them read one vector.
  auto group_sum = [&](std::span<Value* const> v) {
    Value* a[4];
    for (int l = 0; l < 4; ++l) a[l] = b.add(v[static_cast<size_t>(l + 4)], v[static_cast<size_t>(l)]);
    return b.convert(b.add(b.add(a[0], a[2]), b.add(a[1], a[3])), f64);
  };
  auto masked = body([&](Value* gi, std::span<Value* const> it) {
    Value* v[8];
    for (int l = 0; l < 8; ++l) {
      Value* kk = b.sub(b.add(gi, i32(l)), j0);
      Value* in = b.bit_and(b.cmp(Mode::kGe, kk, i32(0)), b.cmp(Mode::kLt, kk, n));
      Value* safe = b.select(in, kk, i32(0));
      v[l] = b.select(in, b.load(sc, safe), b.f32(0.0));
    }
    return std::vector<Value*>{b.add(it[0], group_sum(v))};
  });
  Value* g0 = b.bit_and(j0, i32(~7));
  Value* g1 = b.bit_and(b.add(j0, i32(7)), i32(~7));  // the first full group
  Value* g2 = b.max(g1, b.bit_and(j1, i32(~7)));      // the end of the full groups
  Value* gend = b.bit_and(b.add(j1, i32(7)), i32(~7));
  Value* sum = b.for_loop(g0, b.min(g1, gend), i32(8), {b.const_float(f64, 0.0)}, masked)[0];
  sum = b.for_loop(g1, g2, i32(8), {sum}, body([&](Value* gi, std::span<Value* const> it) {
          Value* x = b.load(sc, b.sub(gi, j0), v8, 4);
          Value* v[8];
          for (int l = 0; l < 8; ++l) v[l] = b.extract(x, l);
          return std::vector<Value*>{b.add(it[0], group_sum(v))};
        }))[0];
  sum = b.for_loop(g2, gend, i32(8), {sum}, masked)[0];
  Value* inv = b.convert(b.div(b.const_float(f64, 1.0), sum), Type::scalar(Scalar::kF32));
  // The probabilities rounded to fp16, in place (eight a vector, then the tail).
  Value* inv8 = b.splat(inv, 8);
  b.for_loop(i32(0), n8, i32(8), none, body([&](Value* j, std::span<Value* const>) {
    b.store(sc, j, b.convert(b.convert(b.mul(b.load(sc, j, v8, 4), inv8), h8), v8), 4);
    return std::vector<Value*>{};
  }));
  b.for_loop(n8, n, i32(1), none, body([&](Value* j, std::span<Value* const>) {
    b.store(sc, j, b.convert(b.convert(b.mul(b.load(sc, j), inv), Type::scalar(Scalar::kF16)), Type::scalar(Scalar::kF32)));
    return std::vector<Value*>{};
  }));
  // p·v: cell j's probability feeds accumulator lane j % 32, cells in order. Lane by lane, with
  // the lane's D values (up to 64 at a time) in registers through its cells j = L, L + 32, ...:
  // each lane sees the same fma sequence as when the cells are walked in order.
  const int32_t dchunk = D < 64 ? D : 64;
  b.for_loop(i32(0), i32(32), i32(1), none, body([&](Value* lane, std::span<Value* const>) {
    // The lane's first cell at or after j0.
    Value* first = b.add(j0, b.bit_and(b.sub(lane, b.bit_and(j0, i32(31))), i32(31)));
    for (int32_t d0 = 0; d0 < D; d0 += dchunk) {
      std::vector<Value*> init(static_cast<size_t>(dchunk / 8), zero8);
      auto a = b.for_loop(first, j1, i32(32), init, body([&](Value* j, std::span<Value* const> it) {
        Value* p8 = b.splat(b.load(sc, b.sub(j, j0)), 8);
        Value* vrow = b.add(b.mul(b.add(base, j), i32(row_stride)), b.add(kv_head, i32(d0)));
        std::vector<Value*> next;
        for (int32_t c = 0; c < dchunk / 8; ++c) {
          Value* vx = b.convert(b.load(vc, b.add(vrow, i32(8 * c)), h8, 16), v8);
          next.push_back(b.fma(vx, p8, it[static_cast<size_t>(c)]));
        }
        return next;
      }));
      for (int32_t c = 0; c < dchunk / 8; ++c)
        b.store(acc, b.add(b.mul(lane, i32(D)), i32(d0 + 8 * c)), a[static_cast<size_t>(c)], 32);
    }
    return std::vector<Value*>{};
  }));
  // The 32 lanes reduced in the reference's order.
  b.for_loop(i32(0), i32(D), i32(8), none, body([&](Value* d, std::span<Value* const>) {
    auto A = [&](int lane) { return b.load(acc, b.add(i32(int64_t{lane} * D), d), v8, 32); };
    Value* r[8];
    for (int l = 0; l < 8; ++l) r[l] = b.add(b.add(A(l), A(16 + l)), b.add(A(8 + l), A(24 + l)));
    Value* t4[4];
    for (int l = 0; l < 4; ++l) t4[l] = b.add(r[l], r[l + 4]);
    b.store(out, b.add(qsrc, d), b.add(b.add(t4[0], t4[1]), b.add(t4[2], t4[3])), 32);
    return std::vector<Value*>{};
  }));

  auto arg_index = [&](std::string_view name) {
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].name == name) return static_cast<int>(i);
    return -1;
  };
  KernelLaunch l;
  l.kernel = k->name;
  l.grid = {static_cast<uint32_t>(H), static_cast<uint32_t>(T), 1};
  l.block = {1, 1, 1};
  for (const char* a : {"q", "pos", "seq", "k_cache", "v_cache", "out"})
    if (arg_index(a) >= 0) l.args.push_back(arg_index(a));
  g.launches.push_back(l);
  LOOM_RETURN_IF_ERROR(elt::verify_generated("attention", g, ir::TargetKind::kCpp));
  return g;
}

}  // namespace loom::kernels
