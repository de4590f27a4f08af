// Loom's one UTF-8 module. For the tokenizer: the lenient decoding llama.cpp applies before
// pre-tokenizing, GPT-2's byte <-> printable-character mapping, and completeness checks for
// streaming output. For chat templates (Jinja): strict decoding, code point counts, and Python's
// str semantics (str.isspace(), case mapping, strip), since templates index and slice strings by
// code point as Python does while Loom stores UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::llm::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces, judged from its high nibble only (so a
// stray continuation byte counts as 1 and 0xF8..0xFF count as 4). This is how llama.cpp cuts
// text into symbols before merging; callers clamp it to the bytes that remain.
size_t utf8_len_from_lead(uint8_t lead);

// Decodes bytes into code points the way llama.cpp does before pre-tokenizing: a sequence is
// accepted when its lead byte announces n bytes and n-1 continuation bytes follow (overlong forms
// and surrogates are accepted as written). Any other byte becomes U+FFFD and decoding resumes at
// the next byte. Sequences that decode above U+10FFFF are also treated as invalid lead bytes
// (llama.cpp aborts on them).
std::vector<uint32_t> decode_utf8_lenient(std::string_view text);

// Appends the UTF-8 form of `cpt` (surrogates encoded like any other value); values above
// U+10FFFF append U+FFFD.
void append_utf8(std::string& out, uint32_t cpt);

// GPT-2's reversible byte -> printable character map: printable Latin-1 bytes map to themselves,
// the other 68 bytes to U+0100.. in byte order. Returns the UTF-8 form of the character.
std::string_view gpt2_byte_to_utf8(uint8_t byte);
// Inverse for one character's UTF-8 form; -1 if it is not one of the 256 mapped characters.
int gpt2_utf8_to_byte(std::string_view utf8_char);

// Number of leading bytes of `bytes` that can be emitted without splitting a character: all of
// them unless the text ends in a proper prefix of a well-formed UTF-8 sequence (a lead byte plus
// fewer continuation bytes than it needs, checked against the valid second-byte ranges). Bytes
// that can never become valid are not held back.
size_t utf8_complete_prefix(std::string_view bytes);

// True when `bytes` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool is_valid_utf8(std::string_view bytes);
// Byte offset of the first ill-formed sequence, or npos when `bytes` is well-formed UTF-8.
size_t find_invalid_utf8(std::string_view bytes);

// Strict decoding: well-formed sequences decode, and each byte that does not start one becomes
// U+FFFD (decoding resumes at the next byte).
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view cps);
// Number of code points (bytes that are not continuation bytes).
size_t utf8_length(std::string_view s);
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

// Python's str.strip/lstrip/rstrip: `chars` null means whitespace.
std::string_view strip(std::string_view s, const std::u32string* chars, bool left, bool right);

}  // namespace loom::llm::unicode
