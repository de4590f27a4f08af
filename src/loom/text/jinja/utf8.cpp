// UTF-8 decoding/encoding and Python-compatible character classes and case mapping.
#include "loom/text/jinja/utf8.h"

#include <clocale>
#include <cwctype>
#include <locale.h>

namespace loom::llm::jinja::utf8 {
namespace {

// Decodes one code point at s[i]; advances i. Returns U+FFFD and advances one byte if invalid.
char32_t next(std::string_view s, size_t& i, bool* bad = nullptr) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) { ++i; return c; }
  int n = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
  else { if (bad) *bad = true; ++i; return 0xFFFD; }
  if (i + n >= s.size()) {  // truncated sequence
    if (bad) *bad = true; ++i; return 0xFFFD; }
  for (int k = 1; k <= n; ++k) {
    unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) { if (bad) *bad = true; ++i; return 0xFFFD; }
    cp = (cp << 6) | (d & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    if (bad) *bad = true;
    ++i;
    return 0xFFFD;
  }
  i += n + 1;
  return cp;
}

// A UTF-8 C locale for the wide-character classification/case functions; null if absent,
// in which case only ASCII is mapped.
locale_t utf8_locale() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    if (!l) l = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", static_cast<locale_t>(0));
    return l;
  }();
  return loc;
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next(s, i));
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

size_t find_invalid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    bool bad = false;
    next(s, i, &bad);
    if (bad) return at;
  }
  return std::string_view::npos;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool is_space(char32_t cp) {
  switch (cp) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_line_break(char32_t cp) {
  switch (cp) {
    case '\n': case '\r': case '\v': case '\f': case 0x1C: case 0x1D: case 0x1E:
    case 0x85: case 0x2028: case 0x2029:
      return true;
    default:
      return false;
  }
}

bool is_alpha(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  locale_t l = utf8_locale();
  return l && iswalpha_l(static_cast<wint_t>(cp), l);
}

bool is_digit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  locale_t l = utf8_locale();
  return l && iswdigit_l(static_cast<wint_t>(cp), l);
}

char32_t to_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(cp), l)) : cp;
}

char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(cp), l)) : cp;
}

bool is_upper(char32_t cp) { return to_lower(cp) != cp; }
bool is_lower(char32_t cp) { return to_upper(cp) != cp || cp == 0xDF; }

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = next(s, i);
    if (cp == 0xDF) { out += "SS"; continue; }  // Python's full mapping of ß
    append(out, to_upper(cp));
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append(out, to_lower(next(s, i)));
  return out;
}

std::string_view strip(std::string_view s, const std::u32string* chars, bool left, bool right) {
  auto strippable = [&](char32_t cp) {
    return chars ? chars->find(cp) != std::u32string::npos : is_space(cp);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t i = b;
      if (!strippable(next(s, i))) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!strippable(next(s.substr(0, e), i))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

}  // namespace loom::llm::jinja::utf8
