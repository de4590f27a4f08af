// Recursive-descent parser for the Jinja subset Loom renders (see docs/chat_templates.md):
// statements and the entry point; expressions are in parser_expr.cpp.
#include <algorithm>

#include "loom/text/jinja/builtins.h"
#include "loom/text/jinja/parser_impl.h"

namespace loom::llm::jinja {
namespace parser_detail {

// Parses until a {% name %} with name in `ends` (left unconsumed: cur() is that name).
Result<Body> Parser::parse_body(std::initializer_list<std::string_view> ends) {
  Nest nest(*this);
  LOOM_RETURN_IF_ERROR(nest.check());
  Body body;
  while (true) {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::kText: {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
        break;
      }
      case TokenType::kVarBegin: {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->pos = t.pos;
        advance();
        LOOM_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
        if (cur().type != TokenType::kVarEnd)
          return fail(fmt::format("expected end of print statement, got {}", describe(cur())));
        advance();
        body.push_back(std::move(s));
        break;
      }
      case TokenType::kBlockBegin: {
        const Token& name = peek();
        if (name.type == TokenType::kName &&
            std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          advance();
          return body;
        }
        advance();
        LOOM_ASSIGN_OR_RETURN(StmtPtr s, parse_statement());
        if (s) body.push_back(std::move(s));
        break;
      }
      case TokenType::kEof:
        if (ends.size() != 0) return unclosed_error();
        return body;
      default:
        return fail(fmt::format("unexpected {}", describe(t)));
    }
  }
}

Status Parser::unclosed_error() const {
  const auto& [tag, pos] = open_.back();
  return syntax_error(pos, fmt::format("unexpected end of template: '{{% {} %}}' opened here is never closed "
                                       "(expected '{{% {} %}}')", tag, end_of(tag)));
}

Status Parser::unknown_tag(const std::string& name, Pos pos) const {
  std::string msg = fmt::format("unknown tag '{}'", name);
  if (!open_.empty())
    msg += fmt::format(" (the innermost open block is '{}' from line {}, closed by '{{% {} %}}')",
                       open_.back().first, open_.back().second.line, end_of(open_.back().first));
  return syntax_error(pos, msg);
}

// After {% : dispatches on the statement name. Returns null for statements that emit nothing.
Result<StmtPtr> Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != TokenType::kName) return fail(fmt::format("expected a statement name, got {}", describe(t)));
  std::string name = t.text;
  Pos pos = t.pos;
  advance();
  auto s = std::make_unique<Stmt>();
  s->pos = pos;
  if (name == "if") return parse_if(std::move(s));
  if (name == "for") return parse_for(std::move(s));
  if (name == "set") return parse_set(std::move(s));
  if (name == "macro") return parse_macro(std::move(s));
  if (name == "call") return parse_call_block(std::move(s));
  if (name == "filter") return parse_filter_block(std::move(s));
  if (name == "with") return parse_with(std::move(s));
  if (name == "generation") {
    s->kind = StmtKind::kGeneration;
    LOOM_RETURN_IF_ERROR(expect_block_end());
    return finish_body(std::move(s), "generation", pos);
  }
  if (name == "print") {
    s->kind = StmtKind::kOutput;
    LOOM_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
    LOOM_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) return syntax_error(pos, fmt::format("'{}' outside of a for loop", name));
    s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    LOOM_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
  for (const char* unsupported : {"include", "import", "from", "extends", "block", "autoescape"})
    if (name == unsupported)
      return syntax_error(pos, fmt::format("'{{% {} %}}' is not supported: chat templates render standalone", name));
  return unknown_tag(name, pos);
}

// Parses the body up to {% end<tag> %} and consumes that tag.
Result<StmtPtr> Parser::finish_body(StmtPtr s, const std::string& tag, Pos pos) {
  Open open(*this, tag, pos);
  std::string end = end_of(tag);
  LOOM_ASSIGN_OR_RETURN(s->body, parse_body({end}));
  advance();  // end tag name
  LOOM_RETURN_IF_ERROR(expect_block_end());
  return s;
}

