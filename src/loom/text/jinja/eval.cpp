// Tree-walking evaluation of statements and expressions with Python's operator semantics and
// jinja2's scoping (loop bodies and macros get their own scope, {% if %} does not).
#include <cmath>
#include <unordered_map>

#include "loom/text/jinja/builtins.h"
#include "loom/text/jinja/interp.h"
#include "loom/text/unicode.h"

namespace loom::llm::jinja {

// --- Scope -------------------------------------------------------------------------------------

const Value* Scope::lookup(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get())
    for (const auto& [k, v] : s->vars_)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(std::string_view name, Value v) {
  for (auto& [k, old] : vars_) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(v));
}

Status undefined_error(const Value& v) {
  return invalid_argument("{}", v.hint().empty() ? "value is undefined" : v.hint());
}

Status overflow_error() { return invalid_argument("integer overflow (template integers are 64-bit)"); }

// --- attribute and item access ------------------------------------------------------------------

namespace {

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attr(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value missing_item(const Value& obj, const Value& key) {
  if (key.is_string()) return missing_attr(obj, key.str());
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), py_repr(key)));
}


// Python's slice.indices(): clamps start/stop for a sequence of `len` items.
Result<std::vector<size_t>> slice_indices(int64_t len, const Value& start, const Value& stop, const Value& step) {
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !v->is_undefined() && !v->is_integral())
      return invalid_argument("slice indices must be integers or None");
  int64_t st = step.is_integral() ? step.as_int() : 1;
  if (st == 0) return invalid_argument("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def) -> int64_t {
    if (!v.is_integral()) return def;
    int64_t i = v.as_int();
    if (i < 0) {
      i += len;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= len) {
      i = st < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t b = clamp(start, st < 0 ? len - 1 : 0);
  int64_t e = clamp(stop, st < 0 ? -1 : len);
  std::vector<size_t> idx;
  if (st > 0) {
    for (int64_t i = b; i < e; i += st) idx.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = b; i > e; i += st) idx.push_back(static_cast<size_t>(i));
  }
  return idx;
}

}  // namespace

Result<Value> get_attr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return undefined_error(obj);
  if (!name.empty() && name[0] == '_') {
    if (obj.is_dict())
      if (const Value* v = obj.dict().find(name)) return *v;
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
  }
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      Value m = get_method(obj, name);
      if (!m.is_undefined() || !m.hint().empty()) return m;
      if (const Value* v = obj.dict().find(name)) return *v;
      return missing_attr(obj, name);
    }
    case Value::Kind::kNamespace:
      if (const Value* v = obj.dict().find(name)) return *v;
      return missing_attr(obj, name);
    case Value::Kind::kString:
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      Value m = get_method(obj, name);
      if (!m.is_undefined() || !m.hint().empty()) return m;
      return missing_attr(obj, name);
    }
    default:
      return missing_attr(obj, name);
  }
}

Result<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return undefined_error(obj);
  switch (obj.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kString: {
      if (!key.is_integral()) break;
      bool is_str = obj.is_string();
      std::u32string cps;
      int64_t len;
      if (is_str) {
        if (unicode::is_ascii(obj.str())) {
          len = static_cast<int64_t>(obj.str().size());
        } else {
          cps = unicode::decode_utf8(obj.str());
          len = static_cast<int64_t>(cps.size());
        }
      } else {
        len = static_cast<int64_t>(obj.items().size());
      }
      int64_t i = key.as_int();
      if (i < 0) i += len;
      if (i < 0 || i >= len) return missing_item(obj, key);
      if (!is_str) return obj.items()[static_cast<size_t>(i)];
      if (cps.empty()) return Value(std::string(1, obj.str()[static_cast<size_t>(i)]));
      return Value(unicode::encode_utf8(cps.substr(static_cast<size_t>(i), 1)));
    }
    case Value::Kind::kDict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    default:
      break;
  }
  // Python raised (TypeError/LookupError): jinja2 retries string keys as attributes.
  if (key.is_string()) {
    Result<Value> attr = get_attr(obj, key.str());
    if (!attr.ok() || !attr->is_undefined() || attr->hint().rfind("access to", 0) == 0) return attr;
  }
  return missing_item(obj, key);
}

// --- macros ---------------------------------------------------------------------------------------

