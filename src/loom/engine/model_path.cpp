// Default model location and the lookup every model-taking command shares.
#include "loom/engine/model_path.h"

#include "loom/base/file.h"
#include "loom/base/options.h"

namespace loom::llm {

std::string default_model_path() {
  if (std::string m = opt::get_string(opt::Opt::kModel); !m.empty()) return m;
  return cache_dir() + "/models/" + std::string(kDefaultModelFile);
}

Result<std::string> resolve_model_path(std::string_view requested) {
  if (!requested.empty()) {
    std::string path(requested);
    if (!file_exists(path)) return not_found("model file {} does not exist", path);
    return path;
  }
  std::string path = default_model_path();
  if (file_exists(path)) return path;
  if (!opt::get_string(opt::Opt::kModel).empty()) {
    if (opt::source(opt::Opt::kModel) == opt::Source::kEnv)
      return not_found("model file {} (from $LOOM_MODEL) does not exist", path);
    return not_found("model file {} does not exist", path);
  }
  return not_found(
      "no model given (-m) and the default model {} is missing; run tools/setup.sh (or "
      "python3 tools/fetch_models.py smollm2) to fetch it, or set $LOOM_MODEL",
      path);
}

}  // namespace loom::llm
