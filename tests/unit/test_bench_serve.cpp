// sieve bench-serve's pure parts: the SSE parser under every way a stream can
// be split, OpenAI chunk parsing, the latency statistics against numpy and a
// direct computation, and the seeded workload and arrival process.
#include <gtest/gtest.h>

#include <set>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sieve/cli/bench_serve_sse.h"
#include "sieve/cli/bench_serve_stats.h"

using namespace sieve::cli;

namespace {

// Feeds `stream` in the pieces cut at `cuts` (ascending offsets).
std::vector<std::string> parse_in_pieces(const std::string &stream, const std::vector<size_t> &cuts) {
    SseParser p;
    std::vector<std::string> events;
    size_t at = 0;
    for (size_t c : cuts) {
        EXPECT_TRUE(p.feed(std::string_view(stream).substr(at, c - at), &events));
        at = c;
    }
    EXPECT_TRUE(p.feed(std::string_view(stream).substr(at), &events));
    return events;
}

// A stream with every line ending, comments, fields other than data, a
// multi-line event, "data:" without the space, an empty data value, and an
// event with no data (which must not be dispatched).
const std::string k_stream =
    ": keep-alive\n"
    "data: {\"a\":1}\n\n"
    "event: ping\r\n"
    "id: 7\r\n"
    "data:first\r\n"
    "data:  second\r\n\r\n"
    ":comment\r\r"
    "retry: 100\n\n"
    "data\n\n"
    "data: \xc3\xa9\xe2\x82\xac\r"
    "\r"
    "data: [DONE]\n\n";
const std::vector<std::string> k_events = {"{\"a\":1}", "first\n second", "", "\xc3\xa9\xe2\x82\xac", "[DONE]"};

}  // namespace

TEST(SseParser, WholeStream) {
    EXPECT_EQ(parse_in_pieces(k_stream, {}), k_events);
}

TEST(SseParser, EverySingleSplitPoint) {
    for (size_t cut = 0; cut <= k_stream.size(); ++cut)
        EXPECT_EQ(parse_in_pieces(k_stream, {cut}), k_events) << "split at byte " << cut;
}

TEST(SseParser, RandomSplitsAndByteByByte) {
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 300; ++trial) {
        size_t n_cuts = rng() % 12;
        std::vector<size_t> cuts;
        for (size_t i = 0; i < n_cuts; ++i) cuts.push_back(rng() % (k_stream.size() + 1));
        std::sort(cuts.begin(), cuts.end());
        EXPECT_EQ(parse_in_pieces(k_stream, cuts), k_events) << "trial " << trial;
    }
    std::vector<size_t> every(k_stream.size());
    std::iota(every.begin(), every.end(), size_t(0));
    EXPECT_EQ(parse_in_pieces(k_stream, every), k_events);
}

TEST(SseParser, UnfinishedEventIsHeldBack) {
    SseParser p;
    std::vector<std::string> events;
    ASSERT_TRUE(p.feed("data: x\n", &events));
    EXPECT_TRUE(events.empty());
    EXPECT_TRUE(p.has_partial_event());
    ASSERT_TRUE(p.feed("\n", &events));
    EXPECT_EQ(events, std::vector<std::string>{"x"});
    EXPECT_FALSE(p.has_partial_event());
    ASSERT_TRUE(p.feed("data: y", &events));
    EXPECT_TRUE(p.has_partial_event());
}

TEST(SseParser, OverlongLineIsAnError) {
    SseParser p(64);
    std::vector<std::string> events;
    EXPECT_TRUE(p.feed("data: " + std::string(50, 'x') + "\n\n", &events));
    EXPECT_FALSE(p.feed("data: " + std::string(100, 'y'), &events));
    EXPECT_NE(p.error().find("longer than 64"), std::string::npos) << p.error();
    EXPECT_FALSE(p.feed("\n\n", &events));  // stays failed
    EXPECT_EQ(events.size(), 1u);
}

