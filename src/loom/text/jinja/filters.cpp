// Builtin filters with jinja2's semantics (tojson is Hugging Face's json.dumps variant, which
// transformers installs in place of jinja2's HTML-safe one).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "loom/text/jinja/builtins.h"
#include "loom/text/jinja/interp.h"
#include "loom/text/jinja/json.h"
#include "loom/text/unicode.h"

namespace loom::llm::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;
using FilterFn = Result<Value> (*)(Interpreter&, const Value&, CallArgs&);

// jinja2's soft_str: str() of anything, Undefined as "".
std::string soft_str(const Value& v) { return py_str(v); }

Value text_like(const Value& input, std::string s) {
  return input.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

bool arg_bool(const std::optional<Value>& a, bool def) { return a ? truthy(*a) : def; }

Result<int64_t> arg_int(const std::optional<Value>& a, int64_t def, std::string_view what) {
  if (!a || a->is_none()) return def;
  if (!a->is_integral()) return invalid_argument("{} must be an integer, not {}", what, type_name(*a));
  return a->as_int();
}

// Lowercases strings for the case-insensitive comparisons of sort/unique/min/max/dictsort.
Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(unicode::lower(v.str()));
  return v;
}

// jinja2's make_attrgetter: "a.b.0" looks up each part with obj[part] (digits as ints).
Result<Value> attr_path(const Value& item, const Value& attribute, const std::optional<Value>& def = std::nullopt) {
  Value cur = item;
  if (attribute.is_integral()) {
    LOOM_ASSIGN_OR_RETURN(cur, get_item(cur, attribute));
  } else {
    std::string path = py_str(attribute);
    size_t b = 0;
    while (true) {
      size_t e = path.find('.', b);
      std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      Value key = digits ? Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10))) : Value(part);
      LOOM_ASSIGN_OR_RETURN(cur, get_item(cur, key));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  }
  if (def && cur.is_undefined()) return *def;
  return cur;
}

// Stable sort with Python ordering; the first comparison error wins.
Status sort_values(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  Status err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (!err.ok()) return false;
    auto c = reverse ? py_compare(b.first, a.first) : py_compare(a.first, b.first);
    if (!c.ok()) {
      err = c.status();
      return false;
    }
    return *c < 0;
  });
  return err;
}

#define LOOM_FILTER(name) Result<Value> name(Interpreter& in, const Value& v, CallArgs& args)

LOOM_FILTER(f_default) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("default", args, {{"default_value"}, {"boolean"}}, a));
  if (v.is_undefined() || (arg_bool(a[1], false) && !truthy(v))) return a[0].value_or(Value(""));
  return v;
}

LOOM_FILTER(f_length) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("length", args, {}, a));
  LOOM_ASSIGN_OR_RETURN(int64_t n, py_len(v));
  return Value(n);
}

LOOM_FILTER(f_upper) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("upper", args, {}, a));
  return text_like(v, unicode::upper(soft_str(v)));
}

LOOM_FILTER(f_lower) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("lower", args, {}, a));
  return text_like(v, unicode::lower(soft_str(v)));
}

std::string capitalize(std::string_view s) {
  std::u32string cps = unicode::decode_utf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0 && cps[0] == 0xDF) {
      out += "Ss";
      continue;
    }
    unicode::append_utf8(out, i == 0 ? unicode::to_upper(cps[i]) : unicode::to_lower(cps[i]));
  }
  return out;
}

LOOM_FILTER(f_capitalize) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("capitalize", args, {}, a));
  return text_like(v, capitalize(soft_str(v)));
}

// jinja2's title: words start after runs of whitespace, '-', '(', '{', '[' or '<'.
LOOM_FILTER(f_title) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("title", args, {}, a));
  std::u32string cps = unicode::decode_utf8(soft_str(v));
  auto sep = [](char32_t c) { return unicode::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool is_sep = sep(cps[i]);
    while (j < cps.size() && sep(cps[j]) == is_sep) ++j;
    for (size_t k = i; k < j; ++k) {
      char32_t c = cps[k];
      if (k == i && c == 0xDF) {  // jinja2 upper()s the first letter: ß -> SS
        out += "SS";
        continue;
      }
      unicode::append_utf8(out, k == i ? unicode::to_upper(c) : unicode::to_lower(c));
    }
    i = j;
  }
  return text_like(v, std::move(out));
}

