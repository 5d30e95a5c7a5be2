#include "sieve/server/metrics.h"

#include <malloc.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "sieve/core/status.h"

namespace sieve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
}

void Histogram::render(const std::string &name, const std::string &help, std::string *out) const {
    *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cum += counts_[i];
        *out += strfmt("%s_bucket{le=\"%g\"} %" PRIu64 "\n", name.c_str(), bounds_[i], cum);
    }
    cum += counts_.back();
    *out += strfmt("%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name.c_str(), cum);
    *out += strfmt("%s_sum %.9g\n%s_count %" PRIu64 "\n", name.c_str(), sum_, name.c_str(), count_);
}

// Bucket bounds as vLLM's (seconds), so dashboards made for it read the same.
ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
             40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
            80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
            960.0, 1920.0, 7680.0}) {}

void ServerMetrics::observe_ttft(double s) {
    std::lock_guard<std::mutex> lock(mu_);
    ttft_.observe(s);
}
void ServerMetrics::observe_itl(double s) {
    std::lock_guard<std::mutex> lock(mu_);
    itl_.observe(s);
}
void ServerMetrics::observe_e2e(double s) {
    std::lock_guard<std::mutex> lock(mu_);
    e2e_.observe(s);
}
void ServerMetrics::count_finished(FinishReason r) {
    const int i = static_cast<int>(r);
    if (i < 0 || i >= 5) return;
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_[i];
}
void ServerMetrics::count_http_error(int status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status >= 500) ++http_5xx_;
    else if (status >= 400) ++http_4xx_;
}

namespace {
void gauge(std::string *out, const char *name, const char *type, const char *help, double v) {
    *out += strfmt("# HELP %s %s\n# TYPE %s %s\n%s %.9g\n", name, help, name, type, name, v);
}

// The standard process gauges of the Prometheus client libraries, from Linux's
// /proc (omitted where it cannot be read). Resident memory is statm's second
// field, so it counts the KV pages mapped for live sequences too: compare it
// at idle (eval/soak.py does) to see growth.
void process_gauges(std::string *out) {
    long long size_pages = 0, resident_pages = 0;
    if (std::ifstream statm("/proc/self/statm"); statm >> size_pages >> resident_pages)
        *out += strfmt("# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                       "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n",
                       resident_pages * static_cast<long long>(sysconf(_SC_PAGESIZE)));
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    // Resident memory also holds what the allocator keeps after free() for
    // reuse, which grows under load and stays (tens of MiB across glibc's
    // per-thread arenas). The bytes malloc counts as allocated move with a
    // leak and not with that; chunks parked in per-thread caches count as
    // allocated too (GLIBC_TUNABLES=glibc.malloc.tcache_count=0 turns them
    // off, as the soak test does; docs/reliability.md).
    const struct mallinfo2 mi = mallinfo2();
    *out += strfmt("# HELP sieve:heap_bytes_in_use Bytes malloc counts as allocated (arenas + mmapped chunks, "
                   "glibc mallinfo2).\n# TYPE sieve:heap_bytes_in_use gauge\nsieve:heap_bytes_in_use %zu\n",
                   mi.uordblks + mi.hblkhd);
#endif
    // Start time: /proc/self/stat's field 22 (clock ticks after boot; the
    // fields are counted after the ')' that ends the command name) + btime.
    std::ifstream stat("/proc/self/stat");
    std::string line;
    if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) return;
    std::istringstream fields(line.substr(line.rfind(')') + 1));
    std::string field;  // ends as field 22 when all 20 fields from field 3 on are there
    int n_read = 0;
    for (std::string f; n_read < 20 && fields >> f; ++n_read) field = f;
    std::ifstream proc_stat("/proc/stat");
    long long btime = -1;
    for (std::string key; proc_stat >> key;)
        if (key == "btime" && (proc_stat >> btime)) break;
    const long ticks = sysconf(_SC_CLK_TCK);
    char *end = nullptr;
    const double start_ticks = std::strtod(field.c_str(), &end);
    if (n_read != 20 || btime < 0 || ticks <= 0 || *end != '\0') return;
    // %.2f, not gauge()'s %.9g: ten digits of seconds come before the point.
    *out += strfmt("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                   "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
                   static_cast<double>(btime) + start_ticks / static_cast<double>(ticks));
}
}  // namespace

