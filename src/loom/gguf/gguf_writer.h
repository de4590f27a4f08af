// GGUF writer (version 3 by default): builds metadata and tensors and writes a file that
// llama.cpp and the `gguf` package read. Used by `loom model synth` and by tests that craft
// valid files to corrupt. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/gguf/ggml_types.h"
#include "loom/gguf/gguf.h"

namespace loom::llm {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = 32);

  // Metadata, written in call order. Keys are not checked for duplicates (tests need that).
  void set_u8(std::string_view key, uint8_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_f32(std::string_view key, float v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_strings(std::string_view key, const std::vector<std::string>& v);
  void set_f32s(std::string_view key, const std::vector<float>& v);
  void set_i32s(std::string_view key, const std::vector<int32_t>& v);

  // A tensor whose bytes come from `fill(dst, n_bytes)` at write time (so multi-GiB files need
  // not be held in memory). n_bytes is derived from type and shape.
  using Fill = std::function<void(uint8_t* dst, size_t n_bytes)>;
  Status add_tensor(std::string_view name, GgmlType type, std::vector<int64_t> shape, Fill fill);
  Status add_tensor(std::string_view name, GgmlType type, std::vector<int64_t> shape, std::string_view bytes);

  // Whole file in memory (tests) or streamed to disk.
  std::string serialize() const;
  // `progress(done, total)` is called after each tensor with data bytes written so far.
  Status write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress = {}) const;
  uint64_t data_bytes() const { return data_size_; }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    uint64_t n_bytes;
    uint64_t offset;
    Fill fill;
  };
  void key(std::string_view k, GgufType t);
  void put_u32(uint32_t v);
  void put_u64(uint64_t v);
  void put_str(std::string_view s);
  std::string header() const;

  uint32_t version_;
  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::string kv_;  // encoded metadata
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace loom::llm
