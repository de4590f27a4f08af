// Jinja lexer. Mirrors jinja2's rules: a tag's '-' strips all whitespace on that side, '+'
// disables lstrip_blocks/trim_blocks, lstrip_blocks removes spaces before a {% or {# that
// starts its line, trim_blocks drops one newline after %} or #}. Braces inside expressions are
// balanced so '}}' can close a dict literal.
#include "loom/text/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "loom/text/unicode.h"

namespace loom::llm::jinja {

Status syntax_error(Pos pos, std::string_view message) {
  return invalid_argument("{}:{}: {}", pos.line, pos.col, message);
}

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Newlines become "\n" (jinja2's newline_sequence) and one trailing newline is dropped.
std::string normalize(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& o) : src_(std::move(src)), o_(o) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  Result<std::vector<Token>> run() {
    size_t p = 0, n = src_.size();
    while (p < n) {
      size_t k = find_tag(p);
      if (k == std::string::npos) {
        emit_text(p, n);
        break;
      }
      char kind = src_[k + 1];
      size_t body = k + 2;
      char sign = (body < n && (src_[body] == '-' || src_[body] == '+')) ? src_[body] : 0;
      size_t raw_end = 0;
      bool raw = kind == '%' && match_raw_begin(k, &raw_end);
      emit_controlled_text(p, k, sign, /*lstrip_allowed=*/kind != '{');
      if (sign) ++body;
      if (raw) {
        LOOM_ASSIGN_OR_RETURN(p, lex_raw(k, raw_end));
      } else if (kind == '#') {
        LOOM_ASSIGN_OR_RETURN(p, skip_comment(k, body));
      } else {
        LOOM_ASSIGN_OR_RETURN(p, lex_tag(kind == '{', k, body));
      }
    }
    Token eof;
    eof.type = TokenType::kEof;
    eof.pos = pos_at(n);
    out_.push_back(std::move(eof));
    return std::move(out_);
  }

 private:
  Pos pos_at(size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    return Pos{static_cast<int>(line), static_cast<int>(off - line_starts_[line - 1] + 1)};
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  // Python's \s at byte offset i (decoding a multi-byte code point); returns its byte length,
  // 0 when not whitespace.
  size_t space_len(size_t i) const {
    unsigned char c = static_cast<unsigned char>(src_[i]);
    if (c < 0x80) return unicode::is_space(c) ? 1 : 0;
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (i + len > src_.size()) return 0;
    std::u32string cp = unicode::decode_utf8(std::string_view(src_).substr(i, len));
    return cp.size() == 1 && unicode::is_space(cp[0]) ? len : 0;
  }

  size_t skip_spaces(size_t i) const {
    while (i < src_.size()) {
      size_t l = space_len(i);
      if (!l) break;
      i += l;
    }
    return i;
  }

  bool starts_with(size_t i, std::string_view s) const {
    return src_.compare(i, s.size(), s) == 0;
  }

  // Text in [b, e) followed by a tag whose whitespace sign is `sign`.
  void emit_controlled_text(size_t b, size_t e, char sign, bool lstrip_allowed) {
    std::string_view text(src_.data() + b, e - b);
    if (sign == '-') {
      text = unicode::strip(text, nullptr, false, true);
    } else if (sign != '+' && o_.lstrip_blocks && lstrip_allowed) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      bool line_starting = l_pos > 0 || b == 0 || src_[b - 1] == '\n';
      if (line_starting && l_pos < text.size() &&
          unicode::strip(text.substr(l_pos), nullptr, true, false).empty())
        text = text.substr(0, l_pos);
    }
    if (!text.empty()) emit_text(b, b + text.size());
  }

  void emit_text(size_t b, size_t e) {
    if (b >= e) return;
    Token t;
    t.type = TokenType::kText;
    t.text = src_.substr(b, e - b);
    t.pos = pos_at(b);
    out_.push_back(std::move(t));
  }

  // "{%" [-+] \s* "raw" \s* ("-%}" \s* | "%}")  (no trim_blocks after raw, as in jinja2)
  bool match_raw_begin(size_t k, size_t* end) const {
    size_t i = k + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_spaces(i);
    if (!starts_with(i, "raw")) return false;
    i = skip_spaces(i + 3);
    if (starts_with(i, "-%}")) {
      *end = skip_spaces(i + 3);
      return true;
    }
    if (starts_with(i, "%}")) {
      *end = i + 2;
      return true;
    }
    return false;
  }

  Result<size_t> lex_raw(size_t tag_start, size_t body) {
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ? src_[j] : 0;
      if (sign) ++j;
      j = skip_spaces(j);
      if (!starts_with(j, "endraw")) continue;
      j = skip_spaces(j + 6);
      size_t end;
      if (starts_with(j, "+%}")) {
        end = j + 3;
      } else if (starts_with(j, "-%}")) {
        end = skip_spaces(j + 3);
      } else if (starts_with(j, "%}")) {
        end = j + 2;
        if (o_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      emit_controlled_text(body, i, sign, true);
      return end;
    }
    return syntax_error(pos_at(tag_start), "missing end of raw directive ({% endraw %})");
  }

  Result<size_t> skip_comment(size_t tag_start, size_t body) {
    for (size_t i = body; i < src_.size(); ++i) {
      if (src_[i] == '+' && starts_with(i + 1, "#}")) return i + 3;
      if (src_[i] == '-' && starts_with(i + 1, "#}")) return skip_spaces(i + 3);
      if (starts_with(i, "#}")) {
        size_t end = i + 2;
        if (o_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
        return end;
      }
    }
    return syntax_error(pos_at(tag_start), "missing end of comment tag '#}'");
  }

  void emit(TokenType type, size_t at, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.pos = pos_at(at);
    out_.push_back(std::move(t));
  }

  Result<size_t> lex_tag(bool variable, size_t tag_start, size_t i) {
    emit(variable ? TokenType::kVarBegin : TokenType::kBlockBegin, tag_start);
    std::vector<char> balance;  // expected closing brackets
    const size_t n = src_.size();
    while (true) {
      if (i >= n)
        return syntax_error(pos_at(tag_start), variable ? "unclosed '{{' (missing '}}')"
                                                        : "unclosed '{%' (missing '%}')");
      if (balance.empty()) {
        if (variable) {
          if (starts_with(i, "-}}")) {
            emit(TokenType::kVarEnd, i);
            return skip_spaces(i + 3);
          }
          if (starts_with(i, "}}")) {
            emit(TokenType::kVarEnd, i);
            return i + 2;
          }
        } else {
          if (starts_with(i, "+%}")) {
            emit(TokenType::kBlockEnd, i);
            return i + 3;
          }
          if (starts_with(i, "-%}")) {
            emit(TokenType::kBlockEnd, i);
            return skip_spaces(i + 3);
          }
          if (starts_with(i, "%}")) {
            emit(TokenType::kBlockEnd, i);
            size_t end = i + 2;
            if (o_.trim_blocks && end < n && src_[end] == '\n') ++end;
            return end;
          }
        }
      }
      if (size_t l = space_len(i)) {
        i += l;
        continue;
      }
      char c = src_[i];
      if (is_digit(c)) {
        LOOM_ASSIGN_OR_RETURN(i, lex_number(i));
      } else if (is_name_start(c)) {
        size_t j = i;
        while (j < n && is_name_char(src_[j])) ++j;
        emit(TokenType::kName, i, src_.substr(i, j - i));
        i = j;
      } else if (c == '\'' || c == '"') {
        LOOM_ASSIGN_OR_RETURN(i, lex_string(i));
      } else {
        LOOM_ASSIGN_OR_RETURN(i, lex_operator(i, balance));
      }
    }
  }

  // Digits with optional single underscores between them ((\d+_)*\d+); returns end or npos.
  size_t digits(size_t i) const {
    if (i >= src_.size() || !is_digit(src_[i])) return std::string::npos;
    while (true) {
      while (i < src_.size() && is_digit(src_[i])) ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && is_digit(src_[i + 1])) {
        ++i;
        continue;
      }
      return i;
    }
  }

  static std::string without_underscores(std::string_view s) {
    std::string out;
    for (char c : s)
      if (c != '_') out.push_back(c);
    return out;
  }

  Result<size_t> lex_number(size_t i) {
    const size_t n = src_.size();
    // Float first, as jinja2 does: digits ('.' digits)? exponent | digits '.' digits.
    if (i == 0 || src_[i - 1] != '.') {
      size_t j = digits(i);
      size_t frac_end = std::string::npos;
      if (j < n && src_[j] == '.') frac_end = digits(j + 1);
      size_t k = frac_end != std::string::npos ? frac_end : j;
      size_t exp_end = std::string::npos;
      if (k < n && (src_[k] == 'e' || src_[k] == 'E')) {
        size_t m = k + 1;
        if (m < n && (src_[m] == '+' || src_[m] == '-')) ++m;
        exp_end = digits(m);
      }
      size_t end = exp_end != std::string::npos ? exp_end : frac_end;
      if (end != std::string::npos) {
        Token t;
        t.type = TokenType::kFloat;
        t.fval = std::strtod(without_underscores(std::string_view(src_).substr(i, end - i)).c_str(), nullptr);
        t.pos = pos_at(i);
        out_.push_back(std::move(t));
        return end;
      }
    }
    // Integers: 0b/0o/0x prefixes, [1-9](_?\d)*, 0(_?0)*.
    int base = 10;
    size_t j = i;
    auto radix_digit = [&](char c, int b) {
      if (b == 2) return c == '0' || c == '1';
      if (b == 8) return c >= '0' && c <= '7';
      if (b == 16) return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      return is_digit(c);
    };
    auto run = [&](size_t from, int b, bool zeros_only) {
      size_t e = from;
      while (true) {
        size_t m = e;
        if (m < n && src_[m] == '_') ++m;
        if (m < n && radix_digit(src_[m], b) && (!zeros_only || src_[m] == '0')) {
          e = m + 1;
        } else {
          return e;
        }
      }
    };
    std::string_view body;
    if (src_[i] == '0' && i + 1 < n && std::string_view("bBoOxX").find(src_[i + 1]) != std::string_view::npos) {
      char p = static_cast<char>(src_[i + 1] | 0x20);
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      // (_?digit)+ after the prefix
      size_t e = i + 2, m;
      while (true) {
        m = e;
        if (m < n && src_[m] == '_') ++m;
        if (m < n && radix_digit(src_[m], base)) e = m + 1;
        else break;
      }
      if (e == i + 2) return syntax_error(pos_at(i), "invalid integer literal");
      j = e;
      body = std::string_view(src_).substr(i + 2, j - i - 2);
    } else if (src_[i] == '0') {
      j = run(i + 1, 10, true);
      body = std::string_view(src_).substr(i, j - i);
    } else {
      j = run(i + 1, 10, false);
      body = std::string_view(src_).substr(i, j - i);
    }
    std::string clean = without_underscores(body);
    Token t;
    t.type = TokenType::kInt;
    t.pos = pos_at(i);
    auto res = std::from_chars(clean.data(), clean.data() + clean.size(), t.ival, base);
    if (res.ec != std::errc()) return syntax_error(t.pos, "integer literal too large");
    out_.push_back(std::move(t));
    return j;
  }

  Result<size_t> lex_string(size_t i) {
    const char quote = src_[i];
    size_t j = i + 1;
    while (j < src_.size() && src_[j] != quote) j += src_[j] == '\\' ? 2 : 1;
    if (j >= src_.size()) return syntax_error(pos_at(i), "unterminated string literal");
    Token t;
    t.type = TokenType::kString;
    t.pos = pos_at(i);
    LOOM_ASSIGN_OR_RETURN(t.text, unescape(std::string_view(src_).substr(i + 1, j - i - 1), t.pos));
    out_.push_back(std::move(t));
    return j + 1;
  }

  // Python's unicode-escape decoding of a string literal's body (what jinja2 applies).
  static Result<std::string> unescape(std::string_view s, Pos pos) {
    std::string out;
    out.reserve(s.size());
    auto hex = [&](size_t at, size_t count, char32_t* cp) {
      if (at + count > s.size()) return false;
      uint32_t v = 0;
      for (size_t k = 0; k < count; ++k) {
        char c = s[at + k];
        int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        v = v * 16 + static_cast<uint32_t>(d);
      }
      *cp = v;
      return true;
    };
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out.push_back(s[i]);
        continue;
      }
      char c = s[++i];
      switch (c) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': case 'u': case 'U': {
          size_t count = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          char32_t cp;
          if (!hex(i + 1, count, &cp) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return syntax_error(pos, fmt::format("bad \\{} escape in string literal", c));
          unicode::append_utf8(out, cp);
          i += count;
          break;
        }
        case 'N':
          return syntax_error(pos, "\\N{...} escapes are not supported");
        default:
          if (c >= '0' && c <= '7') {
            char32_t cp = 0;
            size_t k = 0;
            while (k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7') cp = cp * 8 + static_cast<char32_t>(s[i + (k++)] - '0');
            unicode::append_utf8(out, cp);
            i += k - 1;
          } else if (static_cast<unsigned char>(c) >= 0x80) {
            // jinja2 first turns non-ASCII into backslash escapes, so "\" + "é" reads as
            // the text \xe9; reproduce that quirk.
            size_t len = 1;
            while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xC0) == 0x80) ++len;
            char32_t cp = unicode::decode_utf8(s.substr(i, len))[0];
            out += cp < 0x100 ? fmt::format("\\x{:02x}", static_cast<unsigned>(cp))
                 : cp < 0x10000 ? fmt::format("\\u{:04x}", static_cast<unsigned>(cp))
                                : fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
            i += len - 1;
          } else {
            out.push_back('\\');  // unknown escapes stay as written
            out.push_back(c);
          }
      }
    }
    return out;
  }

  Result<size_t> lex_operator(size_t i, std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (starts_with(i, op)) {
        emit(TokenType::kOp, i, std::string(op));
        return i + 2;
      }
    }
    char c = src_[i];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::string shown = static_cast<unsigned char>(c) < 0x80 ? std::string(1, c)
                          : unicode::encode_utf8(unicode::decode_utf8(std::string_view(src_).substr(i, 4)).substr(0, 1));
      return syntax_error(pos_at(i), fmt::format("unexpected char '{}'", shown));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return syntax_error(pos_at(i), fmt::format("unexpected '{}'", c));
      char expected = balance.back();
      balance.pop_back();
      if (expected != c)
        return syntax_error(pos_at(i), fmt::format("unexpected '{}', expected '{}'", c, expected));
    }
    emit(TokenType::kOp, i, std::string(1, c));
    return i + 1;
  }

  std::string src_;
  LexOptions o_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source, const LexOptions& options) {
  if (size_t bad = unicode::find_invalid_utf8(source); bad != std::string_view::npos)
    return invalid_argument("template is not valid UTF-8 (byte offset {})", bad);
  Lexer lexer(normalize(source, options.keep_trailing_newline), options);
  return lexer.run();
}

}  // namespace loom::llm::jinja
