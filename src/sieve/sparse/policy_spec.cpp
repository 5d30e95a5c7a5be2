#include "sieve/sparse/policy_spec.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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

// The registry: add a row here when a policy lands.
const std::vector<KvPolicyEntry> &kv_policy_table() {
    static const std::vector<KvPolicyEntry> table = {
        {"dense", {}, "keep every row (no policy; the reference)", make_dense},
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
