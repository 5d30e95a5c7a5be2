#include "sieve/tokenizer/unicode.h"

namespace sieve {

int utf8_seq_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 1;
}

void utf8_append(std::string *out, uint32_t cp) {
    if (cp < 0x80) {
        out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

namespace {

constexpr const char k_replacement[] = "\xEF\xBF\xBD";  // U+FFFD

enum class Scan { valid, invalid, incomplete };

// Classifies the sequence starting at in[0]; *n gets its valid length, the
// length of the maximal invalid subpart, or the bytes available (incomplete).
Scan scan_one(std::string_view in, size_t *n) {
    const auto b0 = static_cast<uint8_t>(in[0]);
    if (b0 < 0x80) {
        *n = 1;
        return Scan::valid;
    }
    const int len = utf8_seq_len(b0);
    if (len == 1) {
        *n = 1;
        return Scan::invalid;
    }
    // The second byte's range narrows for E0, ED, F0 and F4 to exclude
    // overlong forms, surrogates and code points past U+10FFFF.
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
    for (int k = 1; k < len; ++k) {
        if (static_cast<size_t>(k) >= in.size()) {
            *n = in.size();
            return Scan::incomplete;
        }
        const auto b = static_cast<uint8_t>(in[k]);
        const uint8_t klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
        if (b < klo || b > khi) {
            *n = static_cast<size_t>(k);
            return Scan::invalid;
        }
    }
    *n = static_cast<size_t>(len);
    return Scan::valid;
}

}  // namespace

size_t utf8_sanitize_prefix(std::string_view in, bool at_end, std::string *out) {
    size_t i = 0;
    while (i < in.size()) {
        size_t n = 0;
        const Scan s = scan_one(in.substr(i), &n);
        if (s == Scan::incomplete && !at_end) break;
        if (s == Scan::valid) {
            out->append(in.data() + i, n);
        } else {
            out->append(k_replacement);
        }
        i += n;
    }
    return i;
}

std::string utf8_sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    utf8_sanitize_prefix(s, true, &out);
    return out;
}

bool utf8_is_valid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        size_t n = 0;
        if (scan_one(s.substr(i), &n) != Scan::valid) return false;
        i += n;
    }
    return true;
}

bool utf8_next(std::string_view s, size_t *pos, uint32_t *cp) {
    size_t n = 0;
    if (scan_one(s.substr(*pos), &n) != Scan::valid) {
        *pos += 1;
        return false;
    }
    const auto *p = reinterpret_cast<const uint8_t *>(s.data() + *pos);
    static constexpr uint8_t k_lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = p[0] & k_lead_mask[n];
    for (size_t k = 1; k < n; ++k) v = (v << 6) | (p[k] & 0x3F);
    *cp = v;
    *pos += n;
    return true;
}

size_t utf8_char_len(std::string_view s, size_t pos) {
    size_t n = 0;
    return scan_one(s.substr(pos), &n) == Scan::valid ? n : 1;
}

namespace {
bool gpt2_is_printable(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
}  // namespace

uint32_t gpt2_byte_to_codepoint(uint8_t b) {
    if (gpt2_is_printable(b)) return b;
    uint32_t n_below = 0;  // non-printable bytes before b
    for (uint32_t c = 0; c < b; ++c) n_below += gpt2_is_printable(c) ? 0 : 1;
    return 256 + n_below;
}

int gpt2_codepoint_to_byte(uint32_t cp) {
    if (cp < 256) return gpt2_is_printable(cp) ? static_cast<int>(cp) : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t want = cp - 256;
    for (uint32_t c = 0; c < 256; ++c) {
        if (gpt2_is_printable(c)) continue;
        if (want == 0) return static_cast<int>(c);
        --want;
    }
    return -1;
}

}  // namespace sieve