namespace {

// Whether `name` is read anywhere in the tree (jinja2 gives macros varargs/kwargs/caller
// only when their body mentions them).
bool mentions(const Expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const auto& a : e->args)
    if (mentions(a.get(), name)) return true;
  for (const auto& kv : e->kwargs)
    if (mentions(kv.second.get(), name)) return true;
  return false;
}

bool mentions(const Body& body, std::string_view name) {
  for (const auto& s : body) {
    if (mentions(s->expr.get(), name) || mentions(s->cond.get(), name) || mentions(s->filter.get(), name) ||
        mentions(s->body, name) || mentions(s->else_body, name))
      return true;
    for (const auto& [test, b] : s->branches)
      if (mentions(test.get(), name) || mentions(b, name)) return true;
    for (const auto& p : s->params)
      if (mentions(p.default_value.get(), name)) return true;
    for (const auto& a : s->assigns)
      if (mentions(a.second.get(), name)) return true;
  }
  return false;
}

}  // namespace

// A {% macro %}, or the body of a {% call %} block (passed to the macro as `caller`).
class MacroFunction : public Function {
 public:
  MacroFunction(const Stmt* def, ScopePtr closure, std::string name)
      : def_(def), closure_(std::move(closure)), name_(std::move(name)) {
    varargs_ = mentions(def->body, "varargs");
    kwargs_ = mentions(def->body, "kwargs");
    caller_ = mentions(def->body, "caller");
  }

  std::string repr() const override { return fmt::format("<Macro '{}'>", name_); }

  Result<Value> call(Interpreter& in, CallArgs& args) override {
    if (in.depth_ > in.limits_.max_depth)
      return resource_exhausted("macro '{}': calls nested deeper than {} levels", name_, in.limits_.max_depth);
    if (!closure_) return failed_precondition("macro '{}' called after its template finished rendering", name_);
    auto scope = std::make_shared<Scope>(closure_);
    const auto& params = def_->params;
    std::vector<bool> given(params.size(), false);
    ValueList extra;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i < params.size()) {
        scope->set(params[i].name, args.args[i]);
        given[i] = true;
      } else if (varargs_) {
        extra.push_back(args.args[i]);
      } else {
        return invalid_argument("macro '{}' takes not more than {} argument(s)", name_, params.size());
      }
    }
    ValueDict kw;
    Value caller;
    for (auto& [k, v] : args.kwargs) {
      size_t i = 0;
      while (i < params.size() && params[i].name != k) ++i;
      if (i < params.size()) {
        if (given[i]) return invalid_argument("macro '{}' got multiple values for argument '{}'", name_, k);
        scope->set(k, v);
        given[i] = true;
      } else if (k == "caller" && caller_) {
        caller = v;
      } else if (kwargs_) {
        kw.set(Value(k), v);
      } else {
        return invalid_argument("macro '{}' takes no keyword argument '{}'", name_, k);
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (given[i]) continue;
      if (params[i].default_value) {
        LOOM_ASSIGN_OR_RETURN(Value d, in.eval(*params[i].default_value, scope));
        scope->set(params[i].name, std::move(d));
      } else {
        scope->set(params[i].name, Value::undefined(fmt::format("parameter '{}' was not provided", params[i].name)));
      }
    }
    if (varargs_) scope->set("varargs", Value::tuple(std::move(extra)));
    if (kwargs_) scope->set("kwargs", Value::dict(std::move(kw)));
    if (caller_ && !caller.is_undefined()) scope->set("caller", caller);
    LOOM_ASSIGN_OR_RETURN(std::string text, in.capture(def_->body, scope));
    return Value(std::move(text));
  }

  void release() override { closure_.reset(); }

 private:
  const Stmt* def_;
  ScopePtr closure_;
  std::string name_;
  bool varargs_ = false, kwargs_ = false, caller_ = false;
};

namespace {

// loop.cycle(a, b, ...): picks by the loop's current index (shared with the running loop, as
// jinja2's bound LoopContext.cycle is).
class CycleFunction : public Function {
 public:
  explicit CycleFunction(std::shared_ptr<size_t> index0) : index0_(std::move(index0)) {}
  std::string repr() const override { return "<bound method LoopContext.cycle>"; }
  Result<Value> call(Interpreter&, CallArgs& args) override {
    if (args.args.empty()) return invalid_argument("no items for cycling given");
    return args.args[*index0_ % args.args.size()];
  }

