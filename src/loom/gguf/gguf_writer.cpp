// GGUF serialization: header, metadata, tensor infos, aligned data section.
#include "loom/gguf/gguf_writer.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace loom::llm {

GgufWriter::GgufWriter(uint32_t version, uint32_t alignment) : version_(version), alignment_(alignment) {
  if (alignment != 32) set_u32("general.alignment", alignment);
}

void GgufWriter::put_u32(uint32_t v) { kv_.append(reinterpret_cast<const char*>(&v), 4); }
void GgufWriter::put_u64(uint64_t v) { kv_.append(reinterpret_cast<const char*>(&v), 8); }
void GgufWriter::put_str(std::string_view s) {
  put_u64(s.size());
  kv_.append(s);
}
void GgufWriter::key(std::string_view k, GgufType t) {
  ++n_kv_;
  put_str(k);
  put_u32(static_cast<uint32_t>(t));
}

void GgufWriter::set_u8(std::string_view k, uint8_t v) { key(k, GgufType::U8); kv_.push_back(static_cast<char>(v)); }
void GgufWriter::set_u32(std::string_view k, uint32_t v) { key(k, GgufType::U32); put_u32(v); }
void GgufWriter::set_i32(std::string_view k, int32_t v) { key(k, GgufType::I32); put_u32(static_cast<uint32_t>(v)); }
void GgufWriter::set_u64(std::string_view k, uint64_t v) { key(k, GgufType::U64); put_u64(v); }
void GgufWriter::set_f32(std::string_view k, float v) {
  key(k, GgufType::F32);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_u32(bits);
}
void GgufWriter::set_bool(std::string_view k, bool v) { key(k, GgufType::BOOL); kv_.push_back(v ? 1 : 0); }
void GgufWriter::set_string(std::string_view k, std::string_view v) { key(k, GgufType::STRING); put_str(v); }
void GgufWriter::set_strings(std::string_view k, const std::vector<std::string>& v) {
  key(k, GgufType::ARRAY);
  put_u32(static_cast<uint32_t>(GgufType::STRING));
  put_u64(v.size());
  for (const auto& s : v) put_str(s);
}
void GgufWriter::set_f32s(std::string_view k, const std::vector<float>& v) {
  key(k, GgufType::ARRAY);
  put_u32(static_cast<uint32_t>(GgufType::F32));
  put_u64(v.size());
  kv_.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
void GgufWriter::set_i32s(std::string_view k, const std::vector<int32_t>& v) {
  key(k, GgufType::ARRAY);
  put_u32(static_cast<uint32_t>(GgufType::I32));
  put_u64(v.size());
  kv_.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

Status GgufWriter::add_tensor(std::string_view name, GgmlType type, std::vector<int64_t> shape, Fill fill) {
  auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info) return invalid_argument("tensor {}: unknown type", name);
  int64_t elems = 1;
  for (int64_t d : shape) elems *= d;
  if (shape.empty() || shape[0] % info->block_elems)
    return invalid_argument("tensor {}: row not a multiple of the {} block size", name, info->name);
  uint64_t n_bytes = static_cast<uint64_t>(elems / info->block_elems) * info->block_bytes;
  Tensor t{std::string(name), type, std::move(shape), n_bytes, data_size_, std::move(fill)};
  data_size_ += (n_bytes + alignment_ - 1) / alignment_ * alignment_;
  tensors_.push_back(std::move(t));
  return Status();
}

Status GgufWriter::add_tensor(std::string_view name, GgmlType type, std::vector<int64_t> shape, std::string_view bytes) {
  std::string copy(bytes);
  size_t given = copy.size();
  LOOM_RETURN_IF_ERROR(add_tensor(name, type, std::move(shape), [copy = std::move(copy)](uint8_t* dst, size_t n) {
    std::memcpy(dst, copy.data(), std::min(n, copy.size()));
  }));
  if (given != tensors_.back().n_bytes) {
    uint64_t want = tensors_.back().n_bytes;
    return invalid_argument("tensor {}: {} bytes given, {} expected", name, given, want);
  }
  return Status();
}

std::string GgufWriter::header() const {
  std::string h;
  auto u32 = [&](uint32_t v) { h.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { h.append(reinterpret_cast<const char*>(&v), 8); };
  h.append("GGUF", 4);
  u32(version_);
  u64(tensors_.size());
  u64(n_kv_);
  h += kv_;
  for (const auto& t : tensors_) {
    u64(t.name.size());
    h += t.name;
    u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) u64(static_cast<uint64_t>(d));
    u32(static_cast<uint32_t>(t.type));
    u64(t.offset);
  }
  h.resize((h.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  return h;
}

std::string GgufWriter::serialize() const {
  std::string out = header();
  size_t base = out.size();
  out.resize(base + data_size_, '\0');
  for (const auto& t : tensors_) t.fill(reinterpret_cast<uint8_t*>(out.data() + base + t.offset), t.n_bytes);
  return out;
}

Status GgufWriter::write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) const {
  // A regular file is written under a private name and renamed into place (atomic): a reader,
  // another process writing the same file (parallel tests share names), or a crash midway never
  // leaves a half-written GGUF at `path`. Anything else (a device, a pipe) is written directly.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  const bool via_tmp = ec ? true : !std::filesystem::exists(st) || std::filesystem::is_regular_file(st);
  const std::string out = via_tmp ? path + "." + std::to_string(::getpid()) + ".tmp" : path;
  Status s = [&]() -> Status {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(out.c_str(), "wb"), &std::fclose);
    if (!f) return invalid_argument("{}: cannot open for writing", path);
    std::string h = header();
    if (std::fwrite(h.data(), 1, h.size(), f.get()) != h.size()) return internal_error("{}: write failed", path);
    std::vector<uint8_t> buf;
    uint64_t done = 0;
    for (const auto& t : tensors_) {
      uint64_t padded = (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
      buf.assign(padded, 0);
      t.fill(buf.data(), t.n_bytes);
      if (std::fwrite(buf.data(), 1, buf.size(), f.get()) != buf.size()) return internal_error("{}: write failed", path);
      done += padded;
      if (progress) progress(done, data_size_);
    }
    if (std::fclose(f.release()) != 0) return internal_error("{}: write failed", path);
    return Status();
  }();
  if (via_tmp) {
    if (s.ok()) {
      std::filesystem::rename(out, path, ec);
      if (ec) s = internal_error("{}: cannot move the written file into place: {}", path, ec.message());
    }
    if (!s.ok()) std::filesystem::remove(out, ec);
  }
  return s;
}

}  // namespace loom::llm
