// String formatting as Python does it: `"%s" % args` and str.format() with format specs, and
// Python's int()/float() parsing of strings.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "loom/text/jinja/builtins.h"
#include "loom/text/jinja/interp.h"
#include "loom/text/unicode.h"

namespace loom::llm::jinja {
namespace {

// C's snprintf for one numeric conversion (its output matches Python's for d/x/e/f/g).
template <typename T>
std::string c_format(const std::string& spec, T value) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, spec.c_str(), value);
  if (n < 0) return {};
  if (static_cast<size_t>(n) < sizeof buf) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec.c_str(), value);
  big.resize(static_cast<size_t>(n));
  return big;
}

std::string pad_to(std::string s, int64_t width, bool left_align, const std::string& fill = " ") {
  int64_t len = static_cast<int64_t>(unicode::utf8_length(s));
  if (width <= len) return s;
  std::string padding;
  for (int64_t i = 0; i < width - len; ++i) padding += fill;
  return left_align ? s + padding : padding + s;
}

// ---- str.format spec mini-language ------------------------------------------------------------

struct Spec {
  std::string fill = " ";
  char align = 0;  // < > ^ =
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int64_t width = -1;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

Result<Spec> parse_spec(const std::string& text) {
  Spec s;
  std::u32string cps = unicode::decode_utf8(text);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    s.fill.clear();
    unicode::append_utf8(s.fill, cps[0]);
    s.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    s.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) s.sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '#') {
    s.alt = true;
    ++i;
  }
  if (i < cps.size() && cps[i] == '0') {
    s.zero = true;
    ++i;
  }
  auto number = [&](int64_t& out) {
    bool any = false;
    int64_t v = 0;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
      v = std::min<int64_t>(v * 10 + (cps[i++] - '0'), 1 << 24);
      any = true;
    }
    if (any) out = v;
    return any;
  };
  number(s.width);
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_')) s.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    if (!number(s.precision)) return invalid_argument("Format specifier missing precision");
  }
  if (i < cps.size()) s.type = static_cast<char>(cps[i++]);
  if (i != cps.size()) return invalid_argument("Invalid format specifier '{}'", text);
  return s;
}

std::string group_digits(const std::string& digits, char sep, size_t every) {
  std::string out;
  size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i && (n - i) % every == 0) out.push_back(sep);
    out.push_back(digits[i]);
  }
  return out;
}

// Sign, prefix and digits joined with the spec's width, fill and alignment.
std::string align_number(const Spec& s, const std::string& sign, const std::string& body) {
  Spec spec = s;
  if (spec.zero && !spec.align) {
    spec.align = '=';
    spec.fill = "0";
  }
  char align = spec.align ? spec.align : '>';
  int64_t len = static_cast<int64_t>(unicode::utf8_length(sign) + unicode::utf8_length(body));
  if (spec.width <= len) return sign + body;
  int64_t pad = spec.width - len;
  std::string fill;
  auto fill_n = [&](int64_t n) {
    std::string f;
    for (int64_t i = 0; i < n; ++i) f += spec.fill;
    return f;
  };
  switch (align) {
    case '<': return sign + body + fill_n(pad);
    case '^': return fill_n(pad / 2) + sign + body + fill_n(pad - pad / 2);
    case '=': return sign + fill_n(pad) + body;
    default: return fill_n(pad) + sign + body;
  }
}

