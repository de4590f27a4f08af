// GGUF parsing with every count, length, offset and size checked against the file before use,
// so hostile files end in a Status (file, field, byte offset) instead of a crash or huge alloc.
#include "loom/gguf/gguf.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace loom::llm {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read little-endian
constexpr int kMaxArrayDepth = 8;
constexpr size_t kMaxTensorName = 63;    // ggml's GGML_MAX_NAME is 64 incl. the terminator
constexpr uint32_t kMaxDims = 4;

// Size in bytes of a fixed-size metadata type; 0 for STRING/ARRAY or unknown.
size_t fixed_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes one fixed-size element at p.
GgufValue decode_fixed(GgufType t, const uint8_t* p) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufType::U8: v.v = uint64_t{load_le<uint8_t>(p)}; break;
    case GgufType::I8: v.v = int64_t{load_le<int8_t>(p)}; break;
    case GgufType::U16: v.v = uint64_t{load_le<uint16_t>(p)}; break;
    case GgufType::I16: v.v = int64_t{load_le<int16_t>(p)}; break;
    case GgufType::U32: v.v = uint64_t{load_le<uint32_t>(p)}; break;
    case GgufType::I32: v.v = int64_t{load_le<int32_t>(p)}; break;
    case GgufType::U64: v.v = load_le<uint64_t>(p); break;
    case GgufType::I64: v.v = load_le<int64_t>(p); break;
    case GgufType::F32: v.v = double{load_le<float>(p)}; break;
    case GgufType::F64: v.v = load_le<double>(p); break;
    case GgufType::BOOL: v.v = load_le<uint8_t>(p) != 0; break;
    default: break;
  }
  return v;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

// ---- GgufValue -------------------------------------------------------------------------------

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(v) || std::holds_alternative<int64_t>(v);
}

Result<uint64_t> GgufValue::as_u64() const {
  if (auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (auto* i = std::get_if<int64_t>(&v)) {
    if (*i < 0) return invalid_argument("value {} is negative", *i);
    return static_cast<uint64_t>(*i);
  }
  return invalid_argument("expected an integer, found {}", gguf_type_name(type));
}

Result<int64_t> GgufValue::as_i64() const {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid_argument("value {} is too large", *u);
    return static_cast<int64_t>(*u);
  }
  return invalid_argument("expected an integer, found {}", gguf_type_name(type));
}

Result<double> GgufValue::as_f64() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return invalid_argument("expected a number, found {}", gguf_type_name(type));
}

Result<bool> GgufValue::as_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  return invalid_argument("expected a bool, found {}", gguf_type_name(type));
}

Result<std::string_view> GgufValue::as_string() const {
  if (auto* s = std::get_if<std::string_view>(&v)) return *s;
  return invalid_argument("expected a string, found {}", gguf_type_name(type));
}

Result<const GgufArray*> GgufValue::as_array() const {
  if (auto* a = std::get_if<std::shared_ptr<const GgufArray>>(&v)) return a->get();
  return invalid_argument("expected an array, found {}", gguf_type_name(type));
}

std::string GgufValue::to_string(size_t max_elems) const {
  if (auto* u = std::get_if<uint64_t>(&v)) return fmt::format("{}", *u);
  if (auto* i = std::get_if<int64_t>(&v)) return fmt::format("{}", *i);
  if (auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string_view>(&v)) {
    std::string out = "\"";
    size_t n = 0;
    for (char c : *s) {
      if (++n > 60) { out += "..."; break; }
      if (c == '\n') out += "\\n";
      else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", c);
      else out += c;
    }
    return out + "\"";
  }
  auto& arr = *std::get<std::shared_ptr<const GgufArray>>(v);
  std::string out = fmt::format("[{} x {}: ", arr.size(), gguf_type_name(arr.elem_type));
  for (size_t i = 0; i < arr.size() && i < max_elems; ++i) {
    if (i) out += ", ";
    out += arr.at(i).to_string(max_elems);
  }
  if (arr.size() > max_elems) out += ", ...";
  return out + "]";
}

// ---- GgufArray -------------------------------------------------------------------------------

GgufValue GgufArray::at(size_t i) const {
  if (elem_type == GgufType::STRING) return GgufValue{GgufType::STRING, strs[i]};
  if (elem_type == GgufType::ARRAY) return GgufValue{GgufType::ARRAY, arrays[i]};
  return decode_fixed(elem_type, raw + i * fixed_size(elem_type));
}

Result<std::vector<std::string_view>> GgufArray::strings() const {
  if (elem_type != GgufType::STRING)
    return invalid_argument("expected an array of strings, found an array of {}", gguf_type_name(elem_type));
  return strs;
}

