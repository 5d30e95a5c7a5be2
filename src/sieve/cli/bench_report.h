// Rows of `sieve bench` and their output formats. Field names follow
// llama-bench's so its jsonl and sieve's can be joined by script on
// (model_filename, n_threads, n_prompt, n_gen, n_depth); sieve adds
// median_ts, gbps, bw_frac and n_parallel (and, in a run with -npl > 1,
// step_ms and step_ratio).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace sieve::cli {

enum class BenchFormat { md, csv, json, jsonl };

struct BenchRow {
    // model
    std::string model_filename;
    std::string model_type;      // "<arch> <params> <main weight type>", e.g. "llama 135M Q8_0"
    int64_t model_size = 0;      // bytes of all tensors
    int64_t model_n_params = 0;
    // test
    int64_t n_batch = 0;
    int n_threads = 0;
    std::string type_k = "f32", type_v = "f32";
    bool k_rotated = false;      // keys stored rotated (--rotate-k)
    std::string kv_store;        // "vattention" | "contiguous"
    std::string kv_policy = "dense";  // --kv-policy label, applied to the depth fill
    bool use_mmap = false;       // weights left in the file mapping (llama-bench's field)
    double huge_frac = 0;        // share of the placed weights on huge pages at load
    int64_t n_prompt = 0, n_gen = 0, n_depth = 0;
    int64_t n_parallel = 1;      // sequences (KV slots) per test; tokens/s are aggregate over them
    std::string test_time;       // ISO 8601 UTC
    std::string cpu_info;
    // results
    std::vector<int64_t> samples_ns;
    std::vector<double> samples_ts;
    double avg_ns = 0, stddev_ns = 0, avg_ts = 0, stddev_ts = 0, median_ts = 0;
    double gbps = -1;            // tg only: bytes read per token x tokens/s; < 0 = not applicable
    double bw_frac = -1;         // gbps / machine bandwidth; < 0 = not applicable
    double bw_gbps = 0;          // the machine's measured (or given) read bandwidth
    double step_ms = -1;         // tg only: median over reps of time / n_gen (one forward pass of
                                 // n_parallel tokens); < 0 = not applicable
    double step_ratio = -1;      // step_ms / step_ms of the n_parallel = 1 row of the same model,
                                 // threads, depth and n_gen; < 0 = no such row
    double read_frac = -1;       // tg with page selection: rows read / rows the lanes held; < 0 = n/a
    double select_ms = -1;       // tg with page selection: selector time per token (all layers); < 0 = n/a
};

// Fills the derived statistics from samples_ns and the token count
// (n_parallel x (n_prompt + n_gen) per sample), and step_ms for tg rows.
void bench_row_finish(BenchRow *row);

// "pp512", "tg128", "pp512 @ d8192", "tg64 @ d512 x8" (n_parallel 8).
std::string bench_test_name(const BenchRow &row);

// Streaming writer: md and csv print a header before the first row, json
// wraps rows in an array; finish() closes what is open. parallel: some row
// has n_parallel > 1, so md gets n_parallel / step ms / x1 step columns and
// csv / json / jsonl the step_ms and step_ratio fields (decided before the
// first row, as every row has the same columns).
class BenchPrinter {
public:
    BenchPrinter(BenchFormat format, FILE *out, bool parallel = false)
        : format_(format), out_(out), parallel_(parallel) {}
    void row(const BenchRow &r);
    void finish();

private:
    BenchFormat format_;
    FILE *out_;
    bool parallel_;
    int64_t n_rows_ = 0;
};

}  // namespace sieve::cli
