#include "sieve/sparse/policy_spec.h"

#include "sieve/kv/page_summary.h"
#include "sieve/sparse/eviction.h"
#include "sieve/sparse/lserve.h"
#include "sieve/sparse/quest.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace sieve {

namespace {

using json = nlohmann::json;

// One registered policy. A factory sees a spec whose keys are already known
// to be among `keys`; it parses the values and builds the shared object.
struct KvPolicyEntry {
    const char *name;
    std::vector<const char *> keys;  // accepted parameter keys
    const char *summary;             // one line for --help
    Result<KvPolicyPtr> (*make)(const KvPolicySpec &spec);
};

Result<KvPolicyPtr> make_dense(const KvPolicySpec &) {
    return KvPolicyPtr();
}

// Values: each error names the key, the value and what is accepted.
Status parse_int(const KvPolicySpec &spec, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    auto it = spec.params.find(key);
    if (it == spec.params.end()) return Status();
    const std::string &v = it->second;
    char *end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi)
        return Status::errorf("%s=%s: expected an integer in [%lld, %lld]", key, v.c_str(), static_cast<long long>(lo),
                              static_cast<long long>(hi));
    *out = x;
    return Status();
}

Status parse_real(const KvPolicySpec &spec, const char *key, double lo, double hi, bool lo_open, double *out) {
    auto it = spec.params.find(key);
    if (it == spec.params.end()) return Status();
    const std::string &v = it->second;
    char *end = nullptr;
    errno = 0;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo))
        return Status::errorf("%s=%s: expected a number in %c%g, %g]", key, v.c_str(), lo_open ? '(' : '[', lo, hi);
    *out = x;
    return Status();
}

// key=NAME for one of two names; the error lists both in the given order.
template <class E>
Status parse_choice(const KvPolicySpec &spec, const char *key, const std::pair<const char *, E> (&names)[2], E *out) {
    auto it = spec.params.find(key);
    if (it == spec.params.end()) return Status();
    for (const auto &[name, value] : names)
        if (it->second == name) {
            *out = value;
            return Status();
        }
    return Status::errorf("%s=%s: expected %s or %s", key, it->second.c_str(), names[0].first, names[1].first);
}

constexpr int64_t k_max_rows = int64_t{1} << 30;

// The keys every eviction policy shares; `kind` picks the defaults and checks.
Result<KvPolicyPtr> make_eviction(const KvPolicySpec &spec, EvictionKind kind) {
    EvictionParams p;
    if (kind == EvictionKind::layerwise) p.full_layers = 3;
    if (kind != EvictionKind::streaming) p.sink = 0;
    const bool has_keep = spec.params.count("keep") > 0, has_budget = spec.params.count("budget") > 0;
    if (has_keep && has_budget)
        return Status::error("give keep=R (a fraction of the prompt's rows) or budget=N (rows per lane), not both");
    SIEVE_TRY(parse_real(spec, "keep", 0.0, 1.0, true, &p.keep));
    SIEVE_TRY(parse_int(spec, "budget", 1, k_max_rows, &p.budget));
    SIEVE_TRY(parse_int(spec, "window", 1, 65536, &p.window));
    SIEVE_TRY(parse_int(spec, "pool", 1, 1023, &p.pool));
    if (p.pool % 2 == 0) return Status::errorf("pool=%lld: expected an odd kernel size (1, 3, 5, 7, ...)",
                                               static_cast<long long>(p.pool));
    SIEVE_TRY(parse_int(spec, "sink", 0, k_max_rows, &p.sink));
    SIEVE_TRY(parse_int(spec, "recent", 0, k_max_rows, &p.recent));
    SIEVE_TRY(parse_int(spec, "full_layers", 0, 4096, &p.full_layers));
    SIEVE_TRY(parse_real(spec, "beta", 1.0, 1e6, false, &p.beta));
    SIEVE_TRY(parse_choice(spec, "agg", {{"mean", sparse::GroupAgg::mean}, {"max", sparse::GroupAgg::max}}, &p.agg));
    SIEVE_TRY(parse_choice(spec, "pooling", {{"max", sparse::Pooling::max}, {"avg", sparse::Pooling::avg}},
                           &p.pooling));
    if (kind == EvictionKind::streaming) {
        if (p.recent >= 0 && (has_keep || has_budget))
            return Status::error("streaming: give recent=W (the window after the sinks) or keep/budget (sinks + "
                                 "window), not both");
        if (has_budget && p.sink >= p.budget)
            return Status::errorf("streaming: sink=%lld must be below budget=%lld", static_cast<long long>(p.sink),
                                  static_cast<long long>(p.budget));
        if (p.recent == 0 && p.sink == 0) return Status::error("streaming: sink=0 and recent=0 keep nothing");
    }
    if (kind == EvictionKind::h2o && has_budget && p.recent > p.budget)
        return Status::errorf("h2o: recent=%lld exceeds budget=%lld", static_cast<long long>(p.recent),
                              static_cast<long long>(p.budget));
    return KvPolicyPtr(std::make_shared<EvictionPolicy>(kind, p, kv_policy_spec_label(spec)));
}