Result<std::vector<float>> GgufArray::floats() const {
  std::vector<float> out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(double d, at(i).as_f64().with_context(fmt::format("element {}", i)));
    out.push_back(static_cast<float>(d));
  }
  return out;
}

Result<std::vector<int64_t>> GgufArray::ints() const {
  std::vector<int64_t> out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(int64_t d, at(i).as_i64().with_context(fmt::format("element {}", i)));
    out.push_back(d);
  }
  return out;
}

int64_t GgufTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated against overflow at parse time
  return n;
}

// ---- Parser ----------------------------------------------------------------------------------

class GgufParser {
 public:
  GgufParser(GgufFile& f) : f_(f), p_(f.map_.data()), n_(f.map_.size()) {}

  Status run() {
    LOOM_ASSIGN_OR_RETURN(uint32_t magic, read<uint32_t>("magic"));
    if (magic != kMagic) {
      return fail("magic", 0,
                  fmt::format("not a GGUF file (magic bytes {:08x}, expected 47475546 'GGUF')",
                              __builtin_bswap32(magic)));
    }
    LOOM_ASSIGN_OR_RETURN(uint32_t version, read<uint32_t>("version"));
    if (version == 2 || version == 3) {
      f_.version_ = version;
    } else if (version == 1) {
      return unsupported("version", 4, "GGUF version 1 is not supported (only 2 and 3); re-convert the model");
    } else if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3) {
      return unsupported("version", 4, "big-endian GGUF files are not supported");
    } else {
      return unsupported("version", 4, fmt::format("unknown GGUF version {} (supported: 2, 3)", version));
    }
    size_t at = off_;
    LOOM_ASSIGN_OR_RETURN(uint64_t n_tensors, read<uint64_t>("tensor_count"));
    // A tensor record is at least 8 (name len) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
    if (n_tensors > remaining() / 24)
      return fail("tensor_count", at, fmt::format("{} tensors cannot fit in the {} bytes left", n_tensors, remaining()));
    at = off_;
    LOOM_ASSIGN_OR_RETURN(uint64_t n_kv, read<uint64_t>("metadata_kv_count"));
    // A key/value is at least 8 (key len) + 4 (type) + 1 (smallest value) bytes.
    if (n_kv > remaining() / 13)
      return fail("metadata_kv_count", at, fmt::format("{} metadata entries cannot fit in the {} bytes left", n_kv, remaining()));

    f_.kv_.reserve(static_cast<size_t>(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) LOOM_RETURN_IF_ERROR(read_kv(i));
    LOOM_RETURN_IF_ERROR(read_alignment());

    f_.tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) LOOM_RETURN_IF_ERROR(read_tensor_info(i));

