// attention_mma: attention_prompt on the tensor cores (PTX), flash-attention style. A CTA of
// `warps` warps takes one KV head and the query rows (token, head of the group) of QT tokens, 16
// rows per warp, so each K/V row it stages serves all G query heads that share it. Per chunk of
// `kc` keys: K and V rows into shared memory, S = Q K^T with mma m16n8k16 (Q's fragments stay in
// registers for the whole kernel, K's come from ldmatrix), the causal / window mask, the online
// softmax on S's accumulators, then O += P V with P taken straight from S's accumulator layout as
// the A fragment (f16) and V's fragments from ldmatrix_t. The row sums stay per lane until the end.
//
// Same shape, arguments, reference and tolerance as attention_prompt (the reference rounds P to
// f16 before P V, as this kernel does); head_dim 64 or 128, no mask or strides (the lowering keeps
// attention_prompt for the others). With several sequence slots a CTA walks the slots its tokens
// use, one after the other (the engine's steps: one or a few prompts, then padding tokens in the
// last slot), each over the keys its tokens of that slot can see. The cpu target (mma is PTX-only) runs
// attention_prompt's own kernel, so the cpu op tests check the shared definition, and the cuda
// op tests this kernel.
#include <algorithm>
#include <cmath>

#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;

constexpr double kNoMax = -1e30;  // a masked score; exp(kNoMax - m) == 0 for every real m

class AttentionMmaOp final : public OpSpec {
 public:
  std::string_view name() const override { return "attention_mma"; }
  std::string_view description() const override {
    return "attention_prompt on tensor cores (mma m16n8k16 f16, online softmax on the accumulators; head_dim 64 or "
           "128)";
  }
  static const OpSpec& base() { return attention_prompt_op(); }