std::string ServerMetrics::render(const EngineStats *s) const {
    std::string out;
    const EngineStats st = s ? *s : EngineStats{};
    gauge(&out, "sieve:num_requests_running", "gauge", "Sequences in the running batch.", st.n_running);
    gauge(&out, "sieve:num_requests_waiting", "gauge", "Requests queued for admission.", st.n_waiting);
    const double usage = st.kv_pages_total > 0 ? static_cast<double>(st.kv_pages_used) / st.kv_pages_total : 0.0;
    gauge(&out, "sieve:kv_cache_usage_perc", "gauge", "Fraction of KV pages in use (0..1).", usage);
    gauge(&out, "sieve:kv_pages_used", "gauge", "KV pool pages mapped for live sequences.",
          static_cast<double>(st.kv_pages_used));
    gauge(&out, "sieve:kv_pages_total", "gauge", "KV pool pages in all.", static_cast<double>(st.kv_pages_total));
    gauge(&out, "sieve:kv_bytes_used", "gauge", "Bytes of the KV pool mapped for live sequences.",
          static_cast<double>(st.kv_pages_used) * static_cast<double>(st.kv_page_bytes));
    gauge(&out, "sieve:num_preemptions_total", "counter", "Sequences preempted for lack of KV pages.",
          static_cast<double>(st.n_preemptions));
    gauge(&out, "sieve:kv_swap_out_total", "counter", "Preemptions that copied the sequence's KV to host memory.",
          static_cast<double>(st.n_swap_out));
    gauge(&out, "sieve:kv_swap_in_total", "counter", "Swapped sequences whose KV was mapped back.",
          static_cast<double>(st.n_swap_in));
    gauge(&out, "sieve:kv_swap_bytes_used", "gauge", "Host bytes held by swapped sequences' KV.",
          static_cast<double>(st.swap_bytes_used));
    gauge(&out, "sieve:kv_swap_bytes_total", "gauge", "The swap space (--swap-space).",
          static_cast<double>(st.swap_bytes_total));
    gauge(&out, "sieve:kv_pages_evicted_total", "counter", "KV pages returned to the pool by policy compactions.",
          static_cast<double>(st.kv_pages_evicted));
    if (!st.policies.empty()) {
        out += "# HELP sieve:kv_compression_ratio KV rows kept / rows seen at the after-prefill point, per policy.\n"
               "# TYPE sieve:kv_compression_ratio gauge\n";
        for (const PolicyCounters &p : st.policies)
            out += strfmt("sieve:kv_compression_ratio{policy=\"%s\"} %.6g\n", p.policy.c_str(),
                          p.rows_seen > 0 ? static_cast<double>(p.rows_kept) / static_cast<double>(p.rows_seen) : 1.0);
        out += "# HELP sieve:kv_policy_requests_total Requests whose prompt went through each policy.\n"
               "# TYPE sieve:kv_policy_requests_total counter\n";
        for (const PolicyCounters &p : st.policies)
            out += strfmt("sieve:kv_policy_requests_total{policy=\"%s\"} %lld\n", p.policy.c_str(),
                          static_cast<long long>(p.requests));
    }
    gauge(&out, "sieve:prompt_tokens_total", "counter", "Prompt tokens processed.",
          static_cast<double>(st.prompt_tokens_total));
    gauge(&out, "sieve:generation_tokens_total", "counter", "Tokens generated.",
          static_cast<double>(st.gen_tokens_total));
    gauge(&out, "sieve:engine_steps_total", "counter", "Forward steps run by the engine.",
          static_cast<double>(st.n_steps));
    // Prefix cache: vLLM's own names (counted in tokens), so dashboards made
    // for vLLM read them; what the cache holds under sieve's prefix.
    gauge(&out, "vllm:prefix_cache_queries_total", "counter",
          "Prompt tokens looked up in the prefix cache (0 when it is off).",
          static_cast<double>(st.prefix_query_tokens));
    gauge(&out, "vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
          static_cast<double>(st.prefix_hit_tokens));
    gauge(&out, "sieve:prefix_cache_blocks", "gauge", "Prompt blocks the prefix cache holds.",
          static_cast<double>(st.prefix_blocks));
    gauge(&out, "sieve:prefix_cache_pages", "gauge",
          "KV pages held only by the prefix cache (reclaimable: counted free, not in kv_pages_used).",
          static_cast<double>(st.prefix_pages_only));
    gauge(&out, "sieve:prefix_cache_evicted_blocks_total", "counter",
          "Prefix-cache blocks dropped to give their pages to new KV.",
          static_cast<double>(st.prefix_blocks_evicted));

    out += "# HELP sieve:kv_map_calls_total KV page mmap calls: inside a step's reservations, or between steps (map-ahead).\n"
           "# TYPE sieve:kv_map_calls_total counter\n";
    out += strfmt("sieve:kv_map_calls_total{where=\"step\"} %lld\n", static_cast<long long>(st.kv_map_calls_in_step));
    out += strfmt("sieve:kv_map_calls_total{where=\"ahead\"} %lld\n", static_cast<long long>(st.kv_map_calls_ahead));
    out += "# HELP sieve:kv_map_seconds_total Time in KV page mmap calls, by where they were made.\n"
           "# TYPE sieve:kv_map_seconds_total counter\n";
    out += strfmt("sieve:kv_map_seconds_total{where=\"step\"} %.6f\n", 1e-6 * static_cast<double>(st.kv_map_us_in_step));
    out += strfmt("sieve:kv_map_seconds_total{where=\"ahead\"} %.6f\n", 1e-6 * static_cast<double>(st.kv_map_us_ahead));

    process_gauges(&out);

    std::lock_guard<std::mutex> lock(mu_);
    out += "# HELP sieve:request_success_total Finished requests by finish reason.\n"
           "# TYPE sieve:request_success_total counter\n";
    for (int i = 1; i < 5; ++i)
        out += strfmt("sieve:request_success_total{finished_reason=\"%s\"} %" PRIu64 "\n",
                      finish_reason_name(static_cast<FinishReason>(i)), finished_[i]);
    out += "# HELP sieve:http_errors_total HTTP error responses by class.\n"
           "# TYPE sieve:http_errors_total counter\n";
    out += strfmt("sieve:http_errors_total{class=\"4xx\"} %" PRIu64 "\n", http_4xx_);
    out += strfmt("sieve:http_errors_total{class=\"5xx\"} %" PRIu64 "\n", http_5xx_);
    ttft_.render("sieve:time_to_first_token_seconds", "Time from request arrival to its first token.", &out);
    itl_.render("sieve:inter_token_latency_seconds", "Time between consecutive tokens of a request.", &out);
    e2e_.render("sieve:e2e_request_latency_seconds", "Time from request arrival to its last token.", &out);
    return out;
}

}  // namespace sieve
