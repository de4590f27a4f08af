// Host KV cache storage for the reference CPU backend: per layer, K and V as IEEE half rows
// [n_ctx, n_head_kv * head_dim]; cell i holds position i.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm {

class KvCache {
 public:
  KvCache() = default;
  // Allocates n_layer x n_ctx cells (zero-filled). Fails cleanly when memory is short.
  Status init(int64_t n_layer, int64_t n_ctx, int64_t k_row, int64_t v_row);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t k_row() const { return k_row_; }
  int64_t v_row() const { return v_row_; }
  uint16_t* k(int64_t layer) { return k_[static_cast<size_t>(layer)].data(); }
  uint16_t* v(int64_t layer) { return v_[static_cast<size_t>(layer)].data(); }
  uint64_t bytes() const;

 private:
  int64_t n_ctx_ = 0, k_row_ = 0, v_row_ = 0;
  std::vector<std::vector<uint16_t>> k_, v_;
};

}  // namespace loom::llm
