// Syntax tree of a parsed template: expressions and statements, each with its source position.
// One generic node type per family keeps the tree small; the comments on each kind say which
// fields it uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/text/jinja/lexer.h"
#include "loom/text/jinja/value.h"

namespace loom::llm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name
  kList,      // args: items
  kTuple,     // args: items
  kDict,      // args: key0, value0, key1, value1, ...
  kGetAttr,   // args[0] object; name: attribute            (obj.name)
  kGetItem,   // args[0] object; args[1] key                (obj[key])
  kSlice,     // args[0] object; args[1..3] start/stop/step, null when absent
  kCall,      // args[0] callee; args[1..] positional; kwargs
  kFilter,    // args[0] input (null in filter blocks); name; args[1..] positional; kwargs
  kTest,      // args[0] input; name; args[1..] positional; kwargs; negated ("is not")
  kNeg,       // args[0]
  kPos,       // args[0]
  kNot,       // args[0]
  kBinary,    // name: + - * / // % ** ~ ; args[0], args[1]
  kAnd,       // args[0], args[1]
  kOr,        // args[0], args[1]
  kCompare,   // args[0] first operand; ops[i] ("==" "!=" "<" "<=" ">" ">=" "in" "notin") with args[i+1]
  kCondExpr,  // args[0] value if true; args[1] test; args[2] value if false (null: undefined)
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  Pos pos;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

// Left side of set/for/with: one name, a tuple of names, or a namespace attribute (ns.attr).
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string attr;  // non-empty: assign names[0].attr (namespace objects only)
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null when required
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // expr
  kIf,           // branches (test, body) for if/elif...; else_body
  kFor,          // target; expr: iterable; cond: optional loop filter; body; else_body
  kSet,          // target; expr
  kSetBlock,     // target; body; filter: optional filter chain (its input is the body)
  kMacro,        // text: name; params; body
  kCallBlock,    // expr: the call; params: caller's parameters; body: caller's body
  kFilterBlock,  // filter: filter chain; body
  kWith,         // assigns; body
  kBreak,
  kContinue,
  kGeneration,   // body (Hugging Face's {% generation %} marker: renders its body)
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  Pos pos;
  std::string text;
  ExprPtr expr, cond, filter;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<Param> params;
  std::vector<std::pair<Target, ExprPtr>> assigns;
};

}  // namespace loom::llm::jinja
