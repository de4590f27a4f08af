// Methods of str, dict, list and tuple values (obj.method(...)), as the immutable sandbox
// exposes them: read-only methods work, mutating ones are refused when called.
#include <algorithm>

#include "loom/text/jinja/builtins.h"
#include "loom/text/jinja/interp.h"
#include "loom/text/unicode.h"

namespace loom::llm::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;

constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "upper", "lower", "title", "capitalize", "swapcase", "replace", "find", "rfind", "index",
    "rindex", "count", "join", "format", "isdigit", "isdecimal", "isnumeric", "isalpha",
    "isalnum", "isspace", "isupper", "islower", "removeprefix", "removesuffix", "center",
    "ljust", "rjust", "zfill", "partition", "rpartition",
};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values", "copy"};
constexpr std::string_view kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kListMethods[] = {"index", "count", "copy"};
constexpr std::string_view kListUnsafe[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool contains(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Status need_str(std::string_view method, const Value& v) {
  if (v.is_string()) return {};
  return invalid_argument("{}() argument must be str, not {}", method, type_name(v));
}

// Code point index of byte offset `off` in `s`.
int64_t cp_index(const std::string& s, size_t off) {
  return static_cast<int64_t>(unicode::utf8_length(std::string_view(s).substr(0, off)));
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (char32_t c : unicode::decode_utf8(s))
    if (!pred(c)) return false;
  return true;
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : unicode::decode_utf8(s)) {
    bool cased = unicode::is_upper(c) || unicode::is_lower(c);
    if (cased) {
      if (!prev_cased && c == 0xDF) out += "Ss";
      else unicode::append_utf8(out, prev_cased ? unicode::to_lower(c) : unicode::to_upper(c));
    } else {
      unicode::append_utf8(out, c);
    }
    prev_cased = cased;
  }
  return out;
}

// str.split / str.rsplit.
Result<Value> split(const std::string& s, const CallArgs& args, bool from_right) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args(from_right ? "rsplit" : "split", args, {{"sep"}, {"maxsplit"}}, a));
  int64_t maxsplit = -1;
  if (a[1]) {
    if (!a[1]->is_integral()) return invalid_argument("maxsplit must be an integer");
    maxsplit = a[1]->as_int();
  }
  std::vector<std::string> parts;
  if (!a[0] || a[0]->is_none()) {
    std::u32string cps = unicode::decode_utf8(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && unicode::is_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        std::u32string rest = cps.substr(i);
        if (from_right) std::reverse(rest.begin(), rest.end());
        parts.push_back(unicode::encode_utf8(rest));
        break;
      }
      size_t j = i;
      while (j < n && !unicode::is_space(cps[j])) ++j;
      std::u32string word = cps.substr(i, j - i);
      if (from_right) std::reverse(word.begin(), word.end());
      parts.push_back(unicode::encode_utf8(word));
      i = j;
    }
    if (from_right) std::reverse(parts.begin(), parts.end());
  } else {
    LOOM_RETURN_IF_ERROR(need_str("split", *a[0]));
    const std::string& sep = a[0]->str();
    if (sep.empty()) return invalid_argument("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t f = s.find(sep, pos);
        if (f == std::string::npos) break;
        parts.push_back(s.substr(pos, f - pos));
        pos = f + sep.size();
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep.size()) break;
        size_t f = s.rfind(sep, end - sep.size());
        if (f == std::string::npos) break;
        parts.push_back(s.substr(f + sep.size(), end - f - sep.size()));
        end = f;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
  }
  ValueList out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

Result<Value> affix_test(const std::string& s, const CallArgs& args, bool prefix) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args(prefix ? "startswith" : "endswith", args, {{"prefix", true}}, a));
  ValueList options;
  if (a[0]->is_tuple()) options = a[0]->items();
  else options.push_back(*a[0]);
  for (const auto& o : options) {
    if (!o.is_string())
      return invalid_argument("{} first arg must be str or a tuple of str, not {}", prefix ? "startswith" : "endswith",
                              type_name(o));
    const std::string& p = o.str();
    if (p.size() <= s.size() && (prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0))
      return Value(true);
  }
  return Value(false);
}

