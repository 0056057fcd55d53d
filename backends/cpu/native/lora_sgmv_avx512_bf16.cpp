// LoRA's segmented pair (lora_sgmv.h), bfloat16 on AVX-512 BF16: the shrink with the bfloat16 dot product,
// 32 inputs a step; the expand with float32 FMAs over the columns each rank reaches.
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

TGI_LORA_BF16 void token_bf16_avx512(const uint16_t* x, const uint16_t* a, const uint16_t* bt, uint16_t* y,
                                     int64_t in, int64_t out, int64_t rank, const int32_t* cols, float* h,
                                     float* acc) {
  // shrink: h[r] = bf16(x . a[r]), four ranks at a time (one load of x for four rows of a)
  int64_t r = 0;
  for (; r + 4 <= rank; r += 4) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t k = 0; k < in; k += 32) {
      const __m512bh xv = load_pairs(x + k, in - k);
      acc0 = _mm512_dpbf16_ps(acc0, load_pairs(a + (r + 0) * in + k, in - k), xv);
      acc1 = _mm512_dpbf16_ps(acc1, load_pairs(a + (r + 1) * in + k, in - k), xv);
      acc2 = _mm512_dpbf16_ps(acc2, load_pairs(a + (r + 2) * in + k, in - k), xv);
      acc3 = _mm512_dpbf16_ps(acc3, load_pairs(a + (r + 3) * in + k, in - k), xv);
    }
    h[r + 0] = _mm512_reduce_add_ps(acc0);
    h[r + 1] = _mm512_reduce_add_ps(acc1);
    h[r + 2] = _mm512_reduce_add_ps(acc2);
    h[r + 3] = _mm512_reduce_add_ps(acc3);
  }
  for (; r < rank; ++r) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < in; k += 32)
      acc = _mm512_dpbf16_ps(acc, load_pairs(a + r * in + k, in - k), load_pairs(x + k, in - k));
    h[r] = _mm512_reduce_add_ps(acc);
  }
  for (r = 0; r < rank; ++r) h[r] = bf16_round(h[r]);
  // expand: acc = y; acc[cols of rank q] += h[q] * bt[q, cols] (only the columns rank q reaches: a fused
  // linear's part, none for zero-padded ranks); y = bf16(acc)
  for (int64_t o = 0; o < out; o += 16) {
    const __mmask16 k = tgi_common::lanes16(out - o);
    _mm512_mask_storeu_ps(acc + o, k, load16(y + o, k));
  }
  for (int64_t q = 0; q < rank; ++q) {
    const int64_t lo = cols[2 * q], hi = cols[2 * q + 1];
    const __m512 hv = _mm512_set1_ps(h[q]);
    const uint16_t* row = bt + q * out;
    int64_t o = lo;
    for (; o + 32 <= hi; o += 32) {
      const __m512 s0 = _mm512_fmadd_ps(hv, load16(row + o, 0xFFFF), _mm512_loadu_ps(acc + o));
      const __m512 s1 = _mm512_fmadd_ps(hv, load16(row + o + 16, 0xFFFF), _mm512_loadu_ps(acc + o + 16));
      _mm512_storeu_ps(acc + o, s0);
      _mm512_storeu_ps(acc + o + 16, s1);
    }
    for (; o < hi; o += 16) {
      const __mmask16 k = tgi_common::lanes16(hi - o);
      _mm512_mask_storeu_ps(acc + o, k, _mm512_fmadd_ps(hv, load16(row + o, k), _mm512_maskz_loadu_ps(k, acc + o)));
    }
  }
  for (int64_t o = 0; o < out; o += 16) {
    const __mmask16 k = tgi_common::lanes16(out - o);
    store16(y + o, _mm512_maskz_loadu_ps(k, acc + o), k);
  }
}
#else
void token_bf16_avx512(const uint16_t*, const uint16_t*, const uint16_t*, uint16_t*, int64_t, int64_t, int64_t,
                       const int32_t*, float*, float*) {}
#endif

}  // namespace tgi_lora
