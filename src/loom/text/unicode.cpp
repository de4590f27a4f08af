// UTF-8: the tokenizer's lenient rules and the templates' strict decoding and Python string
// semantics (see unicode.h).
#include "loom/text/unicode.h"

#include <clocale>
#include <cwctype>
#include <locale.h>

#include <array>

namespace loom::llm::unicode {

size_t utf8_len_from_lead(uint8_t lead) {
  // Only the high nibble decides: 0x0-0xB -> 1, 0xC-0xD -> 2, 0xE -> 3, 0xF -> 4.
  const uint8_t hi = lead >> 4;
  if (hi < 0xC) return 1;
  if (hi < 0xE) return 2;
  return hi == 0xE ? 3 : 4;
}

std::vector<uint32_t> decode_utf8_lenient(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0x40) == 0) {
      out.push_back(kReplacementChar);
      i += 1;
    } else if ((b & 0x20) == 0) {
      if (cont(i + 1)) {
        out.push_back((uint32_t(b & 0x1F) << 6) | (s[i + 1] & 0x3F));
        i += 2;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if ((b & 0x10) == 0) {
      if (cont(i + 1) && cont(i + 2)) {
        out.push_back((uint32_t(b & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
        i += 3;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if ((b & 0x08) == 0) {
      uint32_t cpt = 0;
      bool ok = cont(i + 1) && cont(i + 2) && cont(i + 3);
      if (ok) {
        cpt = (uint32_t(b & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
              (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        ok = cpt <= 0x10FFFF;
      }
      if (ok) {
        out.push_back(cpt);
        i += 4;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else {
      out.push_back(kReplacementChar);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    append_utf8(out, kReplacementChar);
  }
}

namespace {

struct Gpt2ByteMap {
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 0x180> from_cpt;  // every mapped character is below U+0180

  Gpt2ByteMap() {
    from_cpt.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = printable(b) ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(next++);
      append_utf8(to_utf8[b], cpt);
      from_cpt[cpt] = static_cast<int16_t>(b);
    }
  }
};

const Gpt2ByteMap& gpt2_map() {
  static const Gpt2ByteMap map;
  return map;
}

}  // namespace

std::string_view gpt2_byte_to_utf8(uint8_t byte) { return gpt2_map().to_utf8[byte]; }

int gpt2_utf8_to_byte(std::string_view c) {
  const auto* s = reinterpret_cast<const uint8_t*>(c.data());
  uint32_t cpt;
  if (c.size() == 1 && s[0] < 0x80) {
    cpt = s[0];
  } else if (c.size() == 2 && (s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) {
    cpt = (uint32_t(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
  } else {
    return -1;
  }
  return cpt < gpt2_map().from_cpt.size() ? gpt2_map().from_cpt[cpt] : -1;
}

namespace {

// Valid range of the byte right after `lead` in well-formed UTF-8; {0,0} for invalid leads.
std::pair<uint8_t, uint8_t> second_byte_range(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {0x80, 0xBF};
  if (lead == 0xE0) return {0xA0, 0xBF};
  if (lead == 0xED) return {0x80, 0x9F};
  if (lead >= 0xE1 && lead <= 0xEF) return {0x80, 0xBF};
  if (lead == 0xF0) return {0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {0x80, 0xBF};
  if (lead == 0xF4) return {0x80, 0x8F};
  return {0, 0};
}

size_t expected_len(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

size_t utf8_complete_prefix(std::string_view bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  // Find the last non-continuation byte among the final 3 bytes (a held-back tail is at most
  // 3 bytes: a 4-byte sequence missing its last byte).
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    const uint8_t b = s[pos];
    if ((b & 0xC0) == 0x80) continue;  // continuation: keep looking left
    const size_t need = expected_len(b);
    if (need == 0 || back >= need) return n;  // invalid lead, or the sequence is complete
    if (back >= 2) {
      auto [lo, hi] = second_byte_range(b);
      if (s[pos + 1] < lo || s[pos + 1] > hi) return n;  // can never become valid
    }
    return pos;
  }
  return n;
}

namespace {

// One well-formed sequence at s[i]: its code point, with i moved past it. Otherwise U+FFFD, i
// moved one byte, and *bad set.
char32_t next_strict(std::string_view s, size_t& i, bool* bad = nullptr) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t b = p[i];
  if (b < 0x80) {
    ++i;
    return b;
  }
  const size_t need = expected_len(b);
  bool ok = need != 0 && i + need <= s.size();
  if (ok) {
    auto [lo, hi] = second_byte_range(b);
    ok = p[i + 1] >= lo && p[i + 1] <= hi;
  }
  for (size_t k = 2; ok && k < need; ++k) ok = (p[i + k] & 0xC0) == 0x80;
  if (!ok) {
    if (bad) *bad = true;
    ++i;
    return kReplacementChar;
  }
  char32_t cp = b & (0x7F >> need);
  for (size_t k = 1; k < need; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
  i += need;
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

size_t find_invalid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t at = i;
    bool bad = false;
    next_strict(bytes, i, &bad);
    if (bad) return at;
  }
  return std::string_view::npos;
}

bool is_valid_utf8(std::string_view bytes) { return find_invalid_utf8(bytes) == std::string_view::npos; }

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_strict(s, i));
  return out;
}

std::string encode_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

size_t utf8_length(std::string_view s) {
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
    char32_t cp = next_strict(s, i);
    if (cp == 0xDF) { out += "SS"; continue; }  // Python's full mapping of ß
    append_utf8(out, to_upper(cp));
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_utf8(out, to_lower(next_strict(s, i)));
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
      if (!strippable(next_strict(s, i))) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!strippable(next_strict(s.substr(0, e), i))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

}  // namespace loom::llm::unicode
