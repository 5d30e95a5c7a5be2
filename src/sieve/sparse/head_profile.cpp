#include "sieve/sparse/head_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

namespace sieve {

using json = nlohmann::json;

Result<HeadProfile> head_profile_load(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status::errorf("head profile '%s': cannot open it", path.c_str());
    // A profile is a few KiB; read at most 16 MiB (a device or a wrong file
    // must not be read forever).
    constexpr size_t k_max_bytes = size_t{16} << 20;
    std::string text(k_max_bytes + 1, '\0');
    f.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(f.gcount()));
    if (text.size() > k_max_bytes)
        return Status::errorf("head profile '%s': larger than 16 MiB; expected the JSON `sieve calibrate` writes",
                              path.c_str());
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&](const char *what) {
        return Status::errorf("head profile '%s': %s (expected the JSON `sieve calibrate` writes: format "
                              "\"sieve-head-profile\", n_layer, n_head_kv, scores[n_layer][n_head_kv])",
                              path.c_str(), what);
    };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    if (!j.contains("format") || j["format"] != "sieve-head-profile") return bad("no \"format\": \"sieve-head-profile\"");
    if (!j.contains("version") || j["version"] != 1) return bad("version is not 1");
    HeadProfile p;
    if (!j.contains("n_layer") || !j["n_layer"].is_number_integer() || !j.contains("n_head_kv") ||
        !j["n_head_kv"].is_number_integer())
        return bad("n_layer or n_head_kv missing or not an integer");
    p.n_layer = j["n_layer"].get<int64_t>();
    p.n_head_kv = j["n_head_kv"].get<int64_t>();
    if (p.n_layer < 1 || p.n_head_kv < 1 || p.n_layer > 4096 || p.n_head_kv > 4096)
        return bad("n_layer / n_head_kv out of range");
    if (!j.contains("scores") || !j["scores"].is_array() || static_cast<int64_t>(j["scores"].size()) != p.n_layer)
        return bad("scores is not an array of n_layer rows");
    for (const json &row : j["scores"]) {
        if (!row.is_array() || static_cast<int64_t>(row.size()) != p.n_head_kv)
            return bad("a row of scores does not hold n_head_kv numbers");
        for (const json &x : row) {
            if (!x.is_number() || !std::isfinite(x.get<double>())) return bad("a score is not a finite number");
            p.scores.push_back(x.get<double>());
        }
    }
    if (j.contains("model") && j["model"].is_string()) p.model = j["model"].get<std::string>();
    if (j.contains("method") && j["method"].is_string()) p.method = j["method"].get<std::string>();
    if (j.contains("sink") && j["sink"].is_number_integer()) p.sink = j["sink"].get<int64_t>();
    if (j.contains("recent") && j["recent"].is_number_integer()) p.recent = j["recent"].get<int64_t>();
    if (j.contains("data")) p.data_json = j["data"].dump();
    return p;
}

std::string head_profile_json(const HeadProfile &p) {
    json j;
    j["format"] = "sieve-head-profile";
    j["version"] = 1;
    j["model"] = p.model;
    j["n_layer"] = p.n_layer;
    j["n_head_kv"] = p.n_head_kv;
    j["method"] = p.method;
    j["sink"] = p.sink;
    j["recent"] = p.recent;
    j["data"] = json::parse(p.data_json, nullptr, false);
    json scores = json::array();
    for (int64_t l = 0; l < p.n_layer; ++l) {
        json row = json::array();
        for (int64_t g = 0; g < p.n_head_kv; ++g) {
            // 6 significant digits: the file stays readable, ranks unchanged in practice.
            const double s = p.score(l, g);
            row.push_back(std::stod(strfmt("%.6g", s)));
        }
        scores.push_back(row);
    }
    j["scores"] = scores;
    return j.dump(1) + "\n";
}

std::vector<char> head_profile_streaming(const HeadProfile &p, double fraction) {
    const int64_t n = p.n_layer * p.n_head_kv;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const double sa = p.scores[static_cast<size_t>(a)], sb = p.scores[static_cast<size_t>(b)];
        return sa < sb || (sa == sb && a > b);
    });
    const int64_t k = std::clamp<int64_t>(static_cast<int64_t>(std::llround(fraction * static_cast<double>(n))), 0, n);
    std::vector<char> mask(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < k; ++i) mask[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
    return mask;
}

}  // namespace sieve
