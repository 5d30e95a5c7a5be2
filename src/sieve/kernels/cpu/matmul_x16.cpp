// The x16 layout of matmul_q8.h: repacking at load, the decode dot that
// expands tiles in registers, and the expansion into pack_tile's layout for
// prefill. Both kernels compute tile_dot's bits.
#include <cstring>
#include <vector>

#include "sieve/kernels/cpu/intrin.h"

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kernels/cpu/matmul_q8_rows.h"
#include "sieve/quant/blocks.h"

namespace sieve::cpu::q8 {

namespace {
// Where the pieces of one x16 unit lie (matmul_q8.h). A unit is a pair of
// 32-column blocks for the 32-element types, one 256-column super-block for
// the K-quants; offsets are bytes from the unit's start, -1 = absent.
struct X16Layout {
    int unit_blocks = 0;   // 32-column blocks per unit
    int w_bytes = 0;       // weight bytes of one block for 16 rows
    int hi_off = -1;       // Q5: 64 bytes per block; Q6_K: 128 bytes per block
    int d_off = -1;        // 16 f16 per block (32-element types) or per unit (K-quants)
    int m_off = -1;        // Q4_1 / Q5_1: 16 f16 per block; Q4_K / Q5_K: dmin, 16 f16 per unit
    int sc_off = -1;       // K-quants: 16 bytes per sub-block (Q6_K: per 16-column group)
    int mn_off = -1;       // Q4_K / Q5_K: 16 bytes per sub-block
    int unit_bytes = 0;
};

constexpr X16Layout x16_layout(GgmlType type) {
    X16Layout l;
    switch (type) {
        case GgmlType::Q4_0: l = {2, 256, -1, 512, -1, -1, -1, 576}; break;
        case GgmlType::Q4_1: l = {2, 256, -1, 512, 576, -1, -1, 640}; break;
        case GgmlType::Q5_0: l = {2, 256, 512, 640, -1, -1, -1, 704}; break;
        case GgmlType::Q5_1: l = {2, 256, 512, 640, 704, -1, -1, 768}; break;
        case GgmlType::Q8_0: l = {2, 512, -1, 1024, -1, -1, -1, 1088}; break;
        case GgmlType::Q4_K: l = {8, 256, -1, 2048, 2080, 2112, 2240, 2368}; break;
        case GgmlType::Q5_K: l = {8, 256, 2048, 2560, 2592, 2624, 2752, 2880}; break;
        case GgmlType::Q6_K: l = {8, 256, 2048, 3072, -1, 3104, -1, 3392}; break;
        default: break;
    }
    return l;
}

// Byte offsets of d (and m) inside a GGUF block of a 32-element type.
inline int raw_block_bytes(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0: return 18;
        case GgmlType::Q4_1: return 20;
        case GgmlType::Q5_0: return 22;
        case GgmlType::Q5_1: return 24;
        case GgmlType::Q8_0: return 34;
        default: return 0;
    }
}
}  // namespace

bool x16_ok(GgmlType type, int64_t n_rows, int64_t n_cols) {
    const TypeTraits *tr = type_traits(type);
    return has_tile() && x16_layout(type).unit_bytes > 0 && tr && n_rows > 0 && n_cols > 0 &&
           n_cols % tr->block_size == 0;
}

int64_t x16_tile_stride(GgmlType type, int64_t n_cols) {
    const X16Layout l = x16_layout(type);
    const int64_t n_blocks = n_cols / k_block;
    return (n_blocks + l.unit_blocks - 1) / l.unit_blocks * l.unit_bytes;
}

int64_t x16_bytes(GgmlType type, int64_t n_rows, int64_t n_cols) {
    return (n_rows + k_tile_rows - 1) / k_tile_rows * x16_tile_stride(type, n_cols);
}