Result<StmtPtr> Parser::parse_if(StmtPtr s) {
  s->kind = StmtKind::kIf;
  Open open(*this, "if", s->pos);
  while (true) {
    LOOM_ASSIGN_OR_RETURN(ExprPtr test, parse_tuple(false, {}, false));
    LOOM_RETURN_IF_ERROR(expect_block_end());
    LOOM_ASSIGN_OR_RETURN(Body body, parse_body({"elif", "else", "endif"}));
    s->branches.emplace_back(std::move(test), std::move(body));
    std::string which = cur().text;
    advance();
    if (which == "elif") continue;
    if (which == "else") {
      LOOM_RETURN_IF_ERROR(expect_block_end());
      LOOM_ASSIGN_OR_RETURN(s->else_body, parse_body({"endif"}));
      advance();
    }
    LOOM_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
}

// Names of an assignment target: a, b / (a, b) / ns.attr (with_namespace).
Result<Target> Parser::parse_target(bool with_namespace) {
  Target target;
  bool paren = skip_op("(");
  LOOM_ASSIGN_OR_RETURN(std::string first, expect_name());
  target.names.push_back(first);
  if (with_namespace && !paren && is_op(".")) {
    advance();
    LOOM_ASSIGN_OR_RETURN(target.attr, expect_name());
    return target;
  }
  while (skip_op(",")) {
    target.is_tuple = true;
    if (cur().type != TokenType::kName) break;  // trailing comma
    LOOM_ASSIGN_OR_RETURN(std::string n, expect_name());
    target.names.push_back(n);
  }
  if (paren) {
    LOOM_RETURN_IF_ERROR(expect_op(")"));
    target.is_tuple = true;
  }
  for (const auto& n : target.names)
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      return fail(fmt::format("cannot assign to '{}'", n));
  return target;
}

Result<StmtPtr> Parser::parse_for(StmtPtr s) {
  s->kind = StmtKind::kFor;
  LOOM_ASSIGN_OR_RETURN(s->target, parse_target(false));
  if (!skip_name("in")) return fail(fmt::format("expected 'in', got {}", describe(cur())));
  LOOM_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, {"recursive"}, false));
  if (skip_name("if")) {
    LOOM_ASSIGN_OR_RETURN(s->cond, parse_expression(true));
  }
  if (is_name("recursive")) return fail("recursive for loops are not supported");
  LOOM_RETURN_IF_ERROR(expect_block_end());
  Open open(*this, "for", s->pos);
  ++loop_depth_;
  auto body = parse_body({"endfor", "else"});
  --loop_depth_;
  if (!body.ok()) return std::move(body).status();
  s->body = std::move(body).value();
  if (cur().text == "else") {
    advance();
    LOOM_RETURN_IF_ERROR(expect_block_end());
    LOOM_ASSIGN_OR_RETURN(s->else_body, parse_body({"endfor"}));
  }
  advance();
  LOOM_RETURN_IF_ERROR(expect_block_end());
  return s;
}

Result<StmtPtr> Parser::parse_set(StmtPtr s) {
  LOOM_ASSIGN_OR_RETURN(s->target, parse_target(true));
  if (skip_op("=")) {
    s->kind = StmtKind::kSet;
    LOOM_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
    LOOM_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  if (is_op("|")) {
    LOOM_ASSIGN_OR_RETURN(s->filter, parse_filter_chain(nullptr));
  }
  LOOM_RETURN_IF_ERROR(expect_block_end());
  Pos pos = s->pos;
  return finish_body(std::move(s), "set", pos);
}

Result<std::vector<Param>> Parser::parse_params() {
  std::vector<Param> params;
  LOOM_RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    if (!params.empty()) LOOM_RETURN_IF_ERROR(expect_op(","));
    if (is_op(")")) break;
    Param p;
    LOOM_ASSIGN_OR_RETURN(p.name, expect_name());
    if (skip_op("=")) {
      LOOM_ASSIGN_OR_RETURN(p.default_value, parse_expression(true));
    } else if (!params.empty() && params.back().default_value) {
      return fail("non-default argument follows default argument");
    }
    params.push_back(std::move(p));
  }
  advance();
  return params;
}

Result<StmtPtr> Parser::parse_macro(StmtPtr s) {
  s->kind = StmtKind::kMacro;
  LOOM_ASSIGN_OR_RETURN(s->text, expect_name());
  LOOM_ASSIGN_OR_RETURN(s->params, parse_params());
  LOOM_RETURN_IF_ERROR(expect_block_end());
  int saved = loop_depth_;
  loop_depth_ = 0;
  Pos pos = s->pos;
  auto r = finish_body(std::move(s), "macro", pos);
  loop_depth_ = saved;
  return r;
}

