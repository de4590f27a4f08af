// Host KV cache storage (F16) for the reference backend.
#include "loom/llm/kv_cache.h"

#include <new>

namespace loom::llm {

Status KvCache::init(int64_t n_layer, int64_t n_ctx, int64_t k_row, int64_t v_row) {
  if (n_layer <= 0 || n_ctx <= 0 || k_row <= 0 || v_row <= 0)
    return invalid_argument("kv cache: bad geometry {} layers x {} cells", n_layer, n_ctx);
  n_ctx_ = n_ctx;
  k_row_ = k_row;
  v_row_ = v_row;
  try {
    k_.assign(static_cast<size_t>(n_layer), std::vector<uint16_t>(static_cast<size_t>(n_ctx * k_row)));
    v_.assign(static_cast<size_t>(n_layer), std::vector<uint16_t>(static_cast<size_t>(n_ctx * v_row)));
  } catch (const std::bad_alloc&) {
    k_.clear();
    v_.clear();
    return resource_exhausted("kv cache of {} cells x {} layers does not fit in memory; use a smaller -c",
                              n_ctx, n_layer);
  }
  return Status();
}

uint64_t KvCache::bytes() const {
  uint64_t n = 0;
  for (const auto& x : k_) n += x.size() * 2;
  for (const auto& x : v_) n += x.size() * 2;
  return n;
}

}  // namespace loom::llm
