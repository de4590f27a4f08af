// Reference CPU ops: the plain definitions of every op the engine runs, which every faster
// kernel (HRX on CPU and GPU) is checked against. Numerics follow llama.cpp's CPU backend
// (x86/AVX2 build) wherever they decide token-exactness; see docs/engine.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/base/status.h"
#include "loom/gguf/ggml_types.h"

namespace loom {
class ThreadPool;
}

namespace loom::llm::ref {

// ---- Layout conventions -------------------------------------------------------------------
// Activations are row-major float32 matrices [rows, cols]: one row per token.
// A weight matrix is ggml's 2-D tensor with ne0 = n_in (contiguous) and ne1 = n_out rows; each
// row is row_bytes(type, n_in) bytes of blocks. Matmul computes y[t][r] = dot(W[r], x[t]).
// KV caches are IEEE half (uint16_t bits), row-major [n_cells, n_head_kv * head_dim].
// None of the functions below allocate per call except where noted; all are thread-safe for
// disjoint outputs.

// A read-only view of a weight matrix in its stored (quantized) layout. Not owning.
struct WeightView {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;        // elements per row (ne0)
  int64_t n_out = 0;       // rows (ne1)
  size_t row_stride = 0;   // bytes per row
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride; }
};

// ---- Matmul with llama.cpp's activation quantization ---------------------------------------

// The format the activation row is converted to before the dot product with a `weight` row,
// as ggml's CPU type traits define it: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for
// the K-quants, F16 for F16, F32 for F32. Unsupported weight types: error.
Result<GgmlType> vec_dot_type(GgmlType weight);
// True if matmul/get_rows accept this weight type.
bool weight_type_supported(GgmlType weight);

// Bytes one activation row of n elements takes once quantized to vec_dot_type(weight).
size_t quantized_row_bytes(GgmlType dot_type, int64_t n);

// Quantizes one activation row to `dot_type` exactly as llama.cpp's x86 CPU path does before
// its dot products (Q8_0/Q8_1: scale 127/amax, round half to even; Q8_K: ggml's reference
// quantizer; F16: round to nearest even). n must be a multiple of the block size.
void quantize_activation(GgmlType dot_type, const float* x, void* dst, int64_t n);

// dot(W row, activation row already in vec_dot_type(W.type)): integer products per block,
// float scale per block, float accumulation. n = W.n_in.
float vec_dot(GgmlType weight_type, const void* w_row, const void* x_q, int64_t n);

// y[t * n_out + r] = dot(W[r], x[t]) for t < n_tok. x is [n_tok, n_in] float32.
// `scratch` holds the quantized activations (resized as needed). Rows of W are split over the
// pool's threads; the result does not depend on the thread count. With several tokens (AVX2
// builds) each tile of weight rows is multiplied with all of them at once, unpacked once per
// tile of tokens; every element stays bit-identical to vec_dot(W[r], x[t]).
Status matmul(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool* pool,
              std::vector<uint8_t>* scratch);

// y[t * n_out + r] = vec_dot(W[r], xq[t]) for activations already quantized to
// vec_dot_type(W.type) (rows of quantized_row_bytes each, as quantize_activation writes them):
// what matmul computes after its own quantization, bit for bit.
Status matmul_quantized(const WeightView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool* pool);

// y[t * n_out + r] = sum_k dequantized W[r][k] * x[t][k] in double, rounded to float, for f16
// activations: the definition of the tensor-core matmul (matmul_mma), which reads f16
// activations and dequantized weights instead of llama.cpp's integer block products.
Status matmul_dequantized(const WeightView& w, const uint16_t* x_f16, int64_t n_tok, float* y, ThreadPool* pool);

// y[t * n_out + r] for Q8_1 activation rows (quantize_activation's blocks: f16 d, f16 s = d sum(q),
// 32 signed bytes), summed in double per output: the definition of the integer tensor-core
// matmul (matmul_mmq). Per 32 values: Q4_0 / Q8_0 d_w d_x sum(q_w q_x), the Q4_0 quants taken
// as q - 8; Q4_K (d sc) d_x sum(q q_x) - (dmin m) s_x; Q6_K per 16 values d sc d_x sum((q - 32) q_x).
// Other weight types: invalid_argument.
Status matmul_q8_1(const WeightView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool* pool);

// out[i] = dequantized row ids[i] of the table (embedding lookup). ids must be in range.
Status get_rows(const WeightView& table, const int32_t* ids, int64_t n_ids, float* out);

// ---- Elementwise and normalization ----------------------------------------------------------

// For each of n_rows rows of n values: y = x * (1/sqrt(mean(x^2) + eps)) [* w], with the sum of
// squares in double and the scale in float (as ggml). w (length n) may be null. In-place OK.
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps);

void add(const float* a, const float* b, float* y, int64_t n);   // y = a + b
void mul(const float* a, const float* b, float* y, int64_t n);   // y = a * b
void scale(const float* x, float s, float* y, int64_t n);       // y = x * s
// y = cap * tanh(x / cap) (logit soft-capping), computed as the three ggml ops in sequence.
void softcap(const float* x, float cap, float* y, int64_t n);

