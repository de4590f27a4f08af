// rope_kv: rotary position embedding (normal and NeoX, freq factors, YaRN) of q in place and of
// k, fused with the KV-cache store (k and v rounded to F16 into the cells of the step's
// positions). Positions (and sequence slots) come from device buffers. rope: the same rotation
// of one tensor out of place (ggml's ROPE, for ggml-hrx), from the same kernel code.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "loom/ir/builder.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"
#include "loom/ref/ops_ref_util.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Scalar;
using ir::Value;

// Shape: n_tokens, n_head, n_head_kv, head_dim (k and v alike), n_dims (rotated dims, even,
// <= head_dim), mode (0 normal, 2 NeoX), n_seq (sequence slots), n_ctx (cells per slot),
// has_ff (freq factors buffer of n_dims/2), n_ctx_orig (YaRN), and the floats freq_base_f32,
// freq_scale_f32, ext_factor_f32, attn_factor_f32, beta_fast_f32, beta_slow_f32.
// Args: q [n_tokens, n_head*head_dim] in/out; k, v [n_tokens, n_head_kv*head_dim]; pos
// [n_tokens] i32; seq [n_tokens] i32 (n_seq > 1 only: token t goes to cell seq*n_ctx + pos);
// ff [n_dims/2] (has_ff only); k_cache, v_cache [n_seq*n_ctx, n_head_kv*head_dim] f16 in/out.
struct RopeConsts {
  float theta_scale = 1, freq_scale = 1, ext_factor = 0, mscale = 1, corr_low = 0, corr_den = 1;
};

// The per-model constants, computed in float exactly as llm::ref::rope does.
RopeConsts rope_consts(const Shape& s) {
  RopeConsts c;
  const int n_dims = static_cast<int>(dim_or(s, "n_dims", 2));
  const float base = elt::f32_dim(s, "freq_base_f32");
  c.theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  c.freq_scale = elt::f32_dim(s, "freq_scale_f32");
  c.ext_factor = elt::f32_dim(s, "ext_factor_f32");
  c.mscale = elt::f32_dim(s, "attn_factor_f32");
  if (c.ext_factor != 0.0f) {
    const int n_ctx_orig = static_cast<int>(dim_or(s, "n_ctx_orig", 0));
    auto corr_dim = [&](float n_rot) {
      return static_cast<float>(n_dims) *
             std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
             (2.0f * std::log(base));
    };
    const float start = std::floor(corr_dim(elt::f32_dim(s, "beta_fast_f32")));
    const float end = std::ceil(corr_dim(elt::f32_dim(s, "beta_slow_f32")));
    const float low = std::max(0.0f, start);
    const float high = std::min(static_cast<float>(n_dims - 1), end);
    c.corr_low = low;
    c.corr_den = std::max(0.001f, high - low);
    c.mscale *= 1.0f + 0.1f * std::log(1.0f / c.freq_scale);
  }
  return c;
}

// rope (kv = false) reads only n_tokens, n_head, head_dim, n_dims, mode, has_ff, n_ctx_orig,
// x_tok and x_head (optional: x's tokens and heads lie that many values apart, as in a view of
// a fused QKV row; defaults n_head*head_dim and head_dim) and the floats; its args are x, pos,
// [ff], y [n_tokens, n_head*head_dim] (x rotated, always dense; y may be x when x is dense).
class RopeOp final : public OpSpec {
 public:
  explicit RopeOp(bool kv) : kv_(kv) {}
  std::string_view name() const override { return kv_ ? "rope_kv" : "rope"; }
  std::string_view description() const override {
    return kv_ ? "rotate q (in place) and k by position, store k and v as F16 into the KV cache"
               : "y = x rotated by position (rows of n_head heads of head_dim)";
  }