void repack_x16(GgmlType type, const void *src, int64_t row_bytes, int64_t n_rows, int64_t n_cols, uint8_t *dst) {
    const X16Layout l = x16_layout(type);
    const TypeTraits *tr = type_traits(type);
    SIEVE_CHECKF(l.unit_bytes > 0 && tr && n_rows > 0 && n_cols > 0 && n_cols % tr->block_size == 0,
                 "repack_x16: %s %lld x %lld has no x16 layout", type_name(type), static_cast<long long>(n_rows),
                 static_cast<long long>(n_cols));
    const uint8_t *in = static_cast<const uint8_t *>(src);
    const RowShape s = row_shape(n_cols);
    const int64_t stride = x16_tile_stride(type, n_cols);
    std::memset(dst, 0, static_cast<size_t>(x16_bytes(type, n_rows, n_cols)));
    const bool kq = l.unit_blocks == 8, q6 = type == GgmlType::Q6_K, q8 = type == GgmlType::Q8_0;
    const bool q5 = type == GgmlType::Q5_0 || type == GgmlType::Q5_1 || type == GgmlType::Q5_K;
    // Each row goes through unpack_weight (u in element order, whatever the
    // type's bit layout); the scales are copied from the GGUF bytes.
    std::vector<uint8_t> un(static_cast<size_t>(s.stride_bytes) + 64);
    uint8_t *u_row = un.data() + (64 - reinterpret_cast<uintptr_t>(un.data()) % 64) % 64;
    for (int64_t r = 0; r < n_rows; ++r) {
        uint8_t *tile = dst + r / k_tile_rows * stride;
        const int rr = static_cast<int>(r % k_tile_rows);
        const uint8_t *row = in + r * row_bytes;
        unpack_weight(type, row, s, u_row);
        for (int64_t b = 0; b < s.n_blocks; ++b) {
            uint8_t *unit = tile + b / l.unit_blocks * l.unit_bytes;
            const int h = static_cast<int>(b % l.unit_blocks);
            const uint8_t *u = u_row + b * k_block;
            uint8_t *wb = unit + h * l.w_bytes;
            if (q8) {
                for (int q = 0; q < 8; ++q)
                    for (int k = 0; k < 4; ++k) wb[64 * q + 4 * rr + k] = u[4 * q + k];
            } else {
                for (int j = 0; j < 4; ++j)
                    for (int k = 0; k < 4; ++k)
                        wb[64 * j + 4 * rr + k] = static_cast<uint8_t>((u[8 * j + k] & 0x0f) | (u[8 * j + 4 + k] & 0x0f) << 4);
            }
            if (q5) {
                uint8_t *hb = unit + l.hi_off + 64 * h;
                for (int j = 0; j < 4; ++j)
                    for (int k = 0; k < 4; ++k)
                        hb[4 * rr + k] = static_cast<uint8_t>(hb[4 * rr + k] | ((u[8 * j + k] >> 4) & 1) << (2 * j) |
                                                              ((u[8 * j + 4 + k] >> 4) & 1) << (2 * j + 1));
            } else if (q6) {
                uint8_t *hb = unit + l.hi_off + 128 * h;
                for (int j = 0; j < 4; ++j)
                    for (int k = 0; k < 4; ++k) {
                        hb[4 * rr + k] = static_cast<uint8_t>(hb[4 * rr + k] | (u[8 * j + k] >> 4) << (2 * j));
                        hb[64 + 4 * rr + k] = static_cast<uint8_t>(hb[64 + 4 * rr + k] | (u[8 * j + 4 + k] >> 4) << (2 * j));
                    }
            }
            if (!kq) {
                const uint8_t *blk = row + b * raw_block_bytes(type);
                std::memcpy(unit + l.d_off + 32 * h + 2 * rr, blk, 2);
                if (l.m_off >= 0) std::memcpy(unit + l.m_off + 32 * h + 2 * rr, blk + 2, 2);
            }
        }
        if (kq)
            for (int64_t sb = 0; sb < s.n_blocks / 8; ++sb) {
                uint8_t *unit = tile + sb * l.unit_bytes;
                if (q6) {
                    const uint8_t *blk = row + sb * 210;
                    std::memcpy(unit + l.d_off + 2 * rr, blk + 208, 2);
                    for (int g = 0; g < 16; ++g) unit[l.sc_off + 16 * g + rr] = blk[192 + g];
                } else {
                    const uint8_t *blk = row + sb * (type == GgmlType::Q5_K ? 176 : 144);
                    std::memcpy(unit + l.d_off + 2 * rr, blk, 2);
                    std::memcpy(unit + l.m_off + 2 * rr, blk + 2, 2);
                    for (int j = 0; j < 8; ++j)
                        k_quant_scale_min(j, blk + 4, unit + l.sc_off + 16 * j + rr, unit + l.mn_off + 16 * j + rr);
                }
            }
    }
}

