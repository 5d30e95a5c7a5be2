// Reference (de)quantization against the gguf Python package, plus
// properties that need no oracle (round-trip error, Q8_K invariants).
//
// Golden data: tests/data/quant/{dequant,quantize}.bin, made by
// eval/quant/gen_quant_golden.py (format described there).
//
// Tolerance: none. Dequantization is compared bit for bit: both sides take
// the same exact f16 -> f32 conversion and the same float32 operations with
// one rounding each, so any difference (even 1 ulp) means a different formula
// or operation order, which is worth failing on. Quantization is compared byte
// for byte: the package's quantizers are ggml's reference ones
// (trunc(x * id + 8.5), round-half-away for Q8_0, round-half-even for F16/BF16),
// and the golden rows include blocks on power-of-two grids, where x / d lands
// exactly on half-way points, and blocks where a fused multiply-add would pick
// a different nibble (see gen_quant_golden.py), so rounding is really checked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/quant/blocks.h"
#include "sieve/quant/dequant.h"
#include "sieve/quant/types.h"

using namespace sieve;

namespace {

struct GoldenRecord {
    GgmlType type;
    int64_t n;                 // elements
    std::vector<uint8_t> enc;  // encoded row
    std::vector<float> values;
};

struct GoldenFile {
    std::string provenance;
    std::vector<GoldenRecord> records;
    std::string error;  // empty when the file parsed
};

// Reads a golden file; every length is checked against the bytes present.
GoldenFile load_golden(const std::string &name) {
    GoldenFile g;
    const std::string path = std::string(SIEVE_TEST_DATA) + "/quant/" + name;
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        g.error = "cannot open " + path + " (regenerate with eval/quant/gen_quant_golden.py)";
        return g;
    }
    const std::vector<uint8_t> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t pos = 0;
    auto take = [&](void *dst, size_t n_bytes) {
        if (buf.size() - pos < n_bytes) return false;
        std::memcpy(dst, buf.data() + pos, n_bytes);
        pos += n_bytes;
        return true;
    };
    char magic[8];
    uint32_t len = 0, n_records = 0;
    if (!take(magic, 8) || std::memcmp(magic, "SIEVEQG1", 8) != 0 || !take(&len, 4)) {
        g.error = path + ": bad header";
        return g;
    }
    g.provenance.resize(len);
    if (!take(g.provenance.data(), len) || !take(&n_records, 4)) {
        g.error = path + ": truncated header";
        return g;
    }
    for (uint32_t r = 0; r < n_records; ++r) {
        uint32_t hdr[3];
        if (!take(hdr, sizeof hdr)) {
            g.error = path + ": truncated record " + std::to_string(r);
            return g;
        }
        GoldenRecord rec{static_cast<GgmlType>(hdr[0]), hdr[1], std::vector<uint8_t>(hdr[2]),
                         std::vector<float>(hdr[1])};
        int64_t row_bytes = 0;
        if (!type_row_bytes(rec.type, rec.n, &row_bytes) || row_bytes != hdr[2] ||
            !take(rec.enc.data(), rec.enc.size()) || !take(rec.values.data(), rec.values.size() * 4)) {
            g.error = path + ": bad record " + std::to_string(r);
            return g;
        }
        g.records.push_back(std::move(rec));
    }
    if (pos != buf.size()) g.error = path + ": trailing bytes";
    return g;
}

uint32_t bits_of(float f) { return fp32_to_bits(f); }

// First index where two float arrays differ bitwise, or -1.
int64_t first_bit_mismatch(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (bits_of(a[i]) != bits_of(b[i])) return i;
    return -1;
}

constexpr float k_canary = -1234.5f;

