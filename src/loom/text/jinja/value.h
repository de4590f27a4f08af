// Values of the Jinja interpreter with Python's semantics: None/bool/int/float/str/list/tuple/
// dict, jinja2's Undefined, namespace() objects and callables (builtins, macros, bound methods).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"

namespace loom::llm::jinja {

class Value;
class Interpreter;
using ValueList = std::vector<Value>;

class ValueDict;
class Function;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kNamespace, kFunction,
  };

  Value() = default;  // Undefined
  Value(bool b) : kind_(Kind::kBool), i_(b) {}                       // NOLINT
  Value(int i) : kind_(Kind::kInt), i_(i) {}                         // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), i_(i) {}                     // NOLINT
  Value(double f) : kind_(Kind::kFloat), f_(f) {}                    // NOLINT
  Value(std::string s) : Value(Kind::kString, std::move(s)) {}       // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}               // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                    // NOLINT

  // An Undefined; `hint` becomes the error message when it is used in a way that fails
  // (jinja2's "'x' is undefined", "'dict object' has no attribute 'y'"...).
  static Value undefined(std::string hint = {});
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  static Value markup(std::string s) { Value v(std::move(s)); v.markup_ = true; return v; }
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(ValueDict d);
  static Value make_namespace(ValueDict d);
  static Value function(std::shared_ptr<Function> f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // int or bool (Python's bool is an int)
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integral() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_markup() const { return markup_; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }        // int or bool
  double as_double() const { return is_float() ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *s_; }  // kString only
  // An Undefined's failure message ("" when none was given).
  const std::string& hint() const;
  const ValueList& items() const { return *list_; }   // list or tuple
  const ValueDict& dict() const { return *dict_; }    // dict or namespace
  ValueDict& namespace_attrs() const { return *dict_; }  // namespace: shared and mutable
  std::weak_ptr<ValueDict> namespace_ref() const { return dict_; }
  Function* function() const { return fn_.get(); }
  const std::shared_ptr<Function>& function_ptr() const { return fn_; }
  bool same_object(const Value& o) const;  // Python's `is` for containers

 private:
  Value(Kind k, std::string s) : kind_(k), s_(std::make_shared<const std::string>(std::move(s))) {}

  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;  // markupsafe.Markup: produced by escape/safe, escapes what is added
  union {
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Function> fn_;
};

// Insertion-ordered mapping; keys compare with Python's == (so 1, 1.0 and True are one key).
// Lookup is linear: template dicts are small.
class ValueDict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  void set(Value key, Value value);
  // Appends without looking for an equal key; the caller guarantees there is none.
  void append_new(Value key, Value value);
  void clear() { items_.clear(); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<Value, Value>> items_;
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Anything callable from a template. Errors need no source location: the interpreter adds the
// position of the innermost expression that was being evaluated.
class Function {
 public:
  virtual ~Function() = default;
  virtual std::string repr() const = 0;
  virtual Result<Value> call(Interpreter& in, CallArgs& args) = 0;
  // Drops the values and scopes the function holds. Called when a render ends, so reference
  // cycles (a macro in the scope it closes over, a namespace holding itself) do not leak.
  virtual void release() {}
};

// --- Python semantics -------------------------------------------------------------------

bool truthy(const Value& v);
std::string type_name(const Value& v);  // Python's type(v).__name__
std::string py_str(const Value& v);     // str(v); Undefined prints as ""
std::string py_repr(const Value& v);    // repr(v)
std::string py_repr_string(std::string_view s);
std::string format_float(double d);     // repr(float)
bool py_equal(const Value& a, const Value& b);
// Ordering for <, <=, >, >= and sort(); TypeError message for unorderable pairs.
Result<int> py_compare(const Value& a, const Value& b, std::string_view op = "<");
// Items of `for x in v`: list/tuple items, dict keys, string code points; Undefined is empty.
Result<ValueList> py_iterate(const Value& v);
Result<int64_t> py_len(const Value& v);
// HTML escaping of markupsafe.escape (& < > " ').
std::string html_escape(std::string_view s);

}  // namespace loom::llm::jinja
