// The matmuls of fused Programs: from activations that an earlier launch already converted
// (a quantize, or a norm or attention that writes its readers' format).
#include <cstring>
#include <vector>

#include "loom/base/thread_pool.h"
#include "loom/gguf/quant.h"
#include "loom/ref/ops_ref.h"

namespace loom::llm::ref {

Status matmul_quantized(const WeightView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool* pool) {
  LOOM_ASSIGN_OR_RETURN(GgmlType dot_type, vec_dot_type(w.type));
  const size_t xq_row = quantized_row_bytes(dot_type, w.n_in);
  auto rows = [&](int64_t r0, int64_t r1, int) {
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t r = r0; r < r1; ++r) y[t * w.n_out + r] = vec_dot(w.type, w.row(r), xq + t * xq_row, w.n_in);
  };
  if (pool) pool->parallel_for(w.n_out, rows, 16);
  else rows(0, w.n_out, 0);
  return Status();
}

Status matmul_dequantized(const WeightView& w, const uint16_t* x_f16, int64_t n_tok, float* y, ThreadPool* pool) {
  std::vector<float> x(static_cast<size_t>(n_tok * w.n_in));
  LOOM_RETURN_IF_ERROR(dequantize(GgmlType::F16, x_f16, x.data(), n_tok * w.n_in));
  std::vector<Status> errors(static_cast<size_t>(pool ? pool->n_threads() : 1));
  auto rows = [&](int64_t r0, int64_t r1, int worker) {
    std::vector<float> row(static_cast<size_t>(w.n_in));
    for (int64_t r = r0; r < r1; ++r) {
      Status s = dequantize(w.type, w.row(r), row.data(), w.n_in);
      if (!s.ok()) {
        errors[static_cast<size_t>(worker)] = std::move(s);
        return;
      }
      for (int64_t t = 0; t < n_tok; ++t) {
        const float* xt = x.data() + t * w.n_in;
        double acc = 0;
        for (int64_t k = 0; k < w.n_in; ++k) acc += static_cast<double>(row[static_cast<size_t>(k)]) * xt[k];
        y[t * w.n_out + r] = static_cast<float>(acc);
      }
    }
  };
  if (pool) pool->parallel_for(w.n_out, rows, 16);
  else rows(0, w.n_out, 0);
  for (Status& s : errors)
    if (!s.ok()) return std::move(s);
  return Status();
}

namespace {

double f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return static_cast<double>(fp16_to_fp32(h));
}

// One weight row against one Q8_1 activation row (matmul_q8_1's sum).
double dot_q8_1(GgmlType t, const uint8_t* wr, const uint8_t* xr, int64_t n_in) {
  double acc = 0;
  for (int64_t k = 0; k < n_in / 32; ++k) {
    const uint8_t* xb = xr + k * 36;
    int64_t isum = 0;
    double dw = 0, dm = 0;
    if (t == GgmlType::Q4_K) {
      const uint8_t* blk = wr + (k / 8) * 144;
      const int j = static_cast<int>(k % 8);
      const uint8_t* sc = blk + 4;
      const int scv = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
      const int mv = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      dw = f16_at(blk) * scv;
      dm = f16_at(blk + 2) * mv;
      const uint8_t* qs = blk + 16 + 32 * (j / 2);
      for (int e = 0; e < 32; ++e) isum += int64_t{(qs[e] >> (4 * (j % 2))) & 15} * static_cast<int8_t>(xb[4 + e]);
    } else if (t == GgmlType::Q6_K) {
      // Unit j of 8 in a super-block: values 128 (j / 4) + 32 (j % 4) + l, two 16-value
      // sub-blocks with their own int8 scales (dequantize_row_q6_K's order).
      const uint8_t* blk = wr + (k / 8) * 210;
      const int j = static_cast<int>(k % 8), n = j / 4, q = j % 4;
      const uint8_t* ql = blk + 64 * n + 32 * (q % 2);
      const uint8_t* qh = blk + 128 + 32 * n;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * n + 2 * q;
      const double d = f16_at(blk + 208);
      for (int h = 0; h < 2; ++h) {
        int64_t part = 0;
        for (int e = 16 * h; e < 16 * h + 16; ++e) {
          const int v = (((ql[e] >> (4 * (q / 2))) & 15) | (((qh[e] >> (2 * q)) & 3) << 4)) - 32;
          part += int64_t{v} * static_cast<int8_t>(xb[4 + e]);
        }
        acc += d * sc[h] * f16_at(xb) * static_cast<double>(part);
      }
      continue;
    } else {
      const bool q4 = t == GgmlType::Q4_0;
      const uint8_t* wb = wr + k * (q4 ? 18 : 34);
      dw = f16_at(wb);
      for (int e = 0; e < 32; ++e) {
        const int wv = q4 ? (e < 16 ? (wb[2 + e] & 15) : (wb[2 + e - 16] >> 4)) - 8 : static_cast<int8_t>(wb[2 + e]);
        isum += int64_t{wv} * static_cast<int8_t>(xb[4 + e]);
      }
    }
    acc += dw * f16_at(xb) * static_cast<double>(isum) - dm * f16_at(xb + 2);
  }
  return acc;
}

}  // namespace

Status matmul_q8_1(const WeightView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool* pool) {
  const bool k_quant = w.type == GgmlType::Q4_K || w.type == GgmlType::Q6_K;
  if (w.type != GgmlType::Q4_0 && w.type != GgmlType::Q8_0 && !k_quant)
    return invalid_argument("matmul_q8_1: {} weights (Q4_0, Q8_0, Q4_K, Q6_K)", ggml_type_name(w.type));
  if (w.n_in % (k_quant ? 256 : 32) != 0) return invalid_argument("matmul_q8_1: n_in={}", w.n_in);
  const int64_t xq_row = w.n_in / 32 * 36;
  auto rows = [&](int64_t r0, int64_t r1, int) {
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t r = r0; r < r1; ++r)
        y[t * w.n_out + r] = static_cast<float>(dot_q8_1(w.type, w.row(r), xq + t * xq_row, w.n_in));
  };
  if (pool) pool->parallel_for(w.n_out, rows, 16);
  else rows(0, w.n_out, 0);
  return Status();
}

}  // namespace loom::llm::ref
