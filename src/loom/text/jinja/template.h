// A Jinja template compiled once and rendered many times, with jinja2's semantics as Hugging
// Face transformers configures them for chat templates: ImmutableSandboxedEnvironment,
// trim_blocks and lstrip_blocks on, loop controls, and the globals raise_exception(msg) and
// strftime_now(fmt) plus range/namespace/dict/joiner. See docs/chat_templates.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/text/jinja/value.h"

namespace loom::llm::jinja {

struct Stmt;

// Bounds on one render, so hostile templates end in an error instead of a hang or a crash.
struct Limits {
  size_t max_output_bytes = size_t{16} << 20;      // rendered text, and any one string value
  uint64_t max_string_work = uint64_t{256} << 20;  // total bytes built by string operations
  uint64_t max_steps = 20'000'000;                 // expression + statement evaluations
  int max_depth = 500;                             // nested evaluations (macro recursion included)
  uint64_t max_millis = 10'000;                    // wall-clock time of one render
};

// Immutable after parse; render() may run concurrently from several threads.
class Template {
 public:
  // Syntax errors (and unknown filters/tests outside conditionals) come back as
  // kInvalidArgument with "line:col: message".
  static Result<Template> parse(std::string_view source);

  // Renders with `vars` on top of the builtin globals. Runtime errors (raise_exception, type
  // errors, undefined values used wrongly) are kInvalidArgument with "line:col: message";
  // exceeding `limits` is kResourceExhausted.
  Result<std::string> render(const ValueDict& vars, const Limits& limits = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace loom::llm::jinja
