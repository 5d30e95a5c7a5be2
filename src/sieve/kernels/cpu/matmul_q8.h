// Integer-dot matmul path for the 32-element block types (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0), Q4_K / Q5_K (sub-blocks of 32) and Q6_K (sub-blocks of 16).
// Private to kernels/cpu; matmul.cpp drives it. Rows, activations and
// pack_tile / tile_dot are in matmul_q8.cpp, the x16 layout in matmul_x16.cpp.
//
// Both operands are brought to one "q8 row" layout so a single dot kernel
// serves every type:
//
//   weight block b:      w = d_b * u + c_b          u in [0, 255] (uint8)
//   activation block b:  x ~ e_b * q                q in [-127, 127] (int8)
//
//   sum_c w[c] x[c] ~ sum_b d_b e_b (sum u*q) + sum_b c_b (e_b sum q)
//
// so a weight block stores (u[32], d_b, c_b) and an activation block stores
// (q[32], e_b, e_b * sum q). Unsigned-by-signed bytes is exactly what VNNI's
// vpdpbusd multiplies. Q4_0 has c = -8d, Q5_0 c = -16d, Q8_0 u = q + 128 and
// c = -128d; Q4_1 and Q5_1 store c = m directly.
//
// Weight row layout (n_blocks padded to an even count; pad blocks are all zero):
//   [ bytes: n_pad * 32 ][ scale: n_pad floats ][ aux: n_pad floats ] padded to 64 bytes
// Activation rows add the half-block sums used by Q6_K (below):
//   [ ... as above ... ][ half: 2 n_pad floats ] padded to 64 bytes
// with half[2b + i] = e_b * (sum of q over elements 16 i .. 16 i + 15 of block b).
//
// Q6_K: w = d * sc_j * (u - 32), u in 0..63, sc_j int8 per sub-block j of 16.
// Its sub-blocks are half a q8 block, so it has its own unpacked row:
//   [ bytes: u in element order, n_cols ][ dsc: n_cols / 16 floats, d * sc_j ]
// (the same stride; dsc starts where `scale` does and runs on into `aux`), and
// its own dot:
//   sum_c w[c] x[c] ~ sum_j dsc_j e_b(j) (sum_{c in j} u q) - 32 sum_j dsc_j half_j
// Every weight is exact (f16 d times int8 sc is exact in f32), so the result
// differs from the f32 path only by the 8-bit activation rounding.
#pragma once

#include <cstdint>

#include "sieve/quant/types.h"

