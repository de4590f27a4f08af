// UTF-8 helpers for the tokenizer (see unicode.h for the exact leniency rules).
#include "loom/text/unicode.h"

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

bool is_valid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    const size_t need = expected_len(b);
    if (need == 0 || i + need > n) return false;
    auto [lo, hi] = second_byte_range(b);
    if (s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t k = 2; k < need; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return false;
    i += need;
  }
  return true;
}

}  // namespace loom::llm::unicode
