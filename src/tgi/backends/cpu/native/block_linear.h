// The CPU linear over GGUF block-quantized weights (tgi_blocks::...): the packed layout, and what the op
// (block_linear.cpp) and its implementations share.
//
// `block_pack(raw, qtype, N, K)` repacks llama.cpp blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: 32 weights, fp16
// scale, and for Q4_1 / Q5_1 an fp16 min) into groups of 16 rows: for each group and block, the 16 rows'
// values interleaved by pairs of columns (what one `vdpbf16ps` lane takes), for Q5 the fifth bits as lane
// masks of those chunks, then the 16 scales and 16 mins (fp16). Same size as the file's blocks (0.625 bytes
// per Q4 weight; Q5_0 0.75 against the file's 0.6875). The AMX path takes Q4_0, Q4_1 and Q8_0.
//
// `block_linear(x, packed, qtype, N, K, bias, impl)` computes `x @ W.T + bias` for bfloat16 x [M, K], with
// one of these implementations:
// - block_linear_avx512_bf16.cpp: each lane of a 512-bit register is one weight row; the 4-bit (or 8-bit)
//   values become bfloat16 exactly (a table lookup), `vdpbf16ps` multiplies them with broadcast pairs of x
//   exactly and sums in float32; per block, `y += d * sum(x q) + m * sum(x)`. No activation is quantized: the
//   result is the bfloat16 model's product with float32 accumulation (the weights are not even rounded to
//   bfloat16).
// - block_linear_amx.cpp: the weights dequantized to bfloat16 tiles, as the dense weights are, multiplied on
//   AMX.
// - block_linear_reference.cpp: a scalar path over the same layout (what a CPU without AVX512-BF16 takes).
// - block_linear_f32.cpp: float32 x (the float32 models of CPUs without bfloat16 arithmetic), float32 out.
// - block_linear_q8_avx2.cpp: Q4_0, Q4_1, Q8_0 on int8 inputs with AVX2 ("avx2-int8", as llama.cpp computes).
// The packing is in block_linear_pack.cpp.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"

namespace tgi_blocks {

using tgi_common::amx_ready;
using tgi_common::has_avx512_bf16;
using tgi_common::TileConfig;

enum QType : int64_t { kQ4_0 = 0, kQ4_1 = 1, kQ8_0 = 2, kQ5_0 = 6, kQ5_1 = 7 };  // (3-5: the K-quants)
constexpr int64_t QK = 32;  // weights per block
constexpr int64_t R = 16;   // rows per group (lanes of a 512-bit float vector)

inline bool is_q5(int64_t t) { return t == kQ5_0 || t == kQ5_1; }
inline bool has_min(int64_t t) { return t == kQ4_1 || t == kQ5_1; }
inline int q_offset(int64_t t) { return t == kQ4_0 ? 8 : t == kQ5_0 ? 16 : 0; }  // subtracted from the integers
inline int64_t raw_block_bytes(int64_t t) {
  return t == kQ4_0 ? 18 : t == kQ4_1 ? 20 : t == kQ5_0 ? 22 : t == kQ5_1 ? 24 : 34;
}
// per group and block: the values (Q5: the nibbles, then per chunk c at R * QK / 2 + 8c the uint32 lane
// masks of the fifth bits of its "a" and "b" columns, as block_linear_kquant.h describes for Q5_K)
inline int64_t value_bytes(int64_t t) { return t == kQ8_0 ? R * QK : is_q5(t) ? R * QK / 2 + 64 : R * QK / 2; }
inline uint32_t q5_mask(const uint8_t* o, int c, int b) {  // chunk c's mask of its "a" (b = 0) or "b" columns
  uint32_t m;
  std::memcpy(&m, o + R * QK / 2 + 8 * c + 4 * b, 4);
  return m;
}
inline int64_t packed_stride(int64_t t) { return value_bytes(t) + 2 * R * 2; }      // + 16 d, 16 m (fp16)

inline float half_to_float(uint16_t h) {  // exact, subnormals included
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float v) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// packing (block_linear_pack.cpp)
void pack(const uint8_t* raw, int64_t qtype, int64_t N, int64_t K, uint8_t* out);

// float32 activations (block_linear_f32.cpp): x float32 [M, K], y [M, R] float32
void group_f32(const float* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed, int64_t qtype,
               int64_t g, float* y);
#if defined(__x86_64__)
bool has_avx2_fma();
__attribute__((target("avx2,fma,f16c"))) void group_f32_avx2(const float* x, int64_t M, int64_t K,
                                                             const float* sx, const uint8_t* packed,
                                                             int64_t qtype, int64_t g, float* y);
#endif

#if defined(__x86_64__)
// int8 inputs with AVX2, FMA and F16C (block_linear_q8_avx2.cpp): x quantized per row and block of 32 columns
// to int8 for Q4_0, Q4_1, Q8_0: xw [M, K / 2] one uint32 per pair of columns (Q8_0: the two as int16; Q4: the
// two bytes twice), dx [M, K / 32] the scales, bsum [M, K / 32] the blocks' integer sums
#define TGI_Q8_AVX2_DECL __attribute__((target("avx2,fma,f16c")))
TGI_Q8_AVX2_DECL void quantize_rows_q8_32(const float* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw,
                                          float* dx, int32_t* bsum);
TGI_Q8_AVX2_DECL void quantize_rows_q8_32(const uint16_t* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw,
                                          float* dx, int32_t* bsum);
// y [M, R] float32 sums of one group
TGI_Q8_AVX2_DECL void group_q8_avx2(const uint32_t* xw, const float* dx, const int32_t* bsum, int64_t M,
                                    int64_t K, const uint8_t* packed, int64_t qtype, int64_t g, float* y);
#endif

// reference path (block_linear_reference.cpp)
void group_ref(const uint16_t* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed, int64_t qtype,
               int64_t g, float* y /* [M, R] */);

#if defined(__x86_64__)
// AVX-512 BF16 path (block_linear_avx512_bf16.cpp)
#define TGI_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,fma")))

TGI_BF16_TARGET void store_rows_bf16(const float* y, int64_t ldy, const float* bias, int64_t rows, int64_t cols,
                                     uint16_t* out, int64_t ldo);
TGI_BF16_TARGET void group_avx512(const uint16_t* x, int64_t M, int64_t K, const float* sx,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y);

// AMX path (block_linear_amx.cpp; instantiated for T = 1, 2, 3)
#define TGI_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,f16c")))

template <int T>
TGI_AMX_TARGET void groups_amx(const uint16_t* x, int64_t K, const int64_t* mts, const uint8_t* packed,
                               int64_t qtype, int64_t g0, int64_t g1, float* y);
#endif

}  // namespace tgi_blocks
