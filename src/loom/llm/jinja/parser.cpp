// Recursive-descent parser for the Jinja subset Loom renders (see docs/chat_templates.md).
#include "loom/llm/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "loom/llm/jinja/builtins.h"

namespace loom::llm::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kText: return "template data";
    case TokenType::kVarBegin: return "begin of print statement";
    case TokenType::kVarEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kName: return "'" + t.text + "'";
    case TokenType::kString: return "string";
    case TokenType::kInt: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOp: return "'" + t.text + "'";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

ExprPtr make_expr(ExprKind kind, Pos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

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
  Result<Body> parse_body(std::initializer_list<std::string_view> ends) {
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

  Status unclosed_error() const {
    const auto& [tag, pos] = open_.back();
    return syntax_error(pos, fmt::format("unexpected end of template: '{{% {} %}}' opened here is never closed "
                                         "(expected '{{% {} %}}')", tag, end_of(tag)));
  }
  static std::string end_of(const std::string& tag) { return "end" + tag; }

  Status unknown_tag(const std::string& name, Pos pos) const {
    std::string msg = fmt::format("unknown tag '{}'", name);
    if (!open_.empty())
      msg += fmt::format(" (the innermost open block is '{}' from line {}, closed by '{{% {} %}}')",
                         open_.back().first, open_.back().second.line, end_of(open_.back().first));
    return syntax_error(pos, msg);
  }

  // Opens a block for the duration of a statement's body (for error messages).
  struct Open {
    Open(Parser& p, std::string tag, Pos pos) : p_(p) { p_.open_.emplace_back(std::move(tag), pos); }
    ~Open() { p_.open_.pop_back(); }
    Parser& p_;
  };

  // After {% : dispatches on the statement name. Returns null for statements that emit nothing.
  Result<StmtPtr> parse_statement() {
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
  Result<StmtPtr> finish_body(StmtPtr s, const std::string& tag, Pos pos) {
    Open open(*this, tag, pos);
    std::string end = end_of(tag);
    LOOM_ASSIGN_OR_RETURN(s->body, parse_body({end}));
    advance();  // end tag name
    LOOM_RETURN_IF_ERROR(expect_block_end());
    return s;
  }

  Result<StmtPtr> parse_if(StmtPtr s) {
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
  Result<Target> parse_target(bool with_namespace) {
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

  Result<StmtPtr> parse_for(StmtPtr s) {
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

  Result<StmtPtr> parse_set(StmtPtr s) {
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

  Result<std::vector<Param>> parse_params() {
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

  Result<StmtPtr> parse_macro(StmtPtr s) {
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

  Result<StmtPtr> parse_call_block(StmtPtr s) {
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

  Result<StmtPtr> parse_filter_block(StmtPtr s) {
    s->kind = StmtKind::kFilterBlock;
    LOOM_ASSIGN_OR_RETURN(s->filter, parse_filter_chain(nullptr, /*start_inline=*/true));
    LOOM_RETURN_IF_ERROR(expect_block_end());
    Pos pos = s->pos;
    return finish_body(std::move(s), "filter", pos);
  }

  Result<StmtPtr> parse_with(StmtPtr s) {
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

  // --- expressions ------------------------------------------------------------------------

  bool at_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || cur().type == TokenType::kEof ||
        is_op(")"))
      return true;
    for (auto n : extra_end)
      if (is_name(n)) return true;
    return false;
  }

  // Comma-separated expressions; a tuple when a comma appears. `parenthesized` allows "()".
  Result<ExprPtr> parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                              bool parenthesized) {
    Pos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) LOOM_RETURN_IF_ERROR(expect_op(","));
      if (at_tuple_end(extra_end)) break;
      LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
      items.push_back(std::move(e));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!parenthesized) return fail(fmt::format("expected an expression, got {}", describe(cur())));
    }
    auto e = make_expr(ExprKind::kTuple, pos);
    e->args = std::move(items);
    return e;
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    Nest nest(*this);
    LOOM_RETURN_IF_ERROR(nest.check());
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_or());
    if (!with_condexpr) return e;
    while (is_name("if")) {
      Pos pos = cur().pos;
      advance();
      auto c = make_expr(ExprKind::kCondExpr, pos);
      LOOM_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        LOOM_ASSIGN_OR_RETURN(otherwise, parse_expression(true));
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  Result<ExprPtr> binary(ExprKind kind, std::string op, Pos pos, ExprPtr a, ExprPtr b) {
    auto e = make_expr(kind, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  Result<ExprPtr> parse_or() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_and());
    while (is_name("or")) {
      Pos pos = cur().pos;
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_and());
      LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kOr, "or", pos, std::move(e), std::move(r)));
    }
    return e;
  }

  Result<ExprPtr> parse_and() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_not());
    while (is_name("and")) {
      Pos pos = cur().pos;
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_not());
      LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kAnd, "and", pos, std::move(e), std::move(r)));
    }
    return e;
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      LOOM_RETURN_IF_ERROR(nest.check());
      auto e = make_expr(ExprKind::kNot, cur().pos);
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      e->args.push_back(std::move(operand));
      return e;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    Pos pos = cur().pos;
    LOOM_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(ExprKind::kCompare, pos);
        cmp->args.push_back(std::move(first));
      }
      LOOM_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(operand));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  Result<ExprPtr> parse_math1() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_concat());
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      Pos pos = cur().pos;
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_concat());
      LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, op, pos, std::move(e), std::move(r)));
    }
    return e;
  }

  Result<ExprPtr> parse_concat() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_math2());
    while (is_op("~")) {
      Pos pos = cur().pos;
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_math2());
      LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, "~", pos, std::move(e), std::move(r)));
    }
    return e;
  }

  Result<ExprPtr> parse_math2() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      Pos pos = cur().pos;
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_pow());
      LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, op, pos, std::move(e), std::move(r)));
    }
    return e;
  }

  Result<ExprPtr> parse_pow() {
    LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_unary(true));
    while (is_op("**")) {
      Pos pos = cur().pos;
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_unary(true));
      LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, "**", pos, std::move(e), std::move(r)));
    }
    return e;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    Nest nest(*this);
    LOOM_RETURN_IF_ERROR(nest.check());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make_expr(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().pos);
      advance();
      LOOM_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      e->args.push_back(std::move(operand));
    } else {
      LOOM_ASSIGN_OR_RETURN(e, parse_primary());
    }
    LOOM_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) {
      LOOM_ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e)));
    }
    return e;
  }

  Result<ExprPtr> parse_primary() {
    Nest nest(*this);
    LOOM_RETURN_IF_ERROR(nest.check());
    const Token& t = cur();
    Pos pos = t.pos;
    switch (t.type) {
      case TokenType::kName: {
        auto e = make_expr(ExprKind::kConst, pos);
        if (t.text == "true" || t.text == "True") {
          e->value = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (cur().type == TokenType::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        auto e = make_expr(ExprKind::kConst, pos);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenType::kInt:
      case TokenType::kFloat: {
        auto e = make_expr(ExprKind::kConst, pos);
        e->value = t.type == TokenType::kInt ? Value(t.ival) : Value(t.fval);
        advance();
        return e;
      }
      case TokenType::kOp:
        if (t.text == "(") {
          advance();
          LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true, {}, true));
          LOOM_RETURN_IF_ERROR(expect_op(")"));
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    return fail(fmt::format("expected an expression, got {}", describe(t)));
  }

  Result<ExprPtr> parse_list() {
    auto e = make_expr(ExprKind::kList, cur().pos);
    advance();
    while (!is_op("]")) {
      if (!e->args.empty()) LOOM_RETURN_IF_ERROR(expect_op(","));
      if (is_op("]")) break;
      LOOM_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
      e->args.push_back(std::move(item));
    }
    advance();
    return e;
  }

  Result<ExprPtr> parse_dict() {
    auto e = make_expr(ExprKind::kDict, cur().pos);
    advance();
    while (!is_op("}")) {
      if (!e->args.empty()) LOOM_RETURN_IF_ERROR(expect_op(","));
      if (is_op("}")) break;
      LOOM_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
      LOOM_RETURN_IF_ERROR(expect_op(":"));
      LOOM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e->args.push_back(std::move(key));
      e->args.push_back(std::move(value));
    }
    advance();
    return e;
  }

  Result<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        LOOM_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
      } else if (is_op("(")) {
        LOOM_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        LOOM_ASSIGN_OR_RETURN(e, parse_filter_chain(std::move(e)));
      } else if (is_name("is")) {
        LOOM_ASSIGN_OR_RETURN(e, parse_test(std::move(e)));
      } else if (is_op("(")) {
        LOOM_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr obj) {
    Pos pos = cur().pos;
    if (skip_op(".")) {
      if (cur().type == TokenType::kName) {
        auto e = make_expr(ExprKind::kGetAttr, pos);
        e->name = cur().text;
        e->args.push_back(std::move(obj));
        advance();
        return e;
      }
      if (cur().type == TokenType::kInt) {
        auto e = make_expr(ExprKind::kGetItem, pos);
        auto key = make_expr(ExprKind::kConst, cur().pos);
        key->value = Value(cur().ival);
        e->args.push_back(std::move(obj));
        e->args.push_back(std::move(key));
        advance();
        return e;
      }
      return fail(fmt::format("expected a name or number after '.', got {}", describe(cur())));
    }
    advance();  // [
    std::vector<ExprPtr> keys;
    ExprPtr slice;
    while (!is_op("]")) {
      if (!keys.empty() || slice) LOOM_RETURN_IF_ERROR(expect_op(","));
      if (is_op("]")) break;
      ExprPtr start;
      if (!is_op(":")) {
        LOOM_ASSIGN_OR_RETURN(start, parse_expression(true));
      }
      if (!is_op(":")) {
        keys.push_back(std::move(start));
        continue;
      }
      advance();  // first ':'
      auto s = make_expr(ExprKind::kSlice, pos);
      s->args.push_back(nullptr);  // object, filled below
      s->args.push_back(std::move(start));
      ExprPtr stop, step;
      if (!is_op("]") && !is_op(",") && !is_op(":")) {
        LOOM_ASSIGN_OR_RETURN(stop, parse_expression(true));
      }
      if (skip_op(":")) {
        if (!is_op("]") && !is_op(",")) {
          LOOM_ASSIGN_OR_RETURN(step, parse_expression(true));
        }
      }
      s->args.push_back(std::move(stop));
      s->args.push_back(std::move(step));
      if (slice || !keys.empty()) return fail("multi-dimensional subscripts are not supported");
      slice = std::move(s);
    }
    advance();  // ]
    if (slice) {
      if (!keys.empty()) return fail("multi-dimensional subscripts are not supported");
      slice->args[0] = std::move(obj);
      return slice;
    }
    if (keys.empty()) return syntax_error(pos, "expected a subscript expression");
    auto e = make_expr(ExprKind::kGetItem, pos);
    e->args.push_back(std::move(obj));
    if (keys.size() == 1) {
      e->args.push_back(std::move(keys[0]));
    } else {
      auto tup = make_expr(ExprKind::kTuple, pos);
      tup->args = std::move(keys);
      e->args.push_back(std::move(tup));
    }
    return e;
  }

  // "(" args ")" into e->args (after any leading entries) and e->kwargs.
  Status parse_call_args(Expr& e) {
    LOOM_RETURN_IF_ERROR(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) LOOM_RETURN_IF_ERROR(expect_op(","));
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) return fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        LOOM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        e.kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!e.kwargs.empty()) return fail("positional argument follows keyword argument");
        LOOM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        e.args.push_back(std::move(value));
      }
    }
    advance();
    return {};
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    auto e = make_expr(ExprKind::kCall, callee->pos);  // errors of a call point at the callee
    e->args.push_back(std::move(callee));
    LOOM_RETURN_IF_ERROR(parse_call_args(*e));
    return e;
  }

  Result<std::string> parse_dotted_name() {
    LOOM_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (is_op(".")) {
      advance();
      LOOM_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    return name;
  }

  // `| name(args) | name ...`; `input` null for filter blocks ({% filter %}, {% set x | f %}).
  Result<ExprPtr> parse_filter_chain(ExprPtr input, bool start_inline = false) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      auto f = make_expr(ExprKind::kFilter, cur().pos);
      LOOM_ASSIGN_OR_RETURN(f->name, parse_dotted_name());
      f->args.push_back(std::move(input));
      if (is_op("(")) LOOM_RETURN_IF_ERROR(parse_call_args(*f));
      input = std::move(f);
    }
    return input;
  }

  Result<ExprPtr> parse_test(ExprPtr input) {
    auto t = make_expr(ExprKind::kTest, cur().pos);
    advance();  // is
    if (skip_name("not")) t->negated = true;
    LOOM_ASSIGN_OR_RETURN(t->name, parse_dotted_name());
    t->args.push_back(std::move(input));
    if (is_op("(")) {
      LOOM_RETURN_IF_ERROR(parse_call_args(*t));
    } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString ||
                cur().type == TokenType::kInt || cur().type == TokenType::kFloat || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) return fail("you cannot chain multiple tests with 'is'");
      LOOM_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      LOOM_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      t->args.push_back(std::move(arg));
    }
    return t;
  }

  // --- unknown filters/tests ----------------------------------------------------------------
  // jinja2 refuses unknown filters and tests when compiling, except inside if-statements and
  // inline if-expressions ("soft" frames), where the error waits until they run. Loops, macros
  // and block assignments start a fresh, strict frame.

  Status check_expr(const Expr* e, bool soft) {
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

  Status check_body(const Body& body, bool soft) {
    for (const auto& s : body) LOOM_RETURN_IF_ERROR(check_stmt(*s, soft));
    return {};
  }

  Status check_stmt(const Stmt& s, bool soft) {
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

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::pair<std::string, Pos>> open_;
};

}  // namespace

Result<Body> parse(std::vector<Token> tokens) {
  if (tokens.empty() || tokens.back().type != TokenType::kEof) return internal_error("token stream without end");
  Parser p(std::move(tokens));
  return p.run();
}

}  // namespace loom::llm::jinja
