// Python semantics of template values: truthiness, str()/repr(), ==, ordering, iteration.
#include "loom/text/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "loom/text/unicode.h"

namespace loom::llm::jinja {

// --- ValueDict -----------------------------------------------------------------------------

const Value* ValueDict::find(const Value& key) const {
  for (const auto& [k, v] : items_)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void ValueDict::set(Value key, Value value) {
  for (auto& [k, v] : items_) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

void ValueDict::append_new(Value key, Value value) { items_.emplace_back(std::move(key), std::move(value)); }

// --- Value constructors ----------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(ValueDict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(d));
  return v;
}

Value Value::make_namespace(ValueDict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::function(std::shared_ptr<Function> f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::move(f);
  return v;
}

const std::string& Value::hint() const {
  static const std::string kEmpty;
  return s_ ? *s_ : kEmpty;
}

bool Value::same_object(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kList: case Kind::kTuple: return list_ == o.list_;
    case Kind::kDict: case Kind::kNamespace: return dict_ == o.dict_;
    case Kind::kFunction: return fn_ == o.fn_;
    default: return false;
  }
}

// --- Python semantics -------------------------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return false;
    case Value::Kind::kBool: case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_double() != 0.0;
    case Value::Kind::kString: return !v.str().empty();
    case Value::Kind::kList: case Value::Kind::kTuple: return !v.items().empty();
    case Value::Kind::kDict: return !v.dict().empty();
    case Value::Kind::kNamespace: case Value::Kind::kFunction: return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return v.is_markup() ? "Markup" : "str";
    case Value::Kind::kList: return "list";
    case Value::Kind::kTuple: return "tuple";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's repr layout: fixed notation when the decimal
  // exponent lies in [-4, 16), scientific with a two-digit minimum exponent otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  bool neg = !sci.empty() && sci[0] == '-';
  if (neg) sci.remove_prefix(1);
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits.push_back(c);
  int exp10 = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = neg ? "-" : "";
  int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    int e = decpt - 1;
    out += fmt::format("e{}{:02d}", e < 0 ? '-' : '+', e < 0 ? -e : e);
  }
  return out;
}

std::string py_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : unicode::decode_utf8(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
               (cp >= 0x205F && cp <= 0x2064) || cp == 0x1680 || cp == 0x3000 ||
               cp == 0xFEFF) {
      // Separators and format characters: not printable for Python's repr.
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      unicode::append_utf8(out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

namespace {

constexpr int kMaxReprDepth = 64;

void repr_into(std::string& out, const Value& v, int depth);

void str_into(std::string& out, const Value& v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return;
    case Value::Kind::kNone: out += "None"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: out += format_float(v.as_double()); return;
    case Value::Kind::kString: out += v.str(); return;
    default: repr_into(out, v, depth); return;
  }
}

void repr_into(std::string& out, const Value& v, int depth) {
  if (depth > kMaxReprDepth) {
    out += "...";
    return;
  }
  switch (v.kind()) {
    case Value::Kind::kUndefined: out += "Undefined"; return;
    case Value::Kind::kString:
      if (v.is_markup()) out += "Markup(";
      out += py_repr_string(v.str());
      if (v.is_markup()) out += ")";
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      out += v.is_list() ? "[" : "(";
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, items[i], depth + 1);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_list() ? "]" : ")";
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.is_namespace()) out += "<Namespace ";
      out += "{";
      bool first = true;
      for (const auto& [k, val] : v.dict().items()) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, depth + 1);
        out += ": ";
        repr_into(out, val, depth + 1);
      }
      out += "}";
      if (v.is_namespace()) out += ">";
      return;
    }
    case Value::Kind::kFunction: out += v.function()->repr(); return;
    default: str_into(out, v, depth); return;
  }
}

}  // namespace

std::string py_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  str_into(out, v, 0);
  return out;
}

std::string py_repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (a.same_object(b)) return true;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.same_object(b)) return true;
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().items()) {
        const Value* other = b.dict().find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

Result<int> py_compare(const Value& a, const Value& b, std::string_view op) {
  for (const Value* v : {&a, &b})
    if (v->is_undefined()) return invalid_argument("{}", v->hint().empty() ? "value is undefined" : v->hint());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return invalid_argument("'{}' not supported between instances of '{}' and '{}'", op,
                          type_name(a), type_name(b));
}

Result<ValueList> py_iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return ValueList{};
    case Value::Kind::kList: case Value::Kind::kTuple: return v.items();
    case Value::Kind::kDict: {
      ValueList keys;
      keys.reserve(v.dict().size());
      for (const auto& kv : v.dict().items()) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      std::string one;
      for (char32_t cp : unicode::decode_utf8(v.str())) {
        one.clear();
        unicode::append_utf8(one, cp);
        chars.emplace_back(one);
      }
      return chars;
    }
    default:
      return invalid_argument("'{}' object is not iterable", type_name(v));
  }
}

Result<int64_t> py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return int64_t{0};
    case Value::Kind::kString: return static_cast<int64_t>(unicode::utf8_length(v.str()));
    case Value::Kind::kList: case Value::Kind::kTuple: return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict().size());
    default: return invalid_argument("object of type '{}' has no len()", type_name(v));
  }
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace loom::llm::jinja
