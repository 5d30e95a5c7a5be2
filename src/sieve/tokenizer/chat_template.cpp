#include "sieve/tokenizer/chat_template.h"

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace sieve {

namespace {

struct FormatName {
    const char *name;
    ChatFormat format;
};
// The first name of each format is its canonical one.
constexpr FormatName k_names[] = {
    {"chatml", ChatFormat::chatml},   {"llama3", ChatFormat::llama3}, {"llama2", ChatFormat::llama2},
    {"mistral", ChatFormat::mistral}, {"llama-3", ChatFormat::llama3}, {"llama-2", ChatFormat::llama2},
    {"mistral-v1", ChatFormat::mistral},
};

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// ---------------------------------------------------------------------------
// Python's str.strip(), which Jinja's `trim` filter and `.strip()` call: it
// removes every code point for which str.isspace() is true, not just ASCII.

bool is_python_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

// Decodes the code point starting at s[i]; *len gets its byte length. Invalid
// UTF-8 decodes as one non-space unit, so trimming never splits or drops it.
uint32_t decode_at(std::string_view s, size_t i, size_t *len) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
        *len = 1;
        return 0xFFFFFFFFu;
    }
    uint32_t cp = n == 1 ? b0 : b0 & (0x7Fu >> n);
    for (size_t k = 1; k < n; ++k) {
        const auto b = static_cast<uint8_t>(s[i + k]);
        if ((b & 0xC0) != 0x80) {
            *len = 1;
            return 0xFFFFFFFFu;
        }
        cp = (cp << 6) | (b & 0x3Fu);
    }
    *len = n;
    return cp;
}

std::string python_strip(std::string_view s) {
    size_t begin = 0;
    while (begin < s.size()) {
        size_t len = 0;
        if (!is_python_space(decode_at(s, begin, &len))) break;
        begin += len;
    }
    size_t end = s.size();
    while (end > begin) {
        size_t start = end - 1;  // back up to the first byte of the last code point
        while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
        size_t len = 0;
        const uint32_t cp = decode_at(s, start, &len);
        if (start + len != end || !is_python_space(cp)) break;
        end = start;
    }
    return std::string(s.substr(begin, end - begin));
}

// ---------------------------------------------------------------------------
// Default system prompt of a ChatML template: the text of a string literal
// '<|im_start|>system\n...<|im_end|>' (SmolLM2: "You are a helpful AI
// assistant named SmolLM, trained by Hugging Face"; Qwen2.5: "You are Qwen,
// created by Alibaba Cloud. ..."). The literal must run unbroken from the
// marker to <|im_end|>: '<|im_start|>system\n' + messages[0]['content'] is the
// template echoing the user's own system message, not a default.

std::string jinja_unescape(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char c = s[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;  // \\ \' \" -> the character
    }
    return out;
}

std::string chatml_default_system(std::string_view src) {
    constexpr std::string_view k_open = "<|im_start|>system";
    constexpr std::string_view k_close = "<|im_end|>";
    for (size_t at = src.find(k_open); at != std::string_view::npos; at = src.find(k_open, at + 1)) {
        size_t p = at + k_open.size();
        if (src.substr(p, 1) == "\n") {
            p += 1;
        } else if (src.substr(p, 2) == "\\n") {
            p += 2;
        } else {
            continue;
        }
        const size_t end = src.find(k_close, p);
        if (end == std::string_view::npos) break;
        const std::string_view text = src.substr(p, end - p);
        bool unbroken = true;
        for (size_t i = 0; i < text.size(); ++i) {
            if (text[i] == '\\') {
                ++i;  // escaped character, possibly a quote
            } else if (text[i] == '\'' || text[i] == '"') {
                unbroken = false;
                break;
            }
        }
        if (unbroken) return jinja_unescape(text);
    }
    return "";
}

// ---------------------------------------------------------------------------
// Renderers, one per family, each a transcription of its Jinja template.

// out += a + b + ...: without the temporaries of operator+, which also trip
// GCC 12's false -Wrestrict on `"literal" + std::string`.
void append(std::string &out, std::initializer_list<std::string_view> parts) {
    for (std::string_view p : parts) out.append(p);
}

Status check_alternation(const std::vector<ChatMessage> &msgs, size_t first, const char *family) {
    for (size_t i = first; i < msgs.size(); ++i) {
        const bool want_user = (i - first) % 2 == 0;
        if ((msgs[i].role == "user") != want_user)
            return Status::errorf(
                "%s chat template: message %zu has role '%s', expected '%s' (roles must alternate "
                "user/assistant/user/..., after at most one leading system message)",
                family, i, msgs[i].role.c_str(), want_user ? "user" : "assistant");
    }
    return Status();
}