Result<std::string> format_with_spec(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return py_str(v);
  LOOM_ASSIGN_OR_RETURN(Spec s, parse_spec(spec_text));
  if (v.is_string() || (!v.is_number() && (s.type == 0 || s.type == 's'))) {
    if (!v.is_string()) return invalid_argument("unsupported format string passed to {}.__format__", type_name(v));
    if (s.type && s.type != 's') return invalid_argument("Unknown format code '{}' for object of type 'str'", s.type);
    std::u32string cps = unicode::decode_utf8(v.str());
    if (s.precision >= 0 && static_cast<size_t>(s.precision) < cps.size()) cps.resize(static_cast<size_t>(s.precision));
    Spec t = s;
    if (!t.align) t.align = '<';
    return align_number(t, "", unicode::encode_utf8(cps));
  }
  if (!v.is_number()) return invalid_argument("unsupported format string passed to {}.__format__", type_name(v));
  bool int_type = s.type == 0 ? v.is_integral() : std::string_view("bcdoxXn").find(s.type) != std::string_view::npos;
  if (int_type) {
    if (v.is_float()) return invalid_argument("Unknown format code '{}' for object of type 'float'", s.type);
    if (s.precision >= 0) return invalid_argument("Precision not allowed in integer format specifier");
    int64_t x = v.as_int();
    uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    std::string sign = x < 0 ? "-" : (s.sign == '+' ? "+" : s.sign == ' ' ? " " : "");
    std::string digits, prefix;
    char t = s.type ? s.type : 'd';
    if (t == 'c') {
      std::string ch;
      unicode::append_utf8(ch, static_cast<char32_t>(x));
      return align_number(s, "", ch);
    }
    int base = t == 'x' || t == 'X' ? 16 : t == 'o' ? 8 : t == 'b' ? 2 : 10;
    do {
      int d = static_cast<int>(mag % static_cast<uint64_t>(base));
      digits.insert(digits.begin(), static_cast<char>(d < 10 ? '0' + d : (t == 'X' ? 'A' : 'a') + d - 10));
      mag /= static_cast<uint64_t>(base);
    } while (mag);
    if (s.grouping) digits = group_digits(digits, s.grouping, base == 10 ? 3 : 4);
    if (s.alt && base != 10) prefix = t == 'X' ? "0X" : t == 'x' ? "0x" : t == 'o' ? "0o" : "0b";
    return align_number(s, sign + prefix, digits);
  }
  double x = v.as_double();
  std::string sign = std::signbit(x) && !std::isnan(x) ? "-" : (s.sign == '+' ? "+" : s.sign == ' ' ? " " : "");
  double mag = std::fabs(x);
  std::string body;
  char t = s.type;
  if (t == 0 && s.precision < 0) {
    body = format_float(mag);
  } else {
    bool percent = t == '%';
    char ct = t == 0 || t == 'n' ? 'g' : percent ? 'f' : t;
    if (std::string_view("eEfFgG").find(ct) == std::string_view::npos)
      return invalid_argument("Unknown format code '{}' for object of type 'float'", t);
    int64_t prec = s.precision >= 0 ? s.precision : 6;
    body = c_format(fmt::format("%{}.{}{}", s.alt ? "#" : "", prec, ct), percent ? mag * 100 : mag);
    if (percent) body += "%";
    // Python's general format without a type keeps one digit after the point.
    if (t == 0 && std::isfinite(mag) && body.find_first_of(".e") == std::string::npos) body += ".0";
  }
  if (s.grouping) {
    size_t end = body.find_first_not_of("0123456789");
    body = group_digits(body.substr(0, end), s.grouping, 3) + (end == std::string::npos ? "" : body.substr(end));
  }
  return align_number(s, sign, body);
}

}  // namespace

// Python's int(str, base): optional sign, digits with single underscores, spaces around.
std::optional<int64_t> py_parse_int(std::string_view s, int base) {
  s = unicode::strip(s, nullptr, true, true);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() > 1 && s[0] == '0' && (base == 0 || base == 16 || base == 8 || base == 2)) {
    char p = static_cast<char>(s[1] | 0x20);
    int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb && (base == 0 || base == pb)) {
      base = pb;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) base = 10;
  if (s.empty() || s.front() == '_' || s.back() == '_') return std::nullopt;
  __int128 v = 0;
  char prev = 0;
  for (char c : s) {
    if (c == '_') {
      if (prev == '_') return std::nullopt;
      prev = c;
      continue;
    }
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : (c >= 'A' && c <= 'Z') ? c - 'A' + 10 : 99;
    if (d >= base) return std::nullopt;
    v = v * base + d;
    if (v > static_cast<__int128>(INT64_MAX) + 1) return std::nullopt;
    prev = c;
  }
  if (neg) v = -v;
  if (v > INT64_MAX) return std::nullopt;
  return static_cast<int64_t>(v);
}

