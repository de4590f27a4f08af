// GGUF reader (versions 2 and 3, little-endian): metadata, tensor table and tensor data, read
// from a memory map. Every field is bounds-checked; hostile files give one clear Status naming
// the file, the field and the byte offset. Strings and tensor data point into the mapping, so a
// GgufFile must outlive every view taken from it. Thread-safe for concurrent reads once opened.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loom/base/file.h"
#include "loom/base/status.h"
#include "loom/gguf/ggml_types.h"

namespace loom::llm {

// GGUF metadata value types, numbered as in the specification.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_type_name(GgufType type);

struct GgufArray;

// One metadata value. Integers of every width are held widened (signed in i, unsigned in u);
// floats in f; strings as views into the mapping; arrays behind a shared pointer.
struct GgufValue {
  GgufType type = GgufType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string_view, std::shared_ptr<const GgufArray>> v;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  // Conversions that refuse values out of the target's range or of the wrong kind.
  Result<uint64_t> as_u64() const;
  Result<int64_t> as_i64() const;
  Result<double> as_f64() const;  // accepts integers too
  Result<bool> as_bool() const;
  Result<std::string_view> as_string() const;
  Result<const GgufArray*> as_array() const;
  std::string to_string(size_t max_elems = 8) const;  // short human-readable form
};

struct GgufArray {
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  // Storage by element kind, so a huge array costs at most ~2x its bytes in the file:
  const uint8_t* raw = nullptr;  // fixed-size elements: little-endian, unaligned, in the mapping
  std::vector<std::string_view> strs;                     // STRING elements
  std::vector<std::shared_ptr<const GgufArray>> arrays;  // ARRAY elements (nested)

  size_t size() const { return static_cast<size_t>(count); }
  GgufValue at(size_t i) const;  // i < size()
  // Typed copies; fail if an element cannot convert.
  Result<std::vector<std::string_view>> strings() const;
  Result<std::vector<float>> floats() const;
  Result<std::vector<int64_t>> ints() const;
};

struct GgufTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> shape;  // ne[0] (innermost, contiguous) first, as ggml orders it
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t n_elements() const;
  int64_t row_elems() const { return shape.empty() ? 1 : shape[0]; }
  int64_t n_rows() const { return row_elems() ? n_elements() / row_elems() : 0; }
};

class GgufFile {
 public:
  // Maps and parses the file. Tensor data is validated for bounds, not read.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes held in memory (fuzzer, tests); `name` stands in for the path in errors.
  static Result<GgufFile> parse(MappedFile mapping, const std::string& name);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return map_.size(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters; errors name the key and file.
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<int64_t> get_i64(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string_view> get_string(std::string_view key) const;
  Result<const GgufArray*> get_array(std::string_view key) const;
  // Getters with a default for optional keys (still an error if present with a bad type).
  Result<uint64_t> get_u64_or(std::string_view key, uint64_t def) const;
  Result<double> get_f64_or(std::string_view key, double def) const;
  Result<bool> get_bool_or(std::string_view key, bool def) const;
  std::string_view architecture() const;  // general.architecture or ""

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;
  MappedFile map_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace loom::llm