 private:
  std::shared_ptr<size_t> index0_;
};

// loop.changed(value): true when the value differs from the previous call's, per loop.
class ChangedFunction : public Function {
 public:
  explicit ChangedFunction(std::shared_ptr<Value> last) : last_(std::move(last)) {}
  std::string repr() const override { return "<bound method LoopContext.changed>"; }
  Result<Value> call(Interpreter&, CallArgs& args) override {
    Value now = Value::list(args.args);
    if (!last_->is_undefined() && py_equal(*last_, now)) return Value(false);
    *last_ = now;
    return Value(true);
  }
  void release() override { *last_ = Value(); }

 private:
  std::shared_ptr<Value> last_;
};

}  // namespace

// --- Interpreter: statements ------------------------------------------------------------------------

Status Interpreter::locate(Pos pos, Status s) {
  if (located_ || s.ok()) return s;
  located_ = true;
  Status out(s.code(), fmt::format("{}:{}: {}", pos.line, pos.col, s.message()));
  return out;
}

Status Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    return resource_exhausted("template exceeded {} evaluation steps", limits_.max_steps);
  if ((steps_ & 1023) == 0 && std::chrono::steady_clock::now() > deadline_)
    return resource_exhausted("template rendering took longer than {} ms", limits_.max_millis);
  return {};
}

const Value& Interpreter::track(const Value& v) {
  if (v.is_function()) functions_.push_back(v.function_ptr());
  if (v.is_namespace()) namespaces_.push_back(v.namespace_ref());
  return v;
}

Status Interpreter::charge_result(const Value& v) {
  if (v.is_sequence()) return charge_work(v.items().size() * sizeof(Value));
  if (v.is_dict()) return charge_work(v.dict().size() * 2 * sizeof(Value));
  if (v.is_string()) return charge_work(v.str().size());
  return {};
}

Status Interpreter::charge(size_t bytes) {
  if (bytes > limits_.max_output_bytes)
    return resource_exhausted("string of {} bytes exceeds the template limit of {} bytes", bytes,
                              limits_.max_output_bytes);
  return charge_work(bytes);
}

Status Interpreter::charge_work(uint64_t bytes) {
  string_work_ += bytes;
  if (bytes > limits_.max_string_work || string_work_ > limits_.max_string_work)
    return resource_exhausted("template built more than {} bytes of strings and lists", limits_.max_string_work);
  return {};
}

Status Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes)
    return resource_exhausted("template output exceeds {} bytes", limits_.max_output_bytes);
  LOOM_RETURN_IF_ERROR(charge(text.size()));
  out_->append(text);
  return {};
}

Result<std::string> Interpreter::render(const Body& body, const ValueDict& globals) {
  std::string out;
  out_ = &out;
  located_ = false;
  deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(limits_.max_millis);
  auto root = std::make_shared<Scope>(nullptr);
  for (const auto& [k, v] : globals.items())
    if (k.is_string()) root->set(k.str(), v);
  auto r = exec_body(body, root);
  out_ = nullptr;
  // Break the reference cycles this render may have made.
  for (auto& w : functions_)
    if (auto f = w.lock()) f->release();
  for (auto& w : namespaces_)
    if (auto d = w.lock()) d->clear();
  functions_.clear();
  namespaces_.clear();
  if (!r.ok()) return std::move(r).status();
  return out;
}

