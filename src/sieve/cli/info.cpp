// sieve info FILE: what gguf-dump shows (header, metadata, tensor table),
// plus the validated model configuration and a memory estimate.
//
// Output goes to stdout; a file that fails to parse or a model that fails
// validation ends with the reason on stderr and a non-zero exit, after
// whatever could be printed (a bad model still shows its metadata and tensors,
// which is usually what one needs to see why it is bad).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "sieve/cli/args.h"
#include "sieve/cli/commands.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/config.h"

namespace sieve::cli {

namespace {

constexpr uint64_t k_array_preview = 6;   // array elements shown
constexpr size_t k_string_preview = 72;   // string bytes shown

void print_usage(FILE *out) {
    std::fprintf(
        out,
        "usage: sieve info [options] FILE   (or -m FILE)\n"
        "\n"
        "Shows a GGUF file's header, metadata, tensor table, model configuration and\n"
        "memory estimate. Exits non-zero, with the reason on stderr, if the file is not a\n"
        "valid GGUF file or not a model sieve can run.\n"
        "\n"
        "options:\n"
        "  -c, --ctx-size N   also estimate the KV cache for a context of N tokens\n"
        "  -ctk, --cache-type-k T, -ctv, --cache-type-v T\n"
        "                     the KV row type to estimate for: f16 (default), bf16, f32, q8_0, q4_0\n"
        "  -h, --help         show this help\n");
}

std::string human_bytes(uint64_t n) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    return u == 0 ? strfmt("%" PRIu64 " B", n) : strfmt("%.2f %s", v, units[u]);
}

// Quotes a string for display: control bytes escaped, long strings cut.
std::string quoted(std::string_view s) {
    std::string out = "\"";
    const size_t n = s.size() < k_string_preview ? s.size() : k_string_preview;
    for (size_t k = 0; k < n; ++k) {
        const unsigned char c = static_cast<unsigned char>(s[k]);
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '"' || c == '\\') out += std::string("\\") + static_cast<char>(c);
        else if (c < 0x20 || c == 0x7f) out += strfmt("\\x%02x", c);
        else out += static_cast<char>(c);
    }
    out += "\"";
    if (n < s.size()) out += strfmt("... (%zu bytes)", s.size());
    return out;
}

std::string scalar_text(const GgufValue &v) {
    switch (v.type) {
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
    case GgufType::UINT64: return strfmt("%" PRIu64, v.u);
    case GgufType::INT8:
    case GgufType::INT16:
    case GgufType::INT32:
    case GgufType::INT64: return strfmt("%" PRId64, v.i);
    case GgufType::FLOAT32:
    case GgufType::FLOAT64: return strfmt("%g", v.f);
    case GgufType::BOOL: return v.u ? "true" : "false";
    case GgufType::STRING: return quoted(v.str);
    case GgufType::ARRAY: return "[...]";
    }
    return "?";
}

std::string value_text(const GgufValue &v) {
    if (v.type != GgufType::ARRAY) return scalar_text(v);
    std::string s = "[";
    const uint64_t n = v.arr_n < k_array_preview ? v.arr_n : k_array_preview;
    for (uint64_t k = 0; k < n; ++k) s += (k ? ", " : "") + scalar_text(gguf_array_element(v, k));
    if (n < v.arr_n) s += ", ...";
    return s + "]";
}

std::string type_text(const GgufValue &v) {
    if (v.type != GgufType::ARRAY) return gguf_type_name(v.type);
    return strfmt("ARRAY[%s] x %" PRIu64, gguf_type_name(v.arr_type), v.arr_n);
}

std::string shape_text(const GgufTensor &t) {
    std::string s = "[";
    for (int d = 0; d < t.n_dims; ++d) s += strfmt("%s%" PRId64, d ? ", " : "", t.ne[d]);
    return s + "]";
}

void print_file(const GgufFile &f) {
    std::printf("file: %s\n", f.path().c_str());
    std::printf("  version    %u\n", f.version());
    std::printf("  size       %s (%" PRIu64 " bytes)\n", human_bytes(f.file_size()).c_str(), f.file_size());
    std::printf("  alignment  %u\n", f.alignment());
    std::printf("  metadata   %zu keys\n", f.kvs().size());
    std::printf("  tensors    %zu, data section at byte %" PRIu64 "\n\n", f.tensors().size(), f.data_offset());

    size_t key_w = 3, type_w = 4;
    for (const GgufKV &kv : f.kvs()) {
        key_w = std::max(key_w, kv.key.size());
        type_w = std::max(type_w, type_text(kv.value).size());
    }
    std::printf("metadata:\n");
    for (const GgufKV &kv : f.kvs())
        std::printf("  %-*.*s  %-*s  %s\n", static_cast<int>(key_w), static_cast<int>(kv.key.size()), kv.key.data(),
                    static_cast<int>(type_w), type_text(kv.value).c_str(), value_text(kv.value).c_str());

    size_t name_w = 4;
    for (const GgufTensor &t : f.tensors()) name_w = std::max(name_w, t.name.size());
    std::printf("\ntensors:\n  %5s  %-*s  %-5s  %-22s  %12s  %12s\n", "#", static_cast<int>(name_w), "name", "type",
                "shape", "bytes", "offset");
    for (size_t k = 0; k < f.tensors().size(); ++k) {
        const GgufTensor &t = f.tensors()[k];
        std::printf("  %5zu  %-*.*s  %-5s  %-22s  %12" PRIu64 "  %12" PRIu64 "\n", k, static_cast<int>(name_w),
                    static_cast<int>(t.name.size()), t.name.data(), type_name(t.type), shape_text(t).c_str(),
                    t.n_bytes, t.offset);
    }
}

