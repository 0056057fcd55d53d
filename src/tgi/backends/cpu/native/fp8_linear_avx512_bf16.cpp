// The float8 linear's AVX512-BF16 path (fp8_linear.h): each lane of a 512-bit register is one weight row,
// `vdpbf16ps` multiplies its pair of columns, widened to bfloat16, with a broadcast pair of x.
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"
#include "fp8_linear.h"

namespace tgi_fp8 {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_FP8_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,fma")))

bool avx512_bf16_ready() { return tgi_common::has_avx512_bf16(); }

namespace {
// 32 codes (16 rows x a pair of columns) -> 32 bfloat16, each the code's value times 2^-8 (exact)
TGI_FP8_BF16 inline __m512i widen32(const uint8_t* p) {
  const __m512i s = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(s, 7), _mm512_set1_epi16(static_cast<short>(0xBFFF)));
  const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// MODE 0: widen the codes; 1: widen and keep them in the scratch; 2: read them from the scratch. NG groups
// of 16 weight rows (1 or 2: two share each broadcast of x)
template <int MT, int MODE, int NG>
TGI_FP8_BF16 void tile(const uint16_t* x, int64_t K2, const uint8_t* codes, const float* sc, const float* bias,
                       int64_t rows, uint16_t* out, int64_t ldo, __m512i* scratch) {
  const int32_t* x32 = reinterpret_cast<const int32_t*>(x);  // pairs of bfloat16
  __m512 acc[NG][MT];
  for (int g = 0; g < NG; ++g)
    for (int m = 0; m < MT; ++m) acc[g][m] = _mm512_setzero_ps();
  for (int64_t p = 0; p < K2; ++p) {
    __m512i w[NG];
    for (int g = 0; g < NG; ++g) {
      if (MODE == 2) {
        w[g] = _mm512_load_si512(scratch + g * K2 + p);
      } else {
        w[g] = widen32(codes + g * K2 * 32 + 32 * p);
        if (MODE == 1) _mm512_store_si512(scratch + g * K2 + p, w[g]);
      }
    }
    for (int m = 0; m < MT; ++m) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(x32[m * K2 + p]);
      for (int g = 0; g < NG; ++g) acc[g][m] = _mm512_dpbf16_ps(acc[g][m], (__m512bh)w[g], xv);
    }
  }
  for (int g = 0; g < NG; ++g) {
    const __mmask16 k = tgi_common::lanes16(rows - 16 * g);
    const __m512 s = _mm512_loadu_ps(sc + 16 * g);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + 16 * g) : _mm512_setzero_ps();
    for (int m = 0; m < MT; ++m)
      _mm256_mask_storeu_epi16(out + m * ldo + 16 * g, k,
                               (__m256i)_mm512_cvtneps_pbh(_mm512_fmadd_ps(acc[g][m], s, b)));
  }
}

template <int MODE, int NG>
TGI_FP8_BF16 void tile_rest(int mt, const uint16_t* x, int64_t K2, const uint8_t* codes, const float* sc,
                            const float* bias, int64_t rows, uint16_t* out, int64_t ldo, __m512i* scratch) {
  switch (mt) {
    case 7: tile<7, MODE, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch); break;
    case 6: tile<6, MODE, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch); break;
    case 5: tile<5, MODE, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch); break;
    case 4: tile<4, MODE, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch); break;
    case 3: tile<3, MODE, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch); break;
    case 2: tile<2, MODE, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch); break;
    case 1: tile<1, MODE, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch); break;
    default: break;
  }
}

template <int NG>
TGI_FP8_BF16 void groups(const uint16_t* x, int64_t M, int64_t K2, const uint8_t* codes, const float* sc,
                         const float* bias, int64_t rows, uint16_t* out, int64_t ldo, __m512i* scratch) {
  constexpr int MT = 8;
  if (M <= MT) {  // one tile: nothing to keep
    if (M == MT) tile<MT, 0, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch);
    else tile_rest<0, NG>(static_cast<int>(M), x, K2, codes, sc, bias, rows, out, ldo, scratch);
    return;
  }
  tile<MT, 1, NG>(x, K2, codes, sc, bias, rows, out, ldo, scratch);
  int64_t m = MT;
  for (; m + MT <= M; m += MT)
    tile<MT, 2, NG>(x + m * 2 * K2, K2, codes, sc, bias, rows, out + m * ldo, ldo, scratch);
  if (m < M)
    tile_rest<2, NG>(static_cast<int>(M - m), x + m * 2 * K2, K2, codes, sc, bias, rows, out + m * ldo, ldo,
                     scratch);
}
}  // namespace

TGI_FP8_BF16 void group_avx512_bf16(const uint16_t* x, int64_t M, int64_t K2, const uint8_t* codes,
                                    const float* sc, const float* bias, int64_t rows, uint16_t* out,
                                    int64_t ldo, void* scratch) {
  // rows > 16: this group and the next one together
  if (rows > 16) groups<2>(x, M, K2, codes, sc, bias, rows, out, ldo, static_cast<__m512i*>(scratch));
  else groups<1>(x, M, K2, codes, sc, bias, rows, out, ldo, static_cast<__m512i*>(scratch));
}
#else
bool avx512_bf16_ready() { return false; }
void group_avx512_bf16(const uint16_t*, int64_t, int64_t, const uint8_t*, const float*, const float*, int64_t,
                       uint16_t*, int64_t, void*) {}
#endif

}  // namespace tgi_fp8