  Status validate(const Shape& s) const override {
    LOOM_RETURN_IF_ERROR(base().validate(s));
    static constexpr std::string_view kDims[] = {"n_tokens", "n_head", "n_head_kv", "head_dim", "n_seq",
                                                 "n_ctx",    "n_swa",  "scale_f32", "softcap_f32"};
    for (const auto& [k, v] : s.dims)
      if (std::find(std::begin(kDims), std::end(kDims), k) == std::end(kDims))
        return invalid_argument("attention_mma: dimension '{}' is attention_prompt's only", k);
    if (s.at("head_dim") != 64 && s.at("head_dim") != 128)
      return invalid_argument("attention_mma: head_dim {} is not 64 or 128", s.at("head_dim"));
    if (s.at("n_head") / s.at("n_head_kv") > 64)
      return invalid_argument("attention_mma: more than 64 query heads per kv head");
    return Status();
  }
  std::vector<ArgSpec> args(const Shape& s) const override { return base().args(s); }
  Cost cost(const Shape& s) const override { return base().cost(s); }
  Tolerance tolerance(const Shape& s) const override { return base().tolerance(s); }
  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    base().fill_inputs(s, rng, a);
  }
  Status reference(const Shape& s, std::span<HostArg> a) const override { return base().reference(s, a); }
  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    auto add = [&](int64_t T, int64_t H, int64_t HK, int64_t D, int64_t n_ctx, int64_t swa, double cap) {
      out.push_back(elt::make_shape({{"n_tokens", T}, {"n_head", H}, {"n_head_kv", HK}, {"head_dim", D}, {"n_seq", 1},
                                     {"n_ctx", n_ctx}, {"n_swa", swa}},
                                    {{"scale_f32", 1.0 / std::sqrt(static_cast<double>(D))}, {"softcap_f32", cap}}));
    };
    add(100, 8, 2, 128, 160, 0, 0.0);  // GQA 4, a ragged last tile, keys past the prompt
    add(7, 4, 4, 64, 64, 0, 0.0);      // one token tile, no grouping
    add(70, 9, 3, 64, 96, 0, 0.0);     // groups of 3: dead rows in every warp
    add(129, 4, 1, 128, 160, 32, 0.0);  // sliding window
    add(33, 8, 8, 64, 40, 0, 30.0);    // soft-capping
    out.push_back(elt::make_shape({{"n_tokens", 90}, {"n_head", 8}, {"n_head_kv", 2}, {"head_dim", 64}, {"n_seq", 3},
                                   {"n_ctx", 64}, {"n_swa", 0}},
                                  {{"scale_f32", 0.125}, {"softcap_f32", 0.0}}));  // three sequence slots
    return out;
  }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    if (t != ir::TargetKind::kPtx) return base().schedule_space(s, t);
    return {{"warps", {2, 4, 8}}, {"kc", {32, 64}}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    if (t != ir::TargetKind::kPtx) return base().default_schedule(s, t);
    return {{"warps", 4}, {"kc", 64}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    if (t != ir::TargetKind::kPtx) return base().generate(s, sch, t);
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, t), sch));
    return generate_mma(s, sch);
  }

 private:
  static Result<Generated> generate_mma(const Shape& s, const Schedule& sch) {
    const int32_t T = static_cast<int32_t>(s.at("n_tokens")), H = static_cast<int32_t>(s.at("n_head"));
    const int32_t HK = static_cast<int32_t>(s.at("n_head_kv")), D = static_cast<int32_t>(s.at("head_dim"));
    const int32_t G = H / HK, swa = static_cast<int32_t>(s.at("n_swa"));
    const float scale = elt::f32_dim(s, "scale_f32"), cap = elt::f32_dim(s, "softcap_f32");
    const int32_t W = static_cast<int32_t>(sch.at("warps")), KC = static_cast<int32_t>(sch.at("kc"));
    const int32_t R = 16 * W;               // query rows per CTA
    const int32_t QT = std::max(1, R / G);  // tokens per CTA
    const int32_t live_rows = QT * G;       // rows past it (R not a multiple of G) compute nothing used
    if (G > R) return invalid_argument("attention_mma: {} query heads per kv head need more than {} warps", G, W);
    const int32_t SD = D + 8;               // shared row stride (halves): 8 ldmatrix rows hit 8 distinct bank groups
    const int32_t row_stride = HK * D;      // values per cache cell
    const int32_t threads = 32 * W;

    Generated g;
    ir::Kernel* k = g.module.add_kernel("attention_mma");
    k->max_threads = threads;
    Emit b(*k);
    const Type f16x8 = Type::vector(Scalar::kF16, 8);
    const Type f32x4 = Type::vector(Scalar::kF32, 4), f32x2 = Type::vector(Scalar::kF32, 2);
    Value* qbuf = b.param(ty::gptr(Scalar::kF32), "q");
    Value* pos_buf = b.param(ty::gptr(Scalar::kI32), "pos");
    const bool multi_seq = s.at("n_seq") > 1;
    Value* seq_buf = multi_seq ? b.param(ty::gptr(Scalar::kI32), "seq") : nullptr;
    const int32_t n_ctx = static_cast<int32_t>(s.at("n_ctx"));
    Value* kc = b.param(ty::gptr(Scalar::kF16), "k_cache");
    Value* vc = b.param(ty::gptr(Scalar::kF16), "v_cache");
    Value* out = b.param(ty::gptr(Scalar::kF32), "out");
    Value* ks = b.alloc_shared(Scalar::kF16, int64_t{KC} * SD);
    Value* vs = b.alloc_shared(Scalar::kF16, int64_t{KC} * SD);
    Value* red = b.alloc_shared(Scalar::kI32, 4 * W);
    auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };

    Value* tid = b.thread_id(Mode::kX);
    Value* lane = b.rem(tid, i32c(32));
    Value* warp = b.div(tid, i32c(32));
    Value* gq = b.div(lane, i32c(4));
    Value* qq = b.rem(lane, i32c(4));
    Value* hk = b.block_id(Mode::kX);
    Value* t0 = b.mul(b.block_id(Mode::kY), i32c(QT));

    // This lane's two rows (g and g + 8 of its warp's 16): token, head, visible keys [lo, pos].
    struct Row {
      Value *tok, *head, *live, *pos, *lo, *seq;
    };
    Row rows[2];
    for (int h = 0; h < 2; ++h) {
      Value* r = b.add(b.mulc(warp, 16), b.addc(gq, 8 * h));
      Value* t = b.add(t0, b.div(r, i32c(G)));
      Row& w = rows[h];
      w.live = b.bit_and(b.cmp(Mode::kLt, r, i32c(live_rows)), b.cmp(Mode::kLt, t, i32c(T)));
      w.tok = b.min(t, i32c(T - 1));
      w.head = b.add(b.mulc(hk, G), b.rem(r, i32c(G)));
      w.pos = b.load(pos_buf, w.tok);
      w.lo = swa > 0 ? b.max(i32c(0), b.sub(w.pos, i32c(swa - 1))) : i32c(0);
      w.seq = multi_seq ? b.load(seq_buf, w.tok) : i32c(0);
    }
    // A CTA-wide min / max of per-lane i32 values (red holds 2 per warp; `slot` picks one of two
    // halves so a reduction does not overwrite one that a slower warp still reads).
    Value* big = i32c(1 << 30);
    auto cta_min_max = [&](Value* mn, Value* mx, int slot) {
      mn = b.warp_reduce(Mode::kMin, mn);
      mx = b.warp_reduce(Mode::kMax, mx);
      b.if_then_else(b.cmp(Mode::kEq, lane, i32c(0)), {}, [&] {
        b.store(red, b.addc(b.mulc(warp, 2), 2 * W * slot), mn);
        b.store(red, b.addc(b.mulc(warp, 2), 2 * W * slot + 1), mx);
        return std::vector<Value*>{};
      });
      b.barrier();
      Value* a = b.load(red, i32c(2 * W * slot));
      Value* z = b.load(red, i32c(2 * W * slot + 1));
      for (int w = 1; w < W; ++w) {
        a = b.min(a, b.load(red, i32c(2 * W * slot + 2 * w)));
        z = b.max(z, b.load(red, i32c(2 * W * slot + 2 * w + 1)));
      }
      return std::pair<Value*, Value*>{a, z};
    };
    // The sequence slots the CTA's live rows use: from the least to the greatest.
    Value* seq_lo = i32c(0);
    Value* seq_hi = i32c(1);
    if (multi_seq) {
      auto [a, z] = cta_min_max(b.min(b.select(rows[0].live, rows[0].seq, big), b.select(rows[1].live, rows[1].seq, big)),
                                b.max(b.select(rows[0].live, rows[0].seq, i32c(-1)), b.select(rows[1].live, rows[1].seq, i32c(-1))), 0);
      seq_lo = a;
      seq_hi = b.max(b.addc(z, 1), a);
    }
    // Q's A fragments, one per 16 values of the head: (g, 2q..), (g + 8, 2q..), (g, 8 + 2q..), (g + 8, 8 + 2q..).
    std::vector<Value*> qf;
    for (int32_t k16 = 0; k16 < D / 16; ++k16) {
      std::vector<Value*> l8;
      for (int p = 0; p < 4; ++p) {
        const Row& w = rows[p % 2];
        Value* at = b.add(b.add(b.mulc(w.tok, int64_t{H} * D), b.mulc(w.head, D)), b.addc(b.mulc(qq, 2), 16 * k16 + 8 * (p / 2)));
        Value* x = b.load(qbuf, at, f32x2, 8);
        l8.push_back(b.convert(b.extract(x, 0), ty::f16));
        l8.push_back(b.convert(b.extract(x, 1), ty::f16));
      }
      qf.push_back(b.build(l8));
    }

    // Per-lane ldmatrix row addresses (lane l names row l % 8 of matrix l / 8). K: matrices
    // (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15, d 8-15) -> the B
    // fragments of two 8-key tiles at one 16-value step. V (transposed): (keys 0-7, d 0-7),
    // (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15) -> B fragments of two 8-value
    // tiles of the head over 16 keys.
    Value* l8 = b.rem(lane, i32c(8));
    Value* m8 = b.div(lane, i32c(8));
    Value* k_off = b.add(b.mulc(b.add(l8, b.mulc(b.div(m8, i32c(2)), 8)), SD), b.mulc(b.rem(m8, i32c(2)), 8));
    Value* v_off = b.add(b.mulc(b.add(l8, b.mulc(b.rem(m8, i32c(2)), 8)), SD), b.mulc(b.div(m8, i32c(2)), 8));

    const int32_t nt8 = KC / 8, nd8 = D / 8;
    std::vector<Value*> init(static_cast<size_t>(nd8), b.const_float(f32x4, 0.0));
    for (int h = 0; h < 2; ++h) init.push_back(b.f32(kNoMax));  // running max per row
    for (int h = 0; h < 2; ++h) init.push_back(b.f32(0.0));     // this lane's share of the row sum
    const int32_t pieces = D / 8 * KC, per_thread = (pieces + threads - 1) / threads;
    // Per sequence slot of the CTA: the keys [klo, khi) its rows in that slot can see.
    auto acc = b.for_loop(seq_lo, seq_hi, i32c(1), init, [&](Value* sq, std::span<Value* const> sit) {
    std::vector<Value*> in_seq(2);
    for (int h = 0; h < 2; ++h) in_seq[h] = multi_seq ? b.bit_and(rows[h].live, b.cmp(Mode::kEq, rows[h].seq, sq)) : rows[h].live;
    auto [klo, khi0] = cta_min_max(
        b.min(b.select(in_seq[0], rows[0].lo, big), b.select(in_seq[1], rows[1].lo, big)),
        b.max(b.select(in_seq[0], b.addc(rows[0].pos, 1), i32c(0)), b.select(in_seq[1], b.addc(rows[1].pos, 1), i32c(0))), 1);
    Value* khi = b.min(b.max(khi0, klo), i32c(n_ctx));  // a slot without rows here walks no keys
    Value* cell_base = b.mulc(sq, n_ctx);
    std::vector<Value*> sinit(sit.begin(), sit.end());
    auto sacc_out = b.for_loop(klo, khi, i32c(KC), sinit, [&](Value* kb, std::span<Value* const> it) {
      // Stage the chunk's K and V rows (keys past khi repeat the last one; the mask drops them).
      for (int32_t j = 0; j < per_thread; ++j) {
        Value* item = b.addc(tid, int64_t{j} * threads);
        Value* valid = (j + 1) * threads <= pieces ? nullptr : b.cmp(Mode::kLt, item, i32c(pieces));
        Value* itc = valid ? b.min(item, i32c(pieces - 1)) : item;
        Value* key = b.div(itc, i32c(D / 8));
        Value* c8 = b.mulc(b.rem(itc, i32c(D / 8)), 8);
        Value* cell = b.add(cell_base, b.min(b.add(kb, key), b.addc(khi, -1)));
        Value* src = b.add(b.add(b.mulc(cell, row_stride), b.mulc(hk, D)), c8);
        Value* kx = b.load(kc, src, f16x8, 16);
        Value* vx = b.load(vc, src, f16x8, 16);
        Value* dst = b.add(b.mulc(key, SD), c8);
        auto put = [&] {
          b.store(ks, dst, kx, 16);
          b.store(vs, dst, vx, 16);
          return std::vector<Value*>{};
        };
        if (valid) b.if_then_else(valid, {}, put);
        else put();
      }
      b.barrier();
      // S = Q K^T over the chunk.
      std::vector<Value*> sacc(static_cast<size_t>(nt8), b.const_float(f32x4, 0.0));
      for (int32_t n8 = 0; n8 < nt8; n8 += 2)
        for (int32_t k16 = 0; k16 < D / 16; ++k16) {
          Value* pair = b.ldmatrix(ks, b.add(k_off, i32c(n8 * 8 * SD + 16 * k16)));
          for (int h = 0; h < 2; ++h) {
            Value* bf = b.build({b.extract(pair, 4 * h), b.extract(pair, 4 * h + 1), b.extract(pair, 4 * h + 2),
                                 b.extract(pair, 4 * h + 3)});
            sacc[static_cast<size_t>(n8 + h)] = b.mma(qf[static_cast<size_t>(k16)], bf, sacc[static_cast<size_t>(n8 + h)]);
          }
        }
      // Scores: capped, scaled, masked; lane i of tile n8 is row (i / 2) key kb + 8 n8 + 2q + i % 2.
      std::vector<std::vector<Value*>> sc(static_cast<size_t>(nt8));
      std::vector<std::vector<Value*>> ok(static_cast<size_t>(nt8));
      Value* key0 = b.add(kb, b.mulc(qq, 2));
      Value* mx[2] = {b.f32(kNoMax), b.f32(kNoMax)};
      for (int32_t n8 = 0; n8 < nt8; ++n8)
        for (int i = 0; i < 4; ++i) {
          const Row& w = rows[i / 2];
          Value* key = b.addc(key0, 8 * n8 + i % 2);
          Value* v = b.extract(sacc[static_cast<size_t>(n8)], i);
          if (cap > 0.0f) v = b.mul(b.unary(ir::Op::kTanh, b.mul(v, b.f32(1.0f / cap))), b.f32(cap));
          v = b.mul(v, b.f32(scale));
          Value* in = b.bit_and(in_seq[static_cast<size_t>(i / 2)],
                                b.bit_and(b.cmp(Mode::kLe, key, w.pos), b.cmp(Mode::kGe, key, w.lo)));
          v = b.select(in, v, b.f32(kNoMax));
          sc[static_cast<size_t>(n8)].push_back(v);
          ok[static_cast<size_t>(n8)].push_back(in);
          mx[i / 2] = b.max(mx[i / 2], v);
        }
      std::vector<Value*> o(it.begin(), it.begin() + nd8);
      Value* m_new[2];
      Value* alpha[2];
      Value* lsum[2];
      for (int h = 0; h < 2; ++h) {
        for (int off : {1, 2}) mx[h] = b.max(mx[h], b.shfl(Mode::kXor, mx[h], i32c(off)));
        Value* m_old = it[static_cast<size_t>(nd8 + h)];
        m_new[h] = b.max(m_old, mx[h]);
        alpha[h] = b.unary(ir::Op::kExp, b.sub(m_old, m_new[h]));
        lsum[h] = b.mul(it[static_cast<size_t>(nd8 + 2 + h)], alpha[h]);
      }
      // P = exp(S - m) (0 where masked), the rows' sums, O scaled by alpha.
      std::vector<Value*> pf(static_cast<size_t>(nt8));
      for (int32_t n8 = 0; n8 < nt8; ++n8) {
        std::vector<Value*> p4;
        for (int i = 0; i < 4; ++i) {
          Value* e = b.unary(ir::Op::kExp, b.sub(sc[static_cast<size_t>(n8)][static_cast<size_t>(i)], m_new[i / 2]));
          Value* p = b.select(ok[static_cast<size_t>(n8)][static_cast<size_t>(i)], e, b.f32(0.0));
          lsum[i / 2] = b.add(lsum[i / 2], p);
          p4.push_back(b.convert(p, ty::f16));
        }
        pf[static_cast<size_t>(n8)] = b.build(p4);
      }
      Value* a4 = b.build({alpha[0], alpha[0], alpha[1], alpha[1]});
      for (int32_t d8 = 0; d8 < nd8; ++d8) o[static_cast<size_t>(d8)] = b.mul(o[static_cast<size_t>(d8)], a4);
      // O += P V: P's A fragment over keys 16 kk.. is tiles 2 kk and 2 kk + 1 of S's layout.
      for (int32_t kk = 0; kk < KC / 16; ++kk) {
        Value* p0 = pf[static_cast<size_t>(2 * kk)];
        Value* p1 = pf[static_cast<size_t>(2 * kk + 1)];
        Value* af = b.build({b.extract(p0, 0), b.extract(p0, 1), b.extract(p0, 2), b.extract(p0, 3), b.extract(p1, 0),
                             b.extract(p1, 1), b.extract(p1, 2), b.extract(p1, 3)});
        for (int32_t d8 = 0; d8 < nd8; d8 += 2) {
          Value* pair = b.ldmatrix_t(vs, b.add(v_off, i32c(kk * 16 * SD + 8 * d8)));
          for (int h = 0; h < 2; ++h) {
            Value* bf = b.build({b.extract(pair, 4 * h), b.extract(pair, 4 * h + 1), b.extract(pair, 4 * h + 2),
                                 b.extract(pair, 4 * h + 3)});
            o[static_cast<size_t>(d8 + h)] = b.mma(af, bf, o[static_cast<size_t>(d8 + h)]);
          }
        }
      }
      b.barrier();  // the next chunk's stores wait for every warp's reads
      std::vector<Value*> next = o;
      next.push_back(m_new[0]);
      next.push_back(m_new[1]);
      next.push_back(lsum[0]);
      next.push_back(lsum[1]);
      return next;
    });
    b.barrier();  // every warp has read this slot's key range before the next slot's is written
    return std::vector<Value*>(sacc_out.begin(), sacc_out.end());
    });
    // out = O / l for the live rows: lanes 2q, 2q + 1 of each 8-value tile of the head.
    for (int h = 0; h < 2; ++h) {
      Value* l = acc[static_cast<size_t>(nd8 + 2 + h)];
      for (int off : {1, 2}) l = b.add(l, b.shfl(Mode::kXor, l, i32c(off)));
      Value* inv = b.div(b.f32(1.0), b.max(l, b.f32(1e-30)));
      const Row& w = rows[h];
      Value* base = b.add(b.add(b.mulc(w.tok, int64_t{H} * D), b.mulc(w.head, D)), b.mulc(qq, 2));
      b.if_then_else(w.live, {}, [&] {
        for (int32_t d8 = 0; d8 < nd8; ++d8) {
          Value* o = acc[static_cast<size_t>(d8)];
          Value* v2 = b.build({b.mul(b.extract(o, 2 * h), inv), b.mul(b.extract(o, 2 * h + 1), inv)});
          b.store(out, b.addc(base, 8 * d8), v2, 8);
        }
        return std::vector<Value*>{};
      });
    }
    KernelLaunch launch;
    launch.kernel = "attention_mma";
    launch.args = multi_seq ? std::vector<int>{0, 1, 2, 3, 4, 5} : std::vector<int>{0, 1, 2, 3, 4};
    launch.grid = {static_cast<uint32_t>(HK), static_cast<uint32_t>((T + QT - 1) / QT), 1};
    launch.block = {static_cast<uint32_t>(threads), 1, 1};
    g.launches.push_back(launch);
    return g;
  }
};

}  // namespace

const OpSpec& attention_mma_op() {
  static const AttentionMmaOp op;
  return op;
}

}  // namespace loom::kernels
