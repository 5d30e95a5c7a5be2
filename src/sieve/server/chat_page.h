#pragma once
// The chat page served at GET / (docs/serving.md, "Chat page"): the bytes of
// src/sieve/server/chat_page.html, compiled into the binary by
// cmake/embed_file.cmake (the definitions live in the generated
// chat_page_html.cpp under the build folder), so `sieve serve` needs no file
// beside it.

#include <string_view>

namespace sieve {

extern const std::string_view chat_page_html;       // UTF-8 HTML with inline CSS and JS
extern const std::string_view chat_page_html_etag;  // W/"<first 16 hex digits of its SHA-256>"

// The page runs its own inline code and talks to its own origin, nothing else:
// no script, style, font or image from anywhere, and no framing by other sites.
inline constexpr std::string_view chat_page_csp =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace sieve
