// Q4_0, Q4_1 and Q8_0 on int8 inputs with AVX2 (impl "avx2-int8"), the scheme llama.cpp computes these
// formats with on an AVX2 CPU: each input row quantized per block of 32 columns to int8 with a float32 scale
// (dx = amax / 127, x8 = round(x * 127 / amax), llama.cpp's q8_0; for Q4_1 also the block's integer sum
// sum(x8), q8_1's offset term), integer products with the weights' integers, then per block in float32:
//   Q8_0: y += (d dx) * sum(q x8)                Q4_0: y += (d dx) * (sum(q x8) - 8 sum(x8))
//   Q4_1: y += (d dx) * sum(q x8) + (m dx) * sum(x8)     (q the stored nibble 0..15 of Q4_0 / Q4_1)
// Each integer sum is exact (|sum| <= 32 * 15 * 127 or 32 * 128 * 127, exact in float32 too), each float32
// step one FMA. Unlike llama.cpp, dx and the Q4_1 sum are kept in float32 and int32, not rounded to fp16.
//
// The packed layout is the one block_linear_pack.cpp makes for every path (block_linear.h): Q4 chunk c's 32
// bytes hold, at byte 2r + i, row r's low nibble of column 4c + i and high nibble of column 4c + 2 + i, so one
// `vpmaddubsw` of a chunk's low (high) nibbles with the broadcast pair of int8 columns 4c, 4c + 1 (4c + 2,
// 4c + 3) leaves row r's two-column sum in 16-bit lane r; a pair is at most 2 * 15 * 127 = 3810, so four
// chunks (16 columns, 30480) add in 16 bits exactly, and the block's two halves are widened to int32 at once
// by interleaving them (`vpunpck[lh]wd`) and `vpmaddwd` with ones: rows 0-3, 8-11 in one register (L), rows
// 4-7, 12-15 in the other (H) until the end of a group. Q8_0 chunk p holds at byte 2r + j row r's signed
// column 2p + j: its 16 bytes of rows 0-7 (8-15) widened to int16 and `vpmaddwd` with the broadcast int16
// pair of columns 2p, 2p + 1 give the rows' int32 sums in order (signed weights: `vpmaddubsw` would need
// their sign moved onto x for each input row).
//
// Accuracy: each output is within half an input step per column weighted by |w| of the exact-input product
// (sum over blocks of dx / 2 * sum |w|); each row is quantized alone, so rows do not depend on the batch.
//
// Measured on the AMD EPYC family 23 model 1 (Zen 1: AVX2, FMA, F16C; no AVX-512), one thread, a machine
// shared with other work, medians of 7 interleaved runs against the float32 AVX2 kernel it replaces
// (block_linear_f32.cpp) and the dense float32 product: [M, 576] x [576, 1536] Q4_1 M=1 69 us (float32 kernel
// 337, dense 142), M=4 177 (620, 511), M=16 717 (1865, 1210); the Q8_0 head [M, 576] x [576, 49152] M=1
// 2.68 ms (11.3, 10.2), M=4 7.78 (21.2, 36.2), M=16 29.1 (57.4, 54.5) (src/tgi/backends/cpu/README.md).
#include <cstdint>
#include <cstring>

#include "block_linear.h"

