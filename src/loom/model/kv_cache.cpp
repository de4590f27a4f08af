// Host KV cache storage (F16 or Q8_0 rows) for the reference backend.
#include "loom/model/kv_cache.h"

#include <tuple>

#include "loom/gguf/quant.h"

namespace loom::llm {

Status KvCache::init(int64_t n_layer, int64_t n_ctx, int64_t k_row, int64_t v_row, int64_t n_seq, GgmlType k_type,
                     GgmlType v_type) {
  if (n_layer <= 0 || n_ctx <= 0 || k_row <= 0 || v_row <= 0 || n_seq <= 0)
    return invalid_argument("kv cache: bad geometry {} layers x {} sequences x {} cells", n_layer, n_seq, n_ctx);
  for (auto [type, row, what] : {std::tuple{k_type, k_row, "k"}, std::tuple{v_type, v_row, "v"}}) {
    if (type != GgmlType::F16 && type != GgmlType::Q8_0)
      return invalid_argument("kv cache type {} for {}: supported are f16 and q8_0", ggml_type_name(type), what);
    if (type == GgmlType::Q8_0 && row % 32 != 0)
      return invalid_argument("kv cache type q8_0 for {} needs rows of whole 32-value blocks ({} values per cell)", what,
                              row);
  }
  k_type_ = k_type;
  v_type_ = v_type;
  k_row_bytes_ = row_bytes(k_type, k_row);
  v_row_bytes_ = row_bytes(v_type, v_row);
  n_ctx_ = n_ctx;
  n_seq_ = n_seq;
  k_row_ = k_row;
  v_row_ = v_row;
  k_.clear();
  v_.clear();
  const size_t cells = static_cast<size_t>(n_ctx * n_seq);
  for (int64_t l = 0; l < n_layer; ++l) {
    Buffer k(static_cast<uint8_t*>(std::calloc(cells, k_row_bytes_)));
    Buffer v(static_cast<uint8_t*>(std::calloc(cells, v_row_bytes_)));
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
  return static_cast<uint64_t>(k_.size()) * static_cast<uint64_t>(n_cells()) * (k_row_bytes_ + v_row_bytes_);
}

}  // namespace loom::llm
