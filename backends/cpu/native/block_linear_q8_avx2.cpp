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
#include <cmath>
#include <cstdint>
#include <cstring>

#include "block_linear.h"

namespace tgi_blocks {

namespace {
inline float input_value(float v) { return v; }
inline float input_value(uint16_t v) { return bf16_to_float(v); }

template <typename X>
void quantize_rows(const X* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw, float* dx, int32_t* bsum) {
  const int64_t nb = K / QK;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const X* xs = x + m * K + b * QK;
      float amax = 0.0f;
      for (int k = 0; k < QK; ++k) amax = std::fmax(amax, std::fabs(input_value(xs[k])));
      const float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
      dx[m * nb + b] = amax / 127.0f;
      int q[QK];
      int32_t sum = 0;
      for (int k = 0; k < QK; ++k) {
        const float v = std::nearbyint(input_value(xs[k]) * iscale);
        q[k] = static_cast<int>(std::fmax(-127.0f, std::fmin(127.0f, v)));
        sum += q[k];
      }
      bsum[m * nb + b] = sum;
      uint32_t* w = xw + (m * K + b * QK) / 2;
      for (int p = 0; p < QK / 2; ++p) {
        const uint32_t a = static_cast<uint8_t>(q[2 * p]), c = static_cast<uint8_t>(q[2 * p + 1]);
        if (qtype == kQ8_0) {  // int16 pair
          w[p] = (static_cast<uint32_t>(static_cast<uint16_t>(q[2 * p]))) |
                 (static_cast<uint32_t>(static_cast<uint16_t>(q[2 * p + 1])) << 16);
        } else {  // the byte pair twice
          w[p] = a | (c << 8) | (a << 16) | (c << 24);
        }
      }
    }
}
}  // namespace

void quantize_rows_q8_32(const float* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw, float* dx,
                         int32_t* bsum) {
  quantize_rows(x, M, K, qtype, xw, dx, bsum);
}
void quantize_rows_q8_32(const uint16_t* x, int64_t M, int64_t K, int64_t qtype, uint32_t* xw, float* dx,
                         int32_t* bsum) {
  quantize_rows(x, M, K, qtype, xw, dx, bsum);
}

#if defined(__x86_64__)

namespace {

#define TGI_Q8_AVX2 __attribute__((target("avx2,fma,f16c")))

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
