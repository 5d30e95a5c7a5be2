// UTF-8 helpers and the GPT-2 byte-level alphabet used by the tokenizers.
//
// Invalid UTF-8 is replaced the way Unicode §3.9 recommends ("substitution of
// maximal subparts"): every maximal prefix of a valid sequence that cannot be
// completed becomes one U+FFFD. The batch and the streaming forms share one
// scanner, so a stream of chunks sanitizes to exactly what the whole string does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sieve {

// Length a lead byte announces (1..4); 1 for bytes that cannot start a
// sequence, so byte-wise walkers always advance.
int utf8_seq_len(uint8_t lead);
void utf8_append(std::string *out, uint32_t cp);
bool utf8_is_valid(std::string_view s);
// Decodes the character at *pos and advances past it. Invalid bytes give
// false and advance by one.
bool utf8_next(std::string_view s, size_t *pos, uint32_t *cp);
// Length of the valid character at s[pos], or 1 for a byte that starts none.
size_t utf8_char_len(std::string_view s, size_t pos);

// Appends the sanitized form of the longest prefix of `in` that is decided:
// complete characters and definitely invalid bytes. An incomplete but so far
// valid tail is left unconsumed unless at_end, where it becomes U+FFFD.
// Returns the number of bytes of `in` consumed.
size_t utf8_sanitize_prefix(std::string_view in, bool at_end, std::string *out);
std::string utf8_sanitize(std::string_view s);

// GPT-2's reversible byte <-> code point map (the `bytes_to_unicode` table of
// OpenAI's GPT-2 encoder, also HF tokenizers' ByteLevel): printable bytes
// 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves, the other 68 bytes to
// U+0100.. in byte order, so every byte-level token is printable text.
uint32_t gpt2_byte_to_codepoint(uint8_t b);
int gpt2_codepoint_to_byte(uint32_t cp);  // -1 when cp is not in the alphabet

}  // namespace sieve