// Python's float(str): decimal or exponent notation, inf/nan words, underscores between digits.
std::optional<double> py_parse_float(std::string_view s) {
  s = unicode::strip(s, nullptr, true, true);
  std::string clean;
  std::string_view body = s;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  std::string lower = unicode::lower(body);
  if (lower == "inf" || lower == "infinity" || lower == "nan") return std::strtod(std::string(s).c_str(), nullptr);
  bool digit = false, dot = false, exp = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      digit = true;
    } else if (c == '_') {
      if (i == 0 || i + 1 >= s.size() || !(s[i - 1] >= '0' && s[i - 1] <= '9') || !(s[i + 1] >= '0' && s[i + 1] <= '9'))
        return std::nullopt;
      continue;
    } else if (c == '.' && !dot && !exp) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && digit && !exp) {
      exp = true;
      digit = false;
    } else if ((c == '+' || c == '-') && (i == 0 || s[i - 1] == 'e' || s[i - 1] == 'E')) {
    } else {
      return std::nullopt;
    }
    clean.push_back(c);
  }
  if (!digit) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

Result<Value> str_format(Interpreter& in, const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return invalid_argument("Single '}}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string::npos) return invalid_argument("expected '}}' before end of string");
    std::string field = format.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) return invalid_argument("nested format fields are not supported");
    i = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
      if (conv != "r" && conv != "s" && conv != "a") return invalid_argument("Unknown conversion specifier {}", conv);
    }
    size_t name_end = field.find_first_of(".[");
    std::string name = field.substr(0, name_end);
    Value v;
    if (name.empty()) {
      if (used_manual) return invalid_argument("cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_index >= args.args.size()) return invalid_argument("Replacement index {} out of range for positional args tuple", auto_index);
      v = args.args[auto_index++];
    } else if (name.find_first_not_of("0123456789") == std::string::npos) {
      if (used_auto) return invalid_argument("cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      size_t idx = std::stoul(name.substr(0, 9));
      if (idx >= args.args.size()) return invalid_argument("Replacement index {} out of range for positional args tuple", idx);
      v = args.args[idx];
    } else {
      bool found = false;
      for (const auto& [k, val] : args.kwargs)
        if (k == name) {
          v = val;
          found = true;
        }
      if (!found) return invalid_argument("KeyError: '{}'", name);
    }
    // .attr and [key] accessors
    for (size_t p = name_end; p != std::string::npos && p < field.size();) {
      if (field[p] == '.') {
        size_t e = field.find_first_of(".[", p + 1);
        LOOM_ASSIGN_OR_RETURN(v, get_attr(v, field.substr(p + 1, e == std::string::npos ? std::string::npos : e - p - 1)));
        p = e;
      } else {
        size_t e = field.find(']', p);
        if (e == std::string::npos) return invalid_argument("Missing ']' in format string");
        std::string key = field.substr(p + 1, e - p - 1);
        Value k = key.find_first_not_of("0123456789") == std::string::npos && !key.empty()
                      ? Value(static_cast<int64_t>(std::stoll(key.substr(0, 18))))
                      : Value(key);
        LOOM_ASSIGN_OR_RETURN(v, get_item(v, k));
        p = e + 1;
      }
      if (v.is_undefined()) return invalid_argument("{}", v.hint().empty() ? "value is undefined" : v.hint());
    }
    if (conv == "r" || conv == "a") v = Value(py_repr(v));
    else if (conv == "s") v = Value(py_str(v));
    LOOM_ASSIGN_OR_RETURN(std::string piece, format_with_spec(v, spec));
    LOOM_RETURN_IF_ERROR(in.charge(out.size() + piece.size()));
    out += piece;
  }
  return Value(std::move(out));
}