LOOM_FILTER(f_trim) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("trim", args, {{"chars"}}, a));
  std::string s = soft_str(v);
  if (a[0] && !a[0]->is_none()) {
    if (!a[0]->is_string()) return invalid_argument("strip arg must be None or str");
    std::u32string chars = unicode::decode_utf8(a[0]->str());
    return text_like(v, std::string(unicode::strip(s, &chars, true, true)));
  }
  return text_like(v, std::string(unicode::strip(s, nullptr, true, true)));
}

LOOM_FILTER(f_string) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("string", args, {}, a));
  if (v.is_string()) return v;
  return Value(soft_str(v));
}

LOOM_FILTER(f_int) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("int", args, {{"default"}, {"base"}}, a));
  Value def = a[0].value_or(Value(0));
  LOOM_ASSIGN_OR_RETURN(int64_t base, arg_int(a[1], 10, "base"));
  if (v.is_undefined()) return undefined_error(v);
  if (v.is_integral()) return Value(v.as_int());
  if (v.is_float()) {
    double d = std::trunc(v.as_double());
    if (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18) return invalid_argument("cannot convert float {} to integer", format_float(v.as_double()));
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = py_parse_int(v.str(), static_cast<int>(base))) return Value(*i);
    if (auto f = py_parse_float(v.str())) {
      if (std::isnan(*f) || std::isinf(*f)) return invalid_argument("cannot convert float {} to integer", format_float(*f));
      return Value(static_cast<int64_t>(std::trunc(*f)));
    }
  }
  return def;
}

LOOM_FILTER(f_float) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("float", args, {{"default"}}, a));
  if (v.is_undefined()) return undefined_error(v);
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string())
    if (auto f = py_parse_float(v.str())) return Value(*f);
  return a[0].value_or(Value(0.0));
}

LOOM_FILTER(f_abs) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("abs", args, {}, a));
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) return invalid_argument("integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) return undefined_error(v);
  return invalid_argument("bad operand type for abs(): '{}'", type_name(v));
}

LOOM_FILTER(f_round) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("round", args, {{"precision"}, {"method"}}, a));
  LOOM_ASSIGN_OR_RETURN(int64_t precision, arg_int(a[0], 0, "precision"));
  std::string method = a[1] ? py_str(*a[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    return invalid_argument("method must be common, ceil or floor");
  if (v.is_undefined()) return undefined_error(v);
  if (!v.is_number()) return invalid_argument("type {} doesn't define __round__ method", type_name(v));
  if (method == "common") {
    if (v.is_integral()) {  // round(int, n) stays an int
      if (precision >= 0) return Value(v.as_int());
      double p = std::pow(10.0, static_cast<double>(-precision));
      return Value(static_cast<int64_t>(std::nearbyint(static_cast<double>(v.as_int()) / p) * p));
    }
    double x = v.as_double();
    if (std::isnan(x) || std::isinf(x)) return Value(x);
    if (precision == 0) return Value(std::nearbyint(x));
    if (precision > 0) {
      if (precision > 300) return Value(x);
      // glibc prints the exact binary value rounded half-even, which is what Python's
      // correctly-rounded round() computes.
      std::string s = fmt::format("{:.{}f}", x, static_cast<int>(precision));
      return Value(std::strtod(s.c_str(), nullptr));
    }
    double p = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(x / p) * p);
  }
  double p = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * p;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

LOOM_FILTER(f_first) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("first", args, {}, a));
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

LOOM_FILTER(f_last) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("last", args, {}, a));
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

