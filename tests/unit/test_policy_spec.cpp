// --kv-policy specs (src/sieve/sparse/policy_spec.h): both forms parse, the
// registry makes dense as the null policy, and every malformed spec is an
// error that names what was wrong and what is expected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "sieve/sparse/policy_spec.h"

using namespace sieve;

namespace {

// The error text of a spec that must not parse.
std::string parse_error(const std::string &text) {
    Result<KvPolicySpec> s = kv_policy_spec_parse(text);
    EXPECT_FALSE(s.ok()) << "'" << text << "' parsed";
    return s.ok() ? "" : s.status().message();
}

// A JSON file in a per-process temp folder, removed with the object.
class TempJson {
  public:
    explicit TempJson(const std::string &text) {
        path_ = (std::filesystem::temp_directory_path() / ("sieve_policy_spec_" + std::to_string(getpid()) +
                                                           "_" + std::to_string(counter_++) + ".json"))
                    .string();
        std::ofstream(path_) << text;
    }
    ~TempJson() { std::remove(path_.c_str()); }
    const std::string &path() const { return path_; }

  private:
    std::string path_;
    inline static int counter_ = 0;
};

TEST(PolicySpec, DenseParsesAndMakesTheNullPolicy) {
    Result<KvPolicySpec> s = kv_policy_spec_parse("dense");
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->name, "dense");
    EXPECT_TRUE(s->params.empty());
    Result<KvPolicyPtr> p = kv_policy_make(*s);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(*p, nullptr);
    EXPECT_EQ(kv_policy_spec_label(*s), "dense");
    EXPECT_NE(kv_policy_names().find("dense"), std::string::npos);
    EXPECT_NE(kv_policy_help().find("dense"), std::string::npos);
}

TEST(PolicySpec, JsonFileForm) {
    TempJson f(R"({"name": "dense"})");
    Result<KvPolicySpec> s = kv_policy_spec_parse("@" + f.path());
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->name, "dense");
    EXPECT_TRUE(s->params.empty());
}

TEST(PolicySpec, LabelListsKeysSorted) {
    KvPolicySpec s{"snapkv", {{"window", "32"}, {"budget", "512"}}};
    EXPECT_EQ(kv_policy_spec_label(s), "snapkv:budget=512,window=32");
}

TEST(PolicySpec, UnknownNameListsKnownPolicies) {
    const std::string e = parse_error("snapkb:budget=512");
    EXPECT_NE(e.find("unknown policy 'snapkb'"), std::string::npos) << e;
    EXPECT_NE(e.find("known policies: dense, streaming, snapkv, pyramidkv, layerwise, h2o"), std::string::npos) << e;
}

TEST(PolicySpec, UnknownKeyNamesThePolicyAndItsKeys) {
    const std::string e = parse_error("dense:budget=512");
    EXPECT_NE(e.find("dense has no key 'budget' (it takes no keys)"), std::string::npos) << e;
}

TEST(PolicySpec, MalformedInlineSpecs) {
    EXPECT_NE(parse_error("").find("empty KV policy"), std::string::npos);
    EXPECT_NE(parse_error("dense:").find("nothing after ':'"), std::string::npos);
    EXPECT_NE(parse_error("dense:budget").find("'budget' is not key=value"), std::string::npos);
    EXPECT_NE(parse_error("dense:budget=").find("'budget=' is not key=value"), std::string::npos);
    EXPECT_NE(parse_error("dense:a=1,,b=2").find("'' is not key=value"), std::string::npos);
    EXPECT_NE(parse_error("dense:a=1,a=2").find("key 'a' given twice"), std::string::npos);
    EXPECT_NE(parse_error("dense:a=1,").find("trailing ','"), std::string::npos);
    EXPECT_NE(parse_error("den se").find("is not a policy name"), std::string::npos);
    for (const char *bad : {"", "dense:", "den se"})
        EXPECT_NE(parse_error(bad).find("NAME[:key=value,...] or @FILE.json"), std::string::npos) << bad;
}

TEST(PolicySpec, MalformedFiles) {
    EXPECT_NE(parse_error("@/no/such/policy.json").find("cannot open it"), std::string::npos);
    TempJson not_json("{name: dense");
    EXPECT_NE(parse_error("@" + not_json.path()).find("not valid JSON"), std::string::npos);
    TempJson array("[1, 2]");
    EXPECT_NE(parse_error("@" + array.path()).find("got array"), std::string::npos);
    TempJson no_name(R"({"budget": 512})");
    EXPECT_NE(parse_error("@" + no_name.path()).find("with a string \"name\""), std::string::npos);
    TempJson nested(R"({"name": "dense", "budget": [1]})");
    EXPECT_NE(parse_error("@" + nested.path()).find("key 'budget' is array"), std::string::npos);
    TempJson bad_key(R"({"name": "dense", "budget": 512})");
    EXPECT_NE(parse_error("@" + bad_key.path()).find("dense has no key 'budget'"), std::string::npos);
}

TEST(PolicySpec, ListsKeepKeyValuePairsWithTheirPolicy) {
    Result<std::vector<KvPolicySpec>> two = kv_policy_spec_parse_list("dense,dense");
    ASSERT_TRUE(two.ok()) << two.status().message();
    EXPECT_EQ(two->size(), 2u);
    // "a=1" and "b=2" stay with dense (so the error is about dense's key, not
    // about a policy named "b=2").
    Result<std::vector<KvPolicySpec>> grouped = kv_policy_spec_parse_list("dense:a=1,b=2");
    ASSERT_FALSE(grouped.ok());
    EXPECT_NE(grouped.status().message().find("dense has no key 'a'"), std::string::npos)
        << grouped.status().message();
    Result<std::vector<KvPolicySpec>> trailing = kv_policy_spec_parse_list("dense,");
    ASSERT_FALSE(trailing.ok());
    EXPECT_NE(trailing.status().message().find("empty KV policy"), std::string::npos);
}

}  // namespace