Result<Value> percent_format(Interpreter& in, const std::string& format, const Value& args) {
  ValueList positional;
  static const ValueDict kNoKeys;
  // Python treats anything with __getitem__ (dicts, and jinja2's Undefined) as a mapping here.
  const ValueDict* mapping = args.is_dict() ? &args.dict() : args.is_undefined() ? &kNoKeys : nullptr;
  if (args.is_tuple()) positional = args.items();
  else positional.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return invalid_argument("incomplete format");
    Value v;
    bool have = false;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) return invalid_argument("incomplete format key");
      if (!mapping) return invalid_argument("format requires a mapping");
      const Value* found = mapping->find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!found) return invalid_argument("KeyError: '{}'", format.substr(i + 1, close - i - 1));
      v = *found;
      have = used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos) flags += format[i++];
    auto take_arg = [&]() -> Result<Value> {
      if (next >= positional.size()) return invalid_argument("not enough arguments for format string");
      return positional[next++];
    };
    auto number = [&](int64_t& out_n) -> Status {
      if (i < format.size() && format[i] == '*') {
        ++i;
        LOOM_ASSIGN_OR_RETURN(Value w, take_arg());
        if (!w.is_integral()) return invalid_argument("* wants int");
        out_n = std::clamp<int64_t>(w.as_int(), -(1 << 24), 1 << 24);
        return {};
      }
      int64_t n = 0;
      bool any = false;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
        n = std::min<int64_t>(n * 10 + (format[i++] - '0'), 1 << 24);
        any = true;
      }
      if (any) out_n = n;
      return {};
    };
    int64_t width = -1, precision = -1;
    LOOM_RETURN_IF_ERROR(number(width));
    if (width < -1) {
      flags += '-';
      width = -width;
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = 0;
      LOOM_RETURN_IF_ERROR(number(precision));
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) return invalid_argument("incomplete format");
    char t = format[i];
    if (t == '%') {
      out.push_back('%');
      continue;
    }
    if (!have) {
      LOOM_ASSIGN_OR_RETURN(v, take_arg());
    }
    bool left = flags.find('-') != std::string::npos;
    std::string piece;
    if (t == 's' || t == 'r' || t == 'a') {
      std::string s = t == 's' ? py_str(v) : py_repr(v);
      if (precision >= 0) {
        std::u32string cps = unicode::decode_utf8(s);
        if (static_cast<size_t>(precision) < cps.size()) s = unicode::encode_utf8(cps.substr(0, static_cast<size_t>(precision)));
      }
      piece = pad_to(std::move(s), width, left);
    } else if (t == 'c') {
      std::string ch;
      if (v.is_integral()) unicode::append_utf8(ch, static_cast<char32_t>(v.as_int()));
      else if (v.is_string() && unicode::utf8_length(v.str()) == 1) ch = v.str();
      else return invalid_argument("%c requires int or char");
      piece = pad_to(std::move(ch), width, left);
    } else if (std::string_view("diuoxX").find(t) != std::string_view::npos) {
      if (!v.is_number()) return invalid_argument("%{} format: a real number is required, not {}", t, type_name(v));
      if (v.is_float() && t != 'd' && t != 'i' && t != 'u')
        return invalid_argument("%{} format: an integer is required, not float", t);
      long long x = v.is_float() ? static_cast<long long>(std::trunc(v.as_double())) : v.as_int();
      std::string cflags = flags;
      bool octal_alt = t == 'o' && cflags.find('#') != std::string::npos;
      if (octal_alt) cflags.erase(cflags.find('#'), 1);
      std::string spec = "%" + cflags + (width >= 0 ? std::to_string(width) : "") +
                         (precision >= 0 ? "." + std::to_string(precision) : "") + "ll" + (t == 'u' || t == 'i' ? 'd' : t);
      piece = c_format(spec, x);
      if (octal_alt) {  // Python writes 0o17 where C writes 017
        size_t d = piece.find_first_of("01234567");
        piece.insert(d, "0o");
        if (width >= 0 && static_cast<int64_t>(piece.size()) > width && piece.find(' ') == 0) piece.erase(0, 2);
      }
    } else if (std::string_view("eEfFgG").find(t) != std::string_view::npos) {
      if (!v.is_number()) return invalid_argument("must be real number, not {}", type_name(v));
      std::string spec = "%" + flags + (width >= 0 ? std::to_string(width) : "") +
                         "." + std::to_string(precision >= 0 ? precision : 6) + t;
      piece = c_format(spec, v.as_double());
    } else {
      return invalid_argument("unsupported format character '{}' (0x{:x})", t, static_cast<unsigned char>(t));
    }
    LOOM_RETURN_IF_ERROR(in.charge(out.size() + piece.size()));
    out += piece;
  }
  if (!mapping && next < positional.size()) return invalid_argument("not all arguments converted during string formatting");
  (void)used_mapping;
  return Value(std::move(out));
}

}  // namespace loom::llm::jinja