Result<StmtPtr> Parser::parse_call_block(StmtPtr s) {
  s->kind = StmtKind::kCallBlock;
  if (is_op("(")) {
    LOOM_ASSIGN_OR_RETURN(s->params, parse_params());
  }
  LOOM_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
  if (s->expr->kind != ExprKind::kCall) return syntax_error(s->expr->pos, "expected a call after '{% call'");
  LOOM_RETURN_IF_ERROR(expect_block_end());
  int saved = loop_depth_;
  loop_depth_ = 0;
  Pos pos = s->pos;
  auto r = finish_body(std::move(s), "call", pos);
  loop_depth_ = saved;
  return r;
}

Result<StmtPtr> Parser::parse_filter_block(StmtPtr s) {
  s->kind = StmtKind::kFilterBlock;
  LOOM_ASSIGN_OR_RETURN(s->filter, parse_filter_chain(nullptr, /*start_inline=*/true));
  LOOM_RETURN_IF_ERROR(expect_block_end());
  Pos pos = s->pos;
  return finish_body(std::move(s), "filter", pos);
}

Result<StmtPtr> Parser::parse_with(StmtPtr s) {
  s->kind = StmtKind::kWith;
  while (cur().type != TokenType::kBlockEnd) {
    if (!s->assigns.empty()) LOOM_RETURN_IF_ERROR(expect_op(","));
    LOOM_ASSIGN_OR_RETURN(Target target, parse_target(false));
    LOOM_RETURN_IF_ERROR(expect_op("="));
    LOOM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    s->assigns.emplace_back(std::move(target), std::move(value));
  }
  advance();
  Pos pos = s->pos;
  return finish_body(std::move(s), "with", pos);
}

Status Parser::check_expr(const Expr* e, bool soft) {
  if (!e) return {};
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft) {
    if (e->kind == ExprKind::kFilter && !has_filter(e->name))
      return syntax_error(e->pos, fmt::format("no filter named '{}'", e->name));
    if (e->kind == ExprKind::kTest && !has_test(e->name))
      return syntax_error(e->pos, fmt::format("no test named '{}'", e->name));
  }
  for (const auto& a : e->args) LOOM_RETURN_IF_ERROR(check_expr(a.get(), soft));
  for (const auto& kv : e->kwargs) LOOM_RETURN_IF_ERROR(check_expr(kv.second.get(), soft));
  return {};
}

Status Parser::check_body(const Body& body, bool soft) {
  for (const auto& s : body) LOOM_RETURN_IF_ERROR(check_stmt(*s, soft));
  return {};
}

Status Parser::check_stmt(const Stmt& s, bool soft) {
  switch (s.kind) {
    case StmtKind::kIf:
      for (const auto& [test, body] : s.branches) {
        LOOM_RETURN_IF_ERROR(check_expr(test.get(), true));
        LOOM_RETURN_IF_ERROR(check_body(body, true));
      }
      return check_body(s.else_body, true);
    case StmtKind::kFor:
      LOOM_RETURN_IF_ERROR(check_expr(s.expr.get(), soft));
      LOOM_RETURN_IF_ERROR(check_expr(s.cond.get(), false));
      LOOM_RETURN_IF_ERROR(check_body(s.body, false));
      return check_body(s.else_body, false);
    case StmtKind::kMacro:
      for (const auto& p : s.params) LOOM_RETURN_IF_ERROR(check_expr(p.default_value.get(), false));
      return check_body(s.body, false);
    case StmtKind::kCallBlock:
      LOOM_RETURN_IF_ERROR(check_expr(s.expr.get(), soft));
      return check_body(s.body, false);
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock:
      LOOM_RETURN_IF_ERROR(check_expr(s.filter.get(), soft));
      return check_body(s.body, false);
    case StmtKind::kWith:
      for (const auto& a : s.assigns) LOOM_RETURN_IF_ERROR(check_expr(a.second.get(), soft));
      return check_body(s.body, false);
    case StmtKind::kGeneration:
      return check_body(s.body, false);
    default:
      return check_expr(s.expr.get(), soft);
  }
}

}  // namespace parser_detail

Result<Body> parse(std::vector<Token> tokens) {
  if (tokens.empty() || tokens.back().type != TokenType::kEof) return internal_error("token stream without end");
  parser_detail::Parser p(std::move(tokens));
  return p.run();
}

}  // namespace loom::llm::jinja
