#include "sieve/server/json_guard.h"

#include <cstdint>

namespace sieve {

int json_nesting_depth(std::string_view text, int max_depth) {
    int depth = 0;
    int deepest = 0;
    bool in_string = false;
    bool escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        switch (c) {
        case '"':
            in_string = true;
            break;
        case '[':
        case '{':
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > max_depth) return max_depth + 1;
            }
            break;
        case ']':
        case '}':
            // Unbalanced closers are the parser's problem; never go negative.
            if (depth > 0) --depth;
            break;
        default:
            break;
        }
    }
    return deepest;
}

bool utf8_is_valid(std::string_view text, size_t *bad_offset) {
    const auto *s = reinterpret_cast<const uint8_t *>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const uint8_t c = s[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len = 0;
        uint32_t cp = 0;
        uint32_t min_cp = 0;
        if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min_cp = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min_cp = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min_cp = 0x10000;
        } else {
            if (bad_offset) *bad_offset = i;
            return false;
        }
        if (n - i < len) {
            if (bad_offset) *bad_offset = i;
            return false;
        }
        for (size_t k = 1; k < len; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) {
                if (bad_offset) *bad_offset = i;
                return false;
            }
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            if (bad_offset) *bad_offset = i;
            return false;
        }
        i += len;
    }
    return true;
}

Status json_body_check(std::string_view body, int max_depth) {
    size_t bad = 0;
    if (!utf8_is_valid(body, &bad))
        return Status::errorf("request body: invalid UTF-8 at byte offset %zu; send the body as UTF-8 text", bad);
    const int depth = json_nesting_depth(body, max_depth);
    if (depth > max_depth)
        return Status::errorf("request body: JSON nested deeper than %d levels; flatten the request", max_depth);
    return Status();
}

}  // namespace sieve