namespace tgi_blocks {

#if defined(__x86_64__)

#define TGI_Q8_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace {
// 8 values of x as float32 (float32, or bfloat16 bits widened exactly) and a vector's largest lane
using tgi_common::hmax8_ps;
using tgi_common::load8_ps;

// per block: amax (NaN ignored, as fmax does), iscale = 127 / amax (0 for a block of zeros), x8 = the nearest
// even integer of x * iscale clamped to [-127, 127] (a NaN to 127), dx = amax / 127. The scalar model the tests
// hold it to is exactly this (one float32 product, round-half-even: `_mm256_round_ps` in nearest mode).
template <typename X>
TGI_Q8_AVX2 void quantize_rows(const X* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw, float* dx,
                               int32_t* bsum) {
  const int64_t nb = K / QK;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const X* xs = x + m * K + b * QK;
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = load8_ps(xs + 8 * i);
        amax = _mm256_max_ps(_mm256_and_ps(v[i], abs_mask), amax);  // a NaN lane keeps amax
      }
      const float a = hmax8_ps(amax);
      const float iscale = a > 0.0f ? 127.0f / a : 0.0f;
      dx[m * nb + b] = a / 127.0f;
      const __m256 is = _mm256_set1_ps(iscale);
      alignas(32) int32_t q[QK];
      __m256i sum = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], is), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256i qi = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, hi), lo));  // min(NaN, 127) = 127
        sum = _mm256_add_epi32(sum, qi);
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * i), qi);
      }
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      bsum[m * nb + b] = _mm_cvtsi128_si32(s4);
      uint32_t* w = xw + (m * K + b * QK) / 2;
      for (int p = 0; p < QK / 2; ++p) {
        const uint32_t a0 = static_cast<uint8_t>(q[2 * p]), a1 = static_cast<uint8_t>(q[2 * p + 1]);
        if (qtype == kQ8_0) {  // int16 pair
          w[p] = static_cast<uint32_t>(static_cast<uint16_t>(q[2 * p])) |
                 (static_cast<uint32_t>(static_cast<uint16_t>(q[2 * p + 1])) << 16);
        } else {  // the byte pair twice
          w[p] = a0 | (a1 << 8) | (a0 << 16) | (a1 << 24);
        }
      }
    }
}
}  // namespace

TGI_Q8_AVX2 void quantize_rows_q8_32(const float* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw,
                                     float* dx, int32_t* bsum) {
  quantize_rows(x, M, K, qtype, xw, dx, bsum);
}
TGI_Q8_AVX2 void quantize_rows_q8_32(const uint16_t* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw,
                                     float* dx, int32_t* bsum) {
  quantize_rows(x, M, K, qtype, xw, dx, bsum);
}

