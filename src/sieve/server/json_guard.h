// Checks on an HTTP body that run BEFORE the JSON parser sees it.
//
// nlohmann::json parses recursively: a body of 10^5 '[' would recurse 10^5
// frames deep and can overflow the stack of an HTTP worker thread. So the raw
// bytes are scanned first for nesting depth (strings and escapes respected, so
// brackets inside strings do not count) and for well-formed UTF-8, and only a
// body that passes both is handed to the parser.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sieve/core/status.h"

namespace sieve {

// Deepest nesting of [ ] and { } outside strings. Stops counting (and returns
// max_depth + 1) as soon as the limit is passed, so the scan is O(n) with no
// allocation regardless of the input.
int json_nesting_depth(std::string_view text, int max_depth);

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates (U+D800..DFFF),
// nothing above U+10FFFF, no truncated sequence. On failure *bad_offset is the
// byte offset of the first invalid sequence.
bool utf8_is_valid(std::string_view text, size_t *bad_offset);

// Both checks; the error names the offset or the depth and the limit.
Status json_body_check(std::string_view body, int max_depth);

}  // namespace sieve
