// Host KV cache storage for the reference CPU backend: per layer, K and V rows
// [n_seq * n_ctx, n_head_kv * head_dim], each in its own type (IEEE half by default, or Q8_0
// blocks: 34 bytes per 32 values, as llama.cpp's --cache-type-k/v q8_0); sequence s owns cells
// [s * n_ctx, (s + 1) * n_ctx) and its cell s * n_ctx + p holds position p (fixed partitions,
// like llama.cpp's --parallel).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "loom/base/status.h"
#include "loom/gguf/ggml_types.h"

namespace loom::llm {

class KvCache {
 public:
  KvCache() = default;
  // Allocates n_layer x (n_seq * n_ctx) cells, zero-filled. The memory comes from calloc, so
  // the OS commits pages only as cells get written: many idle sequence slots cost little.
  // Fails cleanly when memory is short. k_row/v_row count values; types F16 or Q8_0 (whose rows
  // must be whole blocks of 32).
  Status init(int64_t n_layer, int64_t n_ctx, int64_t k_row, int64_t v_row, int64_t n_seq = 1,
              GgmlType k_type = GgmlType::F16, GgmlType v_type = GgmlType::F16);

  int64_t n_ctx() const { return n_ctx_; }      // cells per sequence
  int64_t n_seq() const { return n_seq_; }
  int64_t n_cells() const { return n_ctx_ * n_seq_; }
  int64_t k_row() const { return k_row_; }  // values per cell
  int64_t v_row() const { return v_row_; }
  GgmlType k_type() const { return k_type_; }
  GgmlType v_type() const { return v_type_; }
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  uint8_t* k(int64_t layer) { return k_[static_cast<size_t>(layer)].get(); }
  uint8_t* v(int64_t layer) { return v_[static_cast<size_t>(layer)].get(); }
  uint64_t bytes() const;  // reserved (not necessarily committed) bytes

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<uint8_t[], Free>;
  int64_t n_ctx_ = 0, n_seq_ = 0, k_row_ = 0, v_row_ = 0;
  GgmlType k_type_ = GgmlType::F16, v_type_ = GgmlType::F16;
  size_t k_row_bytes_ = 0, v_row_bytes_ = 0;
  std::vector<Buffer> k_, v_;
};

}  // namespace loom::llm