// SiLU(x) = x / (1 + exp(-x)).
float silu(float x);
// GELU, tanh approximation.
float gelu_tanh(float x);
// GELU as ggml's CPU backend evaluates it: through a table of gelu_tanh over all fp16 inputs,
// stored as fp16 (x <= -10 -> 0, x >= 10 -> x).
float gelu_ggml(float x);
// y = silu(g) * u ; y = gelu_ggml(g) * u. In-place on g OK.
void swiglu(const float* g, const float* u, float* y, int64_t n);
void geglu(const float* g, const float* u, float* y, int64_t n);

// In-place softmax of one row as ggml computes it: w = x*scale + mask, e = expf_ggml(w - max),
// the e summed eight at a time in float and the group sums in double, x = e * (float)(1/sum).
// mask may be null (else -INFINITY entries get 0). Returns false if every entry was masked.
bool softmax(float* x, const float* mask, int64_t n, float scale);

// A mixture-of-experts router over n_rows rows of n_expert logits, as llama.cpp's graph computes
// it: p = softmax(logits) (the softmax above, scale 1); ids[r, 0..k) = the k largest p in
// descending order (ties: the lower index first); w[r, j] = p[ids[r, j]], and with norm each
// divided by max(s, 2^-14), s = their sum in double (slot order) rounded to float.
void moe_route(const float* logits, int64_t n_rows, int64_t n_expert, int64_t k, bool norm, int32_t* ids,
               float* w);
// y[r] = sum over j = 0..k-1 in order of x[r, j] * w[r, j] (x: [n_rows, k, n], w: [n_rows, k]):
// each product rounded to float, then added left to right (ggml_mul, then one ggml_add per
// further expert).
void moe_sum(const float* x, const float* w, int64_t n_rows, int64_t k, int64_t n, float* y);

int64_t argmax(const float* x, int64_t n);  // first index of the maximum (AVX2 where built)
int64_t argmax_scalar(const float* x, int64_t n);  // its definition, one value at a time

// ---- Rotary position embedding --------------------------------------------------------------

enum class RopeMode : uint8_t {
  kNormal = 0,  // rotate adjacent pairs (x[2i], x[2i+1]): Llama
  kNeox = 2,    // rotate halves (x[i], x[i + n_dims/2]): GPT-NeoX, Gemma
};

struct RopeParams {
  RopeMode mode = RopeMode::kNormal;
  int n_dims = 0;              // rotated dimensions (<= head_dim), even
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;     // 1 / linear scaling factor
  float ext_factor = 0.0f;     // YaRN extrapolation mix (0: off)
  float attn_factor = 1.0f;    // YaRN magnitude scale
  float beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;          // training context, for YaRN correction dims
  const float* freq_factors = nullptr;  // optional, n_dims/2 divisors of theta (Llama 3 style)
};

// Rotates x in place: x is [n_tok, n_head * head_dim]; token t has position pos[t]. theta for
// pair i is pos * freq_base^(-2i/n_dims), computed by repeated float multiplication as ggml
// does, with YaRN/linear scaling applied per RopeParams.
void rope(float* x, int64_t n_tok, int n_head, int head_dim, const int32_t* pos,
          const RopeParams& p);

// ---- Attention over an F16 KV cache ---------------------------------------------------------

struct AttentionParams {
  int n_head = 0, n_head_kv = 0;   // query heads share kv head h / (n_head / n_head_kv)
  int head_dim_k = 0, head_dim_v = 0;
  float scale = 1.0f;              // multiplies q·k inside the softmax (after soft-capping)
  float softcap = 0.0f;            // if > 0: s = softcap * tanh(s / softcap) before softmax
  int n_swa = 0;                   // if > 0: key j masked for query at p when p - j >= n_swa
  // The cache rows' types (F16 or Q8_0; a backend's, not the model's). Q8_0 K: the query is
  // quantized to Q8_0 per head and s_j = vec_dot(k_j, q) (llama.cpp's q8_0 x q8_0 dot); Q8_0 V:
  // each row is dequantized (d * q) before the same p·v.
  GgmlType k_type = GgmlType::F16, v_type = GgmlType::F16;
};

// Causal attention, mirroring llama.cpp's default CPU path (no flash attention): the query is
// rounded to fp16, s_j = q·k_j (fp16 products, float-accurate sums), soft-capped if asked, then
// softmax(s * scale) in float with a double sum, the probabilities rounded to fp16, and
// out = sum_j p_j * v_j.
// q: [n_tok, n_head*head_dim_k]; token t attends cache cells j <= q_pos[t] (cell j holds
// position j) within the window; k_cache/v_cache: [n_kv, n_head_kv*head_dim] rows of halves
// (or Q8_0 blocks, p.k_type / p.v_type);
// out: [n_tok, n_head*head_dim_v]. Heads are split over the pool's threads.
// Several sequences (continuous batching): with q_seq given, token t belongs to sequence
// q_seq[t], whose cells start at q_seq[t] * seq_cells (cell base + j holds its position j), and
// it sees only those; n_kv then bounds positions, not cells. The arithmetic of a token does not
// depend on the other tokens of the step, so a batch gives each sequence its solo results.
Status attention(const float* q, const int32_t* q_pos, int64_t n_tok, const void* k_cache,
                 const void* v_cache, int64_t n_kv, const AttentionParams& p, float* out,
                 ThreadPool* pool, const int32_t* q_seq = nullptr, int64_t seq_cells = 0);

// Rounds x (n values) to fp16 into dst (KV cache store).
void to_fp16(const float* x, uint16_t* dst, int64_t n);

}  // namespace loom::llm::ref
