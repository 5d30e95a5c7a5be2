#include "sieve/cli/bench_report.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "sieve/core/status.h"

namespace sieve::cli {

namespace {

double mean_of(const std::vector<double> &v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// Sample standard deviation (n - 1), as llama-bench reports it.
double stddev_of(const std::vector<double> &v) {
    if (v.size() < 2) return 0.0;
    const double m = mean_of(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size() - 1));
}

double median_of(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string json_string(const std::string &s) {
    std::string o = "\"";
    for (char c : s) {
        const unsigned char u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            o += '\\';
            o += c;
        } else if (u < 0x20) {
            o += strfmt("\\u%04x", u);
        } else {
            o += c;
        }
    }
    return o + "\"";
}

std::string csv_string(const std::string &s) {
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
}

std::string num(double x) { return strfmt("%.6f", x); }

std::string size_text(int64_t bytes) {
    const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
    return mib >= 1024.0 ? strfmt("%.2f GiB", mib / 1024.0) : strfmt("%.2f MiB", mib);
}

std::string params_text(int64_t n) {
    const double x = static_cast<double>(n);
    if (x >= 1e9) return strfmt("%.2f B", x / 1e9);
    if (x >= 1e6) return strfmt("%.2f M", x / 1e6);
    return strfmt("%.2f K", x / 1e3);
}

// One (name, value) pair per field, values already encoded for JSON; csv
// reuses the names and re-encodes strings.
struct Field {
    const char *name;
    std::string json;
    std::string csv;
};

std::vector<Field> fields_of(const BenchRow &r, bool parallel) {
    std::string ns_json = "[", ts_json = "[", ns_csv, ts_csv;
    for (size_t i = 0; i < r.samples_ns.size(); ++i) {
        ns_json += strfmt("%s%lld", i ? ", " : "", static_cast<long long>(r.samples_ns[i]));
        ts_json += strfmt("%s%.6f", i ? ", " : "", r.samples_ts[i]);
        ns_csv += strfmt("%s%lld", i ? " " : "", static_cast<long long>(r.samples_ns[i]));
        ts_csv += strfmt("%s%.6f", i ? " " : "", r.samples_ts[i]);
    }
    ns_json += "]";
    ts_json += "]";
    const auto s = [](const std::string &v) { return Field{nullptr, json_string(v), csv_string(v)}; };
    const auto i = [](int64_t v) {
        const std::string t = strfmt("%lld", static_cast<long long>(v));
        return Field{nullptr, t, t};
    };
    const auto d = [](double v) { return Field{nullptr, num(v), num(v)}; };
    const auto opt = [](double v) {  // negative = not applicable
        return v < 0 ? Field{nullptr, "null", ""} : Field{nullptr, num(v), num(v)};
    };
    std::vector<std::pair<const char *, Field>> kv = {
        {"build_commit", s("sieve")},
        {"cpu_info", s(r.cpu_info)},
        {"backends", s("CPU")},
        {"model_filename", s(r.model_filename)},
        {"model_type", s(r.model_type)},
        {"model_size", i(r.model_size)},
        {"model_n_params", i(r.model_n_params)},
        {"n_batch", i(r.n_batch)},
        {"n_ubatch", i(r.n_batch)},
        {"n_threads", i(r.n_threads)},
        {"type_k", s(r.type_k)},
        {"type_v", s(r.type_v)},
        {"k_rotated", Field{nullptr, r.k_rotated ? "true" : "false", r.k_rotated ? "1" : "0"}},
        {"kv_store", s(r.kv_store)},
        {"kv_policy", s(r.kv_policy)},
        {"use_mmap", Field{nullptr, r.use_mmap ? "true" : "false", r.use_mmap ? "1" : "0"}},
        {"huge_frac", d(r.huge_frac)},
        {"n_prompt", i(r.n_prompt)},
        {"n_gen", i(r.n_gen)},
        {"n_depth", i(r.n_depth)},
        {"n_parallel", i(r.n_parallel)},
        {"test_time", s(r.test_time)},
        {"avg_ns", i(static_cast<int64_t>(std::llround(r.avg_ns)))},
        {"stddev_ns", i(static_cast<int64_t>(std::llround(r.stddev_ns)))},
        {"avg_ts", d(r.avg_ts)},
        {"stddev_ts", d(r.stddev_ts)},
        {"median_ts", d(r.median_ts)},
        {"gbps", opt(r.gbps)},
        {"bw_frac", opt(r.bw_frac)},
        {"bw_gbps", d(r.bw_gbps)},
    };
    if (parallel) {
        kv.push_back({"step_ms", opt(r.step_ms)});
        kv.push_back({"step_ratio", opt(r.step_ratio)});
    }
    if (r.read_frac >= 0) {  // page selection: what the decode read, and the selector's time
        kv.push_back({"read_frac", opt(r.read_frac)});
        kv.push_back({"select_ms", opt(r.select_ms)});
    }
    kv.insert(kv.end(), {
        {"samples_ns", Field{nullptr, ns_json, csv_string(ns_csv)}},
        {"samples_ts", Field{nullptr, ts_json, csv_string(ts_csv)}},
    });
    std::vector<Field> out;
    for (auto &[name, f] : kv) out.push_back(Field{name, f.json, f.csv});
    return out;
}

}  // namespace

void bench_row_finish(BenchRow *row) {
    const int64_t n_tokens = row->n_parallel * (row->n_prompt + row->n_gen);
    std::vector<double> ns;
    row->samples_ts.clear();
    for (int64_t t : row->samples_ns) {
        ns.push_back(static_cast<double>(t));
        row->samples_ts.push_back(t > 0 ? 1e9 * static_cast<double>(n_tokens) / static_cast<double>(t) : 0.0);
    }
    row->avg_ns = mean_of(ns);
    row->stddev_ns = stddev_of(ns);
    row->avg_ts = mean_of(row->samples_ts);
    row->stddev_ts = stddev_of(row->samples_ts);
    row->median_ts = median_of(row->samples_ts);
    if (row->n_prompt == 0 && row->n_gen > 0) {
        std::vector<double> step;
        for (double t : ns) step.push_back(t / 1e6 / static_cast<double>(row->n_gen));
        row->step_ms = step.empty() ? -1.0 : median_of(step);
    }
}

std::string bench_test_name(const BenchRow &r) {
    std::string name = r.n_prompt > 0 ? strfmt("pp%lld", static_cast<long long>(r.n_prompt))
                                      : strfmt("tg%lld", static_cast<long long>(r.n_gen));
    if (r.n_depth > 0) name += strfmt(" @ d%lld", static_cast<long long>(r.n_depth));
    if (r.n_parallel > 1) name += strfmt(" x%lld", static_cast<long long>(r.n_parallel));
    if (r.kv_policy != "dense") name += " " + r.kv_policy;
    return name;
}

void BenchPrinter::row(const BenchRow &r) {
    const std::vector<Field> fields = fields_of(r, parallel_);
    switch (format_) {
        case BenchFormat::md:
            if (parallel_) {
                if (n_rows_ == 0) {
                    std::fprintf(out_, "| model | size | params | backend | threads | n_parallel | test | t/s | step ms | "
                                       "x1 step | GB/s | %% bw |\n");
                    std::fprintf(out_, "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
                }
                std::fprintf(out_, "| %s | %s | %s | CPU | %d | %lld | %s | %.2f ± %.2f | %s | %s | %s | %s |\n",
                             r.model_type.c_str(), size_text(r.model_size).c_str(),
                             params_text(r.model_n_params).c_str(), r.n_threads, static_cast<long long>(r.n_parallel),
                             bench_test_name(r).c_str(), r.avg_ts, r.stddev_ts,
                             r.step_ms < 0 ? "" : strfmt("%.3f", r.step_ms).c_str(),
                             r.step_ratio < 0 ? "" : strfmt("%.2f", r.step_ratio).c_str(),
                             r.gbps < 0 ? "" : strfmt("%.2f", r.gbps).c_str(),
                             r.bw_frac < 0 ? "" : strfmt("%.1f", 100.0 * r.bw_frac).c_str());
                break;
            }
            if (n_rows_ == 0) {
                std::fprintf(out_, "| model | size | params | backend | threads | test | t/s | GB/s | %% bw |\n");
                std::fprintf(out_, "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
            }
            std::fprintf(out_, "| %s | %s | %s | CPU | %d | %s | %.2f ± %.2f | %s | %s |\n", r.model_type.c_str(),
                         size_text(r.model_size).c_str(), params_text(r.model_n_params).c_str(), r.n_threads,
                         bench_test_name(r).c_str(), r.avg_ts, r.stddev_ts,
                         r.gbps < 0 ? "" : strfmt("%.2f", r.gbps).c_str(),
                         r.bw_frac < 0 ? "" : strfmt("%.1f", 100.0 * r.bw_frac).c_str());
            break;
        case BenchFormat::csv:
            if (n_rows_ == 0) {
                for (size_t k = 0; k < fields.size(); ++k) std::fprintf(out_, "%s%s", k ? "," : "", fields[k].name);
                std::fprintf(out_, "\n");
            }
            for (size_t k = 0; k < fields.size(); ++k) std::fprintf(out_, "%s%s", k ? "," : "", fields[k].csv.c_str());
            std::fprintf(out_, "\n");
            break;
        case BenchFormat::json:
        case BenchFormat::jsonl: {
            const bool pretty = format_ == BenchFormat::json;
            if (pretty) std::fprintf(out_, n_rows_ == 0 ? "[\n  {\n" : ",\n  {\n");
            else std::fprintf(out_, "{");
            for (size_t k = 0; k < fields.size(); ++k) {
                if (pretty) std::fprintf(out_, "    \"%s\": %s%s\n", fields[k].name, fields[k].json.c_str(),
                                         k + 1 < fields.size() ? "," : "");
                else std::fprintf(out_, "%s\"%s\": %s", k ? ", " : "", fields[k].name, fields[k].json.c_str());
            }
            std::fprintf(out_, pretty ? "  }" : "}\n");
            break;
        }
    }
    std::fflush(out_);
    ++n_rows_;
}

void BenchPrinter::finish() {
    if (format_ == BenchFormat::json) std::fprintf(out_, n_rows_ == 0 ? "[]\n" : "\n]\n");
    std::fflush(out_);
}

}  // namespace sieve::cli
