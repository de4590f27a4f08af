// Attention over the F16 KV cache with online softmax: attention_decode (one query token per
// sequence, the keys split over blocks: partials into a scratch buffer, then a combine kernel)
// and attention_prompt (n_tokens > 1: a block takes a tile of query tokens and every query head
// of one KV head, so each K/V row it loads serves all of them). Causal, GQA, soft-capping,
// sliding window; positions (and sequence slots) come from device buffers. The masked form
// (mask = 1: which keys a token sees, and what is added to their scores, from an f16 mask as
// ggml's FLASH_ATTN_EXT takes it) and strided q/K/V serve ggml graphs.
#include <algorithm>
#include <cmath>
#include <functional>

#include "loom/ir/builder.h"
#include "loom/kernels/attention_exact.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"
#include "loom/ref/ops_ref_util.h"

namespace loom::kernels {
namespace {

using elt::dim_or;
using ir::Scalar;
using ir::Type;
using ir::Value;

constexpr int64_t kMaxSplits = 64;
constexpr int64_t kSharedBytes = 48 * 1024;
constexpr double kNoMax = -1e30;  // running max before any key: exp(kNoMax - s) == 0

// Shape: n_tokens, n_head, n_head_kv, head_dim, n_seq, n_ctx (cells per sequence slot), n_swa
// (0: no window), scale_f32, softcap_f32 (0: off).
// Args: q [n_tokens, n_head*head_dim] f32; pos [n_tokens] i32; seq [n_tokens] i32 (n_seq > 1);
// k_cache, v_cache [n_seq*n_ctx, n_head_kv*head_dim] f16; out [n_tokens, n_head*head_dim] f32;
// decode: scratch [n_tokens*n_head*64*(head_dim+2)] f32 (per split: max, sum, head_dim values).
// Token t sees cells seq[t]*n_ctx + j for j <= pos[t] (and pos[t] - j < n_swa with a window).
// Masked form (optional dims): mask = 1 replaces pos and seq by mask [n_tokens rows of
// mask_stride, n_ctx used] f16 (n_seq 1, n_swa 0): token t sees key j where mask[t][j] > -1e30,
// its score plus mask[t][j] (a token that sees no key gets zeros). Strides, in values, of q
// (q_tok, q_head: default n_head*head_dim, head_dim) and of both caches (kv_cell, kv_head:
// default n_head_kv*head_dim, head_dim) let q, K and V be ggml's permuted views.
// Decode with out_q (optional dim, 8: Q8_0, 9: Q8_1, 15: Q8_K; 0: none) also writes each token's
// output row as the o projection's activation blocks, xq [n_tokens, row bytes] u8 (after out),
// bit-identical to quantize_act of `out` (one launch less per layer). GPUs quantize in
// the combine kernel (always run then, also with one split): one CTA per head (Q8_0/Q8_1, a
// warp per 32-block) or per 256/head_dim heads (Q8_K, a block per CTA); the cpu appends
// quantize_act's own kernel.
class AttentionOp final : public OpSpec {
 public:
  explicit AttentionOp(bool prompt) : prompt_(prompt) {}

  std::string_view name() const override { return prompt_ ? "attention_prompt" : "attention_decode"; }
  std::string_view description() const override {
    return prompt_ ? "causal attention of a prompt's tokens over the F16 KV cache (tiled, online softmax)"
                   : "attention of one token per sequence over the F16 KV cache (split keys + combine)";
  }

  static int64_t out_q(const Shape& s) { return dim_or(s, "out_q", 0); }
  static bool masked(const Shape& s) { return dim_or(s, "mask", 0) != 0; }
  static bool strided(const Shape& s) { return s.dims.count("q_tok") || s.dims.count("kv_cell"); }
  static int64_t q_tok(const Shape& s) { return dim_or(s, "q_tok", dim_or(s, "n_head", 0) * dim_or(s, "head_dim", 0)); }
  static int64_t q_head(const Shape& s) { return dim_or(s, "q_head", dim_or(s, "head_dim", 0)); }
  static int64_t kv_cell(const Shape& s) { return dim_or(s, "kv_cell", dim_or(s, "n_head_kv", 0) * dim_or(s, "head_dim", 0)); }
  static int64_t kv_head(const Shape& s) { return dim_or(s, "kv_head", dim_or(s, "head_dim", 0)); }
  // Values an argument spans: the last token's (cell's) last head ends there.
  static int64_t q_extent(const Shape& s) {
    const int64_t T = dim_or(s, "n_tokens", 0), H = dim_or(s, "n_head", 0);
    return (T - 1) * q_tok(s) + (H - 1) * q_head(s) + dim_or(s, "head_dim", 0);
  }
  static int64_t kv_extent(const Shape& s) {
    const int64_t cells = dim_or(s, "n_seq", 1) * dim_or(s, "n_ctx", 0), HK = dim_or(s, "n_head_kv", 0);
    return (cells - 1) * kv_cell(s) + (HK - 1) * kv_head(s) + dim_or(s, "head_dim", 0);
  }
  static int64_t out_q_block(int64_t q) { return q == 15 ? 256 : 32; }
  static int64_t out_q_row_bytes(int64_t q, int64_t n) { return n / out_q_block(q) * (q == 15 ? 292 : q == 9 ? 36 : 34); }