TEST(StreamChunk, CompletionChatUsageDoneError) {
    StreamChunk c;
    std::string why;
    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"index":0,"text":"Hi"}]})", false, &c, &why));
    EXPECT_EQ(c.text, "Hi");
    EXPECT_FALSE(c.has_usage);

    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", true, &c, &why));
    EXPECT_EQ(c.text, "");
    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"delta":{"content":"yo"}}]})", true, &c, &why));
    EXPECT_EQ(c.text, "yo");
    // A completions reader does not take a chat delta, nor the reverse.
    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"delta":{"content":"yo"}}]})", false, &c, &why));
    EXPECT_EQ(c.text, "");
    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"text":"t"}]})", true, &c, &why));
    EXPECT_EQ(c.text, "");
    // content: null (chat finish chunks)
    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"delta":{"content":null},"finish_reason":"length"}]})", true, &c,
                                   &why));
    EXPECT_EQ(c.text, "");

    ASSERT_TRUE(parse_stream_chunk(
        R"({"choices":[],"usage":{"prompt_tokens":17,"completion_tokens":5,"total_tokens":22}})", false, &c, &why));
    EXPECT_TRUE(c.has_usage);
    EXPECT_EQ(c.prompt_tokens, 17);
    EXPECT_EQ(c.completion_tokens, 5);
    EXPECT_EQ(c.cached_tokens, 0);
    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,)"
                                   R"("prompt_tokens_details":{"cached_tokens":32}}})",
                                   false, &c, &why));
    EXPECT_EQ(c.cached_tokens, 32);
    ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"text":"a"}],"usage":null})", false, &c, &why));
    EXPECT_FALSE(c.has_usage);

    ASSERT_TRUE(parse_stream_chunk("[DONE]", false, &c, &why));
    EXPECT_TRUE(c.done);
    ASSERT_TRUE(parse_stream_chunk(R"({"error":{"message":"out of KV","type":"server_error"}})", false, &c, &why));
    EXPECT_EQ(c.error, "out of KV");

    EXPECT_FALSE(parse_stream_chunk("{\"choices\":", false, &c, &why));
    EXPECT_NE(why.find("not a JSON object"), std::string::npos);
    EXPECT_FALSE(parse_stream_chunk("[1,2]", false, &c, &why));
}

TEST(Stats, PercentilesMatchNumpy) {
    // numpy.percentile(v, q) with the default (linear) method.
    std::vector<double> v = {3.5, -1.25, 7.0, 2.0, 2.0, 10.5, 0.125};
    std::sort(v.begin(), v.end());
    const std::pair<double, double> golden[] = {{0, -1.25}, {1, -1.1675}, {25, 1.0625}, {50, 2.0},
                                                {90, 8.4},  {99, 10.29},  {100, 10.5}};
    for (auto [q, want] : golden) EXPECT_NEAR(percentile_sorted(v, q), want, 1e-12) << "q=" << q;
    LatencySummary s = summarize({3.5, -1.25, 7.0, 2.0, 2.0, 10.5, 0.125});
    EXPECT_NEAR(s.mean, 3.4107142857142856, 1e-12);
    EXPECT_NEAR(s.std, 3.772973844681813, 1e-12);  // numpy.std (population)
    EXPECT_EQ(s.min, -1.25);
    EXPECT_EQ(s.max, 10.5);
}

TEST(Stats, PercentilesOfRandomDataAgainstRanks) {
    // Direct computation: with values equal to their rank r = 0..n-1, the
    // q-th percentile is exactly q/100 * (n-1); any monotone map of the ranks
    // then moves it between the two neighbouring values.
    std::mt19937_64 rng(99);
    for (size_t n : {1u, 2u, 3u, 7u, 100u, 1001u}) {
        std::vector<double> ranks(n);
        std::iota(ranks.begin(), ranks.end(), 0.0);
        std::vector<double> vals(n);
        std::exponential_distribution<double> gap(0.1);
        double acc = -50;
        for (double &x : vals) x = (acc += gap(rng) + 1e-3);
        std::vector<double> shuffled = vals;
        std::shuffle(shuffled.begin(), shuffled.end(), rng);
        LatencySummary s = summarize(shuffled);
        for (double q : {0.0, 13.0, 50.0, 90.0, 99.0, 100.0}) {
            double pos = q / 100 * double(n - 1);
            EXPECT_NEAR(percentile_sorted(ranks, q), pos, 1e-9) << "n=" << n << " q=" << q;
            double p = percentile_sorted(vals, q);
            size_t lo = size_t(std::floor(pos)), hi = std::min(n - 1, lo + 1);
            EXPECT_GE(p, vals[lo]);
            EXPECT_LE(p, vals[hi]);
        }
        EXPECT_EQ(s.median, percentile_sorted(vals, 50));
        EXPECT_EQ(s.p99, percentile_sorted(vals, 99));
        long double sum = 0;
        for (double x : vals) sum += x;
        EXPECT_NEAR(s.mean, double(sum / n), 1e-9 * std::max(1.0, std::abs(s.mean)));
        EXPECT_EQ(s.n, n);
    }
    EXPECT_EQ(summarize({}).n, 0u);
}

