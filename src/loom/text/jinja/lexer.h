// Jinja lexer: splits template source into text, tag delimiters and expression tokens, applying
// jinja2's whitespace control ({%- -%}, {%+ +%}) and the trim_blocks / lstrip_blocks options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm::jinja {

// 1-based line and column (column counts bytes) of a token in the template source.
struct Pos {
  int line = 1;
  int col = 1;
};

enum class TokenType : uint8_t {
  kText,        // literal template data (already whitespace-controlled)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the decoded value
  kInt,         // ival
  kFloat,       // fval
  kOp,          // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  Pos pos;
};

struct LexOptions {
  bool trim_blocks = true;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;  // drop spaces/tabs before a block or comment tag on its own line
  bool keep_trailing_newline = false;
};

// Errors carry "line:col"; the template must be valid UTF-8.
Result<std::vector<Token>> tokenize(std::string_view source, const LexOptions& options = {});

// Errors of the template engine put the position first: "12:5: message".
Status syntax_error(Pos pos, std::string_view message);

}  // namespace loom::llm::jinja