    // The data section starts at the next multiple of the alignment after the header.
    uint64_t data = align_up(off_, f_.alignment_);
    if (!f_.tensors_.empty() && data > n_)
      return fail("tensor data", off_, fmt::format("file ends at byte {} before the data section at byte {}", n_, data));
    f_.data_offset_ = data;
    for (auto& t : f_.tensors_) LOOM_RETURN_IF_ERROR(place_tensor(t));
    return Status();
  }

 private:
  size_t remaining() const { return n_ - off_; }
  static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

  Status fail(std::string_view field, size_t at, std::string problem) const {
    return data_loss("{}: {} at byte {}: {}", f_.path_, field, at, problem);
  }
  Status unsupported(std::string_view field, size_t at, std::string problem) const {
    return unimplemented("{}: {} at byte {}: {}", f_.path_, field, at, problem);
  }
  Status truncated(std::string_view field, size_t need) const {
    return fail(field, off_, fmt::format("truncated file: needs {} more bytes, only {} left", need, remaining()));
  }

  template <typename T>
  Result<T> read(std::string_view field) {
    if (remaining() < sizeof(T)) return truncated(field, sizeof(T));
    T v = load_le<T>(p_ + off_);
    off_ += sizeof(T);
    return v;
  }

  Result<std::string_view> read_string(std::string_view field) {
    size_t at = off_;
    LOOM_ASSIGN_OR_RETURN(uint64_t len, read<uint64_t>(field));
    if (len > remaining()) {
      off_ = at;
      return fail(field, at, fmt::format("string length {} exceeds the {} bytes left", len, remaining() - 8));
    }
    std::string_view s(reinterpret_cast<const char*>(p_ + off_), static_cast<size_t>(len));
    off_ += static_cast<size_t>(len);
    return s;
  }

  Result<GgufType> read_type(std::string_view field) {
    size_t at = off_;
    LOOM_ASSIGN_OR_RETURN(uint32_t t, read<uint32_t>(field));
    if (!valid_type(t)) return fail(field, at, fmt::format("unknown metadata value type {}", t));
    return static_cast<GgufType>(t);
  }

  Result<GgufValue> read_value(GgufType t, const std::string& field, int depth) {
    if (t == GgufType::STRING) {
      LOOM_ASSIGN_OR_RETURN(std::string_view s, read_string(field));
      return GgufValue{t, s};
    }
    if (t == GgufType::ARRAY) {
      LOOM_ASSIGN_OR_RETURN(auto arr, read_array(field, depth + 1));
      return GgufValue{t, std::move(arr)};
    }
    size_t sz = fixed_size(t);
    if (remaining() < sz) return truncated(field, sz);
    GgufValue v = decode_fixed(t, p_ + off_);
    off_ += sz;
    return v;
  }

  Result<std::shared_ptr<const GgufArray>> read_array(const std::string& field, int depth) {
    if (depth > kMaxArrayDepth)
      return fail(field, off_, fmt::format("arrays nested deeper than {} levels", kMaxArrayDepth));
    auto arr = std::make_shared<GgufArray>();
    LOOM_ASSIGN_OR_RETURN(arr->elem_type, read_type(field + " (array element type)"));
    size_t at = off_;
    LOOM_ASSIGN_OR_RETURN(arr->count, read<uint64_t>(field + " (array length)"));
    // Smallest encoding of one element: its fixed size, 8 for a string length, 12 for an array.
    size_t min_elem = arr->elem_type == GgufType::STRING  ? 8
                      : arr->elem_type == GgufType::ARRAY ? 12
                                                          : fixed_size(arr->elem_type);
    if (arr->count > remaining() / min_elem)
      return fail(field, at, fmt::format("array of {} {} elements cannot fit in the {} bytes left",
                                         arr->count, gguf_type_name(arr->elem_type), remaining()));
    size_t count = static_cast<size_t>(arr->count);
    if (arr->elem_type == GgufType::STRING) {
      arr->strs.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        LOOM_ASSIGN_OR_RETURN(std::string_view s, read_string(field));
        arr->strs.push_back(s);
      }
    } else if (arr->elem_type == GgufType::ARRAY) {
      for (size_t i = 0; i < count; ++i) {
        LOOM_ASSIGN_OR_RETURN(auto sub, read_array(field, depth + 1));
        arr->arrays.push_back(std::move(sub));
      }
    } else {
      arr->raw = p_ + off_;
      off_ += count * min_elem;
    }
    return std::shared_ptr<const GgufArray>(std::move(arr));
  }

  Status read_kv(uint64_t index) {
    size_t at = off_;
    LOOM_ASSIGN_OR_RETURN(std::string_view key, read_string(fmt::format("metadata key #{}", index)));
    if (key.empty()) return fail(fmt::format("metadata key #{}", index), at, "empty key");
    std::string field = fmt::format("metadata '{}'", key);
    if (f_.kv_index_.count(key)) return fail(field, at, "duplicate key");
    LOOM_ASSIGN_OR_RETURN(GgufType t, read_type(field + " (type)"));
    LOOM_ASSIGN_OR_RETURN(GgufValue v, read_value(t, field, 0));
    f_.kv_index_.emplace(std::string(key), f_.kv_.size());
    f_.kv_.emplace_back(std::string(key), std::move(v));
    kv_offsets_.push_back(at);
    return Status();
  }

  Status read_alignment() {
    auto it = f_.kv_index_.find(std::string_view("general.alignment"));
    if (it == f_.kv_index_.end()) return Status();
    const GgufValue& v = f_.kv_[it->second].second;
    size_t at = kv_offsets_[it->second];
    if (v.type != GgufType::U32)
      return fail("metadata 'general.alignment'", at, fmt::format("must be u32, found {}", gguf_type_name(v.type)));
    uint64_t a = std::get<uint64_t>(v.v);
    if (a == 0 || (a & (a - 1)) != 0)
      return fail("metadata 'general.alignment'", at, fmt::format("{} is not a power of two", a));
    f_.alignment_ = a;
    return Status();
  }

  Status read_tensor_info(uint64_t index) {
    size_t at = off_;
    std::string field = fmt::format("tensor #{}", index);
    LOOM_ASSIGN_OR_RETURN(std::string_view name, read_string(field + " name"));
    if (name.size() > kMaxTensorName)
      return fail(field + " name", at, fmt::format("name of {} bytes is longer than {}", name.size(), kMaxTensorName));
    field = fmt::format("tensor '{}'", name);
    if (f_.tensor_index_.count(name)) return fail(field, at, "duplicate tensor name");
    size_t dims_at = off_;
    LOOM_ASSIGN_OR_RETURN(uint32_t n_dims, read<uint32_t>(field + " n_dims"));
    if (n_dims > kMaxDims)
      return fail(field + " n_dims", dims_at, fmt::format("{} dimensions (at most {})", n_dims, kMaxDims));
    GgufTensor t;
    t.name = std::string(name);
    int64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      size_t dim_at = off_;
      LOOM_ASSIGN_OR_RETURN(uint64_t ne, read<uint64_t>(field + " shape"));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(elems, static_cast<int64_t>(ne), &elems))
        return fail(field + " shape", dim_at, fmt::format("dimension {} = {} overflows the element count", d, ne));
      t.shape.push_back(static_cast<int64_t>(ne));
    }
    size_t type_at = off_;
    LOOM_ASSIGN_OR_RETURN(uint32_t type, read<uint32_t>(field + " type"));
    auto info = ggml_type_info(type);
    if (!info) return fail(field + " type", type_at, fmt::format("unknown tensor type {}", type));
    t.type = info->type;
    size_t off_at = off_;
    LOOM_ASSIGN_OR_RETURN(t.offset, read<uint64_t>(field + " offset"));
    int64_t row = t.shape.empty() ? 1 : t.shape[0];
    if (row % info->block_elems != 0)
      return fail(field + " shape", dims_at,
                  fmt::format("row of {} elements is not a multiple of the {} block size {}", row, info->name, info->block_elems));
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(elems / info->block_elems), uint64_t{info->block_bytes}, &bytes))
      return fail(field + " shape", dims_at, "byte size overflows");
    t.n_bytes = bytes;
    offsets_at_.push_back(off_at);
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
    return Status();
  }

  Status place_tensor(GgufTensor& t) {
    size_t at = offsets_at_[&t - f_.tensors_.data()];
    std::string field = fmt::format("tensor '{}' offset", t.name);
    if (t.offset % f_.alignment_ != 0)
      return fail(field, at, fmt::format("offset {} is not a multiple of the alignment {}", t.offset, f_.alignment_));
    uint64_t data_size = n_ - f_.data_offset_;
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      return fail(field, at, fmt::format("data [{}, +{}) lies outside the {}-byte data section (file truncated?)",
                                         t.offset, t.n_bytes, data_size));
    t.data = p_ + f_.data_offset_ + t.offset;
    return Status();
  }

  GgufFile& f_;
  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
  std::vector<size_t> kv_offsets_;
  std::vector<size_t> offsets_at_;
};