#if SIEVE_Q8_VNNI
namespace {
// Reads an x16 unit in registers: the weight vectors of nibble vector j of
// block h (vector j holds columns 8 j .. 8 j + 3 in its low nibbles, 8 j + 4
// .. 8 j + 7 in its high ones) and each scale group's d and c, the same
// values (each exact in f32) as the unpacked row's, so every kernel built on
// it computes what tile_dot computes on pack_tile's tile, bit for bit.
template <GgmlType TY>
struct X16Reader {
    static constexpr bool Q8 = TY == GgmlType::Q8_0, Q6 = TY == GgmlType::Q6_K;
    static constexpr bool Q5 = TY == GgmlType::Q5_0 || TY == GgmlType::Q5_1 || TY == GgmlType::Q5_K;
    static constexpr bool KQ = TY == GgmlType::Q4_K || TY == GgmlType::Q5_K || Q6;
    static constexpr X16Layout l = x16_layout(TY);

    // Bits (2 j, 2 j + 1) of hi bytes moved to bits 4, 5 (epi16 shifts: the
    // bits wanted never cross a byte).
    static inline __m512i shift_to_4(__m512i v, int j) {
        switch (j) {
            case 0: return _mm512_slli_epi16(v, 4);
            case 1: return _mm512_slli_epi16(v, 2);
            case 2: return v;
            default: return _mm512_srli_epi16(v, 2);
        }
    }
    static inline void weights(const uint8_t *unit, int h, int j, __m512i *w0, __m512i *w1) {
        const uint8_t *wb = unit + h * l.w_bytes;
        if constexpr (Q8) {
            *w0 = _mm512_loadu_si512(wb + 128 * j);
            *w1 = _mm512_loadu_si512(wb + 128 * j + 64);
        } else {
            const __m512i m0f = _mm512_set1_epi8(0x0f);
            const __m512i v = _mm512_loadu_si512(wb + 64 * j);
            *w0 = _mm512_and_si512(v, m0f);
            *w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
            if constexpr (Q5) {
                const __m512i m10 = _mm512_set1_epi8(0x10);
                const __m512i hv = shift_to_4(_mm512_loadu_si512(unit + l.hi_off + 64 * h), j);
                *w0 = _mm512_or_si512(*w0, _mm512_and_si512(hv, m10));
                *w1 = _mm512_or_si512(*w1, _mm512_and_si512(_mm512_srli_epi16(hv, 1), m10));
            } else if constexpr (Q6) {
                const __m512i m30 = _mm512_set1_epi8(0x30);
                const uint8_t *hb = unit + l.hi_off + 128 * h;
                *w0 = _mm512_or_si512(*w0, _mm512_and_si512(shift_to_4(_mm512_loadu_si512(hb), j), m30));
                *w1 = _mm512_or_si512(*w1, _mm512_and_si512(shift_to_4(_mm512_loadu_si512(hb + 64), j), m30));
            }
        }
    }
    static inline __m512 f16x16(const uint8_t *p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    }
    static inline __m512 u8x16(const uint8_t *p) {
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
    }
    // Scale group i of block h (i = 0 only, or Q6_K's two 16-column groups).
    static inline void scales(const uint8_t *unit, int h, int i, __m512 *d, __m512 *c) {
        if constexpr (Q6) {
            const __m512 sc = _mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(unit + l.sc_off + 16 * (2 * h + i)))));
            *d = _mm512_mul_ps(f16x16(unit + l.d_off), sc);
            *c = _mm512_mul_ps(*d, _mm512_set1_ps(-32.0f));
        } else if constexpr (KQ) {
            (void)i;
            *d = _mm512_mul_ps(f16x16(unit + l.d_off), u8x16(unit + l.sc_off + 16 * h));
            // 0 - dmin mn, exactly as the VNNI row unpack computes it (which
            // pack_tile's tile holds).
            *c = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(f16x16(unit + l.m_off), u8x16(unit + l.mn_off + 16 * h)));
        } else {
            (void)i;
            *d = f16x16(unit + l.d_off + 32 * h);
            if constexpr (TY == GgmlType::Q4_1 || TY == GgmlType::Q5_1) *c = f16x16(unit + l.m_off + 32 * h);
            else *c = _mm512_mul_ps(*d, _mm512_set1_ps(TY == GgmlType::Q4_0 ? -8.0f : TY == GgmlType::Q5_0 ? -16.0f : -128.0f));
        }
    }
};

