// Expression grammar of the Jinja parser: jinja2's precedence from inline if down to
// primaries, postfix access, calls, filters and tests.
#include <algorithm>

#include "loom/text/jinja/parser_impl.h"

namespace loom::llm::jinja::parser_detail {

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

bool Parser::at_tuple_end(std::initializer_list<std::string_view> extra_end) const {
  if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || cur().type == TokenType::kEof ||
      is_op(")"))
    return true;
  for (auto n : extra_end)
    if (is_name(n)) return true;
  return false;
}

// Comma-separated expressions; a tuple when a comma appears. `parenthesized` allows "()".
Result<ExprPtr> Parser::parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end, bool parenthesized) {
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

Result<ExprPtr> Parser::parse_expression(bool with_condexpr) {
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

Result<ExprPtr> Parser::binary(ExprKind kind, std::string op, Pos pos, ExprPtr a, ExprPtr b) {
  auto e = make_expr(kind, pos);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

Result<ExprPtr> Parser::parse_or() {
  LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_and());
  while (is_name("or")) {
    Pos pos = cur().pos;
    advance();
    LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_and());
    LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kOr, "or", pos, std::move(e), std::move(r)));
  }
  return e;
}

Result<ExprPtr> Parser::parse_and() {
  LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_not());
  while (is_name("and")) {
    Pos pos = cur().pos;
    advance();
    LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_not());
    LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kAnd, "and", pos, std::move(e), std::move(r)));
  }
  return e;
}

Result<ExprPtr> Parser::parse_not() {
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

Result<ExprPtr> Parser::parse_compare() {
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

Result<ExprPtr> Parser::parse_math1() {
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

Result<ExprPtr> Parser::parse_concat() {
  LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_math2());
  while (is_op("~")) {
    Pos pos = cur().pos;
    advance();
    LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_math2());
    LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, "~", pos, std::move(e), std::move(r)));
  }
  return e;
}

Result<ExprPtr> Parser::parse_math2() {
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

Result<ExprPtr> Parser::parse_pow() {
  LOOM_ASSIGN_OR_RETURN(ExprPtr e, parse_unary(true));
  while (is_op("**")) {
    Pos pos = cur().pos;
    advance();
    LOOM_ASSIGN_OR_RETURN(ExprPtr r, parse_unary(true));
    LOOM_ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, "**", pos, std::move(e), std::move(r)));
  }
  return e;
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
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

Result<ExprPtr> Parser::parse_primary() {
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

Result<ExprPtr> Parser::parse_list() {
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

Result<ExprPtr> Parser::parse_dict() {
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

Result<ExprPtr> Parser::parse_postfix(ExprPtr e) {
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

Result<ExprPtr> Parser::parse_filter_expr(ExprPtr e) {
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

Result<ExprPtr> Parser::parse_subscript(ExprPtr obj) {
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
Status Parser::parse_call_args(Expr& e) {
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

Result<ExprPtr> Parser::parse_call(ExprPtr callee) {
  auto e = make_expr(ExprKind::kCall, callee->pos);  // errors of a call point at the callee
  e->args.push_back(std::move(callee));
  LOOM_RETURN_IF_ERROR(parse_call_args(*e));
  return e;
}

Result<std::string> Parser::parse_dotted_name() {
  LOOM_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (is_op(".")) {
    advance();
    LOOM_ASSIGN_OR_RETURN(std::string part, expect_name());
    name += "." + part;
  }
  return name;
}

// `| name(args) | name ...`; `input` null for filter blocks ({% filter %}, {% set x | f %}).
Result<ExprPtr> Parser::parse_filter_chain(ExprPtr input, bool start_inline) {
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

Result<ExprPtr> Parser::parse_test(ExprPtr input) {
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

}  // namespace loom::llm::jinja::parser_detail