namespace {

TGI_Q8_AVX2 inline __m256i bcast32(const uint32_t* p) { return _mm256_set1_epi32(static_cast<int>(*p)); }

// 16 fp16 values of rows 0-15 as float32 in the L / H row order (L: rows 0-3, 8-11; H: 4-7, 12-15)
TGI_Q8_AVX2 inline void halves_lh(const uint8_t* p, __m256* l, __m256* h) {
  const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  *l = _mm256_permute2f128_ps(a, b, 0x20);
  *h = _mm256_permute2f128_ps(a, b, 0x31);
}

// MT input rows against one group of 16 weight rows of Q4_0 / Q4_1; y [MT, R] in row order
template <int MT, int64_t T>
TGI_Q8_AVX2 void group_tile_q4(const uint32_t* xw, const float* dx, const int32_t* bsum, int64_t K,
                               const uint8_t* packed, int64_t g, float* y) {
  const int64_t nb = K / QK, S = packed_stride(T), W = K / 2;
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 yl[MT], yh[MT];
  for (int m = 0; m < MT; ++m) yl[m] = yh[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = packed + (g * nb + b) * S;
    _mm_prefetch(reinterpret_cast<const char*>(o + 4096), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(o + 4096 + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(o + 4096 + 128), _MM_HINT_T0);
    __m256i run[2][MT];
    for (int c = 0; c < QK / 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 32 * c));
      const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      for (int m = 0; m < MT; ++m) {
        const uint32_t* xp = xw + m * W + b * (QK / 2) + 2 * c;
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast32(xp)),
                                           _mm256_maddubs_epi16(hi, bcast32(xp + 1)));
        run[c / 4][m] = c % 4 == 0 ? p : _mm256_add_epi16(run[c / 4][m], p);
      }
    }
    __m256 d_l, d_h, m_l, m_h;
    halves_lh(o + value_bytes(T), &d_l, &d_h);
    if (T == kQ4_1) halves_lh(o + value_bytes(T) + 2 * R, &m_l, &m_h);
    for (int m = 0; m < MT; ++m) {
      __m256i acc_l = _mm256_madd_epi16(_mm256_unpacklo_epi16(run[0][m], run[1][m]), ones);
      __m256i acc_h = _mm256_madd_epi16(_mm256_unpackhi_epi16(run[0][m], run[1][m]), ones);
      const int32_t s = bsum[m * nb + b];
      if (T == kQ4_0) {  // the nibbles' offset of 8, exact in int32
        const __m256i off = _mm256_set1_epi32(8 * s);
        acc_l = _mm256_sub_epi32(acc_l, off);
        acc_h = _mm256_sub_epi32(acc_h, off);
      }
      const __m256 dxs = _mm256_set1_ps(dx[m * nb + b]);
      yl[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_l), _mm256_mul_ps(d_l, dxs), yl[m]);
      yh[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_h), _mm256_mul_ps(d_h, dxs), yh[m]);
      if (T == kQ4_1) {
        const __m256 ss = _mm256_set1_ps(static_cast<float>(s));
        yl[m] = _mm256_fmadd_ps(ss, _mm256_mul_ps(m_l, dxs), yl[m]);
        yh[m] = _mm256_fmadd_ps(ss, _mm256_mul_ps(m_h, dxs), yh[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) {  // L / H back to row order
    _mm256_storeu_ps(y + m * R, _mm256_permute2f128_ps(yl[m], yh[m], 0x20));
    _mm256_storeu_ps(y + m * R + 8, _mm256_permute2f128_ps(yl[m], yh[m], 0x31));
  }
}

// MT input rows against one group of 16 weight rows of Q8_0; y [MT, R] in row order
template <int MT>
TGI_Q8_AVX2 void group_tile_q8(const uint32_t* xw, const float* dx, int64_t K, const uint8_t* packed, int64_t g,
                               float* y) {
  const int64_t nb = K / QK, S = packed_stride(kQ8_0), W = K / 2;
  __m256 y0[MT], y1[MT];
  for (int m = 0; m < MT; ++m) y0[m] = y1[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = packed + (g * nb + b) * S;
    __m256i acc0[MT], acc1[MT];
    for (int m = 0; m < MT; ++m) acc0[m] = acc1[m] = _mm256_setzero_si256();
    for (int p = 0; p < QK / 2; ++p) {
      if (p % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(o + 32 * p + 4096), _MM_HINT_T0);
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p)));
      const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p + 16)));
      for (int m = 0; m < MT; ++m) {
        const __m256i xv = bcast32(xw + m * W + b * (QK / 2) + p);
        acc0[m] = _mm256_add_epi32(acc0[m], _mm256_madd_epi16(w0, xv));
        acc1[m] = _mm256_add_epi32(acc1[m], _mm256_madd_epi16(w1, xv));
      }
    }
    const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + value_bytes(kQ8_0))));
    const __m256 d1 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + value_bytes(kQ8_0) + 16)));
    for (int m = 0; m < MT; ++m) {
      const __m256 dxs = _mm256_set1_ps(dx[m * nb + b]);
      y0[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc0[m]), _mm256_mul_ps(d0, dxs), y0[m]);
      y1[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc1[m]), _mm256_mul_ps(d1, dxs), y1[m]);
    }
  }
  for (int m = 0; m < MT; ++m) {
    _mm256_storeu_ps(y + m * R, y0[m]);
    _mm256_storeu_ps(y + m * R + 8, y1[m]);
  }
}

template <int MT>
TGI_Q8_AVX2 void group_tile(const uint32_t* xw, const float* dx, const int32_t* bsum, int64_t K,
                            const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  if (qtype == kQ4_0) group_tile_q4<MT, kQ4_0>(xw, dx, bsum, K, packed, g, y);
  else if (qtype == kQ4_1) group_tile_q4<MT, kQ4_1>(xw, dx, bsum, K, packed, g, y);
  else group_tile_q8<MT>(xw, dx, K, packed, g, y);
}

}  // namespace

TGI_Q8_AVX2 void group_q8_avx2(const uint32_t* xw, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                               const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  const int64_t nb = K / QK, W = K / 2;
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) group_tile<4>(xw + m * W, dx + m * nb, bsum + m * nb, K, packed, qtype, g, y + m * R);
  const uint32_t* xm = xw + m * W;
  const float* dm = dx + m * nb;
  const int32_t* bm = bsum + m * nb;
  float* ym = y + m * R;
  switch (M - m) {
    case 3: group_tile<3>(xm, dm, bm, K, packed, qtype, g, ym); break;
    case 2: group_tile<2>(xm, dm, bm, K, packed, qtype, g, ym); break;
    case 1: group_tile<1>(xm, dm, bm, K, packed, qtype, g, ym); break;
    default: break;
  }
}
#endif

}  // namespace tgi_blocks
