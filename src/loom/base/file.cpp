// File mapping and whole-file I/O.
#include "loom/base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "loom/base/options.h"

namespace loom {

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this == &other) return *this;
  reset();
  mapped_ = other.mapped_;
  owned_ = std::move(other.owned_);
  path_ = std::move(other.path_);
  size_ = other.size_;
  data_ = mapped_ ? other.data_ : reinterpret_cast<const uint8_t*>(owned_.data());
  other.data_ = nullptr;
  other.size_ = 0;
  other.mapped_ = false;
  return *this;
}

void MappedFile::reset() {
  if (mapped_ && data_) munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
  owned_.clear();
}

namespace {

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a plain file";
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  // stat first: open() on a FIFO blocks until a writer appears, and on a device it may have side
  // effects. O_NONBLOCK covers the path being swapped for one between stat and open; fstat then
  // checks what was actually opened.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int e = errno;
    if (e == ENOENT) return not_found("{}: no such file", path);
    return invalid_argument("{}: cannot open: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) return invalid_argument("{} is not a regular file ({})", path, file_kind(st.st_mode));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return not_found("{}: no such file", path);
    return invalid_argument("{}: cannot open: {}", path, std::strerror(e));
  }
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return invalid_argument("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("{} is not a regular file ({})", path, file_kind(st.st_mode));
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return invalid_argument("{}: cannot map: {}", path, std::strerror(e));
    }
    f.data_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
  }
  ::close(fd);
  return f;
}

MappedFile MappedFile::from_bytes(std::string_view bytes) {
  MappedFile f;
  f.owned_.assign(bytes.data(), bytes.size());
  f.data_ = reinterpret_cast<const uint8_t*>(f.owned_.data());
  f.size_ = f.owned_.size();
  f.path_ = "<memory>";
  return f;
}

Result<std::string> read_file(const std::string& path) {
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return invalid_argument("{} is a directory, not a file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("{}: cannot open for reading", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_file(const std::string& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return invalid_argument("{}: cannot open for writing", path);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!out) return internal_error("{}: write failed", path);
  return Status();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string cache_dir() {
  if (std::string d = opt::get_string(opt::Opt::kCacheDir); !d.empty()) return d;
  if (std::string x = opt::get_string(opt::Opt::kXdgCacheHome); !x.empty()) return x + "/loom";
  const std::string home = opt::get_string(opt::Opt::kHome);
  return (home.empty() ? std::string("/tmp") : home) + "/.cache/loom";
}

}  // namespace loom
