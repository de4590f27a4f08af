// UTF-8 helpers with Python's str semantics: code point indexing, str.isspace(), case mapping.
// Templates index and slice strings by code point, as Python does, while Loom stores UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace loom::llm::jinja::utf8 {

// Decodes `s` (assumed valid UTF-8; invalid bytes decode as U+FFFD) into code points.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view cps);
void append(std::string& out, char32_t cp);
// Byte offset of the first invalid sequence, or npos when `s` is valid UTF-8.
size_t find_invalid(std::string_view s);
// Number of code points.
size_t length(std::string_view s);
bool is_ascii(std::string_view s);

// Python's str.isspace() for one code point.
bool is_space(char32_t cp);
// Python's str.splitlines() line boundaries (\n \r \v \f \x1c-\x1e \x85 \u2028 \u2029).
bool is_line_break(char32_t cp);
bool is_alpha(char32_t cp);  // letters (ASCII exact; other scripts via the C library)
bool is_digit(char32_t cp);
bool is_upper(char32_t cp);
bool is_lower(char32_t cp);

// Case mapping as Python's str.upper()/lower() for the common cases (including ß -> SS).
std::string upper(std::string_view s);
std::string lower(std::string_view s);
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);

// Python's str.strip/lstrip/rstrip: `chars` empty (nullptr) means whitespace.
std::string_view strip(std::string_view s, const std::u32string* chars, bool left, bool right);

}  // namespace loom::llm::jinja::utf8
