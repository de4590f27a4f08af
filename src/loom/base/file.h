// Files: read-only memory maps (move-only RAII) and whole-file reads/writes returning Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/base/status.h"

namespace loom {

// A read-only private mapping of a whole file. Owns the mapping; move-only. The bytes stay
// valid for the object's lifetime. An empty file maps to data()==nullptr, size()==0.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Errors name the path: not found, not a regular file (a directory, FIFO, socket or device is
  // refused after a stat, without opening it, so a FIFO cannot block), unreadable.
  static Result<MappedFile> open(const std::string& path);
  // Maps a copy of bytes held in memory (used by the fuzzer and tests); not file-backed.
  static MappedFile from_bytes(std::string_view bytes);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;    // true: munmap; false: owned_ holds the bytes
  std::string owned_;
  std::string path_;
};

// Reads a whole file or pipe (a FIFO such as <(cmd) is read until its writer closes it); a
// directory is refused.
Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, std::string_view contents);
bool file_exists(const std::string& path);

// ~/.cache/loom (or $LOOM_CACHE_DIR): models, compiled kernels, knowledge base.
std::string cache_dir();

}  // namespace loom
