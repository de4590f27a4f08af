// Reference CPU ops (see ops_ref.h): matmul driver, embedding lookup, norms, activations, rope,
// softmax and attention over the F16 KV cache.
#include "loom/ref/ops_ref.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>

#include "loom/base/thread_pool.h"
#include "loom/gguf/quant.h"
#include "loom/gguf/quant_blocks.h"
#include "loom/gguf/quant_rows.h"
#include "loom/ref/ops_ref_dot_impl.h"
#include "loom/ref/ops_ref_util.h"

#if LOOM_REF_DOT_AVX2
#include <immintrin.h>
#endif

namespace loom::llm::ref {

// ---- Matmul ---------------------------------------------------------------------------------

Status matmul(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool* pool,
              std::vector<uint8_t>* scratch) {
  LOOM_ASSIGN_OR_RETURN(GgmlType dot_type, vec_dot_type(w.type));
  auto info = ggml_type_info(static_cast<uint32_t>(dot_type));
  if (!info || w.n_in % info->block_elems != 0)
    return invalid_argument("matmul: row of {} elements is not a multiple of the {} block", w.n_in,
                            ggml_type_name(dot_type));
  const size_t xq_row = quantized_row_bytes(dot_type, w.n_in);
  scratch->resize(xq_row * static_cast<size_t>(n_tok));
  uint8_t* xq = scratch->data();
  // Quantizing the activations is cheap next to the products; rows are independent.
  auto quantize_rows = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) quantize_activation(dot_type, x + t * w.n_in, xq + t * xq_row, w.n_in);
  };
  if (pool && n_tok > 1) pool->parallel_for(n_tok, quantize_rows);
  else quantize_rows(0, n_tok, 0);

  const GgmlType wt = w.type;
#if LOOM_REF_DOT_AVX2
  // Several tokens: each weight block is unpacked once for a tile of tokens (the weights are
  // walked once per step, not once per token), with per-element arithmetic identical to vec_dot.
  if (n_tok > 1 && avx2::gemm_supported(wt)) {
    thread_local avx2::GemmScales tls_scales;  // the caller's; workers read it through xs
    const avx2::GemmScales* xs = &tls_scales;
    avx2::gemm_prepare(wt, xq, xq_row, n_tok, w.n_in, &tls_scales);
    auto tiles = [&, xs](int64_t r0, int64_t r1, int) {
      avx2::gemm_rows(wt, w.data, w.row_stride, w.n_in, r0, r1, xq, xq_row, n_tok, *xs, y, w.n_out);
    };
    if (pool) pool->parallel_for(w.n_out, tiles, 16);
    else tiles(0, w.n_out, 0);
    return Status();
  }
#endif
  auto rows = [&](int64_t r0, int64_t r1, int) {
    // Tiles of weight rows stay in cache while every token's activation streams past them.
    constexpr int64_t kTile = 16;
    for (int64_t rt = r0; rt < r1; rt += kTile) {
      const int64_t re = std::min(r1, rt + kTile);
      for (int64_t t = 0; t < n_tok; ++t) {
        const uint8_t* xt = xq + t * xq_row;
        float* yt = y + t * w.n_out;
        for (int64_t r = rt; r < re; ++r) yt[r] = vec_dot(wt, w.row(r), xt, w.n_in);
      }
    }
  };
  if (pool) pool->parallel_for(w.n_out, rows, 16);
  else rows(0, w.n_out, 0);
  return Status();
}

Status get_rows(const WeightView& table, const int32_t* ids, int64_t n_ids, float* out) {
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= table.n_out)
      return out_of_range("token id {} is outside the vocabulary (0..{})", ids[i], table.n_out - 1);
    LOOM_RETURN_IF_ERROR(dequantize(table.type, table.row(ids[i]), out + i * table.n_in, table.n_in));
  }
  return Status();
}

// ---- Elementwise ----------------------------------------------------------------------------

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float s = 1.0f / std::sqrt(mean + eps);
    if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * s) * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * s;
    }
  }
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void mul(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}
void scale(const float* x, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}
void softcap(const float* x, float cap, float* y, int64_t n) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i] * inv) * cap;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  // 1 + c x^2 as one fused multiply-add: the form ggml's compiled table holds.
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoef * x, x, 1.0f)));
}