Result<std::string> Interpreter::capture(const Body& body, const ScopePtr& scope) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  ++depth_;
  auto r = exec_body(body, scope);
  --depth_;
  out_ = saved;
  if (!r.ok()) return std::move(r).status();
  return buf;
}

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body, const ScopePtr& scope) {
  for (const auto& s : body) {
    LOOM_ASSIGN_OR_RETURN(Flow f, exec(*s, scope));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec(const Stmt& s, const ScopePtr& scope) {
  if (Status st = step(); !st.ok()) return locate(s.pos, std::move(st));
  if (++depth_ > limits_.max_depth) {
    --depth_;
    return locate(s.pos, resource_exhausted("template evaluation nested deeper than {} levels", limits_.max_depth));
  }
  struct Leave {
    int& d;
    ~Leave() { --d; }
  } leave{depth_};

  auto wrap = [&](Status st) -> Result<Flow> {
    if (!st.ok()) return locate(s.pos, std::move(st));
    return Flow::kNormal;
  };
  switch (s.kind) {
    case StmtKind::kText:
      return wrap(emit(s.text));
    case StmtKind::kOutput: {
      LOOM_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
      if (v.is_string()) return wrap(emit(v.str()));
      return wrap(emit(py_str(v)));
    }
    case StmtKind::kIf:
      for (const auto& [test, body] : s.branches) {
        LOOM_ASSIGN_OR_RETURN(Value v, eval(*test, scope));
        if (truthy(v)) return exec_body(body, scope);
      }
      return exec_body(s.else_body, scope);
    case StmtKind::kFor:
      return exec_for(s, scope);
    case StmtKind::kSet: {
      LOOM_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
      return wrap(assign(s.target, std::move(v), scope, s.pos));
    }
    case StmtKind::kSetBlock: {
      LOOM_ASSIGN_OR_RETURN(std::string text, capture(s.body, scope));
      Value v(std::move(text));
      if (s.filter) {
        LOOM_ASSIGN_OR_RETURN(v, eval_filter(*s.filter, scope, &v));
      }
      return wrap(assign(s.target, std::move(v), scope, s.pos));
    }
    case StmtKind::kFilterBlock: {
      LOOM_ASSIGN_OR_RETURN(std::string text, capture(s.body, scope));
      Value input(std::move(text));
      LOOM_ASSIGN_OR_RETURN(Value v, eval_filter(*s.filter, scope, &input));
      return wrap(emit(py_str(v)));
    }
    case StmtKind::kMacro:
      return wrap(exec_macro_def(s, scope));
    case StmtKind::kCallBlock:
      return wrap(exec_call_block(s, scope));
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (const auto& [target, expr] : s.assigns) {
        LOOM_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
        LOOM_RETURN_IF_ERROR(wrap(assign(target, std::move(v), inner, s.pos)));
      }
      return exec_body(s.body, inner);
    }
    case StmtKind::kGeneration: {
      LOOM_ASSIGN_OR_RETURN(std::string text, capture(s.body, std::make_shared<Scope>(scope)));
      return wrap(emit(text));
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Status Interpreter::assign(const Target& target, Value value, const ScopePtr& scope, Pos pos) {
  if (!target.attr.empty()) {
    const Value* ns = scope->lookup(target.names[0]);
    if (!ns || !ns->is_namespace()) return invalid_argument("cannot assign attribute on non-namespace object");
    ns->namespace_attrs().set(Value(target.attr), std::move(value));
    return {};
  }
  if (!target.is_tuple) {
    scope->set(target.names[0], std::move(value));
    return {};
  }
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(value));
  if (items.size() < target.names.size())
    return invalid_argument("not enough values to unpack (expected {}, got {})", target.names.size(), items.size());
  if (items.size() > target.names.size())
    return invalid_argument("too many values to unpack (expected {})", target.names.size());
  for (size_t i = 0; i < items.size(); ++i) scope->set(target.names[i], std::move(items[i]));
  return {};
}

Result<Interpreter::Flow> Interpreter::exec_for(const Stmt& s, const ScopePtr& scope) {
  LOOM_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr, scope));
  auto listed = py_iterate(iterable);
  if (!listed.ok()) return locate(s.expr->pos, listed.status());
  ValueList items = std::move(listed).value();
  if (s.cond) {
    ValueList kept;
    for (auto& item : items) {
      auto inner = std::make_shared<Scope>(scope);
      if (Status st = assign(s.target, item, inner, s.pos); !st.ok()) return locate(s.pos, std::move(st));
      LOOM_ASSIGN_OR_RETURN(Value keep, eval(*s.cond, inner));
      if (truthy(keep)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body, std::make_shared<Scope>(scope));
  const size_t n = items.size();
  // The loop object: a dict rebuilt per iteration from keys made once.
  enum { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kLength, kDepth, kDepth0, kPrev, kNext,
         kCycle, kChanged, kKeys };
  static const char* const kNames[kKeys] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                            "depth", "depth0", "previtem", "nextitem", "cycle", "changed"};
  Value keys[kKeys];
  for (int k = 0; k < kKeys; ++k) keys[k] = Value(kNames[k]);
  auto index0 = std::make_shared<size_t>(0);
  Value cycle = Value::function(std::make_shared<CycleFunction>(index0));
  Value changed = track(Value::function(std::make_shared<ChangedFunction>(std::make_shared<Value>())));
  for (size_t i = 0; i < n; ++i) {
    if (Status st = step(); !st.ok()) return locate(s.pos, std::move(st));
    *index0 = i;
    auto inner = std::make_shared<Scope>(scope);
    if (Status st = assign(s.target, items[i], inner, s.pos); !st.ok()) return locate(s.pos, std::move(st));
    ValueDict loop;
    auto ii = static_cast<int64_t>(i), nn = static_cast<int64_t>(n);
    loop.append_new(keys[kIndex], Value(ii + 1));
    loop.append_new(keys[kIndex0], Value(ii));
    loop.append_new(keys[kRevindex], Value(nn - ii));
    loop.append_new(keys[kRevindex0], Value(nn - ii - 1));
    loop.append_new(keys[kFirst], Value(i == 0));
    loop.append_new(keys[kLast], Value(i + 1 == n));
    loop.append_new(keys[kLength], Value(nn));
    loop.append_new(keys[kDepth], Value(1));
    loop.append_new(keys[kDepth0], Value(0));
    if (i > 0) loop.append_new(keys[kPrev], items[i - 1]);
    if (i + 1 < n) loop.append_new(keys[kNext], items[i + 1]);
    loop.append_new(keys[kCycle], cycle);
    loop.append_new(keys[kChanged], changed);
    inner->set("loop", Value::dict(std::move(loop)));
    LOOM_ASSIGN_OR_RETURN(Flow f, exec_body(s.body, inner));
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Status Interpreter::exec_macro_def(const Stmt& s, const ScopePtr& scope) {
  scope->set(s.text, track(Value::function(std::make_shared<MacroFunction>(&s, scope, s.text))));
  return {};
}

Status Interpreter::exec_call_block(const Stmt& s, const ScopePtr& scope) {
  const Expr& call = *s.expr;
  LOOM_ASSIGN_OR_RETURN(Value callee, eval(*call.args[0], scope));
  CallArgs args;
  LOOM_RETURN_IF_ERROR(eval_args(call, 1, scope, args));
  args.kwargs.emplace_back("caller", track(Value::function(std::make_shared<MacroFunction>(&s, scope, "caller"))));
  LOOM_ASSIGN_OR_RETURN(Value v, this->call(callee, args));
  return emit(py_str(v));
}

// --- Interpreter: expressions ----------------------------------------------------------------------

Result<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) {
    ++depth_;
    auto r = callee.function()->call(*this, args);
    --depth_;
    if (r.ok()) LOOM_RETURN_IF_ERROR(charge_result(*r));
    return r;
  }
  if (callee.is_undefined()) return undefined_error(callee);
  return invalid_argument("'{}' object is not callable", type_name(callee));
}

Status Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Value v, eval(*e.args[i], scope));
    out.args.push_back(std::move(v));
  }
  for (const auto& [k, expr] : e.kwargs) {
    LOOM_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
    out.kwargs.emplace_back(k, std::move(v));
  }
  return {};
}

