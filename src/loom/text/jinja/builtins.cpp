// Registry of builtin filters and tests, the tests themselves, global functions and argument
// binding. Filters live in filters.cpp, str/dict/list methods and formatting in methods.cpp.
#include "loom/text/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "loom/text/jinja/interp.h"
#include "loom/text/unicode.h"

namespace loom::llm::jinja {

Status bind_args(std::string_view fn, const CallArgs& args, std::initializer_list<ParamSpec> params,
                 std::vector<std::optional<Value>>& out) {
  out.assign(params.size(), std::nullopt);
  if (args.args.size() > params.size())
    return invalid_argument("{}() takes at most {} argument(s) ({} given)", fn, params.size(), args.args.size());
  for (size_t i = 0; i < args.args.size(); ++i) out[i] = args.args[i];
  for (const auto& [k, v] : args.kwargs) {
    size_t i = 0;
    for (const auto& p : params) {
      if (k == p.name) break;
      ++i;
    }
    if (i == params.size()) return invalid_argument("{}() got an unexpected keyword argument '{}'", fn, k);
    if (out[i]) return invalid_argument("{}() got multiple values for argument '{}'", fn, k);
    out[i] = v;
  }
  size_t i = 0;
  for (const auto& p : params) {
    if (p.required && !out[i]) return invalid_argument("{}() missing required argument '{}'", fn, p.name);
    ++i;
  }
  return {};
}

// --- tests -----------------------------------------------------------------------------------------

namespace {

using TestFn = Result<bool> (*)(Interpreter&, const Value&, CallArgs&);

Result<Value> one_arg(std::string_view test, CallArgs& args) {
  std::vector<std::optional<Value>> a;
  LOOM_RETURN_IF_ERROR(bind_args(test, args, {{"other", true}}, a));
  return *a[0];
}

Status no_args(std::string_view test, CallArgs& args) {
  std::vector<std::optional<Value>> a;
  return bind_args(test, args, {}, a);
}

Result<bool> compare_test(const Value& v, CallArgs& args, std::string_view name, std::string_view op) {
  LOOM_ASSIGN_OR_RETURN(Value other, one_arg(name, args));
  if (op == "==") return py_equal(v, other);
  if (op == "!=") return !py_equal(v, other);
  LOOM_ASSIGN_OR_RETURN(int c, py_compare(v, other, op));
  return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
}

// Python's v % m for a number v (used by even/odd/divisibleby).
Result<double> int_mod(const Value& v, int64_t m) {
  if (v.is_undefined()) return invalid_argument("{}", v.hint().empty() ? "value is undefined" : v.hint());
  if (!v.is_number()) return invalid_argument("unsupported operand type(s) for %: '{}' and 'int'", type_name(v));
  if (m == 0) return invalid_argument("integer division or modulo by zero");
  if (v.is_float()) {
    double r = std::fmod(v.as_double(), static_cast<double>(m));
    if (r != 0 && ((r < 0) != (m < 0))) r += static_cast<double>(m);
    return r;
  }
  int64_t r = v.as_int() % m;
  if (r != 0 && ((r < 0) != (m < 0))) r += m;
  return static_cast<double>(r);
}

#define LOOM_TEST(name) Result<bool> name(Interpreter& in, const Value& v, CallArgs& args)
#define LOOM_SIMPLE_TEST(name, expr)               \
  LOOM_TEST(name) {                                \
    LOOM_RETURN_IF_ERROR(no_args(#name, args));    \
    return (expr);                                 \
  }

LOOM_SIMPLE_TEST(test_defined, !v.is_undefined())
LOOM_SIMPLE_TEST(test_undefined, v.is_undefined())
LOOM_SIMPLE_TEST(test_none, v.is_none())
LOOM_SIMPLE_TEST(test_boolean, v.is_bool())
LOOM_SIMPLE_TEST(test_false, v.is_bool() && !v.as_bool())
LOOM_SIMPLE_TEST(test_true, v.is_bool() && v.as_bool())
LOOM_SIMPLE_TEST(test_integer, v.is_int())
LOOM_SIMPLE_TEST(test_float, v.is_float())
LOOM_SIMPLE_TEST(test_number, v.is_number())
LOOM_SIMPLE_TEST(test_string, v.is_string())
LOOM_SIMPLE_TEST(test_mapping, v.is_dict())
LOOM_SIMPLE_TEST(test_iterable, v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined())
LOOM_SIMPLE_TEST(test_sequence, v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined())
LOOM_SIMPLE_TEST(test_callable, v.is_function() || v.is_undefined())
LOOM_SIMPLE_TEST(test_escaped, v.is_markup())

LOOM_TEST(test_lower) {
  LOOM_RETURN_IF_ERROR(no_args("lower", args));
  std::string s = py_str(v);
  bool cased = false;
  for (char32_t cp : unicode::decode_utf8(s)) {
    if (unicode::is_upper(cp)) return false;
    cased |= unicode::is_lower(cp);
  }
  return cased;
}

LOOM_TEST(test_upper) {
  LOOM_RETURN_IF_ERROR(no_args("upper", args));
  std::string s = py_str(v);
  bool cased = false;
  for (char32_t cp : unicode::decode_utf8(s)) {
    if (unicode::is_lower(cp)) return false;
    cased |= unicode::is_upper(cp);
  }
  return cased;
}

LOOM_TEST(test_even) {
  LOOM_RETURN_IF_ERROR(no_args("even", args));
  LOOM_ASSIGN_OR_RETURN(double r, int_mod(v, 2));
  return r == 0;
}

LOOM_TEST(test_odd) {
  LOOM_RETURN_IF_ERROR(no_args("odd", args));
  LOOM_ASSIGN_OR_RETURN(double r, int_mod(v, 2));
  return r == 1;
}

LOOM_TEST(test_divisibleby) {
  std::vector<std::optional<Value>> a;
  LOOM_RETURN_IF_ERROR(bind_args("divisibleby", args, {{"num", true}}, a));
  if (!a[0]->is_integral()) return invalid_argument("divisibleby needs an integer");
  LOOM_ASSIGN_OR_RETURN(double r, int_mod(v, a[0]->as_int()));
  return r == 0;
}

LOOM_TEST(test_eq) { return compare_test(v, args, "eq", "=="); }
LOOM_TEST(test_ne) { return compare_test(v, args, "ne", "!="); }
LOOM_TEST(test_lt) { return compare_test(v, args, "lt", "<"); }
LOOM_TEST(test_le) { return compare_test(v, args, "le", "<="); }
LOOM_TEST(test_gt) { return compare_test(v, args, "gt", ">"); }
LOOM_TEST(test_ge) { return compare_test(v, args, "ge", ">="); }

LOOM_TEST(test_sameas) {
  LOOM_ASSIGN_OR_RETURN(Value other, one_arg("sameas", args));
  if (v.is_none() || v.is_bool() || v.is_undefined()) return v.kind() == other.kind() && py_equal(v, other);
  if (v.is_int() && other.is_int()) return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  return v.same_object(other);
}

LOOM_TEST(test_in) {
  LOOM_ASSIGN_OR_RETURN(Value seq, one_arg("in", args));
  if (seq.is_string()) {
    if (!v.is_string()) return invalid_argument("'in <string>' requires string as left operand, not {}", type_name(v));
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_dict()) return seq.dict().find(v) != nullptr;
  if (seq.is_undefined()) return false;
  if (!seq.is_sequence()) return invalid_argument("argument of type '{}' is not iterable", type_name(seq));
  for (const auto& item : seq.items())
    if (py_equal(item, v)) return true;
  return false;
}

LOOM_TEST(test_filter) {
  LOOM_RETURN_IF_ERROR(no_args("filter", args));
  return v.is_string() && has_filter(v.str());
}

LOOM_TEST(test_test) {
  LOOM_RETURN_IF_ERROR(no_args("test", args));
  return v.is_string() && has_test(v.str());
}

#undef LOOM_SIMPLE_TEST
#undef LOOM_TEST

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr NamedTest kTests[] = {
    {"defined", test_defined}, {"undefined", test_undefined}, {"none", test_none},
    {"boolean", test_boolean}, {"false", test_false}, {"true", test_true},
    {"integer", test_integer}, {"float", test_float}, {"number", test_number},
    {"string", test_string}, {"mapping", test_mapping}, {"iterable", test_iterable},
    {"sequence", test_sequence}, {"callable", test_callable}, {"escaped", test_escaped},
    {"lower", test_lower}, {"upper", test_upper}, {"even", test_even}, {"odd", test_odd},
    {"divisibleby", test_divisibleby}, {"sameas", test_sameas}, {"in", test_in},
    {"filter", test_filter}, {"test", test_test},
    {"eq", test_eq}, {"equalto", test_eq}, {"==", test_eq},
    {"ne", test_ne}, {"!=", test_ne},
    {"lt", test_lt}, {"lessthan", test_lt}, {"<", test_lt},
    {"le", test_le}, {"<=", test_le},
    {"gt", test_gt}, {"greaterthan", test_gt}, {">", test_gt},
    {"ge", test_ge}, {">=", test_ge},
};

const NamedTest* find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

bool has_test(std::string_view name) { return find_test(name) != nullptr; }

Result<bool> apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  const NamedTest* t = find_test(name);
  if (!t) return invalid_argument("no test named '{}'", name);
  return t->fn(in, input, args);
}

// --- global functions ----------------------------------------------------------------------------------

namespace {

// The sandbox's limit on range() (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

class NativeFunction : public Function {
 public:
  using Fn = Result<Value> (*)(Interpreter&, CallArgs&);
  NativeFunction(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
  std::string repr() const override { return fmt::format("<function {}>", name_); }
  Result<Value> call(Interpreter& in, CallArgs& args) override { return fn_(in, args); }

 private:
  std::string name_;
  Fn fn_;
};

Result<Value> fn_range(Interpreter& in, CallArgs& args) {
  if (!args.kwargs.empty()) return invalid_argument("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3)
    return invalid_argument("range expected 1 to 3 arguments, got {}", args.args.size());
  for (const auto& a : args.args)
    if (!a.is_integral()) return invalid_argument("'{}' object cannot be interpreted as an integer", type_name(a));
  int64_t start = 0, stop, step = 1;
  if (args.args.size() == 1) {
    stop = args.args[0].as_int();
  } else {
    start = args.args[0].as_int();
    stop = args.args[1].as_int();
    if (args.args.size() == 3) step = args.args[2].as_int();
  }
  if (step == 0) return invalid_argument("range() arg 3 must not be zero");
  // Length as Python computes it, in 128 bits so extreme bounds cannot overflow.
  __int128 lo = start, hi = stop, st = step, n = 0;
  if (st > 0 && lo < hi) n = (hi - lo - 1) / st + 1;
  if (st < 0 && lo > hi) n = (lo - hi - 1) / (-st) + 1;
  if (n > kMaxRange)
    return invalid_argument("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  LOOM_RETURN_IF_ERROR(in.charge_work(static_cast<uint64_t>(n) * sizeof(Value)));
  ValueList out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) out.emplace_back(start + k * step);
  return Value::list(std::move(out));
}

// dict(mapping_or_pairs, **kwargs) as Python builds it.
Result<ValueDict> build_dict(CallArgs& args, std::string_view fn) {
  ValueDict d;
  if (args.args.size() > 1) return invalid_argument("{} expected at most 1 argument, got {}", fn, args.args.size());
  if (args.args.size() == 1) {
    const Value& src = args.args[0];
    if (src.is_dict() || src.is_namespace()) {
      for (const auto& [k, v] : src.dict().items()) d.set(k, v);
    } else {
      LOOM_ASSIGN_OR_RETURN(ValueList pairs, py_iterate(src));
      for (const auto& p : pairs) {
        if (!p.is_sequence() || p.items().size() != 2)
          return invalid_argument("{}: sequence elements must be key/value pairs", fn);
        d.set(p.items()[0], p.items()[1]);
      }
    }
  }
  for (auto& [k, v] : args.kwargs) d.set(Value(k), v);
  return d;
}

Result<Value> fn_dict(Interpreter&, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(ValueDict d, build_dict(args, "dict"));
  return Value::dict(std::move(d));
}

Result<Value> fn_namespace(Interpreter& in, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(ValueDict d, build_dict(args, "namespace"));
  return in.track(Value::make_namespace(std::move(d)));
}

Result<Value> fn_raise_exception(Interpreter&, CallArgs& args) {
  std::vector<std::optional<Value>> a;
  LOOM_RETURN_IF_ERROR(bind_args("raise_exception", args, {{"message", true}}, a));
  return invalid_argument("{}", py_str(*a[0]));
}

Result<Value> fn_strftime_now(Interpreter&, CallArgs& args) {
  std::vector<std::optional<Value>> a;
  LOOM_RETURN_IF_ERROR(bind_args("strftime_now", args, {{"format", true}}, a));
  if (!a[0]->is_string()) return invalid_argument("strftime_now() argument must be str, not {}", type_name(*a[0]));
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  const std::string& f = a[0]->str();
  if (f.empty()) return Value(std::string());
  for (size_t cap = 256; cap <= (size_t{1} << 20); cap *= 4) {
    std::string buf(cap, '\0');
    size_t n = std::strftime(buf.data(), cap, f.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return Value(std::move(buf));
    }
  }
  return Value(std::string());
}

// joiner(sep): returns "" on its first call and `sep` afterwards.
class Joiner : public Function {
 public:
  explicit Joiner(Value sep) : sep_(std::move(sep)) {}
  std::string repr() const override { return "<jinja2.utils.Joiner object>"; }
  Result<Value> call(Interpreter&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value(std::string());
    }
    return sep_;
  }
  void release() override { sep_ = Value(); }

 private:
  Value sep_;
  bool used_ = false;
};

Result<Value> fn_joiner(Interpreter& in, CallArgs& args) {
  std::vector<std::optional<Value>> a;
  LOOM_RETURN_IF_ERROR(bind_args("joiner", args, {{"sep"}}, a));
  return in.track(Value::function(std::make_shared<Joiner>(a[0].value_or(Value(", ")))));
}

}  // namespace

ValueDict builtin_globals() {
  ValueDict g;
  auto add = [&](const char* name, NativeFunction::Fn fn) {
    g.append_new(Value(name), Value::function(std::make_shared<NativeFunction>(name, fn)));
  };
  add("range", fn_range);
  add("dict", fn_dict);
  add("namespace", fn_namespace);
  add("joiner", fn_joiner);
  add("raise_exception", fn_raise_exception);
  add("strftime_now", fn_strftime_now);
  // jinja2's `self` (the template's blocks): Loom has no blocks, so every self.NAME is
  // undefined, as it is in a template without that block.
  g.append_new(Value("self"), Value::make_namespace({}));
  return g;
}

}  // namespace loom::llm::jinja