void print_config(const ModelConfig &c) {
    std::printf("\nmodel:\n");
    std::printf("  arch            %s%s%s\n", model_arch_name(c.arch), c.name.empty() ? "" : " - ", c.name.c_str());
    std::printf("  n_vocab         %" PRId64 "\n", c.n_vocab);
    std::printf("  n_embd          %" PRId64 "\n", c.n_embd);
    std::printf("  n_layer         %" PRId64 "\n", c.n_layer);
    std::printf("  n_head          %" PRId64 " (kv heads %" PRId64 ", %" PRId64 " queries per kv head)\n", c.n_head,
                c.n_head_kv, c.n_head / c.n_head_kv);
    std::printf("  head_dim        %" PRId64 "\n", c.head_dim);
    std::printf("  n_ff            %" PRId64 "\n", c.n_ff);
    std::printf("  n_ctx_train     %" PRId64 "\n", c.n_ctx_train);
    std::printf("  norm_eps        %g\n", static_cast<double>(c.norm_eps));
    std::printf("  rope            %s pairs, freq_base %g", c.rope_type == RopeType::neox ? "neox (halves)" : "adjacent",
                static_cast<double>(c.rope_freq_base));
    const RopeScaling &rs = c.rope_scaling;
    if (rs.has_freq_factors) std::printf(", per-frequency factors (rope_freqs.weight)");
    if (rs.linear_factor != 1.0f) std::printf(", linear scaling x%g", static_cast<double>(rs.linear_factor));
    if (rs.llama3)
        std::printf(", llama3 scaling (factor %g, original context %" PRId64 ")", static_cast<double>(rs.factor),
                    rs.original_ctx);
    std::printf("\n  output          %s\n", c.tied_embeddings ? "tied to token_embd.weight" : "output.weight");
    std::printf("  qkv bias        %s\n", c.has_qkv_bias ? "yes" : "no");
}

void print_memory(const GgufFile &f, const ModelConfig &c, int64_t n_ctx, cpu::KvRowTypes type) {
    uint64_t weights = 0;
    for (const GgufTensor &t : f.tensors()) weights += t.n_bytes;  // each bounded by the file size
    const int64_t per_tok_f32 = c.kv_bytes_per_token(4), per_tok_f16 = c.kv_bytes_per_token(2);
    std::printf("\nmemory:\n");
    std::printf("  weights                 %s\n", human_bytes(weights).c_str());
    std::printf("  KV per token            %s (f32), %s (f16)\n", human_bytes(static_cast<uint64_t>(per_tok_f32)).c_str(),
                human_bytes(static_cast<uint64_t>(per_tok_f16)).c_str());
    if (type != cpu::KvRowTypes(cpu::RowType::f32) && type != cpu::KvRowTypes(cpu::RowType::f16) &&
        cpu::row_type_fits(type, c.head_dim)) {
        const int64_t per_tok = c.n_layer * c.n_head_kv *
                                (cpu::row_bytes(type.k, c.head_dim) + cpu::row_bytes(type.v, c.head_dim));
        std::printf("  KV per token            %s (%s)\n",
                    human_bytes(static_cast<uint64_t>(per_tok)).c_str(), cpu::row_type_name(type));
    }
    auto kv_line = [&](const char *what, int64_t n) {
        // n <= 2^31 and per-token bytes <= 2^45 for validated configs: no overflow.
        std::printf("  KV %-20s %s (f32), %s (f16)\n", what, human_bytes(static_cast<uint64_t>(n * per_tok_f32)).c_str(),
                    human_bytes(static_cast<uint64_t>(n * per_tok_f16)).c_str());
    };
    kv_line(strfmt("at %" PRId64 " (train)", c.n_ctx_train).c_str(), c.n_ctx_train);
    if (n_ctx > 0) kv_line(strfmt("at -c %" PRId64, n_ctx).c_str(), n_ctx);
    // What one sequence's lanes map in the page pool at the engine's default
    // page for these rows (what /metrics reports as sieve:kv_bytes_used for it).
    const int64_t n = n_ctx > 0 ? n_ctx : c.n_ctx_train;
    const KvShape shape{1, c.n_layer, c.n_head_kv, c.head_dim, type};
    const int64_t page = VAttentionKv::page_bytes_for(shape, 0);
    const int64_t pairs = c.n_layer * c.n_head_kv;
    const int64_t k_pages = (n * shape.k_row_bytes() + page - 1) / page;
    const int64_t v_pages = (n * shape.v_row_bytes() + page - 1) / page;
    const std::string lanes = k_pages == v_pages
                                  ? strfmt("%lld lanes of %lld pages", static_cast<long long>(2 * pairs),
                                           static_cast<long long>(k_pages))
                                  : strfmt("%lld K lanes of %lld pages and %lld V lanes of %lld",
                                           static_cast<long long>(pairs), static_cast<long long>(k_pages),
                                           static_cast<long long>(pairs), static_cast<long long>(v_pages));
    std::printf(
        "  KV lanes at %-11" PRId64 " %s (%s rows, %s of %lld KiB)\n", n,
        human_bytes(static_cast<uint64_t>(VAttentionKv::seq_pages_for_rows(shape, page, n) * page)).c_str(),
        cpu::row_type_name(type), lanes.c_str(), static_cast<long long>(page >> 10));
}

}  // namespace