  Status validate(const Shape& s) const override {
    if (const int64_t q = out_q(s); q != 0) {
      if (prompt_) return invalid_argument("{}: out_q is for decode", name());
      if (q != 8 && q != 9 && q != 15) return invalid_argument("{}: out_q={} is not 0, 8, 9 or 15", name(), q);
      if ((dim_or(s, "n_head", 0) * dim_or(s, "head_dim", 0)) % out_q_block(q))
        return invalid_argument("{}: rows of {} values are not whole blocks of {}", name(),
                                dim_or(s, "n_head", 0) * dim_or(s, "head_dim", 0), out_q_block(q));
    }
    for (const char* d : {"n_tokens", "n_head", "n_head_kv", "n_seq", "n_ctx"})
      LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, d, 1, int64_t{1} << 20));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "head_dim", 2, 256));
    LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "n_swa", 0, int64_t{1} << 20));
    if (s.dims.at("n_head") % s.dims.at("n_head_kv"))
      return invalid_argument("{}: {} query heads cannot share {} kv heads", name(), s.dims.at("n_head"),
                              s.dims.at("n_head_kv"));
    if (s.dims.at("head_dim") % 2) return invalid_argument("{}: odd head_dim", name());
    if (s.dims.at("n_seq") * s.dims.at("n_ctx") * s.dims.at("n_head_kv") * s.dims.at("head_dim") > (int64_t{1} << 30))
      return invalid_argument("{}: KV cache of more than 2^30 values", name());
    if (!(elt::f32_dim(s, "scale_f32") > 0.0f) || elt::f32_dim(s, "softcap_f32") < 0.0f)
      return invalid_argument("{}: scale_f32 must be > 0 and softcap_f32 >= 0", name());
    for (const char* d : {"q_tok", "q_head", "kv_cell", "kv_head"})
      if (s.dims.count(d)) {
        LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, d, 1, int64_t{1} << 24));
        if (s.dims.at(d) % s.dims.at("head_dim"))  // whole heads keep the vector loads aligned
          return invalid_argument("{}: {}={} is not a multiple of head_dim", name(), d, s.dims.at(d));
      }
    if (q_extent(s) > (int64_t{1} << 30) || kv_extent(s) > (int64_t{1} << 30))
      return invalid_argument("{}: strided q or KV cache of more than 2^30 values", name());
    if (const int64_t m = dim_or(s, "mask", 0); m != 0) {
      if (m != 1) return invalid_argument("{}: mask={} is not 0 or 1", name(), m);
      if (out_q(s)) return invalid_argument("{}: out_q with a mask", name());
      if (s.dims.at("n_seq") != 1 || s.dims.at("n_swa") != 0)
        return invalid_argument("{}: a mask takes the place of sequence slots and windows", name());
      LOOM_RETURN_IF_ERROR(elt::require_dim(name(), s, "mask_stride", s.dims.at("n_ctx"), int64_t{1} << 24));
      if (s.dims.at("n_tokens") * dim_or(s, "mask_stride", 0) > (int64_t{1} << 30))
        return invalid_argument("{}: mask of more than 2^30 values", name());
    }
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& s) const override {
    const int64_t T = dim_or(s, "n_tokens", 0), H = dim_or(s, "n_head", 0), HK = dim_or(s, "n_head_kv", 0);
    const int64_t D = dim_or(s, "head_dim", 0), cells = dim_or(s, "n_seq", 1) * dim_or(s, "n_ctx", 0);
    std::vector<ArgSpec> a = {elt::buffer_arg("q", ArgRole::kInput, strided(s) ? q_extent(s) : T * H * D, Scalar::kF32)};
    if (masked(s)) {
      a.push_back(elt::buffer_arg("mask", ArgRole::kInput, (T - 1) * dim_or(s, "mask_stride", 0) + dim_or(s, "n_ctx", 0),
                                  Scalar::kF16));
    } else {
      a.push_back(elt::buffer_arg("pos", ArgRole::kInput, T, Scalar::kI32));
      if (dim_or(s, "n_seq", 1) > 1) a.push_back(elt::buffer_arg("seq", ArgRole::kInput, T, Scalar::kI32));
    }
    const int64_t kv = strided(s) ? kv_extent(s) : cells * HK * D;
    a.push_back(elt::buffer_arg("k_cache", ArgRole::kInput, kv, Scalar::kF16));
    a.push_back(elt::buffer_arg("v_cache", ArgRole::kInput, kv, Scalar::kF16));
    a.push_back(elt::buffer_arg("out", ArgRole::kOutput, T * H * D, Scalar::kF32));
    if (out_q(s)) a.push_back(elt::buffer_arg("xq", ArgRole::kOutput, T * out_q_row_bytes(out_q(s), H * D), Scalar::kU8));
    if (!prompt_) a.push_back(elt::buffer_arg("scratch", ArgRole::kScratch, T * H * kMaxSplits * (D + 2), Scalar::kF32));
    return a;
  }

  // Compulsory traffic: q and out, and the K/V rows in reach of the tokens. Positions are not
  // in the shape, so the count assumes the cache's full context (a window caps it).
  Cost cost(const Shape& s) const override {
    const double T = static_cast<double>(dim_or(s, "n_tokens", 0)), H = static_cast<double>(dim_or(s, "n_head", 0));
    const double HK = static_cast<double>(dim_or(s, "n_head_kv", 0)), D = static_cast<double>(dim_or(s, "head_dim", 0));
    double keys = static_cast<double>(dim_or(s, "n_ctx", 0));
    if (dim_or(s, "n_swa", 0) > 0) keys = std::min(keys, static_cast<double>(dim_or(s, "n_swa", 0) + (prompt_ ? T : 0)));
    const double seqs = prompt_ ? 1.0 : T;
    return {T * H * D * 8.0 + seqs * keys * HK * D * 4.0, T * H * keys * D * 4.0 * (prompt_ ? 0.5 : 1.0)};
  }

  // The reference rounds each probability to fp16 before p·v (as llama.cpp's CPU path); the
  // kernels keep them in float: |out| moves by up to 2^-11 * sum p|v|.
  Tolerance tolerance(const Shape&) const override { return {8e-4, 2e-3, false}; }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    const int64_t G = dim_or(s, "n_head", 1) / std::max<int64_t>(1, dim_or(s, "n_head_kv", 1));
    const int64_t D = dim_or(s, "head_dim", 2);
    const bool gpu = elt::gpu_target(t);
    std::vector<Knob> k;
    if (prompt_) {
      std::vector<int64_t> qt = {1};
      for (int64_t v : {2, 4})
        if (dim_or(s, "n_seq", 1) == 1 && (!gpu || G * v * (D + 2) * 4 <= kSharedBytes / 2) && G * v <= 16) qt.push_back(v);
      k.push_back({"q_tile", qt});
    } else {
      k.push_back({"splits", gpu ? std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64} : std::vector<int64_t>{1, 2, 4, 8}});
    }
    // cpu: exact = 1 is the reference's arithmetic (attention_exact.h), bit for bit; 0 the
    // one-pass online-softmax kernel below (within the tolerance).
    const bool exact = attention_exact_fits(s) && !masked(s) && !strided(s);
    if (!gpu) k.push_back(exact ? Knob{"exact", {1, 0}, {0}} : Knob{"exact", {0}});
    if (gpu) {
      const int64_t qmax = prompt_ ? G * k[0].choices.back() : G;
      std::vector<int64_t> w;
      for (int64_t v : {1, 2, 4, 8})
        if (v * qmax * (D + 2) * 4 <= kSharedBytes) w.push_back(v);
      if (w.empty()) w.push_back(1);
      k.push_back({"warps", w});
    }
    return k;
  }

  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    const bool gpu = elt::gpu_target(t);
    const auto space = schedule_space(s, t);
    const int64_t HK = dim_or(s, "n_head_kv", 1);
    Schedule sch;
    if (prompt_) {
      sch["q_tile"] = gpu ? std::min<int64_t>(2, space[0].choices.back()) : space[0].choices.back();
    } else if (gpu) {
      int64_t splits = 1;  // about one block per SM for a single token
      while (splits < kMaxSplits && HK * dim_or(s, "n_tokens", 1) * splits * 2 <= 128) splits *= 2;
      sch["splits"] = splits;
    } else {
      sch["splits"] = HK >= 2 ? 1 : 2;
    }
    if (!gpu) sch["exact"] = space.back().choices.front();
    // H200, Llama-3-8B decode at 4096 cells: 8 warps 24.6 us, 4 warps 31.5 us (both 16 splits);
    // prompts: q_tile 2 x 4 warps was the best of the three measured.
    if (gpu) sch["warps"] = std::min<int64_t>(prompt_ ? 4 : 8, space.back().choices.back());
    return sch;
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override;

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    elt::size_buffers(args(s), a);
    if (masked(s)) return fill_masked(s, rng, a);
    const int64_t T = s.dims.at("n_tokens"), n_ctx = s.dims.at("n_ctx"), n_seq = s.dims.at("n_seq");
    size_t i = 0;
    elt::fill_uniform(rng, elt::f32s(a[i++]), -1.0f, 1.0f);
    auto pos = elt::i32s(a[i++]);
    if (prompt_) {  // consecutive positions from a random start
      std::uniform_int_distribution<int64_t> start(0, std::max<int64_t>(0, n_ctx - T));
      const int64_t p0 = start(rng);
      for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(std::min(p0 + t, n_ctx - 1));
    } else {  // independent sequences at random positions
      std::uniform_int_distribution<int32_t> p(0, static_cast<int32_t>(n_ctx - 1));
      for (auto& x : pos) x = p(rng);
    }
    if (n_seq > 1) {
      std::uniform_int_distribution<int32_t> q(0, static_cast<int32_t>(n_seq - 1));
      for (auto& x : elt::i32s(a[i++])) x = q(rng);
    }
    elt::fill_uniform_f16(rng, elt::f16s(a[i++]), -1.0f, 1.0f);
    elt::fill_uniform_f16(rng, elt::f16s(a[i++]), -1.0f, 1.0f);
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    if (masked(s)) return reference_masked(s, a);
    const int64_t T = s.dims.at("n_tokens"), n_ctx = s.dims.at("n_ctx"), n_seq = s.dims.at("n_seq");
    const int64_t H = s.dims.at("n_head"), HK = s.dims.at("n_head_kv"), D = s.dims.at("head_dim");
    llm::ref::AttentionParams p;
    p.n_head = static_cast<int>(H);
    p.n_head_kv = static_cast<int>(HK);
    p.head_dim_k = p.head_dim_v = static_cast<int>(D);
    p.scale = elt::f32_dim(s, "scale_f32");
    p.softcap = elt::f32_dim(s, "softcap_f32");
    p.n_swa = static_cast<int>(s.dims.at("n_swa"));
    size_t i = 0;
    const float* q = elt::f32s(a[i++]).data();
    const int32_t* pos = elt::i32s(a[i++]).data();
    const int32_t* seq = n_seq > 1 ? elt::i32s(a[i++]).data() : nullptr;
    const uint16_t* kc = elt::f16s(a[i++]).data();
    const uint16_t* vc = elt::f16s(a[i++]).data();
    float* out = elt::f32s(a[i++]).data();
    const int64_t slot_values = n_ctx * HK * D;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t slot = seq ? seq[t] : 0;
      if (slot < 0 || slot >= n_seq) return out_of_range("{}: sequence slot {} of {}", name(), slot, n_seq);
      LOOM_RETURN_IF_ERROR(llm::ref::attention(q + t * H * D, pos + t, 1, kc + slot * slot_values,
                                               vc + slot * slot_values, n_ctx, p, out + t * H * D, nullptr));
    }
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    auto shape = [](int64_t T, int64_t H, int64_t HK, int64_t D, int64_t n_seq, int64_t n_ctx, int64_t swa,
                    float scale, float cap) {
      return elt::make_shape({{"n_tokens", T}, {"n_head", H}, {"n_head_kv", HK}, {"head_dim", D},
                              {"n_seq", n_seq}, {"n_ctx", n_ctx}, {"n_swa", swa}},
                             {{"scale_f32", scale}, {"softcap_f32", cap}});
    };
    // The masked form: in ggml's token-major layout (llama.cpp's graphs: the default strides),
    // and head-major with q, K and V as separate heads of larger buffers (test-backend-ops').
    auto masked_shape = [&](int64_t T, int64_t H, int64_t HK, int64_t D, int64_t n_ctx, int64_t stride, float cap,
                            bool head_major) {
      Shape m = shape(T, H, HK, D, 1, n_ctx, 0, 0.125f, cap);
      m.dims["mask"] = 1;
      m.dims["mask_stride"] = stride;
      if (head_major) {
        m.dims["q_tok"] = D;
        m.dims["q_head"] = T * D;
        m.dims["kv_cell"] = D;
        m.dims["kv_head"] = 2 * n_ctx * D;
      }
      return m;
    };
    if (!prompt_)
      return {shape(1, 9, 3, 64, 1, 300, 0, 0.125f, 0.0f),            // SmolLM2
              shape(1, 4, 1, 256, 1, 700, 512, 0.0625f, 0.0f),        // Gemma 3 270M, sliding window
              shape(1, 32, 8, 128, 1, 200, 0, 0.0883883f, 0.0f),      // Llama-3-8B
              shape(3, 8, 2, 64, 3, 100, 0, 0.125f, 20.0f),           // 3 sequences, soft-capping
              shape(2, 2, 2, 32, 1, 40, 7, 0.17677669f, 0.0f),        // tiny window
              masked_shape(1, 9, 3, 64, 256, 256, 0.0f, false),
              masked_shape(3, 8, 2, 64, 113, 120, 10.0f, true)};
    return {shape(7, 9, 3, 64, 1, 64, 0, 0.125f, 0.0f),
            shape(19, 4, 1, 256, 1, 64, 8, 0.0625f, 0.0f),
            shape(9, 32, 8, 128, 1, 40, 0, 0.0883883f, 0.0f),
            shape(5, 8, 2, 64, 2, 30, 0, 0.125f, 20.0f),
            shape(33, 2, 1, 32, 1, 48, 0, 0.17677669f, 0.0f),
            masked_shape(19, 4, 1, 256, 64, 64, 0.0f, false),
            masked_shape(7, 8, 2, 64, 48, 56, 0.0f, true)};
  }

 private:
  // Masked inputs: each token sees a random prefix of the keys (none for some), with holes and
  // finite biases; the mask rows' padding and the strided buffers' gaps hold NaN / values that
  // must not be read (the K/V gaps are random halves the reference never touches).
  void fill_masked(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const {
    const int64_t T = s.dims.at("n_tokens"), n_ctx = s.dims.at("n_ctx"), ms = s.dims.at("mask_stride");
    elt::fill_uniform(rng, elt::f32s(a[0]), -1.0f, 1.0f);
    auto m = elt::f16s(a[1]);
    std::fill(m.begin(), m.end(), uint16_t{0x7e00});  // NaN
    std::uniform_int_distribution<int64_t> last(-1, n_ctx - 1);
    std::uniform_real_distribution<float> bias(-2.0f, 0.0f), u(0.0f, 1.0f);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t l = t == 0 && T > 1 ? -1 : last(rng);  // a token that sees nothing, when several
      for (int64_t j = 0; j < n_ctx; ++j) {
        const bool seen = j <= l && u(rng) < 0.9f;
        m[static_cast<size_t>(t * ms + j)] = seen ? llm::ref::float_to_half(u(rng) < 0.5f ? 0.0f : bias(rng)) : uint16_t{0xfc00};
      }
    }
    elt::fill_uniform_f16(rng, elt::f16s(a[2]), -1.0f, 1.0f);
    elt::fill_uniform_f16(rng, elt::f16s(a[3]), -1.0f, 1.0f);
  }

  // softmax over the seen keys of (soft-capped q·k) * scale + mask, q rounded to fp16, in double.
  Status reference_masked(const Shape& s, std::span<HostArg> a) const {
    const int64_t T = s.dims.at("n_tokens"), H = s.dims.at("n_head"), HK = s.dims.at("n_head_kv");
    const int64_t D = s.dims.at("head_dim"), n_ctx = s.dims.at("n_ctx"), ms = s.dims.at("mask_stride");
    const double scale = elt::f32_dim(s, "scale_f32");
    const float cap = elt::f32_dim(s, "softcap_f32");
    const float* q = elt::f32s(a[0]).data();
    const uint16_t* mask = elt::f16s(a[1]).data();
    const uint16_t* kc = elt::f16s(a[2]).data();
    const uint16_t* vc = elt::f16s(a[3]).data();
    float* out = elt::f32s(a[4]).data();
    std::vector<double> sc(static_cast<size_t>(n_ctx)), acc(static_cast<size_t>(D));
    std::vector<float> q16(static_cast<size_t>(D));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t hk = h / (H / HK);
        for (int64_t d = 0; d < D; ++d)
          q16[static_cast<size_t>(d)] = llm::ref::half_to_float(llm::ref::float_to_half(q[t * q_tok(s) + h * q_head(s) + d]));
        double mx = -INFINITY;
        for (int64_t j = 0; j < n_ctx; ++j) {
          const float mv = llm::ref::half_to_float(mask[t * ms + j]);
          double& x = sc[static_cast<size_t>(j)];
          x = -INFINITY;
          if (!(mv > static_cast<float>(kNoMax))) continue;
          const uint16_t* kr = kc + j * kv_cell(s) + hk * kv_head(s);
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q16[static_cast<size_t>(d)]) * llm::ref::half_to_float(kr[d]);
          if (cap > 0.0f) dot = std::tanh(dot / cap) * cap;
          x = dot * scale + mv;
          mx = std::max(mx, x);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0.0;
        for (int64_t j = 0; j < n_ctx; ++j) {
          if (sc[static_cast<size_t>(j)] == -INFINITY) continue;
          const double p = std::exp(sc[static_cast<size_t>(j)] - mx);
          sum += p;
          const uint16_t* vr = vc + j * kv_cell(s) + hk * kv_head(s);
          for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += p * llm::ref::half_to_float(vr[d]);
        }
        for (int64_t d = 0; d < D; ++d)
          out[(t * H + h) * D + d] = sum > 0.0 ? static_cast<float>(acc[static_cast<size_t>(d)] / sum) : 0.0f;
      }
    return Status();
  }

 public:

 private:
  bool prompt_;
};