// ---- GgufFile --------------------------------------------------------------------------------

Result<GgufFile> GgufFile::open(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
  return parse(std::move(map), path);
}

Result<GgufFile> GgufFile::parse(MappedFile mapping, const std::string& name) {
  GgufFile f;
  f.map_ = std::move(mapping);
  f.path_ = name;
  GgufParser parser(f);
  LOOM_RETURN_IF_ERROR(parser.run());
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string_view GgufFile::architecture() const {
  const GgufValue* v = find("general.architecture");
  if (!v) return {};
  auto s = v->as_string();
  return s.ok() ? *s : std::string_view();
}

#define LOOM_GGUF_GETTER(Ret, name, conv)                                              \
  Result<Ret> GgufFile::name(std::string_view key) const {                            \
    const GgufValue* v = find(key);                                                   \
    if (!v) return not_found("{}: metadata key '{}' is missing", path_, key);         \
    return v->conv().with_context(fmt::format("{}: metadata '{}'", path_, key));      \
  }
LOOM_GGUF_GETTER(uint64_t, get_u64, as_u64)
LOOM_GGUF_GETTER(int64_t, get_i64, as_i64)
LOOM_GGUF_GETTER(double, get_f64, as_f64)
LOOM_GGUF_GETTER(bool, get_bool, as_bool)
LOOM_GGUF_GETTER(std::string_view, get_string, as_string)
LOOM_GGUF_GETTER(const GgufArray*, get_array, as_array)
#undef LOOM_GGUF_GETTER

Result<uint64_t> GgufFile::get_u64_or(std::string_view key, uint64_t def) const {
  return has(key) ? get_u64(key) : Result<uint64_t>(def);
}
Result<double> GgufFile::get_f64_or(std::string_view key, double def) const {
  return has(key) ? get_f64(key) : Result<double>(def);
}
Result<bool> GgufFile::get_bool_or(std::string_view key, bool def) const {
  return has(key) ? get_bool(key) : Result<bool>(def);
}

}  // namespace loom::llm