int cmd_info(int argc, char **argv) {
    std::string path, type_k, type_v;
    int64_t n_ctx = 0;
    ArgCursor args(argc, argv);
    std::string flag;
    while (args.next(&flag)) {
        if (flag == "-h" || flag == "--help") {
            print_usage(stdout);
            return 0;
        }
        if (flag == "-c" || flag == "--ctx-size") {
            Result<std::string> v = args.value("a token count");
            Result<int64_t> n = v.ok() ? parse_int(flag, v.value(), 1, int64_t(1) << 31) : Result<int64_t>(v.status());
            if (!n.ok()) {
                std::fprintf(stderr, "sieve info: %s\n", n.status().message().c_str());
                return k_exit_usage;
            }
            n_ctx = n.value();
        } else if (flag == "-ctk" || flag == "--cache-type-k" || flag == "-ctv" || flag == "--cache-type-v") {
            Result<std::string> v = args.value("f16, bf16, f32, q8_0 or q4_0");
            if (!v.ok()) {
                std::fprintf(stderr, "sieve info: %s\n", v.status().message().c_str());
                return k_exit_usage;
            }
            (flag == "-ctk" || flag == "--cache-type-k" ? type_k : type_v) = v.value();
        } else if (flag == "-m" || flag == "--model") {  // as the other commands take it
            Result<std::string> v = args.value("a GGUF file");
            if (!v.ok()) {
                std::fprintf(stderr, "sieve info: %s\n", v.status().message().c_str());
                return k_exit_usage;
            }
            if (!path.empty()) {
                std::fprintf(stderr, "sieve info: one file at a time (got '%s' and '%s')\n", path.c_str(),
                             v.value().c_str());
                return k_exit_usage;
            }
            path = v.value();
        } else if (flag.size() > 1 && flag[0] == '-') {
            std::fprintf(stderr, "sieve info: unknown option '%s'\n\n", flag.c_str());
            print_usage(stderr);
            return k_exit_usage;
        } else if (path.empty()) {
            path = flag;
        } else {
            std::fprintf(stderr, "sieve info: one file at a time (got '%s' and '%s')\n", path.c_str(), flag.c_str());
            return k_exit_usage;
        }
    }
    cpu::KvRowTypes kv_type = cpu::RowType::f16;
    if (Status st = parse_cache_types(type_k, type_v, &kv_type); !st.ok()) {
        std::fprintf(stderr, "sieve info: %s\n", st.message().c_str());
        return k_exit_usage;
    }
    if (path.empty()) {
        std::fprintf(stderr, "sieve info: no file given\n\n");
        print_usage(stderr);
        return k_exit_usage;
    }

    auto file = GgufFile::open(path);
    if (!file.ok()) {
        std::fprintf(stderr, "sieve info: %s\n", file.status().message().c_str());
        return k_exit_error;
    }
    const GgufFile &f = *file.value();
    print_file(f);
    auto cfg = ModelConfig::from_gguf(f);
    if (!cfg.ok()) {
        std::fflush(stdout);
        std::fprintf(stderr, "sieve info: %s: not a model sieve can run: %s\n", path.c_str(),
                     cfg.status().message().c_str());
        return k_exit_error;
    }
    print_config(cfg.value());
    print_memory(f, cfg.value(), n_ctx, kv_type);
    return 0;
}

}  // namespace sieve::cli