// How a thread holds a head_dim slice: on GPUs each lane holds width = head_dim/32 values as one
// vector; on the cpu the one thread holds the row as head_dim/width vectors.
struct Slice {
  int chunks = 1, width = 1;
  bool gpu = false;
  Type f32() const { return Type::of(Scalar::kF32, width); }
  Type f16() const { return Type::of(Scalar::kF16, width); }
};

// The GPU combine kernel that also quantizes (decode with out_q): out as the plain combine
// computes it (same loads, same order of operations), then the row's blocks exactly as
// quantize_act's: Q8_0/Q8_1 one CTA per (token, head), a warp per 32-block (the warp's maximum
// is exact in any order; integer sums too); Q8_K one CTA per 256/head_dim heads = one block,
// whose scale comes from the first element of the largest magnitude (the reference's strict
// '>' scan): each warp's by a butterfly that keeps the lower range on ties, then the warps in
// order. Args: scratch, out, xq.
Status add_combine_q(Generated& g, const Shape& s, int32_t S, int scratch_arg, int out_arg, int xq_arg) {
  const int32_t T = static_cast<int32_t>(s.dims.at("n_tokens")), H = static_cast<int32_t>(s.dims.at("n_head"));
  const int32_t D = static_cast<int32_t>(s.dims.at("head_dim"));
  const int64_t oq = s.dims.at("out_q");
  const bool qk = oq == 15, q81 = oq == 9;
  const int32_t hpc = qk ? 256 / D : 1, threads = hpc * D;  // heads per CTA, one thread per value
  const int32_t bytes = qk ? 292 : q81 ? 36 : 34, qoff = qk || q81 ? 4 : 2;
  const int32_t row_bytes = H * D / (qk ? 256 : 32) * bytes;
  if (qk && (256 % D || H % hpc)) return invalid_argument("attention_decode: Q8_K output with head_dim {}", D);
  ir::Kernel* ck = g.module.add_kernel("attention_combine_q");
  Emit c(*ck);
  const Type fp = elt::global_ptr(Scalar::kF32);
  Value* sc = c.param(fp, "scratch");
  Value* o = c.param(fp, "out");
  Value* xq = c.param(elt::global_ptr(Scalar::kU8), "xq");
  auto i32 = [&](int64_t v) { return c.i32(static_cast<int32_t>(v)); };
  Value* tid = c.thread_id(ir::Mode::kX);
  Value* lane = c.rem(tid, i32(32));
  Value* d = c.rem(tid, i32(D));
  // One head per CTA: the row is the block's (its splits' max and sum are the same loads for
  // every thread, as in attention_combine).
  Value* row = hpc == 1 ? c.block_id(ir::Mode::kX)
                        : c.add(c.mul(c.block_id(ir::Mode::kX), i32(hpc)), c.div(tid, i32(D)));  // token * H + head
  Value* base = c.mul(row, i32(int64_t{S} * (D + 2)));
  std::vector<Value*> m(static_cast<size_t>(S)), l(static_cast<size_t>(S)), v(static_cast<size_t>(S));
  for (int32_t sp = 0; sp < S; ++sp) {
    m[static_cast<size_t>(sp)] = c.load(sc, c.add(base, i32(int64_t{sp} * (D + 2))));
    l[static_cast<size_t>(sp)] = c.load(sc, c.add(base, i32(int64_t{sp} * (D + 2) + 1)));
  }
  Value* M = c.f32(kNoMax);
  for (int32_t sp = 0; sp < S; ++sp) M = c.max(M, m[static_cast<size_t>(sp)]);
  // The per-value work in a one-trip loop over the CTA's values, as attention_combine has it.
  // Written straight-line, ptxas gave the kernel 32 registers for the 8B heads' 48 loads (48
  // for SmolLM2's 96; the plain combine 64 and 121), so the loads could not all be in flight,
  // and the call measured ~1.1 us (SmolLM2 ~1.7 us) slower than attention_combine on the H200;
  // in this loop ptxas -v reports 64 and 128, as for the plain combine (not yet timed).
  Value* sa = qk ? c.alloc_shared(Scalar::kF32, threads / 32) : nullptr;  // Q8_K: the warps' maxima
  Value* sm = qk ? c.alloc_shared(Scalar::kF32, threads / 32) : nullptr;
  c.for_loop(tid, i32(threads), i32(threads), {}, [&](Value*, std::span<Value* const>) {
  for (int32_t sp = 0; sp < S; ++sp)
    v[static_cast<size_t>(sp)] = c.load(sc, c.add(base, c.add(d, i32(int64_t{sp} * (D + 2) + 2))));
  Value* sum_l = c.f32(0.0);
  Value* sum_v = c.f32(0.0);
  for (int32_t sp = 0; sp < S; ++sp) {
    Value* f = c.unary(ir::Op::kExp, c.sub(m[static_cast<size_t>(sp)], M));
    sum_l = c.fma(l[static_cast<size_t>(sp)], f, sum_l);
    sum_v = c.fma(v[static_cast<size_t>(sp)], f, sum_v);
  }
  Value* y = c.div(sum_v, sum_l);
  c.store(o, c.add(c.mul(row, i32(D)), d), y);

  Value* tok = c.div(row, i32(H));
  Value* e = c.add(c.mul(c.rem(row, i32(H)), i32(D)), d);  // the value's index in its token's row
  auto nearest = [&](Value* val) {  // as quantize_act's (the max keeps a host compiler from fusing)
    val = c.max(val, c.f32(-1024.0));
    Value* bits = c.bitcast(c.add(val, c.f32(12582912.0)), ty::i32);
    return c.sub(c.bit_and(bits, i32(0x007fffff)), i32(0x00400000));
  };
  const Type f16 = Type::scalar(Scalar::kF16), u16 = Type::scalar(Scalar::kU16);
  if (!qk) {
    Value* bb = c.add(c.mul(tok, i32(row_bytes)), c.mul(c.div(e, i32(32)), i32(bytes)));
    Value* amax = c.warp_reduce(ir::Mode::kMax, c.op(ir::Op::kAbs, {y}));
    Value* dq = c.div(amax, c.f32(127.0));
    Value* id = c.select(c.cmp(ir::Mode::kNe, amax, c.f32(0.0)), c.div(c.f32(127.0), amax), c.f32(0.0));
    Value* q = nearest(c.mul(y, id));
    c.store_at(xq, c.add(bb, c.add(i32(qoff), lane)), c.convert(q, Type::scalar(Scalar::kI8)), 1);
    Value* qsum = q81 ? c.warp_reduce(ir::Mode::kAdd, q) : nullptr;
    c.when(c.cmp(ir::Mode::kEq, lane, i32(0)), [&] {
      c.store_at(xq, bb, c.bitcast(c.convert(dq, f16), u16), 2);
      if (q81) c.store_at(xq, c.addc(bb, 2), c.bitcast(c.convert(c.mul(dq, c.convert(qsum, ty::f32)), f16), u16), 2);
    });
  } else {
    Value* bb = c.add(c.mul(tok, i32(row_bytes)), c.mul(c.div(e, i32(256)), i32(bytes)));
    Value* am = c.op(ir::Op::kAbs, {y});
    Value* mx = c.select(c.cmp(ir::Mode::kGt, am, c.f32(0.0)), y, c.f32(0.0));
    std::tie(am, mx) = c.warp_absmax(am, mx, lane);
    const int32_t W = threads / 32;
    Value* warp = c.div(tid, i32(32));
    c.when(c.cmp(ir::Mode::kEq, lane, i32(0)), [&] {
      c.store(sa, warp, am);
      c.store(sm, warp, mx);
    });
    c.barrier();
    Value* ba = c.load(sa, i32(0));
    Value* bm = c.load(sm, i32(0));
    for (int32_t w = 1; w < W; ++w) {
      auto [na, nm] = c.merge_absmax(ba, bm, c.load(sa, i32(w)), c.load(sm, i32(w)));
      ba = na;
      bm = nm;
    }
    Value* zero = c.cmp(ir::Mode::kEq, ba, c.f32(0.0));
    Value* iscale = c.select(zero, c.f32(0.0), c.div(c.f32(-127.0), bm));
    Value* dq = c.select(zero, c.f32(0.0), c.div(c.f32(1.0), iscale));
    Value* q = c.min(i32(127), nearest(c.mul(iscale, y)));
    c.store_at(xq, c.add(bb, c.add(i32(4), tid)), c.convert(q, Type::scalar(Scalar::kI8)), 1);
    Value* qs = q;
    for (int32_t off = 8; off >= 1; off /= 2) qs = c.add(qs, c.shfl(ir::Mode::kXor, qs, i32(off)));
    c.when(c.cmp(ir::Mode::kEq, c.rem(tid, i32(16)), i32(0)), [&] {
      c.store_at(xq, c.add(bb, c.add(i32(260), c.mul(c.div(tid, i32(16)), i32(2)))),
                 c.convert(qs, Type::scalar(Scalar::kI16)), 2);
    });
    c.when(c.cmp(ir::Mode::kEq, tid, i32(0)), [&] { c.store_at(xq, bb, dq, 4); });
  }
    return std::vector<Value*>{};
  });
  KernelLaunch cl;
  cl.kernel = "attention_combine_q";
  cl.grid = {static_cast<uint32_t>(int64_t{T} * H / hpc), 1, 1};
  cl.block = {static_cast<uint32_t>(threads), 1, 1};
  cl.args = {scratch_arg, out_arg, xq_arg};
  g.launches.push_back(cl);
  return Status();
}