// Dequantizes the first n elements of rec from an exactly sized heap copy
// placed `offset` bytes into its buffer, so a read past the row is a heap
// overflow under ASan, and checks the result bitwise and that dst past n is untouched.
void check_dequant_prefix(const GoldenRecord &rec, int64_t n, size_t offset) {
    int64_t row_bytes = 0;
    ASSERT_TRUE(type_row_bytes(rec.type, n, &row_bytes));
    std::vector<uint8_t> src(offset + static_cast<size_t>(row_bytes));
    if (row_bytes > 0) std::memcpy(src.data() + offset, rec.enc.data(), static_cast<size_t>(row_bytes));
    std::vector<float> dst(static_cast<size_t>(n) + 8, k_canary);
    dequantize_row(rec.type, src.data() + offset, dst.data(), n);
    const int64_t bad = first_bit_mismatch(dst.data(), rec.values.data(), n);
    ASSERT_EQ(bad, -1) << type_name(rec.type) << " n=" << n << " element " << bad << ": got "
                       << dst[static_cast<size_t>(bad)] << ", gguf says " << rec.values[static_cast<size_t>(bad)];
    for (size_t i = static_cast<size_t>(n); i < dst.size(); ++i) ASSERT_EQ(dst[i], k_canary) << "wrote past n";
}

}  // namespace

TEST(QuantGolden, DequantizeEqualsGgufBitForBit) {
    const GoldenFile g = load_golden("dequant.bin");
    ASSERT_TRUE(g.error.empty()) << g.error;
    std::set<GgmlType> seen;
    for (const GoldenRecord &rec : g.records) {
        SCOPED_TRACE(std::string(type_name(rec.type)) + " (" + g.provenance + ")");
        seen.insert(rec.type);
        check_dequant_prefix(rec, rec.n, 0);
    }
    // Every weight type sieve supports must be covered, or this test proves nothing about it.
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                       GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                       GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
        EXPECT_TRUE(seen.count(t)) << "no golden record for " << type_name(t);
}

// Rows of 1, 2, 3, ... blocks, from a source that ends exactly at the row's
// end and starts at the weakest alignment a GGUF row can have (2 bytes).
TEST(QuantGolden, DequantizePrefixesReadOnlyTheirRow) {
    const GoldenFile g = load_golden("dequant.bin");
    ASSERT_TRUE(g.error.empty()) << g.error;
    for (const GoldenRecord &rec : g.records) {
        const int64_t block = type_traits(rec.type)->block_size;
        const int64_t n_blocks = rec.n / block;
        for (int64_t nb : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, n_blocks - 1}) {
            if (nb < 1 || nb > n_blocks) continue;
            SCOPED_TRACE(std::string(type_name(rec.type)) + " blocks=" + std::to_string(nb));
            check_dequant_prefix(rec, nb * block, 0);
            check_dequant_prefix(rec, nb * block, rec.type == GgmlType::F32 ? 4 : 2);
        }
        check_dequant_prefix(rec, 0, 0);
    }
}

TEST(QuantGolden, QuantizeEqualsGgufByteForByte) {
    const GoldenFile g = load_golden("quantize.bin");
    ASSERT_TRUE(g.error.empty()) << g.error;
    std::set<GgmlType> seen;
    for (const GoldenRecord &rec : g.records) {
        SCOPED_TRACE(std::string(type_name(rec.type)) + " (" + g.provenance + ")");
        seen.insert(rec.type);
        std::vector<uint8_t> out(rec.enc.size() + 16, 0xA5);
        ASSERT_TRUE(quantize_row_ref(rec.type, rec.values.data(), out.data(), rec.n));
        const int64_t type_size = type_traits(rec.type)->type_size;
        for (size_t i = 0; i < rec.enc.size(); ++i) {
            ASSERT_EQ(out[i], rec.enc[i]) << "byte " << i << " (block " << static_cast<int64_t>(i) / type_size
                                          << ", byte " << static_cast<int64_t>(i) % type_size << " in it)";
        }
        for (size_t i = rec.enc.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 0xA5) << "wrote past the row";
    }
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                       GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1})
        EXPECT_TRUE(seen.count(t)) << "no golden record for " << type_name(t);
}