// Decode streams the matrix from DRAM: the kernel asks for the bytes this far
// ahead (past a tile's end they are the next tile's, which the same task
// reads next).
constexpr int k_x16_prefetch = 4096;

// tile_dot_t's arithmetic (same integer sums, which are exact so their order
// is free, and the same fma order) with the weights expanded in registers.
template <int T, GgmlType TY>
void x16_dot_t(const uint8_t *tile16, const uint8_t *const *acts, const RowShape &s, float *const *out, __mmask16 m,
               bool stream) {
    using X = X16Reader<TY>;
    constexpr X16Layout l = X::l;
    constexpr int n_groups = X::Q6 ? 2 : 1, j_per_group = 4 / n_groups;
    ConstRowParts a[T];
    for (int t = 0; t < T; ++t) a[t] = parts(acts[t], s);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < s.n_blocks; ++b) {
        const uint8_t *unit = tile16 + b / l.unit_blocks * l.unit_bytes;
        const int h = static_cast<int>(b % l.unit_blocks);
        if (stream && h == 0)
            for (int o = 0; o < l.unit_bytes; o += 64) __builtin_prefetch(unit + k_x16_prefetch + o, 0, 3);
        const uint8_t *xb[T];
        for (int t = 0; t < T; ++t) xb[t] = a[t].bytes + b * k_block;
#pragma GCC unroll 2
        for (int i = 0; i < n_groups; ++i) {
            __m512i ia[T];
            for (int t = 0; t < T; ++t) ia[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int j = i * j_per_group; j < (i + 1) * j_per_group; ++j) {
                __m512i w0, w1;
                X::weights(unit, h, j, &w0, &w1);
                for (int t = 0; t < T; ++t) {
                    int32_t x0, x1;
                    std::memcpy(&x0, xb[t] + 8 * j, 4);
                    std::memcpy(&x1, xb[t] + 8 * j + 4, 4);
                    ia[t] = _mm512_dpbusd_epi32(ia[t], w0, _mm512_set1_epi32(x0));
                    ia[t] = _mm512_dpbusd_epi32(ia[t], w1, _mm512_set1_epi32(x1));
                }
            }
            __m512 d, c;
            X::scales(unit, h, i, &d, &c);
            for (int t = 0; t < T; ++t) {
                const float sum_term = X::Q6 ? a[t].half[2 * b + i] : a[t].aux[b];
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[t]), _mm512_mul_ps(d, _mm512_set1_ps(a[t].scale[b])), acc[t]);
                acc[t] = _mm512_fmadd_ps(c, _mm512_set1_ps(sum_term), acc[t]);
            }
        }
    }
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(out[t], m, acc[t]);
}

template <GgmlType TY>
void x16_dot_n(const uint8_t *tile16, const uint8_t *const *acts, int n_act, const RowShape &s, float *const *out,
               __mmask16 m, bool stream) {
    switch (n_act) {
        case 1: return x16_dot_t<1, TY>(tile16, acts, s, out, m, stream);
        case 2: return x16_dot_t<2, TY>(tile16, acts, s, out, m, stream);
        case 3: return x16_dot_t<3, TY>(tile16, acts, s, out, m, stream);
        case 4: return x16_dot_t<4, TY>(tile16, acts, s, out, m, stream);
        case 5: return x16_dot_t<5, TY>(tile16, acts, s, out, m, stream);
        case 6: return x16_dot_t<6, TY>(tile16, acts, s, out, m, stream);
        case 7: return x16_dot_t<7, TY>(tile16, acts, s, out, m, stream);
        case 8: return x16_dot_t<8, TY>(tile16, acts, s, out, m, stream);
        default: SIEVE_CHECKF(false, "x16_dot: n_act = %d, expected 1..8", n_act);
    }
}

