// The CPU block linear's AVX512-BF16 path.
#include <cstdint>

#include "block_linear.h"

namespace tgi_blocks {

#if defined(__x86_64__)
// ---- AVX-512 BF16 path -------------------------------------------------------------------------------------
// (TGI_BF16_TARGET: block_linear.h)

// out[m, c] = bf16(y[m, c] + bias[c]) for rows [0, rows) and columns [0, cols) of a float32 block y with
// leading dimension ldy, 16 columns at a time (with a scalar loop here, the default model's block products at
// batch 32 took 24-25 ms a step instead of 15-16)
TGI_BF16_TARGET void store_rows_bf16(const float* y, int64_t ldy, const float* bias, int64_t rows, int64_t cols,
                                     uint16_t* out, int64_t ldo) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 k = tgi_common::lanes16(cols - c);
      __m512 v = _mm512_maskz_loadu_ps(k, y + m * ldy + c);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + c));
      _mm256_mask_storeu_epi16(out + m * ldo + c, k, (__m256i)_mm512_cvtneps_pbh(v));
    }
}

// MT input rows against one group of 16 weight rows.
template <int MT>
TGI_BF16_TARGET void group_tile(const uint16_t* x, int64_t K, const float* sx, const uint8_t* packed,
                                int64_t qtype, int64_t g, float* y /* [MT, R] */) {
  const int64_t nb = K / QK, vb = value_bytes(qtype), S = packed_stride(qtype);
  const int32_t* x32 = reinterpret_cast<const int32_t*>(x);  // pairs of bfloat16
  const int64_t K2 = K / 2;
  alignas(64) uint16_t lut_words[32];
  for (int i = 0; i < 32; ++i) lut_words[i] = float_to_bf16(static_cast<float>(i - q_offset(qtype)));
  const __m512i lut = _mm512_load_si512(lut_words);
  const __m512i low4 = _mm512_set1_epi16(0x0F), bit4 = _mm512_set1_epi16(16);
  const bool q5 = is_q5(qtype);
  __m512 out[MT];
  for (int m = 0; m < MT; ++m) out[m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = packed + (g * nb + b) * S;
    __m512 acc[MT];
    for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
    if (qtype == kQ8_0) {
      for (int p = 0; p < 16; ++p) {
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p))));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p + 16))));
        const __m512bh w = _mm512_cvtne2ps_pbh(hi, lo);
        for (int m = 0; m < MT; ++m)
          acc[m] = _mm512_dpbf16_ps(acc[m], w, (__m512bh)_mm512_set1_epi32(x32[m * K2 + b * 16 + p]));
      }
    } else {
      for (int c = 0; c < 8; ++c) {
        const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 32 * c)));
        __m512i ia = _mm512_and_si512(v, low4), ib = _mm512_srli_epi16(v, 4);
        if (q5) {  // the fifth bits: + 16 in the lanes of the chunk's masks
          ia = _mm512_mask_add_epi16(ia, static_cast<__mmask32>(q5_mask(o, c, 0)), ia, bit4);
          ib = _mm512_mask_add_epi16(ib, static_cast<__mmask32>(q5_mask(o, c, 1)), ib, bit4);
        }
        const __m512bh wa = (__m512bh)_mm512_permutexvar_epi16(ia, lut);
        const __m512bh wb = (__m512bh)_mm512_permutexvar_epi16(ib, lut);
        for (int m = 0; m < MT; ++m) {
          acc[m] = _mm512_dpbf16_ps(acc[m], wa, (__m512bh)_mm512_set1_epi32(x32[m * K2 + b * 16 + 2 * c]));
          acc[m] = _mm512_dpbf16_ps(acc[m], wb, (__m512bh)_mm512_set1_epi32(x32[m * K2 + b * 16 + 2 * c + 1]));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + vb)));
    for (int m = 0; m < MT; ++m) out[m] = _mm512_fmadd_ps(acc[m], d, out[m]);
    if (has_min(qtype)) {
      const __m512 mins = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + vb + 2 * R)));
      for (int m = 0; m < MT; ++m) out[m] = _mm512_fmadd_ps(mins, _mm512_set1_ps(sx[m * nb + b]), out[m]);
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_storeu_ps(y + m * R, out[m]);
}

TGI_BF16_TARGET void group_avx512(const uint16_t* x, int64_t M, int64_t K, const float* sx,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  const int64_t nb = K / QK;
  int64_t m = 0;
  for (; m + 8 <= M; m += 8) group_tile<8>(x + m * K, K, sx + m * nb, packed, qtype, g, y + m * R);
  const uint16_t* xm = x + m * K;
  const float* sm = sx + m * nb;
  float* ym = y + m * R;
  switch (M - m) {
    case 7: group_tile<7>(xm, K, sm, packed, qtype, g, ym); break;
    case 6: group_tile<6>(xm, K, sm, packed, qtype, g, ym); break;
    case 5: group_tile<5>(xm, K, sm, packed, qtype, g, ym); break;
    case 4: group_tile<4>(xm, K, sm, packed, qtype, g, ym); break;
    case 3: group_tile<3>(xm, K, sm, packed, qtype, g, ym); break;
    case 2: group_tile<2>(xm, K, sm, packed, qtype, g, ym); break;
    case 1: group_tile<1>(xm, K, sm, packed, qtype, g, ym); break;
    default: break;
  }
}
#endif

}  // namespace tgi_blocks