// ---------------------------------------------------------------------------
// Properties on fresh random data
// ---------------------------------------------------------------------------

namespace {

// Blocks of 32 with a different magnitude each, non-zero means and outliers.
std::vector<float> random_row(std::mt19937 &rng, int64_t n) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unif(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t b = 0; b < n / 32; ++b) {
        const float scale = std::exp2(8.0f * unif(rng));
        const float mean = 2.0f * scale * unif(rng);
        for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
            float v = mean + scale * normal(rng);
            if (unif(rng) > 0.95f) v *= 40.0f;
            x[static_cast<size_t>(i)] = v;
        }
    }
    return x;
}

struct RoundTripCase {
    GgmlType type;
    // |x - dequant(quant(x))| <= step_factor * step + |m| * 2^-11 per block,
    // step = |d| as stored. Symmetric formats clip one end (max maps to q = 0,
    // -max would need q = 2^bits), so their worst case is a full step; the others
    // round to nearest (half a step); the small excess covers d and m being
    // rounded to f16 after the quants were chosen (<= 31 * 2^-11 steps).
    float step_factor;
    bool affine;
};

}  // namespace

TEST(QuantRoundTrip, ErrorWithinStepSize) {
    std::mt19937 rng(1234);
    const RoundTripCase cases[] = {
        {GgmlType::Q8_0, 0.57f, false}, {GgmlType::Q4_0, 1.01f, false}, {GgmlType::Q5_0, 1.02f, false},
        {GgmlType::Q4_1, 0.51f, true},  {GgmlType::Q5_1, 0.52f, true},
    };
    for (const RoundTripCase &c : cases) {
        SCOPED_TRACE(type_name(c.type));
        const int64_t n = 32 * 37;
        const std::vector<float> x = random_row(rng, n);
        int64_t row_bytes = 0;
        ASSERT_TRUE(type_row_bytes(c.type, n, &row_bytes));
        std::vector<uint8_t> q(static_cast<size_t>(row_bytes));
        std::vector<float> y(static_cast<size_t>(n));
        ASSERT_TRUE(quantize_row_ref(c.type, x.data(), q.data(), n));
        dequantize_row(c.type, q.data(), y.data(), n);
        const int64_t type_size = type_traits(c.type)->type_size;
        for (int64_t b = 0; b < n / 32; ++b) {
            const uint8_t *blk = q.data() + b * type_size;
            uint16_t d16, m16 = 0;
            std::memcpy(&d16, blk, 2);  // d is the first field of every 32-element block
            if (c.affine) std::memcpy(&m16, blk + 2, 2);
            const float step = std::fabs(fp16_to_fp32(d16));
            ASSERT_GT(step, 0.0f) << "block " << b;
            const float bound = c.step_factor * step + std::fabs(fp16_to_fp32(m16)) * 0x1p-11f;
            for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
                const size_t k = static_cast<size_t>(i);
                ASSERT_LE(std::fabs(x[k] - y[k]), bound * (1 + 1e-6f)) << "element " << i << " x=" << x[k];
            }
        }
    }
}

TEST(QuantRoundTrip, HalfFormatsRoundToNearest) {
    std::mt19937 rng(99);
    const std::vector<float> x = random_row(rng, 32 * 9);
    for (auto [type, rel] : {std::pair{GgmlType::F16, 0x1p-11f}, std::pair{GgmlType::BF16, 0x1p-8f}}) {
        SCOPED_TRACE(type_name(type));
        std::vector<uint16_t> h(x.size());
        std::vector<float> y(x.size());
        ASSERT_TRUE(quantize_row_ref(type, x.data(), h.data(), static_cast<int64_t>(x.size())));
        dequantize_row(type, h.data(), y.data(), static_cast<int64_t>(x.size()));
        for (size_t i = 0; i < x.size(); ++i) {
            // random_row stays inside F16's normal range, so the relative bound holds.
            ASSERT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) * rel) << "element " << i;
        }
    }
}