  Status validate(const Shape& s) const override {
    for (const char* d : {"n_tokens", "n_head", "n_head_kv", "n_seq", "n_ctx"}) {
      if (!kv_ && std::string_view(d) != "n_tokens" && std::string_view(d) != "n_head") continue;
      LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, d, 1, int64_t{1} << 20));
    }
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "head_dim", 2, 512));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_dims", 2, dim_or(s, "head_dim", 2)));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "mode", 0, 2));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "has_ff", 0, 1));
    if (s.dims.at("head_dim") % 2 || s.dims.at("n_dims") % 2 || s.dims.at("mode") == 1)
      return invalid_argument("{}: head_dim and n_dims must be even, mode 0 or 2", name());
    if (kv_ && s.dims.at("n_seq") * s.dims.at("n_ctx") * s.dims.at("n_head_kv") * s.dims.at("head_dim") > (int64_t{1} << 30))
      return invalid_argument("rope_kv: KV cache of more than 2^30 values");
    if (!kv_ && s.dims.at("n_tokens") * s.dims.at("n_head") * s.dims.at("head_dim") > (int64_t{1} << 30))
      return invalid_argument("rope: more than 2^30 values");
    if (s.dims.count("x_tok") || s.dims.count("x_head")) {
      if (kv_) return invalid_argument("rope_kv: takes no x_tok / x_head");
      LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "x_head", s.dims.at("head_dim"), int64_t{1} << 30));
      LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "x_tok", 1, int64_t{1} << 30));
      if (x_span(s) > (int64_t{1} << 30)) return invalid_argument("rope: x spans more than 2^30 values");
    }
    if (!(elt::f32_dim(s, "freq_base_f32") > 0.0f) || !(elt::f32_dim(s, "freq_scale_f32") > 0.0f))
      return invalid_argument("{}: freq_base_f32 and freq_scale_f32 must be > 0", name());
    if (elt::f32_dim(s, "ext_factor_f32") != 0.0f && dim_or(s, "n_ctx_orig", 0) <= 0)
      return invalid_argument("{}: YaRN (ext_factor_f32 != 0) needs n_ctx_orig", name());
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t t = dim_or(s, "n_tokens", 0), d = dim_or(s, "head_dim", 0);
    const int64_t h = dim_or(s, "n_head", 0), hk = dim_or(s, "n_head_kv", 0);
    const int64_t cells = dim_or(s, "n_seq", 1) * dim_or(s, "n_ctx", 0);
    if (!kv_) {
      std::vector<ArgSpec> a = {elt::buffer_arg("x", ArgRole::kInput, x_span(s), Scalar::kF32),
                                elt::buffer_arg("pos", ArgRole::kInput, t, Scalar::kI32)};
      if (dim_or(s, "has_ff", 0)) a.push_back(elt::buffer_arg("ff", ArgRole::kInput, dim_or(s, "n_dims", 0) / 2, Scalar::kF32));
      a.push_back(elt::buffer_arg("y", ArgRole::kOutput, t * h * d, Scalar::kF32));
      return a;
    }
    std::vector<ArgSpec> a = {elt::buffer_arg("q", ArgRole::kInOut, t * h * d, Scalar::kF32),
                              elt::buffer_arg("k", ArgRole::kInput, t * hk * d, Scalar::kF32),
                              elt::buffer_arg("v", ArgRole::kInput, t * hk * d, Scalar::kF32),
                              elt::buffer_arg("pos", ArgRole::kInput, t, Scalar::kI32)};
    if (dim_or(s, "n_seq", 1) > 1) a.push_back(elt::buffer_arg("seq", ArgRole::kInput, t, Scalar::kI32));
    if (dim_or(s, "has_ff", 0)) a.push_back(elt::buffer_arg("ff", ArgRole::kInput, dim_or(s, "n_dims", 0) / 2, Scalar::kF32));
    a.push_back(elt::buffer_arg("k_cache", ArgRole::kInOut, cells * hk * d, Scalar::kF16));
    a.push_back(elt::buffer_arg("v_cache", ArgRole::kInOut, cells * hk * d, Scalar::kF16));
    return a;
  }

  // rope: x's strides (values) between tokens and heads, and the values it spans.
  static int64_t x_head(const Shape& s) { return dim_or(s, "x_head", dim_or(s, "head_dim", 0)); }
  static int64_t x_tok(const Shape& s) { return dim_or(s, "x_tok", dim_or(s, "n_head", 0) * dim_or(s, "head_dim", 0)); }
  static int64_t x_span(const Shape& s) {
    const int64_t t = dim_or(s, "n_tokens", 0), h = dim_or(s, "n_head", 0), d = dim_or(s, "head_dim", 0);
    if (t < 1 || h < 1) return 0;
    return (t - 1) * x_tok(s) + (h - 1) * x_head(s) + d;
  }

  Cost cost(const Shape& s) const override {
    const double t = static_cast<double>(dim_or(s, "n_tokens", 0)), d = static_cast<double>(dim_or(s, "head_dim", 0));
    const double h = static_cast<double>(dim_or(s, "n_head", 0));
    const double hk = kv_ ? static_cast<double>(dim_or(s, "n_head_kv", 0)) : 0.0;
    const double rot = static_cast<double>(dim_or(s, "n_dims", 0)) / d;
    if (!kv_) return {t * (d * 8.0 * h + 4.0), t * d * rot * h * 3.0};
    // q read and written, k and v read (f32), k and v written (f16), positions.
    return {t * (d * (8.0 * h + 8.0 * hk + 4.0 * hk) + 4.0), t * d * rot * (h + hk) * 3.0};
  }

  // cos/sin: libm on cpu (as the reference), range-reduced cos.approx/sin.approx on PTX (abs
  // error ~1e-6); the F16 cache values may then round one step apart (2^-11 relative).
  Tolerance tolerance(const Shape&) const override { return {2e-5, 1e-3, false}; }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    const int64_t pairs = dim_or(s, "head_dim", 2) / 2;
    const int64_t tasks = dim_or(s, "n_head", 1) + (kv_ ? dim_or(s, "n_head_kv", 1) : 0);
    if (!elt::gpu_target(t)) return {{"pairs_per_thread", {pairs}}, {"heads_per_block", {tasks}}};
    std::vector<int64_t> ppt;
    for (int64_t p : {1, 2, 4})
      if (pairs % p == 0 && pairs / p <= 1024) ppt.push_back(p);
    std::vector<int64_t> hpb = {1, 2, 4, 8};
    hpb.erase(std::remove_if(hpb.begin(), hpb.end(), [&](int64_t v) { return v >= tasks; }), hpb.end());
    hpb.push_back(tasks);
    return {{"pairs_per_thread", ppt}, {"heads_per_block", hpb}};
  }

  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    auto space = schedule_space(s, t);
    if (!elt::gpu_target(t)) return {{"pairs_per_thread", space[0].choices[0]}, {"heads_per_block", space[1].choices[0]}};
    // Prompts have blocks enough from tokens: one block per token does every head. Decode gives
    // each head its own block: a block walks its heads one after another, and as q is rotated in
    // place each head's loads wait for the previous head's stores (one memory round trip per
    // head: under the profiler on the H200, 4 heads per block took ~6 us per launch, one ~5).
    const int64_t hpb = dim_or(s, "n_tokens", 1) >= 32 ? space[1].choices.back() : 1;
    return {{"pairs_per_thread", 1}, {"heads_per_block", hpb}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
    const int32_t H = static_cast<int32_t>(s.dims.at("n_head")), HK = kv_ ? static_cast<int32_t>(s.dims.at("n_head_kv")) : 0;
    const int32_t D = static_cast<int32_t>(s.dims.at("head_dim")), n_dims = static_cast<int32_t>(s.dims.at("n_dims"));
    const bool neox = s.dims.at("mode") == 2, has_ff = s.dims.at("has_ff") != 0;
    const bool multi_seq = kv_ && s.dims.at("n_seq") > 1;
    const int32_t n_ctx = kv_ ? static_cast<int32_t>(s.dims.at("n_ctx")) : 0;
    const int32_t ppt = static_cast<int32_t>(sch.at("pairs_per_thread"));
    const int32_t hpb = static_cast<int32_t>(sch.at("heads_per_block"));
    const int32_t pairs = D / 2, rot_pairs = n_dims / 2, tasks = H + HK;
    const RopeConsts c = rope_consts(s);
    const bool gpu = elt::gpu_target(t);

    Generated g;
    const std::string kname(name());
    ir::Kernel* k = g.module.add_kernel(kname);
    ir::Builder b(*k);
    const ir::Type fp = elt::global_ptr(Scalar::kF32), ip = elt::global_ptr(Scalar::kI32);
    const ir::Type hp = elt::global_ptr(Scalar::kF16);
    // rope: q is x (read), out is y (written); rope_kv: both are q (in place).
    Value* q = b.param(fp, kv_ ? "q" : "x");
    Value* kin = kv_ ? b.param(fp, "k") : nullptr;
    Value* vin = kv_ ? b.param(fp, "v") : nullptr;
    Value* pos_buf = b.param(ip, "pos");
    Value* seq_buf = multi_seq ? b.param(ip, "seq") : nullptr;
    Value* ff = has_ff ? b.param(fp, "ff") : nullptr;
    Value* kc = kv_ ? b.param(hp, "k_cache") : nullptr;
    Value* vc = kv_ ? b.param(hp, "v_cache") : nullptr;
    Value* out = kv_ ? q : b.param(fp, "y");
    const ir::Type f16 = ir::Type::scalar(Scalar::kF16);

    Value* tok = b.block_id(ir::Mode::kX);
    Value* task0 = b.mul(b.block_id(ir::Mode::kY), b.i32(hpb));
    Value* task1 = b.min(b.add(task0, b.i32(hpb)), b.i32(tasks));
    Value* pos = b.load(pos_buf, tok);
    Value* cell = multi_seq ? b.add(b.mul(b.load(seq_buf, tok), b.i32(n_ctx)), pos) : pos;
    Value* cache_row = b.mul(cell, b.i32(std::max(HK, 1) * D));
    Value* q_row = b.mul(tok, b.i32(H * D));
    // rope reads x's token at x_tok values apart (a view), writes y densely.
    Value* x_row = kv_ ? q_row : b.mul(tok, b.i32(static_cast<int32_t>(x_tok(s))));
    const int32_t xh = kv_ ? D : static_cast<int32_t>(x_head(s));
    Value* kv_row = b.mul(tok, b.i32(std::max(HK, 1) * D));
    Value* i_begin = b.mul(b.thread_id(ir::Mode::kX), b.i32(ppt));
    Value* ts = b.f32(c.theta_scale);
    // theta of the thread's first pair: pos * theta_scale^i by repeated multiplication (the
    // reference's order, so theta is bit-identical).
    auto theta0 = b.for_loop(b.i32(0), i_begin, b.i32(1), {b.convert(pos, elt::f32_type())},
                             [&](Value*, std::span<Value* const> it) { return std::vector<Value*>{b.mul(it[0], ts)}; });

    // Writes pair (a, b) of every task's head: q rotated in place; k rotated (or not) and v into
    // the cache as F16.
    auto pair_tasks = [&](Value* ia, Value* ib, Value* cs, Value* sn) {
      b.for_loop(task0, task1, b.i32(1), {}, [&](Value* task, std::span<Value* const>) {
        auto rotate = [&](Value* x0, Value* x1) {
          if (!cs) return std::pair<Value*, Value*>{x0, x1};
          // The reference's (and ggml's compiled) fused forms, bit for bit.
          return std::pair<Value*, Value*>{b.fma(x0, cs, b.neg(b.mul(x1, sn))), b.fma(x0, sn, b.mul(x1, cs))};
        };
        auto q_pair = [&] {
          if (cs || !kv_) {  // pass-through dims of q stay as they are (rope copies them to y)
            Value* base = b.add(q_row, b.mul(task, b.i32(D)));
            Value* in_base = b.add(x_row, b.mul(task, b.i32(xh)));
            auto [y0, y1] = rotate(b.load(q, b.add(in_base, ia)), b.load(q, b.add(in_base, ib)));
            b.store(out, b.add(base, ia), y0);
            b.store(out, b.add(base, ib), y1);
          }
          return std::vector<Value*>{};
        };
        if (!kv_) {
          q_pair();
          return std::vector<Value*>{};
        }
        b.if_then_else(b.cmp(ir::Mode::kLt, task, b.i32(H)), {}, q_pair, [&] {
          Value* off = b.mul(b.sub(task, b.i32(H)), b.i32(D));
          Value* src = b.add(kv_row, off);
          Value* dst = b.add(cache_row, off);
          auto [y0, y1] = rotate(b.load(kin, b.add(src, ia)), b.load(kin, b.add(src, ib)));
          b.store(kc, b.add(dst, ia), b.convert(y0, f16));
          b.store(kc, b.add(dst, ib), b.convert(y1, f16));
          b.store(vc, b.add(dst, ia), b.convert(b.load(vin, b.add(src, ia)), f16));
          b.store(vc, b.add(dst, ib), b.convert(b.load(vin, b.add(src, ib)), f16));
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
    };

    b.for_loop(b.i32(0), b.i32(ppt), b.i32(1), {theta0[0]}, [&](Value* j, std::span<Value* const> it) {
      Value* i = b.add(i_begin, j);
      Value* theta = it[0];
      auto rotated = [&] {
        Value* extrap = has_ff ? b.div(theta, b.load(ff, i)) : theta;
        Value* th = b.mul(b.f32(c.freq_scale), extrap);
        if (c.ext_factor != 0.0f) {
          Value* y = b.div(b.sub(b.convert(i, elt::f32_type()), b.f32(c.corr_low)), b.f32(c.corr_den));
          Value* ramp = b.sub(b.f32(1.0), b.min(b.f32(1.0), b.max(b.f32(0.0), y)));
          Value* mix = b.mul(ramp, b.f32(c.ext_factor));
          th = b.add(b.mul(th, b.sub(b.f32(1.0), mix)), b.mul(extrap, mix));
        }
        if (gpu) {
          // cos.approx/sin.approx are accurate on [-pi, pi]: reduce by 2*pi in two fma steps.
          constexpr double kTwoPi = 2.0 * std::numbers::pi;
          const float hi = static_cast<float>(kTwoPi);
          const float lo = static_cast<float>(kTwoPi - static_cast<double>(hi));
          Value* kf = b.convert(b.convert(b.fma(th, b.f32(1.0 / kTwoPi), b.f32(0.5)), ir::Type::scalar(Scalar::kI32)),
                                elt::f32_type());
          th = b.fma(b.neg(kf), b.f32(lo), b.fma(b.neg(kf), b.f32(hi), th));
        }
        Value* cs = b.mul(b.unary(ir::Op::kCos, th), b.f32(c.mscale));
        Value* sn = b.mul(b.unary(ir::Op::kSin, th), b.f32(c.mscale));
        Value* ia = neox ? i : b.mul(i, b.i32(2));
        Value* ib = neox ? b.add(i, b.i32(rot_pairs)) : b.add(ia, b.i32(1));
        pair_tasks(ia, ib, cs, sn);
        return std::vector<Value*>{};
      };
      if (rot_pairs == pairs) {
        rotated();
      } else {
        b.if_then_else(b.cmp(ir::Mode::kLt, i, b.i32(rot_pairs)), {}, rotated, [&] {
          Value* ia = b.mul(i, b.i32(2));
          pair_tasks(ia, b.add(ia, b.i32(1)), nullptr, nullptr);
          return std::vector<Value*>{};
        });
      }
      return std::vector<Value*>{b.mul(theta, ts)};
    });

    KernelLaunch l;
    l.kernel = kname;
    l.grid = {static_cast<uint32_t>(s.dims.at("n_tokens")), static_cast<uint32_t>((tasks + hpb - 1) / hpb), 1};
    l.block = {static_cast<uint32_t>(pairs / ppt), 1, 1};
    for (int a = 0; a < static_cast<int>(args(s).size()); ++a) l.args.push_back(a);
    g.launches.push_back(l);
    LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    if (!kv_) {  // x, then positions anywhere below the shape's n_ctx (default 4096), [ff]
      // Positions stay in the context the shape names: at positions of 10^5 and more one ulp of
      // theta is ~0.01 rad, so a contracted fma in YaRN's mix moves the output past any useful
      // tolerance (the same limit holds for ggml's own kernels).
      elt::fill_uniform(rng, elt::f32s(a[0]), -3.0f, 3.0f);
      std::uniform_int_distribution<int32_t> p(0, static_cast<int32_t>(std::max<int64_t>(1, dim_or(s, "n_ctx", 4096)) - 1));
      for (int32_t& v : elt::i32s(a[1])) v = p(rng);
      if (s.dims.at("has_ff")) elt::fill_uniform(rng, elt::f32s(a[2]), 1.0f, 8.0f);
      return;
    }
    const int64_t T = s.dims.at("n_tokens"), n_ctx = s.dims.at("n_ctx"), n_seq = s.dims.at("n_seq");
    size_t i = 0;
    for (; i < 3; ++i) elt::fill_uniform(rng, elt::f32s(a[i]), -3.0f, 3.0f);
    // Prompt-like positions: consecutive from a random start (distinct cells per sequence).
    auto pos = elt::i32s(a[i++]);
    std::uniform_int_distribution<int64_t> start(0, std::max<int64_t>(0, n_ctx - T));
    const int64_t p0 = start(rng);
    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((p0 + t) % n_ctx);
    if (n_seq > 1) {
      // Several sequences: token t in slot t % n_seq (positions then stay distinct per slot).
      auto seq = elt::i32s(a[i++]);
      for (int64_t t = 0; t < T; ++t) seq[static_cast<size_t>(t)] = static_cast<int32_t>(t % n_seq);
    }
    if (s.dims.at("has_ff")) elt::fill_uniform(rng, elt::f32s(a[i++]), 1.0f, 8.0f);
    elt::fill_uniform_f16(rng, elt::f16s(a[i++]), -1.0f, 1.0f);
    elt::fill_uniform_f16(rng, elt::f16s(a[i++]), -1.0f, 1.0f);
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const int64_t T = s.dims.at("n_tokens"), n_ctx = dim_or(s, "n_ctx", 0), n_seq = dim_or(s, "n_seq", 1);
    const int H = static_cast<int>(s.dims.at("n_head")), HK = static_cast<int>(dim_or(s, "n_head_kv", 0));
    const int D = static_cast<int>(s.dims.at("head_dim"));
    llm::ref::RopeParams p;
    p.mode = s.dims.at("mode") == 2 ? llm::ref::RopeMode::kNeox : llm::ref::RopeMode::kNormal;
    p.n_dims = static_cast<int>(s.dims.at("n_dims"));
    p.freq_base = elt::f32_dim(s, "freq_base_f32");
    p.freq_scale = elt::f32_dim(s, "freq_scale_f32");
    p.ext_factor = elt::f32_dim(s, "ext_factor_f32");
    p.attn_factor = elt::f32_dim(s, "attn_factor_f32");
    p.beta_fast = elt::f32_dim(s, "beta_fast_f32");
    p.beta_slow = elt::f32_dim(s, "beta_slow_f32");
    p.n_ctx_orig = static_cast<int>(dim_or(s, "n_ctx_orig", 0));
    if (!kv_) {
      const auto x = elt::f32s(a[0]);
      const int32_t* pos = elt::i32s(a[1]).data();
      if (s.dims.at("has_ff")) p.freq_factors = elt::f32s(a[2]).data();
      auto y = elt::f32s(a[a.size() - 1]);
      const int64_t xt = x_tok(s), xh = x_head(s);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) std::copy_n(x.begin() + t * xt + h * xh, D, y.begin() + (t * H + h) * D);
      llm::ref::rope(y.data(), T, H, D, pos, p);
      return Status();
    }
    size_t i = 0;
    float* q = elt::f32s(a[i++]).data();
    std::vector<float> k(elt::f32s(a[i]).begin(), elt::f32s(a[i]).end());
    ++i;
    const float* v = elt::f32s(a[i++]).data();
    const int32_t* pos = elt::i32s(a[i++]).data();
    const int32_t* seq = n_seq > 1 ? elt::i32s(a[i++]).data() : nullptr;
    if (s.dims.at("has_ff")) p.freq_factors = elt::f32s(a[i++]).data();
    uint16_t* kc = elt::f16s(a[i++]).data();
    uint16_t* vc = elt::f16s(a[i++]).data();
    for (int64_t t = 0; t < T; ++t) {
      const int64_t slot = seq ? seq[t] : 0;
      if (pos[t] < 0 || pos[t] >= n_ctx || slot < 0 || slot >= n_seq)
        return out_of_range("rope_kv: token {} at position {} of sequence {}", t, pos[t], slot);
    }
    llm::ref::rope(q, T, H, D, pos, p);
    llm::ref::rope(k.data(), T, HK, D, pos, p);
    const int64_t row = int64_t{HK} * D;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t cell = (seq ? seq[t] : 0) * n_ctx + pos[t];
      llm::ref::to_fp16(k.data() + t * row, kc + cell * row, row);
      llm::ref::to_fp16(v + t * row, vc + cell * row, row);
    }
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    auto shape = [](int64_t T, int64_t H, int64_t HK, int64_t D, int64_t n_dims, int64_t mode, int64_t n_seq,
                    int64_t n_ctx, int64_t ff, float base, float ext = 0.0f) {
      Shape s = elt::make_shape({{"n_tokens", T}, {"n_head", H}, {"n_head_kv", HK}, {"head_dim", D},
                                 {"n_dims", n_dims}, {"mode", mode}, {"n_seq", n_seq}, {"n_ctx", n_ctx},
                                 {"has_ff", ff}, {"n_ctx_orig", ext != 0.0f ? 4096 : 0}},
                                {{"freq_base_f32", base}, {"freq_scale_f32", ext != 0.0f ? 0.25f : 1.0f},
                                 {"ext_factor_f32", ext}, {"attn_factor_f32", 1.0f},
                                 {"beta_fast_f32", 32.0f}, {"beta_slow_f32", 1.0f}});
      return s;
    };
    auto strided = [](Shape s, int64_t tok, int64_t head) {
      s.dims["x_tok"] = tok;
      s.dims["x_head"] = head;
      return s;
    };
    if (!kv_)  // the same rotations without the cache
      return {shape(7, 9, 3, 64, 64, 0, 1, 64, 0, 100000.0f), shape(3, 4, 1, 256, 256, 2, 1, 600, 0, 1000000.0f),
              shape(2, 32, 8, 128, 128, 0, 1, 4096, 1, 500000.0f), shape(4, 4, 2, 64, 32, 2, 1, 40, 0, 10000.0f),
              shape(2, 4, 2, 64, 64, 0, 1, 300, 0, 10000.0f, 1.0f), shape(5, 3, 1, 10, 6, 0, 1, 8, 0, 10000.0f),
              // q and k of a fused QKV row (Phi-3: 4 heads of 64 q, 2 of k, 2 of v per token)
              strided(shape(5, 4, 1, 64, 64, 2, 1, 512, 0, 10000.0f), 512, 64),
              strided(shape(3, 2, 1, 64, 32, 0, 1, 64, 0, 10000.0f), 512, 64),
              // a view of every other head's first half (test-backend-ops' ROPE views)
              strided(shape(2, 3, 1, 16, 16, 0, 1, 64, 0, 10000.0f), 4 * 32 * 3, 32)};
    return {
        shape(1, 9, 3, 64, 64, 0, 1, 8192, 0, 100000.0f),     // SmolLM2 decode, late position
        shape(7, 9, 3, 64, 64, 0, 1, 64, 0, 100000.0f),       // SmolLM2 prompt
        shape(3, 4, 1, 256, 256, 2, 1, 600, 0, 1000000.0f),   // Gemma 3 270M (NeoX)
        shape(2, 32, 8, 128, 128, 0, 1, 4096, 1, 500000.0f),  // Llama-3-8B with freq factors
        shape(4, 4, 2, 64, 32, 2, 2, 40, 0, 10000.0f),        // partial rotation, 2 sequences
        shape(2, 4, 2, 64, 64, 0, 1, 300, 0, 10000.0f, 1.0f), // YaRN
    };
  }

 private:
  bool kv_;
};

}  // namespace

const OpSpec& rope_kv_op() {
  static const RopeOp op(/*kv=*/true);
  return op;
}
const OpSpec& rope_op() {
  static const RopeOp op(/*kv=*/false);
  return op;
}

}  // namespace loom::kernels
