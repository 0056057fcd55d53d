// The CPU block linear for GGUF's K-quants (Q4_K, Q5_K, Q6_K: super-blocks of 256 weights), beside the
// 32-weight formats of block_linear.h. The op (block_linear.cpp) dispatches to these when qtype is one.
//
// llama.cpp's super-blocks (raw, per row; facts from ggml's block_q4_K / block_q5_K / block_q6_K):
// - Q4_K (144 bytes): fp16 d, fp16 dmin, 12 bytes of eight 6-bit scales and eight 6-bit mins, 128 bytes of
//   nibbles. Sub-block j (32 weights) is w = d * sc[j] * q - dmin * m[j], q in 0..15.
// - Q5_K (176 bytes): as Q4_K, then 32 bytes of fifth bits (bit j of byte l: weight l of sub-block j)
//   before the nibbles; q in 0..31.
// - Q6_K (210 bytes): 128 bytes of low nibbles, 64 bytes of 2-bit high parts, sixteen int8 scales, fp16
//   d; 16 sub-blocks of 16: w = d * sc[i] * (q - 32), q in 0..63.
//
// Packed (block_linear_kquant_pack.cpp), per group of 16 rows and super-block, with S = kq_stride(qtype):
// - [0, 2048): per 32-weight sub-block j, 256 bytes of low nibbles in the layout of Q4_0/Q4_1 (chunk c,
//   byte 2r + i: row r, low nibble column 4c + i, high nibble column 4c + 2 + i). Q6_K's sub-blocks of 16
//   are the chunks 0-3 and 4-7 of one 32-wide sub-block.
// - the high bits of Q5_K (bit 4 of q) and Q6_K (bits 4-5), per sub-block 64 (Q5_K) or 128 (Q6_K) bytes, in
//   one of two layouts, each a packed type of its own (the type ids below):
//   - lane masks (kQ5_K, kQ6_K; every path reads them, the AVX-512 ones set each mask register from one):
//     the 32 lanes of a chunk (lane 2r + i) for its "a" columns (4c + i) and its "b" columns (4c + 2 + i) as
//     uint32 masks. Q5_K: chunk c at 8c: mask a, mask b. Q6_K: chunk c at 16c: a bit 4, b bit 4, a bit 5, b bit 5.
//   - fields (kQ5_KF, kQ6_KF; not the AVX-512 paths): per 32-byte vector, byte `lane` holds that lane's high
//     bits for several chunk halves, so a vector shift and mask put them in place beside 32 low nibbles
//     (AVX2: 1-2 operations per 32 weights, against ~6 per lane mask). Q5_K: vector v = chunks 4v..4v + 3,
//     bit 2(c - 4v) + h (h 0: a, 1: b). Q6_K: vector v = chunks 2v, 2v + 1, bits 2f, 2f + 1 with
//     f = 2(c - 2v) + h.
// - the header at kq_header(qtype): fp16 d[16], fp16 dmin[16] (zero for Q6_K), then Q4_K/Q5_K uint8
//   sc[8][16] and m[8][16]; Q6_K int8 sc[16][16]. (Scales unpacked to bytes: 148 / 180 / 212 bytes per row
//   and super-block against the file's 144 / 176 / 210.)
//
// Every path forms, per sub-block, sum(x * q) of x with the exact integers (bfloat16 or float32 products,
// float32 sums), then y += (d * sc) * sum - (dmin * m) * sum(x); d * sc and dmin * m are exact in float32.
#pragma once

#include <cstdint>
#include <vector>

#include "block_linear.h"