namespace {
// ggml evaluates GELU on the CPU through a 64K-entry fp16 table; mirroring it keeps the FFN
// activations of GELU models bit-identical with llama.cpp.
const std::array<uint16_t, 65536>& gelu_table() {
  static const auto* table = [] {
    auto* t = new std::array<uint16_t, 65536>();
    for (uint32_t h = 0; h < 65536; ++h)
      (*t)[h] = fp32_to_fp16(gelu_tanh(fp16_to_fp32(static_cast<uint16_t>(h))));
    return t;
  }();
  return *table;
}
}  // namespace

float gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return half_to_float(gelu_table()[float_to_half(x)]);
}

#if LOOM_REF_DOT_AVX2
namespace {
// expf_ggml (ops_ref_util.h) on eight lanes, operation for operation (the same fused
// multiply-adds, products and exponent bit arithmetic), so every lane is bit-identical to it.
// Returns false, leaving *out alone, when a lane needs the rare |n| > 126 branch.
inline bool expf_ggml8(__m256 x, __m256* out) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  // fma(-n, c, x) == fnmadd(n, c, x): the negation is exact.
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  if (_mm256_movemask_ps(big) != 0) return false;
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  *out = _mm256_fmadd_ps(j, k, k);
  return true;
}
}  // namespace
#endif

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  // ggml's vector path (groups of 8) uses its own exp; a short tail uses libm's expf.
  const int64_t n8 = n & ~int64_t{7};
  int64_t i = 0;
#if LOOM_REF_DOT_AVX2
  // Eight at a time with the same arithmetic (a batched step runs n_tokens x n_ff of these on
  // one thread between two matmuls); a group with an extreme input goes the scalar way.
  for (; i < n8; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    __m256 e;
    if (!expf_ggml8(_mm256_sub_ps(_mm256_setzero_ps(), x), &e)) {
      for (int64_t k = i; k < i + 8; ++k) y[k] = silu_ggml(g[k]) * u[k];
      continue;
    }
    const __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
#endif
  for (; i < n8; ++i) y[i] = silu_ggml(g[i]) * u[i];
  for (; i < n; ++i) y[i] = silu(g[i]) * u[i];
}

void geglu(const float* g, const float* u, float* y, int64_t n) {
  const auto& table = gelu_table();
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    float gx;
    if (x <= -10.0f) gx = 0.0f;
    else if (x >= 10.0f) gx = x;
    else gx = half_to_float(table[float_to_half(x)]);
    y[i] = gx * u[i];
  }
}

namespace {
// The x86 softmax reduction: exp values summed eight at a time (hi+lo halves, then pairwise) in
// float, each group's sum added in double. `base` is the index the first element would have in
// ggml's row, so groups line up with its 8-element vectors.
double exp_sum_groups(float* e, int64_t n, int64_t base) {
  double sum = 0.0;
  int64_t g0 = base & ~int64_t{7};
  for (int64_t g = g0; g < base + n; g += 8) {
    float v[8];
    for (int l = 0; l < 8; ++l) {
      const int64_t k = g + l - base;
      v[l] = (k >= 0 && k < n) ? e[k] : 0.0f;
    }
    float a[4];
    for (int l = 0; l < 4; ++l) a[l] = v[l + 4] + v[l];
    sum += static_cast<double>((a[0] + a[2]) + (a[1] + a[3]));
  }
  return sum;
}
}  // namespace

bool softmax(float* x, const float* mask, int64_t n, float s) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    x[i] = x[i] * s;
    if (mask) x[i] += mask[i];
    max = std::max(max, x[i]);
  }
  if (max == -std::numeric_limits<float>::infinity()) return false;
  for (int64_t i = 0; i < n; ++i) x[i] = expf_ggml(x[i] - max);
  const double sum = exp_sum_groups(x, n, 0);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return true;
}

