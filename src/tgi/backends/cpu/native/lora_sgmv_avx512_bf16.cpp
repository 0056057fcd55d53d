// LoRA's segmented pair (lora_sgmv.h), bfloat16 on AVX-512 BF16, up to 8 tokens of one adapter at a time (each
// row of its A and B read once for all of them): the shrink with the bfloat16 dot product, 32 inputs a step;
// the expand with float32 FMAs, 16 columns a step, over the ranks that reach them.
#include <cstdint>

#include "common.h"
#include "lora_sgmv.h"

namespace tgi_lora {

bool avx512_bf16_ready() { return tgi_common::has_avx512_bf16(); }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_LORA_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

namespace {
TGI_LORA_BF16 inline __m512bh load_pairs(const uint16_t* p, int64_t n) {  // the first min(n, 32) values
  const __mmask32 k = n >= 32 ? 0xFFFFFFFFu : ((1u << n) - 1);
  return (__m512bh)_mm512_maskz_loadu_epi16(k, p);
}

TGI_LORA_BF16 inline __m512 load16(const uint16_t* p, __mmask16 k) {
  return tgi_common::bf16x16_to_float(_mm256_maskz_loadu_epi16(k, p));
}

TGI_LORA_BF16 inline void store16(uint16_t* p, __m512 v, __mmask16 k) {
  _mm256_mask_storeu_epi16(p, k, (__m256i)_mm512_cvtneps_pbh(v));
}
}  // namespace

// Ranks [r0, r1) of the shrink for up to N tokens of one adapter: h[j, r] = bf16(x_j . a[r]), each row of a read
// once for all of them.
template <int N>
TGI_LORA_BF16 void shrink_tile(const uint16_t* const* xs, const uint16_t* a, int64_t in, int64_t r0, int64_t r1,
                               int64_t rank, float* h) {
  for (int64_t r = r0; r < r1; ++r) {
    __m512 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < in; k += 32) {
      const __m512bh av = load_pairs(a + r * in + k, in - k);
      for (int j = 0; j < N; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], av, load_pairs(xs[j] + k, in - k));
    }
    for (int j = 0; j < N; ++j) h[j * rank + r] = bf16_round(_mm512_reduce_add_ps(acc[j]));
  }
}

// Columns [o0, o1) of the expand for up to N tokens: y_j += h_j @ bt, 16 columns at a time, over the ranks that
// reach them (bt is zero outside a rank's cols), each row of bt read once for all of them.
template <int N>
TGI_LORA_BF16 void expand_tile(uint16_t* const* ys, const uint16_t* bt, int64_t out, int64_t o0, int64_t o1,
                               int64_t rank, const int32_t* cols, const float* h) {
  for (int64_t o = o0; o < o1; o += 16) {
    const __mmask16 k = tgi_common::lanes16(o1 - o);
    __m512 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = load16(ys[j] + o, k);
    for (int64_t q = 0; q < rank; ++q) {
      if (o >= cols[2 * q + 1] || o + 16 <= cols[2 * q]) continue;
      const __m512 bv = load16(bt + q * out + o, k);
      for (int j = 0; j < N; ++j) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(h[j * rank + q]), bv, acc[j]);
    }
    for (int j = 0; j < N; ++j) store16(ys[j] + o, acc[j], k);
  }
}

#define TGI_LORA_TILE_CASES(CALL) \
  switch (n) {                    \
    case 1: CALL(1); break;       \
    case 2: CALL(2); break;       \
    case 3: CALL(3); break;       \
    case 4: CALL(4); break;       \
    case 5: CALL(5); break;       \
    case 6: CALL(6); break;       \
    case 7: CALL(7); break;       \
    default: CALL(8); break;      \
  }

TGI_LORA_BF16 void shrink_bf16_avx512(const uint16_t* const* xs, int n, const uint16_t* a, int64_t in, int64_t r0,
                                      int64_t r1, int64_t rank, float* h) {
#define TGI_SHRINK(N) shrink_tile<N>(xs, a, in, r0, r1, rank, h)
  TGI_LORA_TILE_CASES(TGI_SHRINK)
#undef TGI_SHRINK
}

TGI_LORA_BF16 void expand_bf16_avx512(uint16_t* const* ys, int n, const uint16_t* bt, int64_t out, int64_t o0,
                                      int64_t o1, int64_t rank, const int32_t* cols, const float* h) {
#define TGI_EXPAND(N) expand_tile<N>(ys, bt, out, o0, o1, rank, cols, h)
  TGI_LORA_TILE_CASES(TGI_EXPAND)
#undef TGI_EXPAND
}
#else
void shrink_bf16_avx512(const uint16_t* const*, int, const uint16_t*, int64_t, int64_t, int64_t, int64_t, float*) {}
void expand_bf16_avx512(uint16_t* const*, int, const uint16_t*, int64_t, int64_t, int64_t, int64_t, const int32_t*,
                        const float*) {}
#endif

}  // namespace tgi_lora
