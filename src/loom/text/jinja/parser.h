// Jinja parser: tokens -> syntax tree, with jinja2's grammar and operator precedence
// (filters bind tighter than arithmetic, ** is left-associative, comparisons chain).
#pragma once

#include <vector>

#include "loom/base/status.h"
#include "loom/text/jinja/ast.h"
#include "loom/text/jinja/lexer.h"

namespace loom::llm::jinja {

// Nesting of expressions and blocks beyond this is refused, so hostile templates cannot
// exhaust the stack while parsing or evaluating.
inline constexpr int kMaxParseDepth = 128;

// Errors carry "line:col". Unknown filters/tests fail here, except inside {% if %} blocks and
// inline if-expressions, where jinja2 defers the error to the moment they run.
Result<Body> parse(std::vector<Token> tokens);

}  // namespace loom::llm::jinja