// A masked token that sees no key has l = 0 and an all-zero accumulator: dividing by 1
// instead gives ggml's zeros (and leaves every other result as it was).
Value* nonzero(ir::Builder& b, Value* l) { return b.select(b.cmp(ir::Mode::kGt, l, b.f32(0.0)), l, b.f32(1.0)); }

// The combine body on amdgpu: loops over the splits instead of unrolled loads. Unrolled, the
// splits' max and sum are 2 x S uniform loads that llc issues together into SGPRs (106 per
// wave): at S = 64 they spill. Here M and the sum of l_s e^(m_s - M) are loop-carried, and each
// value's loop reloads m_s (a uniform, cached load) for its factor; the same operations in the
// same order as the unrolled form, so the same results.
void combine_loops(ir::Builder& c, Value* sc, Value* o, Value* row, Value* base, int32_t S, int32_t D,
                   int32_t threads, bool masked) {
  auto ci32 = [&](int64_t v) { return c.i32(static_cast<int32_t>(v)); };
  auto at = [&](Value* sp, int64_t off) { return c.add(base, c.add(c.mul(sp, ci32(D + 2)), ci32(off))); };
  Value* M = c.for_loop(ci32(0), ci32(S), ci32(1), {c.f32(kNoMax)}, [&](Value* sp, std::span<Value* const> acc) {
    return std::vector<Value*>{c.max(acc[0], c.load(sc, at(sp, 0)))};
  })[0];
  Value* sum_l = c.for_loop(ci32(0), ci32(S), ci32(1), {c.f32(0.0)}, [&](Value* sp, std::span<Value* const> acc) {
    Value* f = c.unary(ir::Op::kExp, c.sub(c.load(sc, at(sp, 0)), M));
    return std::vector<Value*>{c.fma(c.load(sc, at(sp, 1)), f, acc[0])};
  })[0];
  c.for_loop(c.thread_id(ir::Mode::kX), ci32(D), ci32(threads), {}, [&](Value* d, std::span<Value* const>) {
    Value* sum_v = c.for_loop(ci32(0), ci32(S), ci32(1), {c.f32(0.0)}, [&](Value* sp, std::span<Value* const> acc) {
      Value* f = c.unary(ir::Op::kExp, c.sub(c.load(sc, at(sp, 0)), M));
      return std::vector<Value*>{c.fma(c.load(sc, c.add(at(sp, 2), d)), f, acc[0])};
    })[0];
    c.store(o, c.add(c.mul(row, ci32(D)), d), c.div(sum_v, masked ? nonzero(c, sum_l) : sum_l));
    return std::vector<Value*>{};
  });
}