Result<KvPolicyPtr> make_streaming(const KvPolicySpec &s) { return make_eviction(s, EvictionKind::streaming); }
Result<KvPolicyPtr> make_snapkv(const KvPolicySpec &s) { return make_eviction(s, EvictionKind::snapkv); }
Result<KvPolicyPtr> make_pyramidkv(const KvPolicySpec &s) { return make_eviction(s, EvictionKind::pyramidkv); }
Result<KvPolicyPtr> make_layerwise(const KvPolicySpec &s) { return make_eviction(s, EvictionKind::layerwise); }
Result<KvPolicyPtr> make_h2o(const KvPolicySpec &s) { return make_eviction(s, EvictionKind::h2o); }

// The page-selection keys quest and lserve share: budget, page, interval, agg, score.
Status parse_page_selection(const KvPolicySpec &spec, QuestParams *p) {
    SIEVE_TRY(parse_int(spec, "budget", 1, k_max_rows, &p->budget));
    SIEVE_TRY(parse_int(spec, "page", k_summary_rows, 65536, &p->page));
    if (p->page % k_summary_rows != 0)
        return Status::errorf("page=%lld: expected a multiple of %lld rows (the logical page of the key summaries)",
                              static_cast<long long>(p->page), static_cast<long long>(k_summary_rows));
    if (p->budget < p->page)
        return Status::errorf("budget=%lld is below one page of %lld rows; expected budget >= page",
                              static_cast<long long>(p->budget), static_cast<long long>(p->page));
    SIEVE_TRY(parse_int(spec, "interval", 1, 1 << 20, &p->interval));
    if (auto it = spec.params.find("agg"); it != spec.params.end()) {
        if (it->second == "max")
            p->agg = cpu::PageAgg::max;
        else if (it->second == "mean")
            p->agg = cpu::PageAgg::mean;
        else if (it->second == "mass")
            p->agg = cpu::PageAgg::mass;
        else if (it->second == "maxprob")
            p->agg = cpu::PageAgg::maxprob;
        else
            return Status::errorf("agg=%s: expected max, mean, mass or maxprob", it->second.c_str());
    }
    if (auto it = spec.params.find("score"); it != spec.params.end()) {
        if (it->second != "bound" && it->second != "exact")
            return Status::errorf(
                "score=%s: expected bound (the pages' min/max bound) or exact (from every key: "
                "an oracle that reads the whole lane)",
                it->second.c_str());
        p->exact = it->second == "exact";
    }
    SIEVE_TRY(parse_real(spec, "refine", 0.0, 64.0, false, &p->refine));
    if (p->refine > 0.0 && p->refine < 1.0)
        return Status::errorf(
            "refine=%g: expected 0 (off) or a factor of at least 1 (candidates per chosen unit)", p->refine);
    return Status();
}

Result<KvPolicyPtr> make_quest(const KvPolicySpec &spec) {
    QuestParams p;
    SIEVE_TRY(parse_page_selection(spec, &p));
    SIEVE_TRY(parse_int(spec, "sink", 0, k_max_rows, &p.sink));
    SIEVE_TRY(parse_int(spec, "recent", 0, k_max_rows, &p.recent));
    SIEVE_TRY(parse_int(spec, "full_layers", 0, 4096, &p.full_layers));
    return KvPolicyPtr(std::make_shared<QuestPolicy>(p, kv_policy_spec_label(spec)));
}

Result<KvPolicyPtr> make_lserve(const KvPolicySpec &spec) {
    LServeParams p;
    p.quest.budget = 4096;
    p.quest.full_layers = 0;
    auto prof = spec.params.find("profile");
    if (prof == spec.params.end())
        return Status::error("lserve needs profile=FILE, a head profile (make one with `sieve calibrate -m MODEL -o "
                             "FILE`)");
    p.profile_path = prof->second;
    SIEVE_TRY(parse_real(spec, "static", 0.0, 1.0, false, &p.static_frac));
    SIEVE_TRY(parse_int(spec, "sink", 0, k_max_rows, &p.sink));
    SIEVE_TRY(parse_int(spec, "recent", 1, k_max_rows, &p.recent));
    SIEVE_TRY(parse_page_selection(spec, &p.quest));
    SIEVE_TRY(parse_int(spec, "full_layers", 0, 4096, &p.quest.full_layers));
    p.quest.sink = p.sink;
    if (auto it = spec.params.find("prefill"); it != spec.params.end()) {
        if (it->second != "lambda" && it->second != "dense")
            return Status::errorf("prefill=%s: expected lambda (streaming heads see sink + recent rows in prefill) "
                                  "or dense",
                                  it->second.c_str());
        p.lambda_prefill = it->second == "lambda";
    }
    Result<HeadProfile> profile = head_profile_load(p.profile_path);
    if (!profile.ok()) return profile.status();
    return KvPolicyPtr(std::make_shared<LServePolicy>(p, std::move(*profile), kv_policy_spec_label(spec)));
}