Result<Value> pad(Interpreter& in, const std::string& s, const CallArgs& args, std::string_view method) {
  Args a;
  LOOM_RETURN_IF_ERROR(bind_args(method, args, {{"width", true}, {"fillchar"}}, a));
  if (!a[0]->is_integral()) return invalid_argument("{}: width must be an integer", method);
  std::string fill = " ";
  if (a[1]) {
    if (!a[1]->is_string() || unicode::utf8_length(a[1]->str()) != 1)
      return invalid_argument("The fill character must be exactly one character long");
    fill = a[1]->str();
  }
  int64_t len = static_cast<int64_t>(unicode::utf8_length(s)), width = a[0]->as_int();
  if (width <= len) return Value(s);
  LOOM_RETURN_IF_ERROR(in.charge(static_cast<size_t>(width) * fill.size()));
  int64_t marg = width - len, left;
  if (method == "ljust") left = 0;
  else if (method == "rjust") left = marg;
  else left = marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return Value(std::move(out));
}

Result<Value> str_method(Interpreter& in, const Value& self, const std::string& m, CallArgs& args) {
  const std::string& s = self.str();
  Args a;
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"chars"}}, a));
    bool l = m != "rstrip", r = m != "lstrip";
    if (a[0] && !a[0]->is_none()) {
      LOOM_RETURN_IF_ERROR(need_str(m, *a[0]));
      std::u32string chars = unicode::decode_utf8(a[0]->str());
      return Value(std::string(unicode::strip(s, &chars, l, r)));
    }
    return Value(std::string(unicode::strip(s, nullptr, l, r)));
  }
  if (m == "split" || m == "rsplit") return split(s, args, m == "rsplit");
  if (m == "splitlines") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"keepends"}}, a));
    bool keep = a[0] && truthy(*a[0]);
    std::u32string cps = unicode::decode_utf8(s);
    ValueList out;
    std::u32string line;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (!unicode::is_line_break(cps[i])) {
        line.push_back(cps[i]);
        continue;
      }
      bool crlf = cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n';
      if (keep) {
        line.push_back(cps[i]);
        if (crlf) line.push_back('\n');
      }
      if (crlf) ++i;
      out.emplace_back(unicode::encode_utf8(line));
      line.clear();
    }
    if (!line.empty()) out.emplace_back(unicode::encode_utf8(line));
    return Value::list(std::move(out));
  }
  if (m == "startswith" || m == "endswith") return affix_test(s, args, m == "startswith");
  if (m == "upper" || m == "lower" || m == "title" || m == "capitalize" || m == "swapcase") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {}, a));
    if (m == "upper") return Value(unicode::upper(s));
    if (m == "lower") return Value(unicode::lower(s));
    if (m == "title") return Value(py_title(s));
    std::string out;
    bool first = true;
    for (char32_t c : unicode::decode_utf8(s)) {
      if (m == "capitalize") unicode::append_utf8(out, first ? unicode::to_upper(c) : unicode::to_lower(c));
      else unicode::append_utf8(out, unicode::is_upper(c) ? unicode::to_lower(c) : unicode::to_upper(c));
      first = false;
    }
    return Value(std::move(out));
  }
  if (m == "replace") {
    CallArgs fargs = args;
    return apply_filter(in, "replace", self, fargs);
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"sub", true}}, a));
    LOOM_RETURN_IF_ERROR(need_str(m, *a[0]));
    size_t f = (m == "find" || m == "index") ? s.find(a[0]->str()) : s.rfind(a[0]->str());
    if (f == std::string::npos) {
      if (m == "index" || m == "rindex") return invalid_argument("substring not found");
      return Value(-1);
    }
    return Value(cp_index(s, f));
  }
  if (m == "count") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"sub", true}}, a));
    LOOM_RETURN_IF_ERROR(need_str(m, *a[0]));
    const std::string& sub = a[0]->str();
    if (sub.empty()) return Value(static_cast<int64_t>(unicode::utf8_length(s)) + 1);
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  if (m == "join") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"iterable", true}}, a));
    LOOM_ASSIGN_OR_RETURN(ValueList items, py_iterate(*a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        return invalid_argument("sequence item {}: expected str instance, {} found", i, type_name(items[i]));
      LOOM_RETURN_IF_ERROR(in.charge(out.size() + s.size() + items[i].str().size()));
      if (i) out += s;
      out += items[i].str();
    }
    return Value(std::move(out));
  }
  if (m == "format") return str_format(in, s, args);
  if (m.rfind("is", 0) == 0) {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {}, a));
    if (m == "isdigit" || m == "isdecimal" || m == "isnumeric") return Value(all_chars(s, unicode::is_digit));
    if (m == "isalpha") return Value(all_chars(s, unicode::is_alpha));
    if (m == "isalnum") return Value(all_chars(s, [](char32_t c) { return unicode::is_alpha(c) || unicode::is_digit(c); }));
    if (m == "isspace") return Value(all_chars(s, unicode::is_space));
    bool cased = false, upper = m == "isupper";
    for (char32_t c : unicode::decode_utf8(s)) {
      if (upper ? unicode::is_lower(c) : unicode::is_upper(c)) return Value(false);
      cased |= upper ? unicode::is_upper(c) : unicode::is_lower(c);
    }
    return Value(cased);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"affix", true}}, a));
    LOOM_RETURN_IF_ERROR(need_str(m, *a[0]));
    const std::string& p = a[0]->str();
    if (m == "removeprefix" && s.compare(0, p.size(), p) == 0) return Value(s.substr(p.size()));
    if (m == "removesuffix" && !p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
      return Value(s.substr(0, s.size() - p.size()));
    return self;
  }
  if (m == "center" || m == "ljust" || m == "rjust") return pad(in, s, args, m);
  if (m == "zfill") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"width", true}}, a));
    if (!a[0]->is_integral()) return invalid_argument("zfill: width must be an integer");
    int64_t len = static_cast<int64_t>(unicode::utf8_length(s)), width = a[0]->as_int();
    if (width <= len) return self;
    LOOM_RETURN_IF_ERROR(in.charge(static_cast<size_t>(width)));
    size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
  }
  if (m == "partition" || m == "rpartition") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"sep", true}}, a));
    LOOM_RETURN_IF_ERROR(need_str(m, *a[0]));
    const std::string& sep = a[0]->str();
    if (sep.empty()) return invalid_argument("empty separator");
    size_t f = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos)
      return m == "partition" ? Value::tuple({Value(s), Value(""), Value("")}) : Value::tuple({Value(""), Value(""), Value(s)});
    return Value::tuple({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))});
  }
  return invalid_argument("'str' object has no attribute '{}'", m);
}

