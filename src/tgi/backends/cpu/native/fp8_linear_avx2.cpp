// The float8 linear's float32 path on AVX2 + FMA + F16C (fp8_linear.h): the codes of 16 rows x a pair of
// columns widen to four vectors of float32, lane 2i + j being row 4v + i, column j of the pair; they multiply
// x's pair broadcast as (x0, x1, x0, x1, ...), and the two lanes of each row are added at the end. float32
// products and sums (FMA); no deinterleaving in the inner loop.
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "fp8_linear.h"

namespace tgi_fp8 {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_FP8_AVX2 __attribute__((target("avx2,fma,f16c")))

bool avx2_ready() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

namespace {
// 16 codes (8 rows x a pair) -> two vectors of float32 (rows 0-3, rows 4-7), the codes' values times 2^-8
TGI_FP8_AVX2 inline void widen16(const uint8_t* p, __m256& a, __m256& b) {
  const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<short>(0xBFFF)));
  a = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  b = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// rows 0-7 of a row pair's sums: lanes (row, column parity) of acc rows 0-3 and 4-7 added by row
TGI_FP8_AVX2 inline __m256 row_sums(__m256 a, __m256 b) {
  const __m256 h = _mm256_hadd_ps(a, b);  // rows 0, 1, 4, 5 | 2, 3, 6, 7
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(h), 0xD8));
}

TGI_FP8_AVX2 inline __m256i lanes8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 0 ? 0 : n > 8 ? 8 : n)), idx);
}

// MODE 0: widen; 1: widen and keep in the scratch; 2: read from the scratch
template <int MT, int MODE>
TGI_FP8_AVX2 void tile(const float* x, int64_t K2, const uint8_t* codes, const float* sc, const float* bias,
                       int64_t rows, float* out, int64_t ldo, __m256* scratch) {
  __m256 acc[MT][4];
  for (int m = 0; m < MT; ++m)
    for (int v = 0; v < 4; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int64_t p = 0; p < K2; ++p) {
    __m256 w[4];
    if (MODE == 2) {
      for (int v = 0; v < 4; ++v) w[v] = _mm256_load_ps(reinterpret_cast<const float*>(scratch + 4 * p + v));
    } else {
      widen16(codes + 32 * p, w[0], w[1]);
      widen16(codes + 32 * p + 16, w[2], w[3]);
      if (MODE == 1)
        for (int v = 0; v < 4; ++v) _mm256_store_ps(reinterpret_cast<float*>(scratch + 4 * p + v), w[v]);
    }
    for (int m = 0; m < MT; ++m) {
      const __m256 xv = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(x + m * 2 * K2 + 2 * p)));
      for (int v = 0; v < 4; ++v) acc[m][v] = _mm256_fmadd_ps(w[v], xv, acc[m][v]);
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int h = 0; h < 2; ++h) {
      const __m256i k = lanes8(rows - 8 * h);
      const __m256 b = bias ? _mm256_maskload_ps(bias + 8 * h, k) : _mm256_setzero_ps();
      const __m256 y = _mm256_fmadd_ps(row_sums(acc[m][2 * h], acc[m][2 * h + 1]), _mm256_loadu_ps(sc + 8 * h), b);
      _mm256_maskstore_ps(out + m * ldo + 8 * h, k, y);
    }
}
}  // namespace

TGI_FP8_AVX2 void group_avx2(const float* x, int64_t M, int64_t K2, const uint8_t* codes, const float* sc,
                             const float* bias, int64_t rows, float* out, int64_t ldo, void* scratch_bytes) {
  __m256* scratch = static_cast<__m256*>(scratch_bytes);
  if (M == 1) {
    tile<1, 0>(x, K2, codes, sc, bias, rows, out, ldo, scratch);
    return;
  }
  if (M == 2) {
    tile<2, 0>(x, K2, codes, sc, bias, rows, out, ldo, scratch);
    return;
  }
  tile<2, 1>(x, K2, codes, sc, bias, rows, out, ldo, scratch);
  int64_t m = 2;
  for (; m + 2 <= M; m += 2) tile<2, 2>(x + m * 2 * K2, K2, codes, sc, bias, rows, out + m * ldo, ldo, scratch);
  if (m < M) tile<1, 2>(x + m * 2 * K2, K2, codes, sc, bias, rows, out + m * ldo, ldo, scratch);
}
#else
bool avx2_ready() { return false; }
void group_avx2(const float*, int64_t, int64_t, const uint8_t*, const float*, const float*, int64_t, float*,
                int64_t, void*) {}
#endif

}  // namespace tgi_fp8