// The registry: add a row here when a policy lands.
const std::vector<KvPolicyEntry> &kv_policy_table() {
    static const std::vector<KvPolicyEntry> table = {
        {"dense", {}, "keep every row (no policy; the reference)", make_dense},
        {"streaming",
         {"keep", "budget", "sink", "recent", "full_layers"},
         "StreamingLLM: the first sink rows + a recent window, sliding while decoding (default sink=4, "
         "keep=0.25)",
         make_streaming},
        {"snapkv",
         {"keep", "budget", "window", "pool", "pooling", "agg", "full_layers"},
         "SnapKV: top rows per KV head by the last window queries' attention, pooled, + the window "
         "(default keep=0.25, window=32, pool=7, pooling=max, agg=mean)",
         make_snapkv},
        {"pyramidkv",
         {"keep", "budget", "window", "pool", "pooling", "agg", "beta", "full_layers"},
         "PyramidKV: SnapKV scores, budget falling with depth, same total (default beta=20)",
         make_pyramidkv},
        {"layerwise",
         {"keep", "budget", "window", "pool", "pooling", "agg", "full_layers"},
         "the first full_layers layers dense, a SnapKV budget after (default full_layers=3)",
         make_layerwise},
        {"h2o",
         {"keep", "budget", "recent", "agg", "full_layers"},
         "H2O: heavy hitters by attention over every query + recent rows, evicting while decoding (default "
         "recent=budget/2)",
         make_h2o},
        {"quest",
         {"budget", "page", "interval", "sink", "recent", "full_layers", "agg", "score", "refine"},
         "Quest page selection: every row kept, each decode query reads the pages of `page` rows with the "
         "highest "
         "min/max bound, reselected every `interval` steps (default budget=2048, page=16, interval=4, "
         "sink=16, "
         "full_layers=2, agg=max, score=bound, refine=0; agg=mean|mass|maxprob, score=exact: an oracle, "
         "refine=R: "
         "the bound's best R x budget re-ranked by their keys)",
         make_quest},
        {"lserve",
         {"static", "budget", "page", "interval", "sink", "recent", "profile", "agg", "score", "refine",
          "prefill", "full_layers"},
         "LServe: the `static` fraction of KV heads with the lowest head-profile scores keep sink + recent "
         "rows "
         "(streaming heads; in prefill a lambda-shaped mask, unless prefill=dense), the rest read Quest "
         "pages (default "
         "static=0.5, budget=4096, interval=4, sink=64, recent=256; profile=FILE from `sieve calibrate` is "
         "required)",
         make_lserve},
    };
    return table;
}

const KvPolicyEntry *find_entry(const std::string &name) {
    for (const KvPolicyEntry &e : kv_policy_table())
        if (name == e.name) return &e;
    return nullptr;
}

std::string keys_text(const KvPolicyEntry &e) {
    if (e.keys.empty()) return "no keys";
    std::string s;
    for (const char *k : e.keys) s += (s.empty() ? "" : ", ") + std::string(k);
    return "keys " + s;
}

const char *k_form = "expected NAME[:key=value,...] or @FILE.json";

// Name and keys against the registry.
Status check_spec(const KvPolicySpec &spec, const std::string &text) {
    const KvPolicyEntry *e = find_entry(spec.name);
    if (!e)
        return Status::errorf("KV policy '%s': unknown policy '%s'; known policies: %s", text.c_str(),
                              spec.name.c_str(), kv_policy_names().c_str());
    for (const auto &[key, value] : spec.params) {
        bool known = false;
        for (const char *k : e->keys) known = known || key == k;
        if (!known)
            return Status::errorf("KV policy '%s': %s has no key '%s' (it takes %s)", text.c_str(), e->name,
                                  key.c_str(), keys_text(*e).c_str());
    }
    return Status();
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

bool is_name(const std::string &s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!is_name_char(c)) return false;
    return true;
}

