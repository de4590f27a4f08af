// Internal to the parser: the Parser class, split between parser.cpp (statements, driver,
// unknown filter/test checks) and parser_expr.cpp (expressions).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "loom/text/jinja/parser.h"

namespace loom::llm::jinja::parser_detail {

// How a token reads in error messages.
std::string describe(const Token& t);
ExprPtr make_expr(ExprKind kind, Pos pos);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<Body> run() {
    LOOM_ASSIGN_OR_RETURN(Body body, parse_body({}));
    LOOM_RETURN_IF_ERROR(check_body(body, false));
    return body;
  }

 private:
  // RAII depth counter: refuses nesting past kMaxParseDepth.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) { ++p_.depth_; }
    ~Nest() { --p_.depth_; }
    Status check() const {
      if (p_.depth_ > kMaxParseDepth)
        return syntax_error(p_.cur().pos, fmt::format("template nested deeper than {} levels", kMaxParseDepth));
      return {};
    }

   private:
    Parser& p_;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  Status fail(std::string_view msg) const { return syntax_error(cur().pos, msg); }
  Status expect_op(std::string_view op) {
    if (skip_op(op)) return {};
    return fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  Status expect_block_end() {
    if (cur().type == TokenType::kBlockEnd) {
      advance();
      return {};
    }
    return fail(fmt::format("expected end of statement block, got {}", describe(cur())));
  }
  Result<std::string> expect_name() {
    if (cur().type != TokenType::kName) return fail(fmt::format("expected a name, got {}", describe(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }

  // --- statements -------------------------------------------------------------------------

  // Parses until a {% name %} with name in `ends` (left unconsumed: cur() is that name).
  Result<Body> parse_body(std::initializer_list<std::string_view> ends);

  Status unclosed_error() const;
  static std::string end_of(const std::string& tag) { return "end" + tag; }

  Status unknown_tag(const std::string& name, Pos pos) const;

  // Opens a block for the duration of a statement's body (for error messages).
  struct Open {
    Open(Parser& p, std::string tag, Pos pos) : p_(p) { p_.open_.emplace_back(std::move(tag), pos); }
    ~Open() { p_.open_.pop_back(); }
    Parser& p_;
  };

  // After {% : dispatches on the statement name. Returns null for statements that emit nothing.
  Result<StmtPtr> parse_statement();

  // Parses the body up to {% end<tag> %} and consumes that tag.
  Result<StmtPtr> finish_body(StmtPtr s, const std::string& tag, Pos pos);

  Result<StmtPtr> parse_if(StmtPtr s);

  // Names of an assignment target: a, b / (a, b) / ns.attr (with_namespace).
  Result<Target> parse_target(bool with_namespace);

  Result<StmtPtr> parse_for(StmtPtr s);

  Result<StmtPtr> parse_set(StmtPtr s);

  Result<std::vector<Param>> parse_params();

  Result<StmtPtr> parse_macro(StmtPtr s);

  Result<StmtPtr> parse_call_block(StmtPtr s);

  Result<StmtPtr> parse_filter_block(StmtPtr s);

  Result<StmtPtr> parse_with(StmtPtr s);

  // --- expressions ------------------------------------------------------------------------

  bool at_tuple_end(std::initializer_list<std::string_view> extra_end) const;

  // Comma-separated expressions; a tuple when a comma appears. `parenthesized` allows "()".
  Result<ExprPtr> parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end, bool parenthesized);

  Result<ExprPtr> parse_expression(bool with_condexpr);

  Result<ExprPtr> binary(ExprKind kind, std::string op, Pos pos, ExprPtr a, ExprPtr b);

  Result<ExprPtr> parse_or();

  Result<ExprPtr> parse_and();

  Result<ExprPtr> parse_not();

  Result<ExprPtr> parse_compare();

  Result<ExprPtr> parse_math1();

  Result<ExprPtr> parse_concat();

  Result<ExprPtr> parse_math2();

  Result<ExprPtr> parse_pow();

  Result<ExprPtr> parse_unary(bool with_filter);

  Result<ExprPtr> parse_primary();

  Result<ExprPtr> parse_list();

  Result<ExprPtr> parse_dict();

  Result<ExprPtr> parse_postfix(ExprPtr e);

  Result<ExprPtr> parse_filter_expr(ExprPtr e);

  Result<ExprPtr> parse_subscript(ExprPtr obj);

  // "(" args ")" into e->args (after any leading entries) and e->kwargs.
  Status parse_call_args(Expr& e);

  Result<ExprPtr> parse_call(ExprPtr callee);

  Result<std::string> parse_dotted_name();

  // `| name(args) | name ...`; `input` null for filter blocks ({% filter %}, {% set x | f %}).
  Result<ExprPtr> parse_filter_chain(ExprPtr input, bool start_inline = false);

  Result<ExprPtr> parse_test(ExprPtr input);

  // --- unknown filters/tests ----------------------------------------------------------------
  // jinja2 refuses unknown filters and tests when compiling, except inside if-statements and
  // inline if-expressions ("soft" frames), where the error waits until they run. Loops, macros
  // and block assignments start a fresh, strict frame.

  Status check_expr(const Expr* e, bool soft);

  Status check_body(const Body& body, bool soft);

  Status check_stmt(const Stmt& s, bool soft);

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::pair<std::string, Pos>> open_;
};

}  // namespace loom::llm::jinja::parser_detail