std::string render_chatml(const ChatTemplate &t, const std::vector<ChatMessage> &msgs, bool gen) {
    std::string out;
    if (!t.default_system.empty() && !msgs.empty() && msgs[0].role != "system")
        append(out, {"<|im_start|>system\n", t.default_system, "<|im_end|>\n"});
    for (const ChatMessage &m : msgs) append(out, {"<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n"});
    if (gen) out += "<|im_start|>assistant\n";
    return out;
}

std::string render_llama3(const ChatTemplate &t, const std::vector<ChatMessage> &msgs, bool gen) {
    std::string out;
    for (size_t i = 0; i < msgs.size(); ++i) {
        if (i == 0) out += t.bos;
        append(out, {"<|start_header_id|>", msgs[i].role, "<|end_header_id|>\n\n", python_strip(msgs[i].content),
                     "<|eot_id|>"});
    }
    if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

Result<std::string> render_llama2(const ChatTemplate &t, const std::vector<ChatMessage> &msgs) {
    const bool has_system = !msgs.empty() && msgs[0].role == "system";
    const size_t first = has_system ? 1 : 0;
    SIEVE_TRY(check_alternation(msgs, first, "llama2"));
    std::string out;
    for (size_t i = first; i < msgs.size(); ++i) {
        std::string content;
        if (i == first && has_system) append(content, {"<<SYS>>\n", msgs[0].content, "\n<</SYS>>\n\n"});
        content += msgs[i].content;
        if (msgs[i].role == "user") {
            append(out, {t.bos, "[INST] ", python_strip(content), " [/INST]"});
        } else {
            append(out, {" ", python_strip(content), " ", t.eos});
        }
    }
    return out;
}

Result<std::string> render_mistral(const ChatTemplate &t, const std::vector<ChatMessage> &msgs) {
    const bool has_system = !msgs.empty() && msgs[0].role == "system";
    const size_t first = has_system ? 1 : 0;
    if (has_system && msgs.size() == 1)
        return Status::error("mistral chat template: a system message must be followed by a user message");
    SIEVE_TRY(check_alternation(msgs, first, "mistral"));
    std::string out = t.bos;
    for (size_t i = first; i < msgs.size(); ++i) {
        if (msgs[i].role == "user") {
            out += "[INST] ";
            if (i == first && has_system) append(out, {msgs[0].content, "\n\n"});
            append(out, {msgs[i].content, " [/INST]"});
        } else {
            append(out, {msgs[i].content, t.eos});
        }
    }
    return out;
}

}  // namespace

const char *chat_format_name(ChatFormat f) {
    for (const FormatName &n : k_names)
        if (n.format == f) return n.name;
    return "?";
}

std::string chat_format_names() {
    return "chatml, llama3, llama2, mistral";
}

Result<ChatFormat> chat_format_from_name(const std::string &name) {
    for (const FormatName &n : k_names)
        if (name == n.name) return n.format;
    return Status::errorf("unknown chat template name '%s': expected one of %s", name.c_str(),
                          chat_format_names().c_str());
}

Result<ChatFormat> chat_format_detect(const std::string &src) {
    if (contains(src, "<|im_start|>")) return ChatFormat::chatml;
    if (contains(src, "<|start_header_id|>")) return ChatFormat::llama3;
    if (contains(src, "[INST]")) return contains(src, "<<SYS>>") ? ChatFormat::llama2 : ChatFormat::mistral;
    std::string head = src.substr(0, 80);
    for (char &c : head)
        if (c == '\n') c = ' ';
    return Status::errorf(
        "unrecognised chat template (it begins \"%s%s\"): none of the markers of the supported families "
        "was found; pass --chat-template NAME with NAME one of %s, or -no-cnv to use the prompt as raw text",
        head.c_str(), src.size() > 80 ? "..." : "", chat_format_names().c_str());
}

Result<ChatTemplate> chat_template_from_jinja(const std::string &jinja_source, std::string bos, std::string eos) {
    Result<ChatFormat> f = chat_format_detect(jinja_source);
    if (!f.ok()) return f.status();
    ChatTemplate t;
    t.format = *f;
    if (t.format == ChatFormat::chatml) t.default_system = chatml_default_system(jinja_source);
    t.bos = std::move(bos);
    t.eos = std::move(eos);
    return t;
}

Result<std::string> chat_render(const ChatTemplate &tmpl, const std::vector<ChatMessage> &messages,
                                bool add_generation_prompt) {
    switch (tmpl.format) {
        case ChatFormat::chatml:
            return render_chatml(tmpl, messages, add_generation_prompt);
        case ChatFormat::llama3:
            return render_llama3(tmpl, messages, add_generation_prompt);
        case ChatFormat::llama2:
            return render_llama2(tmpl, messages);
        case ChatFormat::mistral:
            return render_mistral(tmpl, messages);
    }
    return Status::error("chat_render: unknown chat format");
}

}  // namespace sieve
