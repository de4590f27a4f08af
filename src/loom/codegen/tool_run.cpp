// Subprocess execution with posix_spawn (no shell, so paths need no quoting) and the content hash.
#include "loom/base/hash.h"
#include "loom/codegen/tool_run.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "loom/base/options.h"

extern char** environ;

namespace loom::codegen {
namespace {

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

bool is_executable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Result<std::string> find_tool(const std::vector<std::string>& names) {
  const std::string path = opt::get_string(opt::Opt::kPath);
  for (const std::string& name : names) {
    if (name.empty()) continue;
    if (name.find('/') != std::string::npos) {
      if (is_executable(name)) return name;
      continue;
    }
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find(':', start);
      if (end == std::string::npos) end = path.size();
      std::string dir = path.substr(start, end - start);
      if (!dir.empty() && is_executable(dir + "/" + name)) return dir + "/" + name;
      start = end + 1;
    }
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return not_found("none of [{}] found on PATH", list);
}

Result<ToolResult> run_tool(const std::vector<std::string>& argv) {
  if (argv.empty()) return invalid_argument("run_tool: empty command");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return internal_error("pipe: {}", std::strerror(errno));
  Fd read_end(fds[0]), write_end(fds[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return unavailable("cannot run {}: {}", argv[0], std::strerror(rc));
  write_end.reset();

  ToolResult result;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (result.output.size() < (64u << 10)) result.output.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return internal_error("waitpid {}: {}", argv[0], std::strerror(errno));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// 128 bits: a collision between two kernels in one cache is out of the question in practice.
std::string content_hash(std::string_view bytes) { return content_hash128(bytes); }

}  // namespace loom::codegen