// An x16 tile expanded into pack_tile's layout: vector k of the bytes is
// columns 4 k .. 4 k + 3, then D and C per scale group (tile_bytes()).
template <GgmlType TY>
void x16_unpack_t(const uint8_t *tile16, const RowShape &s, uint8_t *tile) {
    using X = X16Reader<TY>;
    constexpr X16Layout l = X::l;
    constexpr int n_groups = X::Q6 ? 2 : 1;
    const int64_t n_cols = s.n_blocks * k_block, n_all = n_groups * s.n_blocks;
    float *D = reinterpret_cast<float *>(tile + 16 * n_cols), *C = D + 16 * n_all;
    for (int64_t b = 0; b < s.n_blocks; ++b) {
        const uint8_t *unit = tile16 + b / l.unit_blocks * l.unit_bytes;
        const int h = static_cast<int>(b % l.unit_blocks);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            __m512i w0, w1;
            X::weights(unit, h, j, &w0, &w1);
            _mm512_store_si512(tile + 64 * (8 * b + 2 * j), w0);
            _mm512_store_si512(tile + 64 * (8 * b + 2 * j + 1), w1);
        }
        for (int i = 0; i < n_groups; ++i) {
            __m512 d, c;
            X::scales(unit, h, i, &d, &c);
            _mm512_store_ps(D + 16 * (n_groups * b + i), d);
            _mm512_store_ps(C + 16 * (n_groups * b + i), c);
        }
    }
}
}  // namespace
#endif

void x16_unpack_tile(GgmlType type, const uint8_t *tile16, const RowShape &s, uint8_t *tile) {
#if SIEVE_Q8_VNNI
    switch (type) {
        case GgmlType::Q4_0: return x16_unpack_t<GgmlType::Q4_0>(tile16, s, tile);
        case GgmlType::Q4_1: return x16_unpack_t<GgmlType::Q4_1>(tile16, s, tile);
        case GgmlType::Q5_0: return x16_unpack_t<GgmlType::Q5_0>(tile16, s, tile);
        case GgmlType::Q5_1: return x16_unpack_t<GgmlType::Q5_1>(tile16, s, tile);
        case GgmlType::Q8_0: return x16_unpack_t<GgmlType::Q8_0>(tile16, s, tile);
        case GgmlType::Q4_K: return x16_unpack_t<GgmlType::Q4_K>(tile16, s, tile);
        case GgmlType::Q5_K: return x16_unpack_t<GgmlType::Q5_K>(tile16, s, tile);
        case GgmlType::Q6_K: return x16_unpack_t<GgmlType::Q6_K>(tile16, s, tile);
        default: SIEVE_CHECKF(false, "x16_unpack_tile: type %s has no x16 layout", type_name(type));
    }
#else
    (void)type, (void)tile16, (void)s, (void)tile;
    SIEVE_CHECKF(false, "x16_unpack_tile: needs an AVX-512 VNNI build (check x16_ok first)");
#endif
}

void x16_dot(GgmlType type, const uint8_t *tile16, const uint8_t *const *acts, int n_act, const RowShape &s,
             float *const *out, int n_rows, bool stream) {
#if SIEVE_Q8_VNNI
    SIEVE_CHECKF(n_rows >= 1 && n_rows <= k_tile_rows, "x16_dot: n_rows = %d, expected 1..16", n_rows);
    const __mmask16 m = static_cast<__mmask16>(n_rows == 16 ? 0xffffu : (1u << n_rows) - 1u);
    switch (type) {
        case GgmlType::Q4_0: return x16_dot_n<GgmlType::Q4_0>(tile16, acts, n_act, s, out, m, stream);
        case GgmlType::Q4_1: return x16_dot_n<GgmlType::Q4_1>(tile16, acts, n_act, s, out, m, stream);
        case GgmlType::Q5_0: return x16_dot_n<GgmlType::Q5_0>(tile16, acts, n_act, s, out, m, stream);
        case GgmlType::Q5_1: return x16_dot_n<GgmlType::Q5_1>(tile16, acts, n_act, s, out, m, stream);
        case GgmlType::Q8_0: return x16_dot_n<GgmlType::Q8_0>(tile16, acts, n_act, s, out, m, stream);
        case GgmlType::Q4_K: return x16_dot_n<GgmlType::Q4_K>(tile16, acts, n_act, s, out, m, stream);
        case GgmlType::Q5_K: return x16_dot_n<GgmlType::Q5_K>(tile16, acts, n_act, s, out, m, stream);
        case GgmlType::Q6_K: return x16_dot_n<GgmlType::Q6_K>(tile16, acts, n_act, s, out, m, stream);
        default: SIEVE_CHECKF(false, "x16_dot: type %s has no x16 layout", type_name(type));
    }
#else
    (void)type, (void)tile16, (void)acts, (void)n_act, (void)s, (void)out, (void)n_rows, (void)stream;
    SIEVE_CHECKF(false, "x16_dot: needs an AVX-512 VNNI build (check x16_ok first)");
#endif
}

}  // namespace sieve::cpu::q8