LOOM_FILTER(f_join) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("join", args, {{"d"}, {"attribute"}}, a));
  std::string sep = a[0] ? py_str(*a[0]) : "";
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (a[1] && !a[1]->is_none()) {
      LOOM_ASSIGN_OR_RETURN(item, attr_path(item, *a[1]));
    }
    std::string s = py_str(item);
    LOOM_RETURN_IF_ERROR(in.charge(out.size() + sep.size() + s.size()));
    if (i) out += sep;
    out += s;
  }
  return Value(std::move(out));
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` around every code point
    std::u32string cps = unicode::decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) unicode::append_utf8(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

LOOM_FILTER(f_replace) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("replace", args, {{"old", true}, {"new", true}, {"count"}}, a));
  LOOM_ASSIGN_OR_RETURN(int64_t count, arg_int(a[2], -1, "count"));
  std::string s = soft_str(v), old = py_str(*a[0]), repl = py_str(*a[1]);
  size_t occurrences = old.empty() ? unicode::utf8_length(s) + 1 : 0;
  if (!old.empty())
    for (size_t p = s.find(old); p != std::string::npos; p = s.find(old, p + old.size())) ++occurrences;
  if (repl.size() > old.size()) LOOM_RETURN_IF_ERROR(in.charge(s.size() + occurrences * (repl.size() - old.size())));
  return Value(py_replace(s, old, repl, count));
}

LOOM_FILTER(f_tojson) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("tojson", args, {{"ensure_ascii"}, {"indent"}, {"separators"}, {"sort_keys"}}, a));
  JsonOptions o;
  o.ensure_ascii = arg_bool(a[0], false);
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string()) {
      o.indent = a[1]->str();
    } else if (a[1]->is_integral()) {
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a[1]->as_int(), 0, 1024)), ' ');
    } else {
      return invalid_argument("tojson: indent must be an int or str");
    }
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_sequence() || a[2]->items().size() != 2)
      return invalid_argument("tojson: separators must be an (item_separator, key_separator) pair");
    o.item_separator = py_str(a[2]->items()[0]);
    o.key_separator = py_str(a[2]->items()[1]);
  }
  o.sort_keys = arg_bool(a[3], false);
  LOOM_ASSIGN_OR_RETURN(std::string s, to_json(v, o));
  LOOM_RETURN_IF_ERROR(in.charge(s.size()));
  return Value(std::move(s));
}

LOOM_FILTER(f_list) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("list", args, {}, a));
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  return Value::list(std::move(items));
}

LOOM_FILTER(f_items) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("items", args, {}, a));
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) return invalid_argument("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.dict().items()) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

LOOM_FILTER(f_dictsort) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("dictsort", args, {{"case_sensitive"}, {"by"}, {"reverse"}}, a));
  bool cs = arg_bool(a[0], false);
  std::string by = a[1] ? py_str(*a[1]) : "key";
  if (by != "key" && by != "value") return invalid_argument("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) return invalid_argument("dictsort needs a mapping, got {}", type_name(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, val] : v.dict().items())
    keyed.emplace_back(ignore_case(by == "key" ? k : val, cs), Value::tuple({k, val}));
  LOOM_RETURN_IF_ERROR(sort_values(keyed, arg_bool(a[2], false)));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

LOOM_FILTER(f_sort) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("sort", args, {{"reverse"}, {"case_sensitive"}, {"attribute"}}, a));
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  bool cs = arg_bool(a[1], false);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) {
    Value key = item;
    if (a[2] && !a[2]->is_none()) {
      LOOM_ASSIGN_OR_RETURN(key, attr_path(item, *a[2]));
    }
    keyed.emplace_back(ignore_case(key, cs), std::move(item));
  }
  LOOM_RETURN_IF_ERROR(sort_values(keyed, arg_bool(a[0], false)));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

LOOM_FILTER(f_unique) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("unique", args, {{"case_sensitive"}, {"attribute"}}, a));
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  bool cs = arg_bool(a[0], false);
  ValueList seen, out;
  for (auto& item : items) {
    Value key = item;
    if (a[1] && !a[1]->is_none()) {
      LOOM_ASSIGN_OR_RETURN(key, attr_path(item, *a[1]));
    }
    key = ignore_case(key, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) continue;
    seen.push_back(key);
    out.push_back(std::move(item));
  }
  return Value::list(std::move(out));
}

Result<Value> min_max(const Value& v, CallArgs& args, bool want_max) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args(want_max ? "max" : "min", args, {{"case_sensitive"}, {"attribute"}}, a));
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  bool cs = arg_bool(a[0], false);
  auto key_of = [&](const Value& item) -> Result<Value> {
    Value key = item;
    if (a[1] && !a[1]->is_none()) {
      LOOM_ASSIGN_OR_RETURN(key, attr_path(item, *a[1]));
    }
    return ignore_case(key, cs);
  };
  size_t best = 0;
  LOOM_ASSIGN_OR_RETURN(Value best_key, key_of(items[0]));
  for (size_t i = 1; i < items.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Value k, key_of(items[i]));
    LOOM_ASSIGN_OR_RETURN(int c, py_compare(k, best_key, want_max ? ">" : "<"));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

LOOM_FILTER(f_min) { return min_max(v, args, false); }
LOOM_FILTER(f_max) { return min_max(v, args, true); }

LOOM_FILTER(f_sum) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("sum", args, {{"attribute"}, {"start"}}, a));
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  Value total = a[1].value_or(Value(0));
  for (const auto& item : items) {
    Value x = item;
    if (a[0] && !a[0]->is_none()) {
      LOOM_ASSIGN_OR_RETURN(x, attr_path(item, *a[0]));
    }
    if (!total.is_number() || !x.is_number())
      return invalid_argument("unsupported operand type(s) for +: '{}' and '{}'", type_name(total), type_name(x));
    if (total.is_float() || x.is_float()) {
      total = Value(total.as_double() + x.as_double());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) return invalid_argument("integer overflow");
      total = Value(r);
    }
  }
  return total;
}

LOOM_FILTER(f_reverse) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("reverse", args, {}, a));
  if (v.is_string()) {
    std::u32string cps = unicode::decode_utf8(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value(unicode::encode_utf8(cps));
  }
  auto items = py_iterate(v);
  if (!items.ok()) return invalid_argument("argument must be iterable");
  ValueList out = std::move(items).value();
  std::reverse(out.begin(), out.end());
  return Value::list(std::move(out));
}

LOOM_FILTER(f_map) {
  if (!truthy(v)) return Value::list({});  // jinja2 maps nothing over a falsy value
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  ValueList out;
  if (args.args.empty()) {
    std::optional<Value> attribute, def;
    for (auto& [k, val] : args.kwargs) {
      if (k == "attribute") attribute = val;
      else if (k == "default") def = val;
      else return invalid_argument("Unexpected keyword argument '{}'", k);
    }
    if (!attribute) return invalid_argument("map requires a filter argument");
    for (const auto& item : items) {
      LOOM_ASSIGN_OR_RETURN(Value x, attr_path(item, *attribute, def));
      out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
  }
  std::string name = py_str(args.args[0]);
  if (!has_filter(name)) return invalid_argument("no filter named '{}'", name);
  CallArgs rest;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  rest.kwargs = args.kwargs;
  for (const auto& item : items) {
    CallArgs copy = rest;
    LOOM_ASSIGN_OR_RETURN(Value x, apply_filter(in, name, item, copy));
    out.push_back(std::move(x));
  }
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr: args are ([attribute,] [test name, test args...]).
Result<Value> select_common(Interpreter& in, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  if (!truthy(v)) return Value::list({});  // as jinja2: a falsy value selects nothing
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  size_t off = 0;
  Value attribute;
  if (by_attr) {
    if (args.args.empty()) return invalid_argument("Missing parameter for attribute name");
    attribute = args.args[0];
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.args.size() > off) {
    test = py_str(args.args[off]);
    if (!has_test(*test)) return invalid_argument("no test named '{}'", *test);
    test_args.args.assign(args.args.begin() + static_cast<ptrdiff_t>(off) + 1, args.args.end());
    test_args.kwargs = args.kwargs;
  }
  ValueList out;
  for (const auto& item : items) {
    Value x = item;
    if (by_attr) {
      LOOM_ASSIGN_OR_RETURN(x, attr_path(item, attribute));
    }
    bool pass;
    if (test) {
      CallArgs copy = test_args;
      LOOM_ASSIGN_OR_RETURN(pass, apply_test(in, *test, x, copy));
    } else {
      pass = truthy(x);
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

LOOM_FILTER(f_select) { return select_common(in, v, args, false, true); }
LOOM_FILTER(f_reject) { return select_common(in, v, args, false, false); }
LOOM_FILTER(f_selectattr) { return select_common(in, v, args, true, true); }
LOOM_FILTER(f_rejectattr) { return select_common(in, v, args, true, false); }

LOOM_FILTER(f_attr) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("attr", args, {{"name", true}}, a));
  return get_attr(v, py_str(*a[0]));
}

LOOM_FILTER(f_batch) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("batch", args, {{"linecount", true}, {"fill_with"}}, a));
  LOOM_ASSIGN_OR_RETURN(int64_t n, arg_int(a[0], 1, "linecount"));
  if (n <= 0) return invalid_argument("batch: linecount must be positive");
  LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(v));
  ValueList out, cur;
  for (auto& item : items) {
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(std::move(item));
  }
  if (!cur.empty()) {
    if (a[1] && !a[1]->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*a[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

LOOM_FILTER(f_indent) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("indent", args, {{"width"}, {"first"}, {"blank"}}, a));
  std::string pad;
  if (a[0] && a[0]->is_string()) {
    pad = a[0]->str();
  } else {
    LOOM_ASSIGN_OR_RETURN(int64_t w, arg_int(a[0], 4, "width"));
    pad.assign(static_cast<size_t>(std::clamp<int64_t>(w, 0, 1024)), ' ');
  }
  bool first = arg_bool(a[1], false), blank = arg_bool(a[2], false);
  if (v.is_undefined()) return undefined_error(v);
  if (!v.is_string()) return invalid_argument("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v));
  // Python's str.splitlines() of s + "\n".
  std::u32string cps = unicode::decode_utf8(v.str());
  cps.push_back('\n');
  std::vector<std::string> lines;
  std::u32string line;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (unicode::is_line_break(cps[i])) {
      if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      lines.push_back(unicode::encode_utf8(line));
      line.clear();
    } else {
      line.push_back(cps[i]);
    }
  }
  if (!line.empty()) lines.push_back(unicode::encode_utf8(line));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  LOOM_RETURN_IF_ERROR(in.charge(out.size()));
  return text_like(v, std::move(out));
}

LOOM_FILTER(f_escape) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("escape", args, {}, a));
  if (v.is_markup()) return v;
  return Value::markup(html_escape(soft_str(v)));
}

LOOM_FILTER(f_forceescape) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("forceescape", args, {}, a));
  return Value::markup(html_escape(soft_str(v)));
}

LOOM_FILTER(f_safe) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("safe", args, {}, a));
  return Value::markup(soft_str(v));
}

LOOM_FILTER(f_center) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("center", args, {{"width"}}, a));
  LOOM_ASSIGN_OR_RETURN(int64_t width, arg_int(a[0], 80, "width"));
  std::string s = soft_str(v);
  int64_t len = static_cast<int64_t>(unicode::utf8_length(s));
  if (width <= len) return Value(s);
  width = std::min<int64_t>(width, static_cast<int64_t>(in.limits().max_output_bytes));
  int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
}

LOOM_FILTER(f_truncate) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("truncate", args, {{"length"}, {"killwords"}, {"end"}, {"leeway"}}, a));
  LOOM_ASSIGN_OR_RETURN(int64_t length, arg_int(a[0], 255, "length"));
  LOOM_ASSIGN_OR_RETURN(int64_t leeway, arg_int(a[3], 5, "leeway"));
  std::string end = a[2] ? py_str(*a[2]) : "...";
  std::u32string e = unicode::decode_utf8(end);
  if (length < static_cast<int64_t>(e.size())) return invalid_argument("expected length >= {}, got {}", e.size(), length);
  if (leeway < 0) return invalid_argument("expected leeway >= 0, got {}", leeway);
  LOOM_ASSIGN_OR_RETURN(int64_t len, py_len(v));  // jinja2 takes len() of whatever it is given
  if (len <= length + leeway) return v;
  if (!v.is_string()) return invalid_argument("'{}' object has no attribute 'rsplit'", type_name(v));
  std::u32string s = unicode::decode_utf8(v.str());
  std::u32string cut = s.substr(0, static_cast<size_t>(length) - e.size());
  if (!arg_bool(a[1], false)) {
    size_t sp = cut.rfind(U' ');
    if (sp != std::u32string::npos) cut = cut.substr(0, sp);
  }
  return Value(unicode::encode_utf8(cut) + end);
}

LOOM_FILTER(f_wordcount) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args("wordcount", args, {}, a));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : unicode::decode_utf8(soft_str(v))) {
    bool w = unicode::is_alpha(c) || unicode::is_digit(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

LOOM_FILTER(f_format) {
  if (!args.args.empty() && !args.kwargs.empty())
    return invalid_argument("can't handle positional and keyword arguments at the same time");
  Value fmt_args;
  if (!args.kwargs.empty()) {
    ValueDict d;
    for (auto& [k, val] : args.kwargs) d.set(Value(k), val);
    fmt_args = Value::dict(std::move(d));
  } else {
    fmt_args = Value::tuple(args.args);
  }
  return percent_format(in, soft_str(v), fmt_args);
}

#undef LOOM_FILTER

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kFilters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"forceescape", f_forceescape}, {"format", f_format}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
    {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

const NamedFilter* find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }

Result<Value> apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  const NamedFilter* f = find_filter(name);
  if (!f) return invalid_argument("no filter named '{}'", name);
  return f->fn(in, input, args);
}

}  // namespace loom::llm::jinja