// NAME[:key=value,...]
Result<KvPolicySpec> parse_inline(const std::string &text) {
    KvPolicySpec spec;
    const size_t colon = text.find(':');
    spec.name = text.substr(0, colon);
    if (!is_name(spec.name))
        return Status::errorf("KV policy '%s': '%s' is not a policy name (%s; known policies: %s)",
                              text.c_str(), spec.name.c_str(), k_form, kv_policy_names().c_str());
    if (colon == std::string::npos) return spec;
    const std::string rest = text.substr(colon + 1);
    if (rest.empty())
        return Status::errorf("KV policy '%s': nothing after ':' (%s, e.g. %s)", text.c_str(), k_form,
                              "snapkv:budget=512");
    std::stringstream parts(rest);
    std::string part;
    while (std::getline(parts, part, ',')) {
        const size_t eq = part.find('=');
        const std::string key = part.substr(0, eq);
        if (eq == std::string::npos || !is_name(key) || eq + 1 == part.size())
            return Status::errorf("KV policy '%s': '%s' is not key=value (%s)", text.c_str(), part.c_str(),
                                  k_form);
        if (!spec.params.emplace(key, part.substr(eq + 1)).second)
            return Status::errorf("KV policy '%s': key '%s' given twice", text.c_str(), key.c_str());
    }
    if (!rest.empty() && rest.back() == ',')
        return Status::errorf("KV policy '%s': trailing ',' (%s)", text.c_str(), k_form);
    return spec;
}

// @FILE.json: {"name": ..., key: value, ...}
Result<KvPolicySpec> parse_file(const std::string &path) {
    std::ifstream f(path);
    if (!f) return Status::errorf("KV policy file '%s': cannot open it", path.c_str());
    std::stringstream buf;
    buf << f.rdbuf();
    const json j = json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        return Status::errorf(
            "KV policy file '%s': not valid JSON; expected an object such as "
            "{\"name\": \"dense\"}",
            path.c_str());
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string())
        return Status::errorf(
            "KV policy file '%s': expected a JSON object with a string \"name\" (known "
            "policies: %s), got %s",
            path.c_str(), kv_policy_names().c_str(), j.type_name());
    KvPolicySpec spec;
    spec.name = j["name"].get<std::string>();
    for (const auto &[key, value] : j.items()) {
        if (key == "name") continue;
        if (value.is_string())
            spec.params[key] = value.get<std::string>();
        else if (value.is_number() || value.is_boolean())
            spec.params[key] = value.dump();
        else
            return Status::errorf("KV policy file '%s': key '%s' is %s; expected a number, string or boolean",
                                  path.c_str(), key.c_str(), value.type_name());
    }
    return spec;
}

}  // namespace

Result<KvPolicySpec> kv_policy_spec_parse(const std::string &text) {
    if (text.empty())
        return Status::errorf("empty KV policy (%s; known policies: %s)", k_form, kv_policy_names().c_str());
    Result<KvPolicySpec> spec = text[0] == '@' ? parse_file(text.substr(1)) : parse_inline(text);
    if (!spec.ok()) return spec.status();
    SIEVE_TRY(check_spec(*spec, text));
    return spec;
}

Result<std::vector<KvPolicySpec>> kv_policy_spec_parse_list(const std::string &text) {
    // Regroup "a,b:k=1,j=2,c" into "a", "b:k=1,j=2", "c" before parsing each.
    std::vector<std::string> items;
    std::stringstream parts(text);
    std::string part;
    while (std::getline(parts, part, ',')) {
        const bool continues = !items.empty() && part.find(':') == std::string::npos &&
                               part.find('=') != std::string::npos && part[0] != '@';
        if (continues)
            items.back() += "," + part;
        else
            items.push_back(part);
    }
    if (text.empty() || text.back() == ',') items.emplace_back();  // reported as an empty spec
    std::vector<KvPolicySpec> out;
    for (const std::string &item : items) {
        Result<KvPolicySpec> s = kv_policy_spec_parse(item);
        if (!s.ok()) return s.status();
        out.push_back(std::move(*s));
    }
    return out;
}

std::string kv_policy_spec_label(const KvPolicySpec &spec) {
    std::string s = spec.name;
    char sep = ':';
    for (const auto &[key, value] : spec.params) {
        s += sep + key + "=" + value;
        sep = ',';
    }
    return s;
}

Result<KvPolicyPtr> kv_policy_make(const KvPolicySpec &spec) {
    const std::string label = kv_policy_spec_label(spec);
    SIEVE_TRY(check_spec(spec, label));
    Result<KvPolicyPtr> p = find_entry(spec.name)->make(spec);
    if (!p.ok()) return p.status().with_context("KV policy '" + label + "'");
    return p;
}

std::string kv_policy_names() {
    std::string s;
    for (const KvPolicyEntry &e : kv_policy_table()) s += (s.empty() ? "" : ", ") + std::string(e.name);
    return s;
}

std::string kv_policy_help() {
    std::string s;
    for (const KvPolicyEntry &e : kv_policy_table())
        s += strfmt("  %-12s %s (%s)\n", e.name, e.summary, keys_text(e).c_str());
    return s;
}

}  // namespace sieve