void moe_route(const float* logits, int64_t n_rows, int64_t n_expert, int64_t k, bool norm, int32_t* ids,
               float* w) {
  std::vector<float> p(static_cast<size_t>(n_expert));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::copy(logits + r * n_expert, logits + (r + 1) * n_expert, p.begin());
    softmax(p.data(), nullptr, n_expert, 1.0f);
    int32_t* id = ids + r * k;
    float* wr = w + r * k;
    // Selection in (p descending, index ascending) order: slot j takes the best entry ranked
    // after slot j-1's.
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t i = 0; i < n_expert; ++i) {
        if (j > 0) {
          const float pp = wr[j - 1];
          const int64_t pi = id[j - 1];
          if (!(p[i] < pp || (p[i] == pp && i > pi))) continue;
        }
        if (best < 0 || p[i] > p[best]) best = i;
      }
      if (best < 0) best = 0;  // NaN probabilities: nothing ranks; expert 0 keeps ids in range
      id[j] = static_cast<int32_t>(best);
      wr[j] = p[best];
    }
    if (!norm) continue;
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += static_cast<double>(wr[j]);
    const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int64_t j = 0; j < k; ++j) wr[j] = wr[j] / s;
  }
}

void moe_sum(const float* x, const float* w, int64_t n_rows, int64_t k, int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * k * n;
    const float* wr = w + r * k;
    float* yr = y + r * n;
    for (int64_t i = 0; i < n; ++i) {
      float acc = xr[i] * wr[0];
      for (int64_t j = 1; j < k; ++j) {
        // Rounded before the add: never contracted into an fma (ggml's mul and add are two ops).
        const volatile float prod = xr[j * n + i] * wr[j];
        acc = acc + prod;
      }
      yr[i] = acc;
    }
  }
}

// The definition: the first index whose value no later value exceeds (NaN never wins; with a NaN
// at index 0 nothing exceeds it, so 0).
int64_t argmax_scalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

// Greedy sampling reads every logit of every token (128256 for Llama 3): eight lanes at a time.
// The same answer as argmax_scalar: with x[0] a number, that is the first index holding the
// largest number (== also matches -0.0 to +0.0, as > never separates them); a NaN x[0] is 0.
int64_t argmax(const float* x, int64_t n) {
#if LOOM_REF_DOT_AVX2
  if (n >= 16 && x[0] == x[0]) {
    __m256 m = _mm256_set1_ps(x[0]);
    int64_t i = 0;
    // max_ps returns its second operand when either is NaN: m stays put on NaN lanes.
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float best = lanes[0];
    for (int k = 1; k < 8; ++k) best = lanes[k] > best ? lanes[k] : best;
    for (; i < n; ++i) best = x[i] > best ? x[i] : best;
    const __m256 b = _mm256_set1_ps(best);
    for (i = 0; i + 8 <= n; i += 8)
      if (int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_EQ_OQ)); mask != 0)
        return i + __builtin_ctz(static_cast<unsigned>(mask));
    for (; i < n; ++i)
      if (x[i] == best) return i;
  }
#endif
  return argmax_scalar(x, n);
}

void to_fp16(const float* x, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(x[i]);
}

// ---- RoPE -----------------------------------------------------------------------------------

namespace {
// Dimension at which the rotation of `n_rot` turns over the training context (YaRN).
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

float yarn_ramp(float low, float high, int i0) {
  const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}
}  // namespace