Result<Value> Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  if (Status st = step(); !st.ok()) return locate(e.pos, std::move(st));
  if (++depth_ > limits_.max_depth) {
    --depth_;
    return locate(e.pos, resource_exhausted("template evaluation nested deeper than {} levels", limits_.max_depth));
  }
  auto r = eval_inner(e, scope);
  --depth_;
  if (!r.ok()) return locate(e.pos, std::move(r).status());
  return r;
}

Result<Value> Interpreter::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input) {
  Value input;
  if (!e.args[0]) {
    input = *block_input;
  } else if (block_input && e.args[0]->kind == ExprKind::kFilter) {
    LOOM_ASSIGN_OR_RETURN(input, eval_filter(*e.args[0], scope, block_input));
  } else {
    LOOM_ASSIGN_OR_RETURN(input, eval(*e.args[0], scope));
  }
  CallArgs args;
  LOOM_RETURN_IF_ERROR(eval_args(e, 1, scope, args));
  if (!has_filter(e.name)) return locate(e.pos, invalid_argument("no filter named '{}'", e.name));
  auto r = apply_filter(*this, e.name, input, args);
  if (r.ok()) {
    if (Status st = charge_result(*r); !st.ok()) return locate(e.pos, std::move(st));
  }
  if (!r.ok()) return locate(e.pos, std::move(r).status());
  return r;
}