TEST(Workload, SeededLengthsAndIds) {
    std::vector<RequestSpec> a = make_workload(7, 200, 100, 40, 0.5, 513);
    std::vector<RequestSpec> b = make_workload(7, 200, 100, 40, 0.5, 513);
    std::vector<RequestSpec> c = make_workload(8, 200, 100, 40, 0.5, 513);
    bool any_differs = false;
    int64_t min_in = 1 << 30, max_in = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].token_ids, b[i].token_ids);
        EXPECT_EQ(a[i].output_len, b[i].output_len);
        any_differs |= a[i].token_ids != c[i].token_ids;
        EXPECT_GE(a[i].input_len, 50);
        EXPECT_LE(a[i].input_len, 150);
        EXPECT_GE(a[i].output_len, 20);
        EXPECT_LE(a[i].output_len, 60);
        EXPECT_EQ(int64_t(a[i].token_ids.size()), a[i].input_len);
        for (int32_t id : a[i].token_ids) ASSERT_TRUE(id >= 0 && id < 513) << id;
        min_in = std::min(min_in, a[i].input_len);
        max_in = std::max(max_in, a[i].input_len);
    }
    EXPECT_TRUE(any_differs);
    EXPECT_LT(min_in, 60);  // 200 draws cover the range
    EXPECT_GT(max_in, 140);
    for (const RequestSpec &r : make_workload(3, 20, 33, 9, 0.0, 50)) {
        EXPECT_EQ(r.input_len, 33);
        EXPECT_EQ(r.output_len, 9);
    }
    // A ratio close to 1 never draws a zero length.
    for (const RequestSpec &r : make_workload(5, 200, 3, 1, 0.99, 50)) {
        EXPECT_GE(r.input_len, 1);
        EXPECT_GE(r.output_len, 1);
    }
}

// --random-prefix-len: every request starts with the same prefix, drawn once;
// what follows is exactly the workload without a prefix.
TEST(Workload, SharedPrefix) {
    const std::vector<RequestSpec> plain = make_workload(9, 30, 100, 20, 0.3, 700);
    const std::vector<RequestSpec> pre = make_workload(9, 30, 100, 20, 0.3, 700, 250);
    ASSERT_EQ(pre.size(), plain.size());
    const std::vector<int32_t> prefix(pre[0].token_ids.begin(), pre[0].token_ids.begin() + 250);
    EXPECT_GT(std::set<int32_t>(prefix.begin(), prefix.end()).size(), 100u) << "a random prefix, not one id repeated";
    for (size_t i = 0; i < pre.size(); ++i) {
        EXPECT_EQ(pre[i].input_len, plain[i].input_len + 250);
        EXPECT_EQ(pre[i].output_len, plain[i].output_len);
        ASSERT_EQ(int64_t(pre[i].token_ids.size()), pre[i].input_len);
        EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), pre[i].token_ids.begin())) << "request " << i;
        EXPECT_TRUE(std::equal(plain[i].token_ids.begin(), plain[i].token_ids.end(), pre[i].token_ids.begin() + 250))
            << "request " << i;
    }
}

TEST(Arrivals, PoissonSeededAndInfinite) {
    std::vector<double> inf = arrival_times(1, 50, INFINITY);
    EXPECT_TRUE(std::all_of(inf.begin(), inf.end(), [](double t) { return t == 0; }));

    const double rate = 4.0;
    std::vector<double> a = arrival_times(11, 20000, rate);
    EXPECT_EQ(a, arrival_times(11, 20000, rate));
    EXPECT_NE(a, arrival_times(12, 20000, rate));
    std::vector<double> gaps(a.size());
    double prev = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        gaps[i] = a[i] - prev;
        ASSERT_GE(gaps[i], 0.0);
        prev = a[i];
    }
    // Exponential gaps: mean 1/rate, std 1/rate, P(gap > mean) = e^-1. With
    // 20000 draws the standard errors are under 1%; the bounds are 4-5 of them.
    double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / double(gaps.size());
    EXPECT_NEAR(mean * rate, 1.0, 0.03);
    double var = 0;
    for (double g : gaps) var += (g - mean) * (g - mean);
    EXPECT_NEAR(std::sqrt(var / double(gaps.size())) * rate, 1.0, 0.05);
    double above = double(std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g > 1.0 / rate; }));
    EXPECT_NEAR(above / double(gaps.size()), std::exp(-1.0), 0.02);
}