void rope(float* x, int64_t n_tok, int n_head, int head_dim, const int32_t* pos, const RopeParams& p) {
  const int n_dims = p.n_dims;
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(n_dims));
  float corr[2] = {0.0f, 0.0f};
  if (p.ext_factor != 0.0f) {
    const float start = std::floor(yarn_corr_dim(n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
    const float end = std::ceil(yarn_corr_dim(n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
    corr[0] = std::max(0.0f, start);
    corr[1] = std::min(static_cast<float>(n_dims - 1), end);
  }
  std::vector<float> cs(static_cast<size_t>(n_dims));  // cos, sin interleaved per pair
  for (int64_t t = 0; t < n_tok; ++t) {
    // theta_i = pos * base^(-2i/n_dims), by repeated multiplication in float (as ggml).
    float theta = static_cast<float>(pos[t]);
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
      const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
      const float extrap = theta / ff;
      const float interp = p.freq_scale * extrap;
      float th = interp;
      float mscale = p.attn_factor;
      if (p.ext_factor != 0.0f) {
        const float mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
        th = interp * (1.0f - mix) + extrap * mix;
        mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
      }
      cs[i0] = std::cos(th) * mscale;
      cs[i0 + 1] = std::sin(th) * mscale;
      theta *= theta_scale;
    }
    for (int h = 0; h < n_head; ++h) {
      float* v = x + (t * n_head + h) * head_dim;
      for (int i0 = 0; i0 < n_dims; i0 += 2) {
        const int a = p.mode == RopeMode::kNeox ? i0 / 2 : i0;
        const int b = p.mode == RopeMode::kNeox ? i0 / 2 + n_dims / 2 : i0 + 1;
        const float c = cs[i0], s = cs[i0 + 1];
        const float x0 = v[a], x1 = v[b];
        // The fused forms GCC produces for ggml's (and this) loop, written out so that the
        // result no longer depends on how a compiler contracts or vectorizes it.
        v[a] = std::fma(x0, c, -(x1 * s));
        v[b] = std::fma(x0, s, x1 * c);
      }
    }
  }
}

// ---- Attention ------------------------------------------------------------------------------

Status attention(const float* q, const int32_t* q_pos, int64_t n_tok, const void* k_cache,
                 const void* v_cache, int64_t n_kv, const AttentionParams& p, float* out,
                 ThreadPool* pool, const int32_t* q_seq, int64_t seq_cells) {
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0)
    return invalid_argument("attention: {} query heads cannot share {} kv heads", p.n_head, p.n_head_kv);
  const int group = p.n_head / p.n_head_kv;
  const int dk = p.head_dim_k, dv = p.head_dim_v;
  const bool k8 = p.k_type == GgmlType::Q8_0, v8 = p.v_type == GgmlType::Q8_0;
  if ((!k8 && p.k_type != GgmlType::F16) || (!v8 && p.v_type != GgmlType::F16))
    return invalid_argument("attention: cache types {}/{} (f16 or q8_0)", ggml_type_name(p.k_type),
                            ggml_type_name(p.v_type));
  if ((k8 && dk % kQK32 != 0) || (v8 && dv % kQK32 != 0))
    return invalid_argument("attention: a q8_0 cache needs head sizes that are multiples of 32 ({}/{})", dk, dv);
  // Bytes of one head's part of a row, and of a whole row (a cell).
  const int64_t k_head = static_cast<int64_t>(row_bytes(p.k_type, dk)), v_head = static_cast<int64_t>(row_bytes(p.v_type, dv));
  const int64_t k_stride = p.n_head_kv * k_head, v_stride = p.n_head_kv * v_head;
  const auto* k_bytes = static_cast<const uint8_t*>(k_cache);
  const auto* v_bytes = static_cast<const uint8_t*>(v_cache);
  for (int64_t t = 0; t < n_tok; ++t) {
    if (q_pos[t] < 0 || q_pos[t] >= n_kv)
      return out_of_range("attention: query position {} outside the {} cached cells", q_pos[t], n_kv);
    if (q_seq && (q_seq[t] < 0 || q_pos[t] >= seq_cells))
      return out_of_range("attention: token of sequence {} at position {} outside its {} cells", q_seq[t], q_pos[t],
                          seq_cells);
  }

  // One task per (token, head); each computes its output row completely, in the arithmetic of
  // llama.cpp's kq = k·q (f16 dot), softmax, kqv = v·kq (f16 dot over the cache cells) chain.
  auto task = [&](int64_t i0, int64_t i1, int) {
    std::vector<uint16_t> q16(static_cast<size_t>(dk));
    std::vector<uint8_t> q8(k8 ? row_bytes(GgmlType::Q8_0, dk) : 0);
    std::vector<float> vrow(v8 ? static_cast<size_t>(dv) : 0);
    std::vector<float> s(static_cast<size_t>(n_kv));
    std::vector<float> acc(static_cast<size_t>(dv) * 32);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / p.n_head;
      const int h = static_cast<int>(i % p.n_head);
      const int hk = h / group;
      const int64_t pos = q_pos[t];
      // The token's own sequence: its cells are a contiguous block, indexed by position.
      const int64_t base = q_seq ? static_cast<int64_t>(q_seq[t]) * seq_cells : 0;
      const uint8_t* k_seq = k_bytes + base * k_stride;
      const uint8_t* v_seq = v_bytes + base * v_stride;
      const int64_t j0 = p.n_swa > 0 ? std::max<int64_t>(0, pos - p.n_swa + 1) : 0;
      const int64_t j1 = pos + 1;  // causal: keys at positions <= pos
      const int64_t n = j1 - j0;
      if (k8) quantize_activation(GgmlType::Q8_0, q + (t * p.n_head + h) * dk, q8.data(), dk);
      else to_fp16(q + (t * p.n_head + h) * dk, q16.data(), dk);
      for (int64_t j = j0; j < j1; ++j) {
        const uint8_t* kr = k_seq + j * k_stride + hk * k_head;
        float sj = k8 ? vec_dot(GgmlType::Q8_0, kr, q8.data(), dk)
                      : dot_f16_fast(reinterpret_cast<const uint16_t*>(kr), q16.data(), dk);
        if (p.softcap > 0.0f) sj = std::tanh(sj * (1.0f / p.softcap)) * p.softcap;
        s[j - j0] = sj * p.scale;
      }
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) max = std::max(max, s[j]);
      for (int64_t j = 0; j < n; ++j) s[j] = expf_ggml(s[j] - max);
      const float inv = static_cast<float>(1.0 / exp_sum_groups(s.data(), n, j0));
      // p·v: cell j feeds lane j % 8 of accumulator (j % 32) / 8 (cells outside the window
      // contribute exact zeros there, so they are skipped). acc is lane-major (acc[lane * dv + d])
      // so one cell updates dv adjacent floats: the same fma per (d, lane), in SIMD.
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = j0; j < j1; ++j) {
        const float pj = half_to_float(float_to_half(s[j - j0] * inv));
        float* a = acc.data() + (j & 31) * dv;
        if (v8) {  // the row's values d * q, then the same fma per (d, lane)
          dequantize_row_q8_0(reinterpret_cast<const BlockQ8_0*>(v_seq + j * v_stride + hk * v_head), vrow.data(),
                              dv / kQK32);
          for (int d = 0; d < dv; ++d) a[d] = std::fma(vrow[static_cast<size_t>(d)], pj, a[d]);
          continue;
        }
        const uint16_t* vr = reinterpret_cast<const uint16_t*>(v_seq + j * v_stride + hk * v_head);
        int d = 0;
#if LOOM_REF_DOT_AVX2
        const __m256 pv = _mm256_set1_ps(pj);
        for (; d + 8 <= dv; d += 8) {
          const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + d)));
          _mm256_storeu_ps(a + d, _mm256_fmadd_ps(v, pv, _mm256_loadu_ps(a + d)));
        }