namespace tgi_blocks {

// the GGUF formats (their raw super-blocks; packed with lane masks), and Q5_K / Q6_K packed with fields
enum KQType : int64_t { kQ4_K = 3, kQ5_K = 4, kQ6_K = 5, kQ5_KF = 8, kQ6_KF = 9 };
constexpr int64_t QKK = 256;  // weights per super-block
constexpr int64_t kLowBytes = 8 * 256;

inline bool is_kquant(int64_t t) { return t == kQ4_K || t == kQ5_K || t == kQ6_K || t == kQ5_KF || t == kQ6_KF; }
// whether a packed K-quant type holds its high bits as fields (else lane masks)
constexpr bool kq_fields(int64_t t) { return t == kQ5_KF || t == kQ6_KF; }
// the GGUF format of a packed K-quant type
constexpr int64_t kq_format(int64_t t) { return t == kQ5_KF ? kQ5_K : t == kQ6_KF ? kQ6_K : t; }
inline int64_t kq_raw_bytes(int64_t t) { t = kq_format(t); return t == kQ4_K ? 144 : t == kQ5_K ? 176 : 210; }
inline int64_t kq_high_bytes(int64_t t) { t = kq_format(t); return t == kQ4_K ? 0 : t == kQ5_K ? 8 * 64 : 8 * 128; }
inline int64_t kq_header(int64_t t) { return kLowBytes + kq_high_bytes(t); }
inline int64_t kq_stride(int64_t t) { return kq_header(t) + 2 * R * 2 + 16 * R; }

// the high bits (0, 16, 32 or 48: what they add to q) of lane `lane` of chunk c's half h (0: the "a"
// columns, its low nibbles; 1: the "b" columns) in sub-block j of a packed super-block `o`
inline int kq_high(const uint8_t* o, int64_t t, int j, int c, int lane, int h) {
  const uint8_t* p = o + kLowBytes;
  uint32_t m4, m5;
  switch (t) {
    case kQ5_K:
      std::memcpy(&m4, p + 64 * j + 8 * c + 4 * h, 4);
      return static_cast<int>((m4 >> lane) & 1u) << 4;
    case kQ6_K:
      std::memcpy(&m4, p + 128 * j + 16 * c + 4 * h, 4);
      std::memcpy(&m5, p + 128 * j + 16 * c + 8 + 4 * h, 4);
      return static_cast<int>((((m4 >> lane) & 1u) << 4) | (((m5 >> lane) & 1u) << 5));
    case kQ5_KF:
      return ((p[64 * j + 32 * (c / 4) + lane] >> (2 * (c % 4) + h)) & 1) << 4;
    case kQ6_KF:
      return ((p[128 * j + 32 * (c / 2) + lane] >> (2 * (2 * (c % 2) + h))) & 3) << 4;
    default:
      return 0;
  }
}

// the integer q of row r, column k (0..255) of a packed super-block `o` (Q6_K's without its -32)
inline int kq_value(const uint8_t* o, int64_t t, int r, int k) {
  const int j = k / 32, kk = k % 32, c = kk / 4, lane = 2 * r + kk % 2, h = (kk % 4) >= 2;
  const uint8_t byte = o[256 * j + 32 * c + lane];
  return (h ? (byte >> 4) : (byte & 0x0F)) | kq_high(o, t, j, c, lane, h);
}

// the scale and min (to subtract) of row r's sub-block i (of 32 weights; Q6_K: of 16) of super-block `o`
inline void kq_scale(const uint8_t* o, int64_t t, int r, int i, float* scale, float* min) {
  const uint8_t* h = o + kq_header(t);
  t = kq_format(t);
  uint16_t dh, mh;
  std::memcpy(&dh, h + 2 * r, 2);
  std::memcpy(&mh, h + 2 * R + 2 * r, 2);
  const uint8_t* s = h + 4 * R;
  if (t == kQ6_K) {
    *scale = half_to_float(dh) * static_cast<float>(static_cast<int8_t>(s[i * R + r]));
    *min = 0.0f;
  } else {
    *scale = half_to_float(dh) * static_cast<float>(s[i * R + r]);
    *min = half_to_float(mh) * static_cast<float>(s[8 * R + i * R + r]);
  }
}

// packing (block_linear_kquant_pack.cpp): qtype a packed type (its GGUF format's raw super-blocks in `raw`)
void pack_k(const uint8_t* raw, int64_t qtype, int64_t N, int64_t K, uint8_t* out);

// reference (bfloat16 x) and float32 paths (block_linear_kquant_ref.cpp); sx: sums of x per 32 columns
void group_ref_k(const uint16_t* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed, int64_t qtype,
                 int64_t g, float* y /* [M, R] */);
void group_f32_k(const float* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed, int64_t qtype,
                 int64_t g, float* y /* [M, R] */);

// int8 inputs (block_linear_kquant_avx512_vnni.cpp): x [M, K] bfloat16 quantized per row and `G` columns
// (G 256: llama.cpp's q8_K, the AVX2 path's; G 32: one scale per K-quant sub-block of 32 columns, the
// AVX512-VNNI path's): q [M, K] (each 8 columns in the order 0, 1, 4, 5, 2, 3, 6, 7), dx [M, K / G] the
// scales, bsum [M, K / 16] the sums of q per 16 columns (in the columns' own order)
void quantize_rows_int8(const uint16_t* x, int64_t M, int64_t K, int64_t G, int8_t* q, float* dx,
                        int32_t* bsum);
// the same of float32 x (the AVX2 int8 path's float32 models)
void quantize_rows_int8(const float* x, int64_t M, int64_t K, int64_t G, int8_t* q, float* dx, int32_t* bsum);

// x [M, K] quantized by quantize_rows_int8 with a scale per G columns, in buffers of the sizes it writes
struct Int8Rows {
  std::vector<int8_t> q;
  std::vector<float> dx;
  std::vector<int32_t> bsum;
  template <typename X>
  Int8Rows(const X* x, int64_t M, int64_t K, int64_t G) : q(M * K), dx(M * (K / G)), bsum(M * (K / 16)) {
    quantize_rows_int8(x, M, K, G, q.data(), dx.data(), bsum.data());
  }
};

#if defined(__x86_64__)
// Software prefetch for the stream of packed super-blocks a thread reads in order (its groups are
// consecutive), called at step `it` (0-31, eight sub-blocks of four) of super-block `o` (S bytes), by the
// int8 paths. Q4_K: the line 4 KiB ahead of the one read (one core, [1, 2048] x [2048, 16384] from memory
// 2.28 -> 1.75 ms; 8 KiB gains no more, nor does the rule below). Q5_K and Q6_K read their high bits from a
// second region of the super-block, which that rule leaves a third of unfetched: there every line of the
// super-block two ahead, two lines a step (AMD EPYC Zen 4, AVX512-VNNI path, [1, 8192] x [8192, 2048] from
// memory, two threads, A/B of builds in one process, six runs: Q6_K 1.26-1.54x (17-20 -> 22-32 GB/s, as noisy
// as the host), Q5_K 1.46-1.58x; one thread Q6_K 9.7 -> 18.0; one super-block ahead or three no better;
// src/tgi/backends/cpu/README.md)
template <int64_t T>
inline void kq_prefetch_ahead(const uint8_t* o, int64_t S, int it) {
  if (kq_format(T) == kQ4_K) {
    _mm_prefetch(reinterpret_cast<const char*>(o + 64 * it + 4096), _MM_HINT_T0);
  } else if (128 * it < S) {
    _mm_prefetch(reinterpret_cast<const char*>(o + 2 * S + 128 * it), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(o + 2 * S + 128 * it + 64), _MM_HINT_T0);
  }
}

// AVX-512 BF16 path (block_linear_kquant_avx512_bf16.cpp); lane masks only (the op refuses fields there)
TGI_BF16_TARGET void group_avx512_k(const uint16_t* x, int64_t M, int64_t K, const float* sx,
                                    const uint8_t* packed, int64_t qtype, int64_t g, float* y);

// AVX512-VNNI int8 path (block_linear_kquant_avx512_vnni.cpp); the op stores its float32 sums with
// store_rows_bf16, so it is offered where the CPU has AVX512-BF16 too
#define TGI_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,f16c,fma")))

inline bool has_avx512_vnni() {
  static const bool ok = has_avx512_bf16() && __builtin_cpu_supports("avx512vnni") &&
                         __builtin_cpu_supports("avx512vbmi");
  return ok;
}
// dx: the input's scales per 32 columns (quantize_rows_int8 with G = kVnniScaleCols)
constexpr int64_t kVnniScaleCols = 32;
TGI_VNNI_TARGET void group_vnni_k(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y);
// AVX2 int8 path (block_linear_kquant_avx2.cpp): the input quantized per 256 columns (q8_K; its integer sums
// run through a whole super-block), float32 sums y [M, R]; either layout
#define TGI_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

// quantize_rows_int8 on AVX2 (block_linear_kquant_avx2.cpp): the same bits as its scalar loop
TGI_AVX2_TARGET void quantize_rows_int8_avx2(const float* x, int64_t M, int64_t K, int64_t G, int8_t* q,
                                            float* dx, int32_t* bsum);
TGI_AVX2_TARGET void quantize_rows_int8_avx2(const uint16_t* x, int64_t M, int64_t K, int64_t G, int8_t* q,
                                            float* dx, int32_t* bsum);
TGI_AVX2_TARGET void group_avx2_k(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y);
#endif

}  // namespace tgi_blocks