Result<Value> Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName: {
      if (const Value* v = scope->lookup(e.name)) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) {
        LOOM_ASSIGN_OR_RETURN(Value v, eval(*a, scope));
        items.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      ValueDict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        LOOM_ASSIGN_OR_RETURN(Value k, eval(*e.args[i], scope));
        LOOM_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1], scope));
        if (k.is_list() || k.is_dict() || k.is_undefined())
          return invalid_argument("unhashable type: '{}'", type_name(k));
        d.set(std::move(k), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      LOOM_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
      return get_attr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      LOOM_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
      LOOM_ASSIGN_OR_RETURN(Value key, eval(*e.args[1], scope));
      return get_item(obj, key);
    }
    case ExprKind::kSlice: {
      LOOM_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
      Value bounds[3] = {Value::none(), Value::none(), Value::none()};
      for (int i = 0; i < 3; ++i)
        if (e.args[1 + i]) {
          LOOM_ASSIGN_OR_RETURN(bounds[i], eval(*e.args[1 + i], scope));
        }
      // jinja2 compiles slices to plain Python subscripts (not environment.getitem), so
      // slicing what is not a sequence raises.
      if (obj.is_undefined()) return undefined_error(obj);
      if (obj.is_dict()) return invalid_argument("unhashable type: 'slice'");
      if (!obj.is_sequence() && !obj.is_string())
        return invalid_argument("'{}' object is not subscriptable", type_name(obj));
      if (obj.is_string()) {
        std::u32string cps = unicode::decode_utf8(obj.str());
        LOOM_ASSIGN_OR_RETURN(auto idx, slice_indices(static_cast<int64_t>(cps.size()), bounds[0], bounds[1], bounds[2]));
        std::u32string out;
        for (size_t i : idx) out.push_back(cps[i]);
        return Value(unicode::encode_utf8(out));
      }
      const auto& items = obj.items();
      LOOM_ASSIGN_OR_RETURN(auto idx, slice_indices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], bounds[2]));
      ValueList out;
      out.reserve(idx.size());
      for (size_t i : idx) out.push_back(items[i]);
      return obj.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
    }
    case ExprKind::kCall: {
      LOOM_ASSIGN_OR_RETURN(Value callee, eval(*e.args[0], scope));
      CallArgs args;
      LOOM_RETURN_IF_ERROR(eval_args(e, 1, scope, args));
      return call(callee, args);
    }
    case ExprKind::kFilter:
      return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: {
      LOOM_ASSIGN_OR_RETURN(Value input, eval(*e.args[0], scope));
      CallArgs args;
      LOOM_RETURN_IF_ERROR(eval_args(e, 1, scope, args));
      if (!has_test(e.name)) return invalid_argument("no test named '{}'", e.name);
      LOOM_ASSIGN_OR_RETURN(bool r, apply_test(*this, e.name, input, args));
      return Value(r != e.negated);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      LOOM_ASSIGN_OR_RETURN(Value v, eval(*e.args[0], scope));
      if (v.is_undefined()) return undefined_error(v);
      if (!v.is_number())
        return invalid_argument("bad operand type for unary {}: '{}'", e.kind == ExprKind::kNeg ? '-' : '+', type_name(v));
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_double());
      if (v.as_int() == INT64_MIN) return overflow_error();
      return Value(-v.as_int());
    }
    case ExprKind::kNot: {
      LOOM_ASSIGN_OR_RETURN(Value v, eval(*e.args[0], scope));
      return Value(!truthy(v));
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      LOOM_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], scope));
      if (truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return eval(*e.args[1], scope);
    }
    case ExprKind::kBinary: {
      LOOM_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], scope));
      LOOM_ASSIGN_OR_RETURN(Value b, eval(*e.args[1], scope));
      return eval_binary(e, a, b);
    }
    case ExprKind::kCompare:
      return eval_compare(e, scope);
    case ExprKind::kCondExpr: {
      LOOM_ASSIGN_OR_RETURN(Value test, eval(*e.args[1], scope));
      if (truthy(test)) return eval(*e.args[0], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", e.pos.line));
    }
  }
  return internal_error("unknown expression kind");
}

}  // namespace loom::llm::jinja
