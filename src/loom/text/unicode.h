// UTF-8 helpers for the tokenizer: the lenient decoding llama.cpp applies before pre-tokenizing,
// GPT-2's byte <-> printable-character mapping, and completeness checks for streaming output.
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

}  // namespace loom::llm::unicode