TEST(QuantQ8K, InvariantsOnRandomRows) {
    std::mt19937 rng(7);
    const int64_t n = 256 * 5;
    const std::vector<float> x = random_row(rng, n);
    std::vector<block_q8_k> q(static_cast<size_t>(n / 256));
    std::vector<float> y(static_cast<size_t>(n));
    quantize_row_q8_k_ref(x.data(), q.data(), n);
    dequantize_row(GgmlType::Q8_K, q.data(), y.data(), n);
    for (size_t b = 0; b < q.size(); ++b) {
        const float *xb = x.data() + 256 * b;
        // The element of largest magnitude maps to -127 (so d has the opposite sign).
        size_t imax = 0;
        for (size_t i = 1; i < 256; ++i)
            if (std::fabs(xb[i]) > std::fabs(xb[imax])) imax = i;
        EXPECT_EQ(q[b].qs[imax], -127) << "block " << b;
        EXPECT_TRUE(std::signbit(q[b].d) != std::signbit(xb[imax])) << "block " << b;
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int i = 16 * g; i < 16 * g + 16; ++i) sum += q[b].qs[i];
            EXPECT_EQ(q[b].bsums[g], sum) << "block " << b << " group " << g;
        }
        for (size_t i = 0; i < 256; ++i) {
            const size_t k = 256 * b + i;
            ASSERT_LE(std::fabs(x[k] - y[k]), std::fabs(q[b].d) * 0.5f * (1 + 1e-5f)) << "element " << k;
        }
    }
}

// Ties round half to even (ggml's nearest_int), unlike Q8_0's round-half-away.
TEST(QuantQ8K, TiesRoundToEvenAndZeroBlocks) {
    std::vector<float> x(512);
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> k(-120, 120);
    for (size_t i = 0; i < 256; ++i) x[i] = static_cast<float>(k(rng));
    x[5] = -127.0f;  // v = -127 -> iscale = 1, so x * iscale is exact
    x[10] = 2.5f;
    x[11] = 3.5f;
    x[12] = -2.5f;
    x[13] = -0.5f;
    x[14] = 126.5f;
    // Second block stays all zero: d = 0, q = 0, bsums = 0.
    std::vector<block_q8_k> q(2);
    std::memset(q.data(), 0x5A, q.size() * sizeof(block_q8_k));
    quantize_row_q8_k_ref(x.data(), q.data(), 512);
    EXPECT_EQ(q[0].d, 1.0f);
    EXPECT_EQ(q[0].qs[5], -127);
    EXPECT_EQ(q[0].qs[10], 2);
    EXPECT_EQ(q[0].qs[11], 4);
    EXPECT_EQ(q[0].qs[12], -2);
    EXPECT_EQ(q[0].qs[13], 0);
    EXPECT_EQ(q[0].qs[14], 126);
    EXPECT_EQ(q[1].d, 0.0f);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(q[1].qs[i], 0);
    for (int g = 0; g < 16; ++g) ASSERT_EQ(q[1].bsums[g], 0);
}

TEST(QuantContract, UnsupportedOrMisshapenRowsAreRejected) {
    float x[64] = {};
    uint8_t out[512];
    EXPECT_FALSE(quantize_row_ref(GgmlType::Q4_K, x, out, 0));
    EXPECT_FALSE(quantize_row_ref(GgmlType::Q6_K, x, out, 0));
    EXPECT_DEATH(dequantize_row(GgmlType::Q4_0, out, x, 33), "multiple of 32");
    EXPECT_DEATH(dequantize_row(GgmlType::Q8_1, out, x, 32), "not supported");
    EXPECT_DEATH(quantize_row_ref(GgmlType::Q8_0, x, out, 48), "multiple of 32");
    EXPECT_DEATH(quantize_row_q8_k_ref(x, out, 64), "multiple of 256");
}
