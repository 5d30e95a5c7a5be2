// Runs token-id prompts through sieve's forward pass and writes the logits of
// every position, for comparison with the NumPy reference (test_reference.py).
//
//   dump_logits -m MODEL -f PROMPTS [-o LOGITS.f32] [--chunk N] [--gen N] [-t THREADS] [--acts DIR] [--exact]
//               [-ctk f32|f16|bf16]
//
// PROMPTS: one prompt per line, whitespace-separated token ids.
// All prompts run together, each in its own KV slot, in steps of --chunk
// tokens per prompt (0 = each prompt whole in one batch: batched prefill;
// 1 = one token per prompt per step: the decode path). A step's batch holds
// the next chunk of every prompt that has tokens left, so prompts of
// different lengths mix prefill chunks with single tokens, as the engine does.
// -o writes f32 logits [sum of prompt lengths, n_vocab], prompts in order.
// --gen N then greedy-generates N tokens for every prompt, batched as decode
// steps, and prints one line per prompt: "gen <i>: <ids>".
// --acts DIR writes every named intermediate of the first step as
// DIR/<name>.<layer>.f32 ([n_rows, n_cols] f32), to diff against the reference.
// --exact multiplies block-format weights with f32 activations instead of
// 8-bit ones (cpu::ActPrecision::f32): the exact model up to f32 rounding.
// -ctk sets the KV rows' type (K and V alike). The default is f32, not the
// engine's f16: the f32 cache is the oracle mode the reference compares
// against unless it is told to round K and V the same way (kv_round).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sieve/gguf/gguf.h"
#include "sieve/kernels/cpu/row_type.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/model/model.h"

namespace {

using sieve::Status;

struct Args {
    std::string model, prompts, out, acts;
    int64_t chunk = 0;
    int64_t n_gen = 0;
    int threads = 0;
    bool exact = false;
    sieve::cpu::RowType kv_type = sieve::cpu::RowType::f32;
};

int usage() {
    std::fprintf(stderr,
                 "usage: dump_logits -m MODEL -f PROMPTS [-o LOGITS.f32] [--chunk N] [--gen N] [-t N] "
                 "[--acts DIR] [--exact]\n"
                 "                   [-ctk f32|f16|bf16]\n");
    return 2;
}

Status read_prompts(const std::string &path, std::vector<std::vector<int32_t>> *out) {
    std::ifstream f(path);
    if (!f) return Status::errorf("cannot open prompts file '%s'", path.c_str());
    std::string line;
    while (std::getline(f, line)) {
        std::istringstream ss(line);
        std::vector<int32_t> ids;
        long long id = 0;
        while (ss >> id) ids.push_back(static_cast<int32_t>(id));
        if (!ss.eof()) return Status::errorf("prompts file '%s': not a token id in line '%s'", path.c_str(), line.c_str());
        if (!ids.empty()) out->push_back(std::move(ids));
    }
    if (out->empty()) return Status::errorf("prompts file '%s' holds no token ids", path.c_str());
    return Status();
}

// Batch under construction; vectors are reserved once by the caller.
struct BatchBuf {
    std::vector<int32_t> tokens, pos, seq;
    std::vector<int8_t> want;
    void clear() {
        tokens.clear();
        pos.clear();
        seq.clear();
        want.clear();
    }
    void add(int32_t tok, int32_t p, int32_t s, bool w) {
        tokens.push_back(tok);
        pos.push_back(p);
        seq.push_back(s);
        want.push_back(w ? 1 : 0);
    }
    sieve::Batch view() const {
        return sieve::Batch{tokens.data(), pos.data(), seq.data(), static_cast<int64_t>(tokens.size()), want.data()};
    }
};

int64_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

sieve::ActivationCallback dump_to(const std::string &dir) {
    return [dir](const char *name, int il, const float *data, int64_t n_rows, int64_t n_cols) {
        const std::string path = dir + "/" + name + "." + std::to_string(il) + ".f32";
        FILE *f = std::fopen(path.c_str(), "wb");
        if (!f) return;
        std::fwrite(data, sizeof(float), static_cast<size_t>(n_rows * n_cols), f);
        std::fclose(f);
    };
}

Status run(const Args &args) {
    auto file = sieve::GgufFile::open(args.model);
    if (!file.ok()) return file.status();
    auto model = sieve::Model::load(**file);
    if (!model.ok()) return model.status();
    const sieve::Model &m = **model;
    const int64_t n_vocab = m.config().n_vocab;

    std::vector<std::vector<int32_t>> prompts;
    SIEVE_TRY(read_prompts(args.prompts, &prompts));
    const int n_seq = static_cast<int>(prompts.size());
    int64_t total = 0, longest = 0;
    std::vector<int64_t> offset;  // row of each prompt's first position in the logits file
    for (const auto &p : prompts) {
        offset.push_back(total);
        total += static_cast<int64_t>(p.size());
        longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
    }
    const int64_t chunk = args.chunk > 0 ? args.chunk : longest;

    auto kv = sieve::ContiguousKv::create(m.kv_shape(n_seq, args.kv_type), longest + args.n_gen + 1);
    if (!kv.ok()) return kv.status();
    auto ws = m.make_workspace(std::max<int64_t>(chunk * n_seq, n_seq));
    if (args.exact) ws->act_precision = sieve::cpu::ActPrecision::f32;
    sieve::ThreadPool pool(args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency()));

