// The tree-walking interpreter behind Template::render, with the resource limits that keep
// hostile templates bounded: output size, string sizes, evaluation steps and nesting depth.
// Internal to the jinja directory (builtins call back into it); use template.h instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/text/jinja/ast.h"
#include "loom/text/jinja/template.h"
#include "loom/text/jinja/value.h"

namespace loom::llm::jinja {

// Variables of one block level. Loop iterations, macro calls and {% with %} open a child scope;
// {% if %} does not (assignments inside it are visible after it), as in jinja2.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* lookup(std::string_view name) const;
  void set(std::string_view name, Value v);
  Scope* parent() const { return parent_.get(); }

 private:
  std::vector<std::pair<std::string, Value>> vars_;
  std::shared_ptr<Scope> parent_;
};
using ScopePtr = std::shared_ptr<Scope>;

// obj.name and obj[key] with the sandboxed environment's rules (a dict's methods win over its
// keys for obj.name, keys win for obj[key]; misses give an Undefined that explains itself).
Result<Value> get_attr(const Value& obj, std::string_view name);
Result<Value> get_item(const Value& obj, const Value& key);

// The error of using an Undefined where a value is needed (its hint, or a generic message).
Status undefined_error(const Value& v);
Status overflow_error();

class Interpreter {
 public:
  explicit Interpreter(const Limits& limits) : limits_(limits) {}

  // Runs `body` with `globals` as the outermost scope.
  Result<std::string> render(const Body& body, const ValueDict& globals);

  // Calls any callable value.
  Result<Value> call(const Value& callee, CallArgs& args);
  // Charges a string of `bytes` about to be built: one string may not exceed the output limit,
  // and all strings together not the string-work budget.
  Status charge(size_t bytes);
  // Charges other allocations (lists) against the same budget.
  Status charge_work(uint64_t bytes);
  // Counts one evaluation step against the limit (and checks the clock now and then).
  Status step();
  // Charges a list or string that a builtin returned against the work budget.
  Status charge_result(const Value& v);

  // Runs `body` in `scope`, capturing its output (macro and caller bodies).
  Result<std::string> capture(const Body& body, const ScopePtr& scope);
  int& depth() { return depth_; }
  // Registers a callable or namespace made during this render, to be released when it ends.
  const Value& track(const Value& v);
  const Limits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Result<Flow> exec_body(const Body& body, const ScopePtr& scope);
  Result<Flow> exec(const Stmt& s, const ScopePtr& scope);
  Result<Flow> exec_for(const Stmt& s, const ScopePtr& scope);
  Status exec_macro_def(const Stmt& s, const ScopePtr& scope);
  Status exec_call_block(const Stmt& s, const ScopePtr& scope);
  Status assign(const Target& target, Value value, const ScopePtr& scope, Pos pos);
  Status emit(std::string_view text);

  Result<Value> eval(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_inner(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_binary(const Expr& e, const Value& a, const Value& b);
  Result<Value> eval_compare(const Expr& e, const ScopePtr& scope);
  Status eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out);
  // Applies a filter chain whose innermost input is `input` (for filter blocks, null input).
  Result<Value> eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input);

  // The first error to reach an evaluation frame gets that frame's "line:col: " prefix; the
  // frames it then passes through leave it alone (errors always end the render).
  Status locate(Pos pos, Status s);

  friend class MacroFunction;
  Limits limits_;
  std::chrono::steady_clock::time_point deadline_;
  bool located_ = false;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  uint64_t string_work_ = 0;
  int depth_ = 0;
  std::vector<std::weak_ptr<Function>> functions_;
  std::vector<std::weak_ptr<ValueDict>> namespaces_;
};

}  // namespace loom::llm::jinja
