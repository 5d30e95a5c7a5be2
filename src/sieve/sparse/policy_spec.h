// KV policy specs: the text a user writes after --kv-policy (sieve eval,
// later sieve serve and bench), parsed into a name and key=value parameters,
// and turned into a KvPolicyPtr by a small registry.
//
// Two forms:
//   NAME[:key=value,...]   e.g. "dense", "snapkv:budget=512,window=32"
//   @FILE.json             one JSON object: {"name": "snapkv", "budget": 512, "window": 32}
//                          (every key but "name" is a parameter; values are
//                          numbers, strings or booleans)
// Parameter values stay text here; each policy's factory parses and range-
// checks its own (its errors name the policy, the key and the accepted form).
//
// The registry is one constant table (policy_spec.cpp, kv_policy_table): a
// policy is added by writing its factory and one row naming it, its keys and
// a one-line description: dense (keep every row: the null policy) and the
// eviction families of sparse/eviction.h.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/sparse/policy.h"

namespace sieve {

struct KvPolicySpec {
    std::string name;                           // a registered policy's name
    std::map<std::string, std::string> params;  // key -> value text, sorted by key
};

// Parses either form above; "@FILE" reads the file. Errors say what was
// malformed (position and text), list the expected form and the known policies.
// The name and keys are checked against the registry as well, so a spec that
// parses can be made unless a value is out of range.
Result<KvPolicySpec> kv_policy_spec_parse(const std::string &text);

// A comma-separated list of specs (--kv-policy dense,snapkv:budget=512).
// Commas inside NAME:k=v,k=v belong to that spec: a part that has no ':'
// and contains '=' continues the previous spec.
Result<std::vector<KvPolicySpec>> kv_policy_spec_parse_list(const std::string &text);

// "name" or "name:k=v,k=v" (keys sorted): the label in reports; parsing it
// again gives the same spec.
std::string kv_policy_spec_label(const KvPolicySpec &spec);

// The policy object; nullptr for dense (the engine keeps every row). Errors
// come from the policy's factory (a value it cannot use).
Result<KvPolicyPtr> kv_policy_make(const KvPolicySpec &spec);

// "dense" (comma-separated registered names): for help texts and errors.
std::string kv_policy_names();
// One line per policy: name, its keys, what it does (for --help).
std::string kv_policy_help();

}  // namespace sieve