    // 1. The prompts, chunk by chunk; logits of every position.
    std::vector<float> logits(static_cast<size_t>(total * n_vocab));
    std::vector<int32_t> next(static_cast<size_t>(n_seq));  // greedy pick after each prompt
    BatchBuf b;
    b.tokens.reserve(static_cast<size_t>(ws->max_tokens()));
    b.pos.reserve(static_cast<size_t>(ws->max_tokens()));
    b.seq.reserve(static_cast<size_t>(ws->max_tokens()));
    b.want.reserve(static_cast<size_t>(ws->max_tokens()));
    std::vector<int64_t> row_of(static_cast<size_t>(ws->max_tokens()));  // batch index -> logits row
    for (int64_t start = 0; start < longest; start += chunk) {
        b.clear();
        for (int s = 0; s < n_seq; ++s) {
            const auto &p = prompts[static_cast<size_t>(s)];
            for (int64_t i = start; i < std::min<int64_t>(start + chunk, static_cast<int64_t>(p.size())); ++i) {
                row_of[b.tokens.size()] = offset[static_cast<size_t>(s)] + i;
                b.add(p[static_cast<size_t>(i)], static_cast<int32_t>(i), s, true);
            }
        }
        if (!args.acts.empty()) ws->callback = start == 0 ? dump_to(args.acts) : sieve::ActivationCallback();
        SIEVE_TRY(m.forward(b.view(), **kv, *ws, pool));
        for (int64_t o = 0; o < ws->n_outputs(); ++o) {
            const int64_t row = row_of[static_cast<size_t>(ws->output_token(o))];
            std::memcpy(&logits[static_cast<size_t>(row * n_vocab)], ws->logits() + o * n_vocab,
                        sizeof(float) * static_cast<size_t>(n_vocab));
        }
    }
    for (int s = 0; s < n_seq; ++s) {
        const int64_t last = offset[static_cast<size_t>(s)] + static_cast<int64_t>(prompts[static_cast<size_t>(s)].size()) - 1;
        next[static_cast<size_t>(s)] = static_cast<int32_t>(argmax(&logits[static_cast<size_t>(last * n_vocab)], n_vocab));
    }
    if (!args.out.empty()) {
        FILE *f = std::fopen(args.out.c_str(), "wb");
        if (!f) return Status::errorf("cannot write '%s'", args.out.c_str());
        const size_t n = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
        if (std::fclose(f) != 0 || n != logits.size()) return Status::errorf("short write to '%s'", args.out.c_str());
    }

    // 2. Greedy generation: one decode token per prompt per step.
    std::vector<std::vector<int32_t>> gen(static_cast<size_t>(n_seq));
    for (int64_t step = 0; step < args.n_gen; ++step) {
        b.clear();
        for (int s = 0; s < n_seq; ++s) {
            gen[static_cast<size_t>(s)].push_back(next[static_cast<size_t>(s)]);
            b.add(next[static_cast<size_t>(s)], static_cast<int32_t>((**kv).n_pos(s)), s, true);
        }
        if (step + 1 == args.n_gen) break;  // the last pick needs no forward
        SIEVE_TRY(m.forward(b.view(), **kv, *ws, pool));
        for (int64_t o = 0; o < ws->n_outputs(); ++o) {
            const int s = b.seq[static_cast<size_t>(ws->output_token(o))];
            next[static_cast<size_t>(s)] = static_cast<int32_t>(argmax(ws->logits() + o * n_vocab, n_vocab));
        }
    }
    for (int s = 0; s < n_seq && args.n_gen > 0; ++s) {
        std::printf("gen %d:", s);
        for (int32_t t : gen[static_cast<size_t>(s)]) std::printf(" %d", t);
        std::printf("\n");
    }
    return Status();
}

}  // namespace

int main(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "-m" && has_value) {
            a.model = argv[++i];
        } else if (arg == "-f" && has_value) {
            a.prompts = argv[++i];
        } else if (arg == "-o" && has_value) {
            a.out = argv[++i];
        } else if (arg == "--chunk" && has_value) {
            a.chunk = std::atoll(argv[++i]);
        } else if (arg == "--gen" && has_value) {
            a.n_gen = std::atoll(argv[++i]);
        } else if (arg == "--exact") {
            a.exact = true;
        } else if (arg == "--acts" && has_value) {
            a.acts = argv[++i];
        } else if (arg == "-t" && has_value) {
            a.threads = std::atoi(argv[++i]);
        } else if (arg == "-ctk" && has_value) {
            if (!sieve::cpu::row_type_parse(argv[++i], &a.kv_type)) {
                std::fprintf(stderr, "error: -ctk '%s': expected f32, f16 or bf16\n", argv[i]);
                return 2;
            }
        } else {
            return usage();
        }
    }
    if (a.model.empty() || a.prompts.empty()) return usage();
    Status st = run(a);
    if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return 1;
    }
    return 0;
}