namespace sieve::cpu::q8 {

constexpr int64_t k_block = 32;

bool supports(GgmlType t);

struct RowShape {
    int64_t n_blocks = 0;     // real blocks: n_cols / 32
    int64_t n_pad = 0;        // n_blocks rounded up to even
    int64_t stride_bytes = 0; // bytes of one q8 weight row
    int64_t act_stride_bytes = 0; // bytes of one q8 activation row (with the half sums)
};
RowShape row_shape(int64_t n_cols);

// Activations: one row of n_cols floats -> q8 activation row (round to
// nearest, scale amax/127).
void quantize_act(const float *x, const RowShape &s, uint8_t *dst);
// Weights: one GGUF row of `type` -> q8 weight row (the Q6_K row for Q6_K).
void unpack_weight(GgmlType type, const void *src, const RowShape &s, uint8_t *dst);
// out[t] = dot(unpacked weight row of `type`, act row t) for t < n_act (1..4).
void dot(GgmlType type, const uint8_t *w, const uint8_t *const *acts, int n_act, const RowShape &s, float *out);
// Whether dot_raw can read `type`'s blocks directly (AVX-512 VNNI builds:
// every supported type). For a few tokens this skips the unpack to scratch.
bool has_dot_raw(GgmlType t);
// dot() with the weight row given as its raw GGUF blocks.
void dot_raw(GgmlType type, const void *w, const uint8_t *const *acts, int n_act, const RowShape &s, float *out);
// The same with a per-block int32 dot (AVX2 or plain C++): what dot() runs
// without AVX-512 VNNI, and what tests compare the VNNI body with.
void dot_portable(GgmlType type, const uint8_t *w, const uint8_t *const *acts, int n_act, const RowShape &s,
                  float *out);

// Prefill tiles (AVX-512 VNNI builds). k_tile_rows weight rows are packed
// with their 4-byte column groups interleaved, dword k of tile row r at bytes
// [(16 k + r) * 4, +4):
//   [ bytes: 16 n_cols ][ D: 16 n_groups floats ][ C: 16 n_groups floats ]
// A group is a 32-column block (D = d_b, C = c_b of the q8 row), or for
// Q6_K a 16-column sub-block (D = dsc_j, C = -32 dsc_j). One vpdpbusd then
// multiplies 4 columns of all 16 rows by the same 4 activation bytes (a
// broadcast): its int32 lanes are the rows, a group's products add up in
// int32, and each group costs one scale per token for 16 rows. No lane ever
// mixes rows, so there is no horizontal sum: 16 outputs per vector.
constexpr int k_tile_rows = 16;
bool has_tile();
int64_t tile_bytes(GgmlType type, const RowShape &s);
// Packs n_rows <= k_tile_rows GGUF rows of `type` (row_bytes apart); tile
// rows past n_rows are zero. row_scratch holds k_tile_rows * s.stride_bytes.
void pack_tile(GgmlType type, const uint8_t *rows, int64_t row_bytes, int n_rows, const RowShape &s,
               uint8_t *row_scratch, uint8_t *tile);
// out[t][r] = dot(tile row r, activation row t) for r < n_rows, t < n_act (1..8).
void tile_dot(GgmlType type, const uint8_t *tile, const uint8_t *const *acts, int n_act, const RowShape &s,
              float *const *out, int n_rows);

// tile_dot for n_tok tokens whose activation rows are s.act_stride_bytes
// apart from act, 8 at a time; token t's outputs at y + t * y_stride.
void tile_dot_tokens(GgmlType type, const uint8_t *tile, const uint8_t *act, int64_t n_tok, const RowShape &s,
                     float *y, int64_t y_stride, int n_rows);

// Every integer-path type repacked once at load for the tile kernel
// ("x16"), so decode and prefill read the same 16-row tiles and a token's
// result never depends on how many tokens share its step. Each 16 rows (a
// row tile; the last one padded with zero rows) hold units of columns, a
// pair of 32-column blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; an odd last block
// leaves the pair half zero) or one 256-column super-block (Q4_K, Q5_K,
// Q6_K), with the weights in 64-byte vectors, byte 4 r + k for row r:
//   nibble types: vector j (4 per block) holds column 8 j + k in its low
//         nibble and 8 j + 4 + k in its high nibble;
//   Q8_0: vector q (8 per block) holds column 4 q + k as u = q8 + 128;
//   Q5_*: per block one vector more, bit 2 j of byte 4 r + k the fifth bit
//         of column 8 j + k, bit 2 j + 1 that of column 8 j + 4 + k;
//   Q6_K: per block two vectors more, bits 2 j, 2 j + 1 of byte 4 r + k the
//         top two bits of column 8 j + k (first vector), 8 j + 4 + k (second).
// then the scales as the file has them, 16 rows side by side: the f16 d (and
// m) per block; for the K-quants the f16 d (and dmin) per super-block and the
// 6-bit sub-block scales (and mins) one byte per row (Q6_K: its int8 scales
// per 16 columns). So decode streams about what the file holds (Q6_K +1%,
// Q4_K / Q5_K +3%), and the kernel expands weights in registers.
// Needs an AVX-512 VNNI build and n_cols a multiple of the type's block.
bool x16_ok(GgmlType type, int64_t n_rows, int64_t n_cols);
int64_t x16_tile_stride(GgmlType type, int64_t n_cols);  // bytes per 16 rows
int64_t x16_bytes(GgmlType type, int64_t n_rows, int64_t n_cols);  // bytes of the whole repacked matrix
void repack_x16(GgmlType type, const void *src, int64_t row_bytes, int64_t n_rows, int64_t n_cols, uint8_t *dst);
// out[t][r] = dot(row r of the 16-row tile at tile16, activation row t), t < n_act (1..8), r < n_rows (1..16).
// The same arithmetic as tile_dot on the unpacked rows (bit for bit).
// stream: the call is part of a decode pass over the whole matrix (prefetch ahead).
void x16_dot(GgmlType type, const uint8_t *tile16, const uint8_t *const *acts, int n_act, const RowShape &s,
             float *const *out, int n_rows = k_tile_rows, bool stream = false);
// The x16 tile at tile16 expanded into pack_tile's layout (tile_bytes(type, s)
// bytes, 64-byte aligned), for tile_dot: prefill expands each tile once for
// all its tokens, with the bits x16_dot would give.
void x16_unpack_tile(GgmlType type, const uint8_t *tile16, const RowShape &s, uint8_t *tile);

}  // namespace sieve::cpu::q8