#endif
        for (; d < dv; ++d) a[d] = std::fma(half_to_float(vr[d]), pj, a[d]);
      }
      float* o = out + (t * p.n_head + h) * dv;
      int d0 = 0;
#if LOOM_REF_DOT_AVX2
      // The same adds, eight d at a time (acc is lane-major, so each lane's values for eight
      // adjacent d are contiguous).
      for (; d0 + 8 <= dv; d0 += 8) {
        auto a = [&](int lane) { return _mm256_loadu_ps(acc.data() + static_cast<size_t>(lane * dv + d0)); };
        __m256 r[8];
        for (int l = 0; l < 8; ++l) r[l] = _mm256_add_ps(_mm256_add_ps(a(l), a(16 + l)), _mm256_add_ps(a(8 + l), a(24 + l)));
        __m256 t4[4];
        for (int l = 0; l < 4; ++l) t4[l] = _mm256_add_ps(r[l], r[l + 4]);
        _mm256_storeu_ps(o + d0, _mm256_add_ps(_mm256_add_ps(t4[0], t4[1]), _mm256_add_ps(t4[2], t4[3])));
      }
#endif
      for (int d = d0; d < dv; ++d) {
        auto a = [&](int lane) { return acc[static_cast<size_t>(lane * dv + d)]; };
        float r[8];
        for (int l = 0; l < 8; ++l) r[l] = (a(l) + a(16 + l)) + (a(8 + l) + a(24 + l));
        float t4[4];
        for (int l = 0; l < 4; ++l) t4[l] = r[l] + r[l + 4];
        o[d] = (t4[0] + t4[1]) + (t4[2] + t4[3]);
      }
    }
  };
  const int64_t n_tasks = n_tok * p.n_head;
  if (pool) pool->parallel_for(n_tasks, task);
  else task(0, n_tasks, 0);
  return Status();
}

}  // namespace loom::llm::ref