Result<Value> dict_method(const Value& self, const std::string& m, CallArgs& args) {
  Args a;
  if (m == "get") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"key", true}, {"default"}}, a));
    if (const Value* v = self.dict().find(*a[0])) return *v;
    return a[1].value_or(Value::none());
  }
  LOOM_RETURN_IF_ERROR(bind_args(m, args, {}, a));
  if (m == "copy") return Value::dict(self.dict());
  ValueList out;
  for (const auto& [k, v] : self.dict().items()) {
    if (m == "items") out.push_back(Value::tuple({k, v}));
    else out.push_back(m == "keys" ? k : v);
  }
  return Value::list(std::move(out));
}

Result<Value> list_method(const Value& self, const std::string& m, CallArgs& args) {
  Args a;
  if (m == "copy") {
    LOOM_RETURN_IF_ERROR(bind_args(m, args, {}, a));
    return Value::list(self.items());
  }
  LOOM_RETURN_IF_ERROR(bind_args(m, args, {{"value", true}}, a));
  const auto& items = self.items();
  if (m == "count") {
    return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& x) { return py_equal(x, *a[0]); })));
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (py_equal(items[i], *a[0])) return Value(static_cast<int64_t>(i));
  return invalid_argument("{} is not in {}", py_repr(*a[0]), type_name(self));
}

class MethodFunction : public Function {
 public:
  MethodFunction(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string repr() const override {
    return fmt::format("<built-in method {} of {} object>", name_, type_name(self_));
  }
  Result<Value> call(Interpreter& in, CallArgs& args) override {
    if (self_.is_string()) return str_method(in, self_, name_, args);
    if (self_.is_dict()) return dict_method(self_, name_, args);
    return list_method(self_, name_, args);
  }

 private:
  Value self_;
  std::string name_;
};

}  // namespace

Value get_method(const Value& obj, std::string_view name) {
  bool known = false, unsafe = false;
  if (obj.is_string()) {
    known = contains(kStrMethods, name);
  } else if (obj.is_dict()) {
    known = contains(kDictMethods, name);
    unsafe = contains(kDictUnsafe, name);
  } else if (obj.is_list()) {
    known = contains(kListMethods, name);
    unsafe = contains(kListUnsafe, name);
  } else if (obj.is_tuple()) {
    known = name == "index" || name == "count";
  }
  if (unsafe)
    return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
  if (!known) return Value();
  return Value::function(std::make_shared<MethodFunction>(obj, std::string(name)));
}

}  // namespace loom::llm::jinja
