// Command-line helpers shared by the subcommands: strict number parsing with
// messages that name the flag and the expected form, a cursor over argv that
// understands both "--flag value" and "--flag=value", and where the default
// model lives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/row_type.h"
#include "sieve/sparse/policy.h"
#include "sieve/tokenizer/chat_template.h"

namespace sieve {
class GgufFile;
class Tokenizer;
}  // namespace sieve

namespace sieve::cli {

// Exit status for a command line that cannot be used (unknown flag, bad value).
constexpr int k_exit_usage = 2;
// Exit status for everything else that fails (missing file, bad model, ...).
constexpr int k_exit_error = 1;

// Whole-string parses; the error names `flag`, the expected form and the text given.
Result<int64_t> parse_int(const std::string &flag, const std::string &text, int64_t min, int64_t max);
// A finite number. parse_double keeps what a double holds (eval's depths: a
// run split by seed must put its samples where the whole run does).
Result<double> parse_double(const std::string &flag, const std::string &text);
Result<float> parse_float(const std::string &flag, const std::string &text);

// Walks argv[1 ..]. For each flag, next() yields it; a flag taking a value
// then calls value(), which consumes "--flag=VALUE" or the following argument.
class ArgCursor {
public:
    ArgCursor(int argc, char **argv) : argc_(argc), argv_(argv) {}
    // False when no arguments remain; otherwise *flag is the next one (the part
    // before '=' for "--long=value" forms).
    bool next(std::string *flag);
    // The value of the current flag; an error naming the flag and `form` (e.g.
    // "an integer", "a file path") when there is none.
    Result<std::string> value(const std::string &form);
    // Error for a value-less flag given "=value".
    bool has_inline_value() const { return has_inline_; }

private:
    int argc_;
    char **argv_;
    int i_ = 0;
    std::string flag_;
    std::string inline_value_;
    bool has_inline_ = false;
};

// The current flag's value, parsed; errors name the flag and the expected form.
Status take_int(ArgCursor &args, const std::string &flag, int64_t lo, int64_t hi, int64_t *out);
Status take_bytes(ArgCursor &args, const std::string &flag, int64_t *out);  // "512MiB"
Status take_string(ArgCursor &args, const std::string &form, std::string *out);

// "8,12,16" appended to *out; every item in [min, max].
Status parse_int_list(const std::string &flag, const std::string &text, int64_t min, int64_t max,
                      std::vector<int64_t> *out);
// "a,b,c" split at commas (empty items kept, so "a,,b" can be reported).
std::vector<std::string> split_commas(const std::string &text);

// "a, b, c": lists of names in help texts and errors.
std::string join_names(const std::vector<std::string> &names);

// The K and V row types from llama.cpp's --cache-type-k / --cache-type-v
// values ("" = not given): f16 by default; one given alone sets both (so
// `-ctk q8_0` quantizes the whole cache); both given may differ (q8_0 K with
// q4_0 V), except f32, the oracle, which pairs with f32 only. rotate_k is
// --rotate-k: "auto" (or "") rotates q4_0 keys only, "on" any keys, "off"
// none (cpu::KvRowTypes::k_rotated).
Status parse_cache_types(const std::string &type_k, const std::string &type_v, cpu::KvRowTypes *out,
                         const std::string &rotate_k = "");

// --kv-policy NAME[:key=value,...] or @FILE.json: one policy (null for dense);
// errors name the flag and say what was wrong (sparse/policy_spec.h).
Status parse_kv_policy_flag(const std::string &text, KvPolicyPtr *out);

// Picks the chat template: `name` (--chat-template) if given, else the
// model's own. *found stays false (and the status ok) when the model has none
// and no name was given; an unrecognised template of the model is an error.
Status choose_chat_template(const std::string &name, const GgufFile &file, const Tokenizer &tok, ChatTemplate *out,
                            bool *found);

// Cache folder for models: $SIEVE_CACHE, else $XDG_CACHE_HOME/sieve, else
// $HOME/.cache/sieve — the same rule as scripts/fetch_model.sh.
std::string model_cache_dir();
// The default model file, SmolLM2-135M-Instruct Q4_1, inside model_cache_dir().
std::string default_model_path();

}  // namespace sieve::cli