Result<Generated> AttentionOp::generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const {
  LOOM_RETURN_IF_ERROR(validate(s));
  LOOM_RETURN_IF_ERROR(elt::check_schedule(name(), schedule_space(s, t), sch));
  const int64_t oq = out_q(s);
  if (oq && !elt::gpu_target(t)) {
    // cpu: the plain op's kernels, then quantize_act's own kernel over `out` (bit-identical to
    // the separate launch by construction). Argument indices move to this shape's list.
    Shape plain = s;
    plain.dims.erase("out_q");
    LOOM_ASSIGN_OR_RETURN(Generated g, generate(plain, sch, t));
    const std::vector<ArgSpec> from = args(plain), to = args(s);
    auto index_of = [&](std::string_view n) {
      for (size_t i = 0; i < to.size(); ++i)
        if (to[i].name == n) return static_cast<int>(i);
      return -1;
    };
    for (KernelLaunch& l : g.launches)
      for (int& ai : l.args) ai = index_of(from[static_cast<size_t>(ai)].name);
    const OpSpec* qa = find_op("quantize_act");
    if (!qa) return internal_error("{}: the op library has no quantize_act", name());
    Shape qs;
    qs.dims = {{"dtype", oq}, {"n_in", s.dims.at("n_head") * s.dims.at("head_dim")}, {"n_tokens", s.dims.at("n_tokens")}};
    LOOM_ASSIGN_OR_RETURN(Generated qg, qa->generate(qs, qa->default_schedule(qs, t), t));
    for (auto& k : qg.module.kernels) g.module.kernels.push_back(std::move(k));
    for (KernelLaunch l : qg.launches) {
      l.args = {index_of("out"), index_of("xq")};
      g.launches.push_back(std::move(l));
    }
    return g;
  }
  const int32_t T = static_cast<int32_t>(s.dims.at("n_tokens")), H = static_cast<int32_t>(s.dims.at("n_head"));
  const int32_t HK = static_cast<int32_t>(s.dims.at("n_head_kv")), D = static_cast<int32_t>(s.dims.at("head_dim"));
  const int32_t G = H / HK, n_ctx = static_cast<int32_t>(s.dims.at("n_ctx"));
  const int32_t swa = static_cast<int32_t>(s.dims.at("n_swa"));
  const bool multi_seq = s.dims.at("n_seq") > 1;
  const float scale = elt::f32_dim(s, "scale_f32"), cap = elt::f32_dim(s, "softcap_f32");
  const bool mk = masked(s), st = strided(s);
  const int32_t ms = static_cast<int32_t>(dim_or(s, "mask_stride", 0));
  const bool gpu = elt::gpu_target(t);
  if (!gpu && sch.at("exact") == 1) return attention_exact_cpu(s, args(s));
  const int32_t S = prompt_ ? 1 : static_cast<int32_t>(sch.at("splits"));
  // The partials go through scratch and the combine kernel when keys are split, and on GPUs
  // whenever the output is also quantized (the combine kernel does that).
  const bool combine = S > 1 || (gpu && oq);
  const int32_t QT = prompt_ ? static_cast<int32_t>(sch.at("q_tile")) : 1;
  const int32_t W = gpu ? static_cast<int32_t>(sch.at("warps")) : 1;
  const int32_t Q = QT * G;  // queries per block
  Slice sl;
  sl.gpu = gpu;
  if (gpu) {
    if (D % 32 || D / 32 > 8 || (D / 32) & (D / 32 - 1))
      return invalid_argument("{}: head_dim {} is not 32, 64, 128 or 256 on GPUs", name(), D);
    sl.width = D / 32;
  } else {
    sl.width = D % 8 == 0 ? 8 : D % 4 == 0 ? 4 : 2;
    sl.chunks = D / sl.width;
  }
  const int align_f32 = 4 * sl.width, align_f16 = 2 * sl.width;
  const int32_t row_stride = HK * D;  // values per cache cell

  Generated g;
  ir::Kernel* k = g.module.add_kernel(prompt_ ? "attention_prompt" : "attention_partial");
  ir::Builder b(*k);
  const Type fp = elt::global_ptr(Scalar::kF32), ip = elt::global_ptr(Scalar::kI32), hp = elt::global_ptr(Scalar::kF16);
  Value* qbuf = b.param(fp, "q");
  Value* pos_buf = mk ? nullptr : b.param(ip, "pos");
  Value* mask_buf = mk ? b.param(hp, "mask") : nullptr;
  Value* seq_buf = multi_seq ? b.param(ip, "seq") : nullptr;
  Value* kc = b.param(hp, "k_cache");
  Value* vc = b.param(hp, "v_cache");
  Value* out = b.param(fp, "out");
  Value* scratch = combine ? b.param(fp, "scratch") : nullptr;
  auto i32 = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };

  Value* tid = b.thread_id(ir::Mode::kX);
  Value* lane = gpu ? b.rem(tid, i32(32)) : i32(0);
  Value* warp = gpu ? b.div(tid, i32(32)) : i32(0);
  Value* hk = b.block_id(ir::Mode::kX);
  Value* t0 = b.mul(b.block_id(ir::Mode::kY), i32(QT));
  Value* split = b.block_id(ir::Mode::kZ);
  Value* lane_off = b.mul(lane, i32(sl.width));  // the lane's first value within a head

  // Per token of the tile: clamped index, position, first visible key, cell base.
  std::vector<Value*> tok(QT), pos(QT), lo(QT);
  Value* klo = nullptr;
  Value* khi = nullptr;
  for (int tt = 0; tt < QT; ++tt) {
    tok[tt] = b.min(b.add(t0, i32(tt)), i32(T - 1));
    if (mk) {  // every key is a candidate; the mask decides
      lo[tt] = i32(0);
      klo = i32(0);
      khi = i32(n_ctx);
      continue;
    }
    pos[tt] = b.load(pos_buf, tok[tt]);
    lo[tt] = swa > 0 ? b.max(i32(0), b.sub(pos[tt], i32(swa - 1))) : i32(0);
    Value* hi = b.add(pos[tt], i32(1));
    klo = klo ? b.min(klo, lo[tt]) : lo[tt];
    khi = khi ? b.max(khi, hi) : hi;
  }
  // q_tile > 1 only with one sequence slot, so the tile shares one cell base.
  Value* cell_base = multi_seq ? b.mul(b.load(seq_buf, tok[0]), i32(n_ctx)) : i32(0);
  Value* len = b.sub(khi, klo);
  Value* chunk = b.div(b.add(len, i32(S - 1)), i32(S));
  Value* s0 = b.add(klo, b.mul(split, chunk));
  Value* s1 = b.min(khi, b.add(s0, chunk));

  auto splat = [&](Value* v) { return sl.width > 1 ? b.splat(v, sl.width) : v; };
  // Where head h of token `tk` starts in q.
  auto q_at = [&](Value* tk, Value* h) {
    return st ? b.add(b.mul(tk, i32(q_tok(s))), b.mul(h, i32(q_head(s)))) : b.mul(b.add(b.mul(tk, i32(H)), h), i32(D));
  };
  // The mask value of token `tk` for key j, and whether the key is seen at all.
  auto mask_of = [&](Value* tk, Value* j) {
    Value* mv = b.convert(b.load(mask_buf, b.add(b.mul(tk, i32(ms)), j)), ty::f32);
    return std::pair{mv, b.cmp(ir::Mode::kGt, mv, b.f32(kNoMax))};
  };
  // Where a query's result goes: out (one split) or its split's partial in scratch.
  auto out_index = [&](Value* qi_tok, Value* h) { return b.mul(b.add(b.mul(qi_tok, i32(H)), h), i32(D)); };
  auto part_index = [&](Value* qi_tok, Value* h) {
    return b.mul(b.add(b.mul(b.add(b.mul(qi_tok, i32(H)), h), i32(S)), split), i32(D + 2));
  };

  if (!gpu) {
    // One thread per block: the queries' state lives in per-thread arrays and loops walk the
    // queries and the head's chunks (unrolling them all would make huge C++ for big tiles).
    const ir::Type vt = sl.f32();
    Value* qloc = b.alloc_local(Scalar::kF32, int64_t{Q} * D);
    Value* aloc = b.alloc_local(Scalar::kF32, int64_t{Q} * D);
    Value* mloc = b.alloc_local(Scalar::kF32, int64_t{Q} * 2);
    Value* ploc = mk ? nullptr : b.alloc_local(Scalar::kI32, int64_t{QT} * 2);  // per token: first key, position
    for (int tt = 0; tt < QT && !mk; ++tt) {
      b.store(ploc, i32(2 * tt), lo[tt]);
      b.store(ploc, i32(2 * tt + 1), pos[tt]);
    }
    Value* zero = b.const_float(vt, 0.0);
    b.for_loop(i32(0), i32(Q), i32(1), {}, [&](Value* qi, std::span<Value* const>) {
      Value* tokq = b.min(b.add(t0, b.div(qi, i32(G))), i32(T - 1));
      Value* h = b.add(b.mul(hk, i32(G)), b.rem(qi, i32(G)));
      Value* src = q_at(tokq, h);
      Value* dst = b.mul(qi, i32(D));
      b.for_loop(i32(0), i32(D), i32(sl.width), {}, [&](Value* d, std::span<Value* const>) {
        Value* x = b.load(qbuf, b.add(src, d), vt, align_f32);
        b.store(qloc, b.add(dst, d), b.convert(b.convert(x, sl.f16()), vt), align_f32);
        b.store(aloc, b.add(dst, d), zero, align_f32);
        return std::vector<Value*>{};
      });
      b.store(mloc, b.mul(qi, i32(2)), b.f32(kNoMax));
      b.store(mloc, b.add(b.mul(qi, i32(2)), i32(1)), b.f32(0.0));
      return std::vector<Value*>{};
    });
    b.for_loop(s0, s1, i32(1), {}, [&](Value* j, std::span<Value* const>) {
      Value* row = st ? b.add(b.mul(b.add(cell_base, j), i32(kv_cell(s))), b.mul(hk, i32(kv_head(s))))
                      : b.add(b.mul(b.add(cell_base, j), i32(row_stride)), b.mul(hk, i32(D)));
      b.for_loop(i32(0), i32(Q), i32(1), {}, [&](Value* qi, std::span<Value* const>) {
        Value* valid = nullptr;
        Value* mv = nullptr;
        if (mk) {
          std::tie(mv, valid) = mask_of(b.min(b.add(t0, b.div(qi, i32(G))), i32(T - 1)), j);
        } else {
          Value* tt2 = b.mul(b.div(qi, i32(G)), i32(2));
          valid = b.bit_and(b.cmp(ir::Mode::kGe, j, b.load(ploc, tt2)),
                            b.cmp(ir::Mode::kLe, j, b.load(ploc, b.add(tt2, i32(1)))));
        }
        b.if_then_else(valid, {}, [&] {
          Value* qb = b.mul(qi, i32(D));
          auto dot = b.for_loop(i32(0), i32(D), i32(sl.width), {zero}, [&](Value* d, std::span<Value* const> it) {
            Value* kx = b.convert(b.load(kc, b.add(row, d), sl.f16(), align_f16), vt);
            return std::vector<Value*>{b.fma(b.load(qloc, b.add(qb, d), vt, align_f32), kx, it[0])};
          });
          Value* sc = elt::horizontal_sum(b, dot[0]);
          if (cap > 0.0f) sc = b.mul(b.unary(ir::Op::kTanh, b.mul(sc, b.f32(1.0f / cap))), b.f32(cap));
          sc = b.mul(sc, b.f32(scale));
          if (mk) sc = b.add(sc, mv);
          Value* mi = b.mul(qi, i32(2));
          Value* m = b.load(mloc, mi);
          Value* m_new = b.max(m, sc);
          Value* alpha = b.unary(ir::Op::kExp, b.sub(m, m_new));
          Value* p = b.unary(ir::Op::kExp, b.sub(sc, m_new));
          b.store(mloc, mi, m_new);
          b.store(mloc, b.add(mi, i32(1)), b.fma(b.load(mloc, b.add(mi, i32(1))), alpha, p));
          Value* av = splat(alpha);
          Value* pv = splat(p);
          b.for_loop(i32(0), i32(D), i32(sl.width), {}, [&](Value* d, std::span<Value* const>) {
            Value* vx = b.convert(b.load(vc, b.add(row, d), sl.f16(), align_f16), vt);
            Value* ai = b.add(qb, d);
            b.store(aloc, ai, b.fma(vx, pv, b.mul(b.load(aloc, ai, vt, align_f32), av)), align_f32);
            return std::vector<Value*>{};
          });
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
    b.for_loop(i32(0), i32(Q), i32(1), {}, [&](Value* qi, std::span<Value* const>) {
      Value* qt = b.add(t0, b.div(qi, i32(G)));
      Value* h = b.add(b.mul(hk, i32(G)), b.rem(qi, i32(G)));
      Value* m = b.load(mloc, b.mul(qi, i32(2)));
      Value* l = b.load(mloc, b.add(b.mul(qi, i32(2)), i32(1)));
      Value* qb = b.mul(qi, i32(D));
      b.if_then_else(b.cmp(ir::Mode::kLt, qt, i32(T)), {}, [&] {
        Value* base = S == 1 ? out_index(qt, h) : part_index(qt, h);
        if (S > 1) {
          b.store(scratch, base, m);
          b.store(scratch, b.add(base, i32(1)), l);
          base = b.add(base, i32(2));
        }
        Value* lv = splat(mk && S == 1 ? nonzero(b, l) : l);
        b.for_loop(i32(0), i32(D), i32(sl.width), {}, [&](Value* d, std::span<Value* const>) {
          Value* a = b.load(aloc, b.add(qb, d), vt, align_f32);
          if (S == 1) b.store(out, b.add(base, d), b.div(a, lv), align_f32);
          else b.store(scratch, b.add(base, d), a);
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
  } else {
      // Queries rounded to fp16 as the reference does.
    std::vector<std::vector<Value*>> qv(Q);
    for (int qi = 0; qi < Q; ++qi) {
      Value* h = b.add(b.mul(hk, i32(G)), i32(qi % G));
      Value* base = b.add(q_at(tok[qi / G], h), lane_off);
      for (int c = 0; c < sl.chunks; ++c) {
        Value* x = b.load(qbuf, b.add(base, i32(c * sl.width)), sl.f32(), align_f32);
        qv[qi].push_back(b.convert(b.convert(x, sl.f16()), sl.f32()));
      }
    }

    // The key loop: per query (m, l, acc chunks...).
    const int per_q = 2 + sl.chunks;
    std::vector<Value*> inits;
    for (int qi = 0; qi < Q; ++qi) {
      inits.push_back(b.f32(kNoMax));
      inits.push_back(b.f32(0.0));
      for (int c = 0; c < sl.chunks; ++c) inits.push_back(b.const_float(sl.f32(), 0.0));
    }
    auto state = b.for_loop(b.add(s0, warp), s1, i32(W), inits, [&](Value* j, std::span<Value* const> it) {
      Value* row = st ? b.add(b.mul(b.add(cell_base, j), i32(kv_cell(s))), b.add(b.mul(hk, i32(kv_head(s))), lane_off))
                      : b.add(b.mul(b.add(cell_base, j), i32(row_stride)), b.add(b.mul(hk, i32(D)), lane_off));
      std::vector<Value*> kv, vv;
      for (int c = 0; c < sl.chunks; ++c) {
        kv.push_back(b.convert(b.load(kc, b.add(row, i32(c * sl.width)), sl.f16(), align_f16), sl.f32()));
        vv.push_back(b.convert(b.load(vc, b.add(row, i32(c * sl.width)), sl.f16(), align_f16), sl.f32()));
      }
      std::vector<std::pair<Value*, Value*>> seen;  // per token of the tile: mask value, seen
      for (int tt = 0; tt < QT && mk; ++tt) seen.push_back(mask_of(tok[tt], j));
      std::vector<Value*> next;
      for (int qi = 0; qi < Q; ++qi) {
        Value* dot = b.mul(qv[qi][0], kv[0]);
        for (int c = 1; c < sl.chunks; ++c) dot = b.fma(qv[qi][c], kv[c], dot);
        Value* sc = elt::horizontal_sum(b, dot);
        sc = b.warp_reduce(ir::Mode::kAdd, sc);
        if (cap > 0.0f) sc = b.mul(b.unary(ir::Op::kTanh, b.mul(sc, b.f32(1.0f / cap))), b.f32(cap));
        sc = b.mul(sc, b.f32(scale));
        const int tt = qi / G;
        if (mk) sc = b.add(sc, seen[tt].first);
        Value* valid = mk ? seen[tt].second : b.bit_and(b.cmp(ir::Mode::kGe, j, lo[tt]), b.cmp(ir::Mode::kLe, j, pos[tt]));
        Value* m = it[qi * per_q];
        Value* l = it[qi * per_q + 1];
        Value* m_new = b.select(valid, b.max(m, sc), m);
        Value* alpha = b.unary(ir::Op::kExp, b.sub(m, m_new));
        Value* p = b.select(valid, b.unary(ir::Op::kExp, b.sub(sc, m_new)), b.f32(0.0));
        next.push_back(m_new);
        next.push_back(b.fma(l, alpha, p));
        Value* av = splat(alpha);
        Value* pv = splat(p);
        for (int c = 0; c < sl.chunks; ++c) next.push_back(b.fma(vv[c], pv, b.mul(it[qi * per_q + 2 + c], av)));
      }
      return next;
    });

    // Merge the warps' states through shared memory: [warp][query] (m, l) and acc[head_dim].
    Value* ml = b.alloc_shared(Scalar::kF32, int64_t{W} * Q * 2);
    Value* acc = b.alloc_shared(Scalar::kF32, int64_t{W} * Q * D);
    for (int qi = 0; qi < Q; ++qi) {
      Value* slot = b.add(b.mul(warp, i32(Q)), i32(qi));
      b.if_then_else(b.cmp(ir::Mode::kEq, lane, i32(0)), {}, [&] {
        b.store(ml, b.mul(slot, i32(2)), state[qi * per_q]);
        b.store(ml, b.add(b.mul(slot, i32(2)), i32(1)), state[qi * per_q + 1]);
        return std::vector<Value*>{};
      });
      b.store(acc, b.add(b.mul(slot, i32(D)), lane_off), state[qi * per_q + 2], align_f32);
    }
    b.barrier();
    b.for_loop(tid, i32(int64_t{Q} * D), i32(32 * W), {}, [&](Value* e, std::span<Value* const>) {
      Value* qi = b.div(e, i32(D));
      Value* d = b.rem(e, i32(D));
      Value* tt = b.div(qi, i32(G));
      Value* h = b.add(b.mul(hk, i32(G)), b.rem(qi, i32(G)));
      Value* qt = b.add(t0, tt);
      Value* M = b.load(ml, b.mul(qi, i32(2)));
      for (int w = 1; w < W; ++w) M = b.max(M, b.load(ml, b.mul(b.add(i32(int64_t{w} * Q), qi), i32(2))));
      Value* L = b.f32(0.0);
      Value* A = b.f32(0.0);
      for (int w = 0; w < W; ++w) {
        Value* slot = b.add(i32(int64_t{w} * Q), qi);
        Value* f = b.unary(ir::Op::kExp, b.sub(b.load(ml, b.mul(slot, i32(2))), M));
        L = b.fma(b.load(ml, b.add(b.mul(slot, i32(2)), i32(1))), f, L);
        A = b.fma(b.load(acc, b.add(b.mul(slot, i32(D)), d)), f, A);
      }
      b.if_then_else(b.cmp(ir::Mode::kLt, qt, i32(T)), {}, [&] {
        if (!combine) {
          b.store(out, b.add(out_index(qt, h), d), b.div(A, mk ? nonzero(b, L) : L));
        } else {
          Value* base = part_index(qt, h);
          b.store(scratch, b.add(base, b.add(d, i32(2))), A);
          b.if_then_else(b.cmp(ir::Mode::kEq, d, i32(0)), {}, [&] {
            b.store(scratch, base, M);
            b.store(scratch, b.add(base, i32(1)), L);
            return std::vector<Value*>{};
          });
        }
        return std::vector<Value*>{};
      });
      return std::vector<Value*>{};
    });
  }

  const auto arg_list = args(s);
  auto arg_index = [&](std::string_view n) {
    for (size_t i = 0; i < arg_list.size(); ++i)
      if (arg_list[i].name == n) return static_cast<int>(i);
    return -1;
  };
  KernelLaunch l;
  l.kernel = k->name;
  l.grid = {static_cast<uint32_t>(HK), static_cast<uint32_t>((T + QT - 1) / QT), static_cast<uint32_t>(S)};
  l.block = {static_cast<uint32_t>(32 * W), 1, 1};
  for (const char* n : {"q", "pos", "mask", "seq", "k_cache", "v_cache", "out", "scratch"})
    if (arg_index(n) >= 0 && (std::string_view(n) != "scratch" || combine)) l.args.push_back(arg_index(n));
  if (!gpu) l.block = {1, 1, 1};
  g.launches.push_back(l);

  if (combine && oq) {
    LOOM_RETURN_IF_ERROR(add_combine_q(g, s, S, arg_index("scratch"), arg_index("out"), arg_index("xq")));
  } else if (S > 1) {
    // Combine: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s.
    ir::Kernel* ck = g.module.add_kernel("attention_combine");
    ir::Builder c(*ck);
    Value* sc = c.param(fp, "scratch");
    Value* o = c.param(fp, "out");
    auto ci32 = [&](int64_t v) { return c.i32(static_cast<int32_t>(v)); };
    Value* row = c.block_id(ir::Mode::kX);  // token * H + head
    Value* base = c.mul(row, ci32(int64_t{S} * (D + 2)));
    const int32_t threads = gpu ? std::min<int32_t>(D, 128) : 1;
    if (t == ir::TargetKind::kAmdgpu) {
      combine_loops(c, sc, o, row, base, S, D, threads, mk);
    } else {
      // The split loops are unrolled (S <= kMaxSplits is known here): every split's max, sum and
      // value are loaded together, one trip to memory instead of one per split; the sums are
      // formed in the same order as a loop would, so results are unchanged.
      std::vector<Value*> m(S), l(S);
      Value* M = c.f32(kNoMax);
      for (int32_t sp = 0; sp < S; ++sp) {
        m[sp] = c.load(sc, c.add(base, ci32(int64_t{sp} * (D + 2))));
        l[sp] = c.load(sc, c.add(base, ci32(int64_t{sp} * (D + 2) + 1)));
      }
      for (int32_t sp = 0; sp < S; ++sp) M = c.max(M, m[sp]);
      c.for_loop(c.thread_id(ir::Mode::kX), ci32(D), ci32(threads), {}, [&](Value* d, std::span<Value* const>) {
        std::vector<Value*> v(S);
        for (int32_t sp = 0; sp < S; ++sp) v[sp] = c.load(sc, c.add(base, c.add(d, ci32(int64_t{sp} * (D + 2) + 2))));
        Value* sum_l = c.f32(0.0);
        Value* sum_v = c.f32(0.0);
        for (int32_t sp = 0; sp < S; ++sp) {
          Value* f = c.unary(ir::Op::kExp, c.sub(m[sp], M));
          sum_l = c.fma(l[sp], f, sum_l);
          sum_v = c.fma(v[sp], f, sum_v);
        }
        c.store(o, c.add(c.mul(row, ci32(D)), d), c.div(sum_v, mk ? nonzero(c, sum_l) : sum_l));
        return std::vector<Value*>{};
      });
    }
    KernelLaunch cl;
    cl.kernel = "attention_combine";
    cl.grid = {static_cast<uint32_t>(int64_t{T} * H), 1, 1};
    cl.block = {static_cast<uint32_t>(threads), 1, 1};
    cl.args = {arg_index("scratch"), arg_index("out")};
    g.launches.push_back(cl);
  }
  LOOM_RETURN_IF_ERROR(elt::verify_generated(name(), g, t));
  return g;
}

}  // namespace

const OpSpec& attention_decode_op() {
  static const AttentionOp op(false);
  return op;
}
const OpSpec& attention_prompt_op() {
  static const AttentionOp op(true);
  return op;
}

}  // namespace loom::kernels
