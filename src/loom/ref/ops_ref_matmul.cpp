// The matmuls of fused Programs: from activations that an earlier launch already converted
// (a quantize, or a norm or attention that writes its readers' format).
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

}  // namespace loom::llm::ref
