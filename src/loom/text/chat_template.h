// Chat prompts from a model's own chat template: the Jinja text in the GGUF key
// tokenizer.chat_template, rendered as Hugging Face transformers renders it (jinja2 sandbox,
// trim_blocks, lstrip_blocks; variables messages, add_generation_prompt, bos_token, eos_token,
// tools=None, documents=None). Gemma GGUFs that ship without a template get Loom's builtin
// Gemma turn format. See docs/chat_templates.md.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm {

class GgufFile;
namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;
  std::string content;
};

// A parsed chat template plus the special-token text it refers to. Cheap to copy; immutable;
// render() is safe to call from several threads.
class ChatTemplate {
 public:
  // Reads tokenizer.chat_template (or the builtin for Gemma) and the BOS/EOS token text from
  // the vocabulary. kNotFound when the model has no template and no builtin applies.
  static Result<ChatTemplate> from_gguf(const GgufFile& gguf);
  static Result<ChatTemplate> from_source(std::string_view source, std::string bos_token, std::string eos_token);

  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // Messages as a JSON array of objects with any fields (role, content as string or list of
  // parts, tool_calls...); `extra_vars_json`, when not empty, is a JSON object of further
  // variables (e.g. {"tools": [...]}) that override the defaults.
  Result<std::string> render_json(std::string_view messages_json, bool add_generation_prompt,
                                  std::string_view extra_vars_json = {}) const;

  const std::string& source() const { return source_; }
  bool is_builtin() const { return builtin_; }  // true when the GGUF had no template
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  std::shared_ptr<const jinja::Template> template_;
  std::string source_, bos_, eos_;
  bool builtin_ = false;
};

// One-shot helpers over ChatTemplate.
Result<std::string> render_template(std::string_view template_text, const std::vector<ChatMessage>& messages,
                                    std::string_view bos_token, std::string_view eos_token,
                                    bool add_generation_prompt);
Result<std::string> render_chat(const GgufFile& gguf, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

// Loom's builtin template for an architecture whose GGUFs may lack one ("" when none).
std::string_view builtin_chat_template(std::string_view architecture);

}  // namespace loom::llm
