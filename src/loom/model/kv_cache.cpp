// Host KV cache storage (F16) for the reference backend.
#include "loom/model/kv_cache.h"

namespace loom::llm {

Status KvCache::init(int64_t n_layer, int64_t n_ctx, int64_t k_row, int64_t v_row, int64_t n_seq) {
  if (n_layer <= 0 || n_ctx <= 0 || k_row <= 0 || v_row <= 0 || n_seq <= 0)
    return invalid_argument("kv cache: bad geometry {} layers x {} sequences x {} cells", n_layer, n_seq, n_ctx);
  n_ctx_ = n_ctx;
  n_seq_ = n_seq;
  k_row_ = k_row;
  v_row_ = v_row;
  k_.clear();
  v_.clear();
  const size_t cells = static_cast<size_t>(n_ctx * n_seq);
  for (int64_t l = 0; l < n_layer; ++l) {
    Buffer k(static_cast<uint16_t*>(std::calloc(cells * static_cast<size_t>(k_row), sizeof(uint16_t))));
    Buffer v(static_cast<uint16_t*>(std::calloc(cells * static_cast<size_t>(v_row), sizeof(uint16_t))));
    if (!k || !v) {
      k_.clear();
      v_.clear();
      return resource_exhausted("kv cache of {} cells x {} layers does not fit in memory; use a smaller -c",
                                cells, n_layer);
    }
    k_.push_back(std::move(k));
    v_.push_back(std::move(v));
  }
  return Status();
}

uint64_t KvCache::bytes() const {
  return static_cast<uint64_t>(k_.size()) * static_cast<uint64_t>(n_cells()) *
         static_cast<uint64_t>(k_row_ + v_row_) * 2;
}

}  // namespace loom::llm
