// The K-quants' AVX512-BF16 path (layout: block_linear_kquant.h). As for Q4_0/Q4_1: each 16-bit lane of a
// 512-bit register is one (row, column) of a chunk; the integers (4 bits plus the high bits, set from the lane
// masks with one masked add each) become bfloat16 exactly by a table lookup (32 entries: one
// `vpermw`; Q6_K's 64: one `vpermt2w`), `vdpbf16ps` multiplies them with broadcast pairs of x exactly and
// sums in float32; per sub-block, y += (d * sc) * sum - (dmin * m) * sum(x).
#include <cstdint>

#include "block_linear_kquant.h"

namespace tgi_blocks {

#if defined(__x86_64__)

namespace {

TGI_BF16_TARGET inline __m512 bytes_to_ps(const uint8_t* p, bool is_signed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

TGI_BF16_TARGET inline __mmask32 mask_at(const uint8_t* p) {
  uint32_t m;
  std::memcpy(&m, p, 4);
  return static_cast<__mmask32>(m);
}

// MT input rows against one group of 16 weight rows
template <int MT, int64_t T>
TGI_BF16_TARGET void group_tile_k(const uint16_t* x, int64_t K, const float* sx, const uint8_t* packed, int64_t g,
                                  float* y /* [MT, R] */) {
  const int64_t ns = K / QKK, nb = K / QK, S = kq_stride(T), H = kq_header(T);
  const int32_t* x32 = reinterpret_cast<const int32_t*>(x);  // pairs of bfloat16
  const int64_t K2 = K / 2;
  alignas(64) uint16_t lut_words[64];
  for (int i = 0; i < 64; ++i)
    lut_words[i] = float_to_bf16(static_cast<float>(T == kQ6_K ? i - 32 : (i & 31)));
  const __m512i lut0 = _mm512_load_si512(lut_words), lut1 = _mm512_load_si512(lut_words + 32);
  const __m512i low4 = _mm512_set1_epi16(0x0F), bit4 = _mm512_set1_epi16(16), bit5 = _mm512_set1_epi16(32);
  __m512 out[MT];
  for (int m = 0; m < MT; ++m) out[m] = _mm512_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* o = packed + (g * ns + s) * S;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + H)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + H + 2 * R)));
    const uint8_t* scales = o + H + 4 * R;
    for (int j = 0; j < 8; ++j) {
      __m512 acc[MT];
      for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
      const int32_t* xs = x32 + s * (QKK / 2) + j * 16;
      for (int c = 0; c < 8; ++c) {
        const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 256 * j + 32 * c)));
        __m512i ia = _mm512_and_si512(v, low4), ib = _mm512_srli_epi16(v, 4);
        __m512bh wa, wb;
        if (T == kQ6_K) {
          const uint8_t* h = o + kLowBytes + 128 * j + 16 * c;
          ia = _mm512_mask_add_epi16(ia, mask_at(h), ia, bit4);
          ib = _mm512_mask_add_epi16(ib, mask_at(h + 4), ib, bit4);
          ia = _mm512_mask_add_epi16(ia, mask_at(h + 8), ia, bit5);
          ib = _mm512_mask_add_epi16(ib, mask_at(h + 12), ib, bit5);
          wa = (__m512bh)_mm512_permutex2var_epi16(lut0, ia, lut1);
          wb = (__m512bh)_mm512_permutex2var_epi16(lut0, ib, lut1);
        } else {
          if (T == kQ5_K) {
            const uint8_t* h = o + kLowBytes + 64 * j + 8 * c;
            ia = _mm512_mask_add_epi16(ia, mask_at(h), ia, bit4);
            ib = _mm512_mask_add_epi16(ib, mask_at(h + 4), ib, bit4);
          }
          wa = (__m512bh)_mm512_permutexvar_epi16(ia, lut0);
          wb = (__m512bh)_mm512_permutexvar_epi16(ib, lut0);
        }
        for (int m = 0; m < MT; ++m) {
          acc[m] = _mm512_dpbf16_ps(acc[m], wa, (__m512bh)_mm512_set1_epi32(xs[m * K2 + 2 * c]));
          acc[m] = _mm512_dpbf16_ps(acc[m], wb, (__m512bh)_mm512_set1_epi32(xs[m * K2 + 2 * c + 1]));
        }
        if (T == kQ6_K && c == 3) {  // columns 0-15 of the sub-block: Q6_K's scale 2j
          const __m512 sc = _mm512_mul_ps(d, bytes_to_ps(scales + (2 * j) * R, true));
          for (int m = 0; m < MT; ++m) {
            out[m] = _mm512_fmadd_ps(acc[m], sc, out[m]);
            acc[m] = _mm512_setzero_ps();
          }
        }
      }
      if (T == kQ6_K) {
        const __m512 sc = _mm512_mul_ps(d, bytes_to_ps(scales + (2 * j + 1) * R, true));
        for (int m = 0; m < MT; ++m) out[m] = _mm512_fmadd_ps(acc[m], sc, out[m]);
      } else {
        const __m512 sc = _mm512_mul_ps(d, bytes_to_ps(scales + j * R, false));
        const __m512 mn = _mm512_mul_ps(dmin, bytes_to_ps(scales + (8 + j) * R, false));
        for (int m = 0; m < MT; ++m) {
          out[m] = _mm512_fmadd_ps(acc[m], sc, out[m]);
          out[m] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(sx[m * nb + s * 8 + j]), out[m]);
        }
      }
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_storeu_ps(y + m * R, out[m]);
}

template <int64_t T>
TGI_BF16_TARGET void group_rows(const uint16_t* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed,
                                int64_t g, float* y) {
  const int64_t nb = K / QK;
  int64_t m = 0;
  for (; m + 8 <= M; m += 8) group_tile_k<8, T>(x + m * K, K, sx + m * nb, packed, g, y + m * R);
  const uint16_t* xm = x + m * K;
  const float* sm = sx + m * nb;
  float* ym = y + m * R;
  switch (M - m) {
    case 7: group_tile_k<7, T>(xm, K, sm, packed, g, ym); break;
    case 6: group_tile_k<6, T>(xm, K, sm, packed, g, ym); break;
    case 5: group_tile_k<5, T>(xm, K, sm, packed, g, ym); break;
    case 4: group_tile_k<4, T>(xm, K, sm, packed, g, ym); break;
    case 3: group_tile_k<3, T>(xm, K, sm, packed, g, ym); break;
    case 2: group_tile_k<2, T>(xm, K, sm, packed, g, ym); break;
    case 1: group_tile_k<1, T>(xm, K, sm, packed, g, ym); break;
    default: break;
  }
}

}  // namespace

TGI_BF16_TARGET void group_avx512_k(const uint16_t* x, int64_t M, int64_t K, const float* sx,
                                    const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  if (qtype == kQ4_K) group_rows<kQ4_K>(x, M, K, sx, packed, g, y);
  else if (qtype == kQ5_K) group_rows<kQ5_K>(x, M, K, sx, packed, g, y);
  else group_rows<kQ6_K>(x, M, K, sx, packed, g, y);
}
#endif

}  // namespace tgi_blocks
