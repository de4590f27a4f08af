// Where Loom looks for a model when the user names none: $LOOM_MODEL, else the default SmolLM2
// file in the model cache ($LOOM_CACHE_DIR/models, default ~/.cache/loom/models).
#pragma once

#include <string>
#include <string_view>

#include "loom/base/status.h"

namespace loom::llm {

inline constexpr std::string_view kDefaultModelFile = "SmolLM2-135M-Instruct-Q4_1.gguf";

// $LOOM_MODEL if set and non-empty, else <cache_dir()>/models/SmolLM2-135M-Instruct-Q4_1.gguf.
// Does not touch the file system.
std::string default_model_path();

// The model a command should open: `requested` (a -m value) when non-empty, else
// default_model_path(). Errors with kNotFound when the file does not exist; for the default
// model the message says how to fetch it (tools/setup.sh).
Result<std::string> resolve_model_path(std::string_view requested);

}  // namespace loom::llm
