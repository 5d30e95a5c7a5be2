#include "sieve/cli/args.h"

#include "sieve/sparse/policy_spec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "sieve/gguf/gguf.h"
#include "sieve/kv/page_pool.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve::cli {

Result<int64_t> parse_int(const std::string &flag, const std::string &text, int64_t min, int64_t max) {
    errno = 0;
    char *end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
        return Status::errorf("%s: expected an integer, got '%s'", flag.c_str(), text.c_str());
    if (v < min || v > max)
        return Status::errorf("%s: expected an integer in [%lld, %lld], got %lld", flag.c_str(),
                              static_cast<long long>(min), static_cast<long long>(max), v);
    return static_cast<int64_t>(v);
}

namespace {

template <class T>
Result<T> parse_real(const std::string &flag, const std::string &text, T (*conv)(const char *, char **)) {
    errno = 0;
    char *end = nullptr;
    const T v = conv(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
        return Status::errorf("%s: expected a number, got '%s'", flag.c_str(), text.c_str());
    return v;
}

}  // namespace

Result<double> parse_double(const std::string &flag, const std::string &text) {
    return parse_real<double>(flag, text, std::strtod);
}

Result<float> parse_float(const std::string &flag, const std::string &text) {
    return parse_real<float>(flag, text, std::strtof);
}

bool ArgCursor::next(std::string *flag) {
    if (++i_ >= argc_) return false;
    const std::string arg = argv_[i_];
    has_inline_ = false;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        flag_ = arg.substr(0, eq);
        inline_value_ = arg.substr(eq + 1);
        has_inline_ = true;
    } else {
        flag_ = arg;
    }
    *flag = flag_;
    return true;
}

Result<std::string> ArgCursor::value(const std::string &form) {
    if (has_inline_) {
        has_inline_ = false;
        return inline_value_;
    }
    if (i_ + 1 >= argc_)
        return Status::errorf("%s: expected %s after it, got nothing", flag_.c_str(), form.c_str());
    return std::string(argv_[++i_]);
}

Status choose_chat_template(const std::string &name, const GgufFile &file, const Tokenizer &tok, ChatTemplate *out,
                            bool *found) {
    const std::string bos = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id()) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id()) : "";
    *found = false;
    if (!name.empty()) {
        Result<ChatFormat> f = chat_format_from_name(name);
        if (!f.ok()) return f.status().with_context("--chat-template");
        std::string src;
        if (file.has("tokenizer.chat_template")) SIEVE_TRY(file.get_string("tokenizer.chat_template", &src));
        Result<ChatTemplate> from_model = chat_template_from_jinja(src, bos, eos);
        // Keep the model's default system prompt when it is the same family.
        *out = from_model.ok() && from_model->format == *f ? *from_model : ChatTemplate{*f, "", bos, eos};
        *found = true;
        return Status();
    }
    if (!file.has("tokenizer.chat_template")) return Status();
    std::string src;
    SIEVE_TRY(file.get_string("tokenizer.chat_template", &src));
    Result<ChatTemplate> t = chat_template_from_jinja(src, bos, eos);
    if (!t.ok()) return t.status().with_context("the model's tokenizer.chat_template");
    *out = *t;
    *found = true;
    return Status();
}

Status take_int(ArgCursor &args, const std::string &flag, int64_t lo, int64_t hi, int64_t *out) {
    Result<std::string> v = args.value("an integer");
    if (!v.ok()) return v.status();
    Result<int64_t> n = parse_int(flag, *v, lo, hi);
    if (!n.ok()) return n.status();
    *out = *n;
    return Status();
}

Status take_bytes(ArgCursor &args, const std::string &flag, int64_t *out) {
    Result<std::string> v = args.value("a size such as 512MiB");
    if (!v.ok()) return v.status();
    return parse_bytes(*v, out).with_context(flag);
}

Status take_string(ArgCursor &args, const std::string &form, std::string *out) {
    Result<std::string> v = args.value(form);
    if (!v.ok()) return v.status();
    *out = *v;
    return Status();
}

std::vector<std::string> split_commas(const std::string &text) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

std::string join_names(const std::vector<std::string> &names) {
    std::string s;
    for (const std::string &n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
}

Status parse_int_list(const std::string &flag, const std::string &text, int64_t min, int64_t max,
                      std::vector<int64_t> *out) {
    for (const std::string &part : split_commas(text)) {
        Result<int64_t> v = parse_int(flag, part, min, max);
        if (!v.ok()) return v.status();
        out->push_back(v.value());
    }
    return Status();
}

std::string model_cache_dir() {
    if (const char *c = std::getenv("SIEVE_CACHE"); c && *c) return c;
    if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/sieve";
    const char *home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.cache/sieve";
}

std::string default_model_path() { return model_cache_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

Status parse_cache_types(const std::string &type_k, const std::string &type_v, cpu::KvRowTypes *out,
                         const std::string &rotate_k) {
    cpu::RowType k = cpu::RowType::f16, v = cpu::RowType::f16;
    if (!type_k.empty() && !cpu::row_type_parse(type_k, &k))
        return Status::errorf("--cache-type-k: expected %s, got '%s'", cpu::row_type_names(), type_k.c_str());
    if (!type_v.empty() && !cpu::row_type_parse(type_v, &v))
        return Status::errorf("--cache-type-v: expected %s, got '%s'", cpu::row_type_names(), type_v.c_str());
    if (type_k.empty()) k = v;
    if (type_v.empty()) v = k;
    if (k != v && (k == cpu::RowType::f32 || v == cpu::RowType::f32)) {
        return Status::errorf(
            "--cache-type-k %s with --cache-type-v %s: f32 rows (the exact oracle) go with f32 "
            "only; give f32 to both, or f16, bf16, q8_0 or q4_0 to each",
            cpu::row_type_name(k), cpu::row_type_name(v));
    }
    bool rotated = k == cpu::RowType::q4_0;
    if (rotate_k == "on")
        rotated = true;
    else if (rotate_k == "off")
        rotated = false;
    else if (!rotate_k.empty() && rotate_k != "auto")
        return Status::errorf("--rotate-k: expected auto, on or off, got '%s'", rotate_k.c_str());
    *out = cpu::KvRowTypes(k, v, rotated);
    return Status();
}

}  // namespace sieve::cli

namespace sieve::cli {

Status parse_kv_policy_flag(const std::string &text, KvPolicyPtr *out) {
    Result<KvPolicySpec> spec = kv_policy_spec_parse(text);
    if (!spec.ok()) return spec.status().with_context("--kv-policy");
    Result<KvPolicyPtr> made = kv_policy_make(*spec);
    if (!made.ok()) return made.status().with_context("--kv-policy");
    *out = *made;
    return Status();
}

}  // namespace sieve::cli
