// The CPU's fused elementwise ops (tgi_fused::...): what the row kernels (fused_ops.cpp) and the greedy pick
// (greedy_pick.cpp) share.
#pragma once

#include <torch/types.h>

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"

namespace tgi_fused {

// calls f(scalar_t{}) with the tensor's element type: float or at::BFloat16
template <typename F> void dispatch(const torch::Tensor& t, F f) {
  if (t.scalar_type() == at::kFloat) f(float{});
  else f(at::BFloat16{});
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// AVX-512 loads and stores of 16 lanes (the CPU is checked at run time: use_avx512)
#define TGI_FUSED_AVX512 1
#define TGI_V512 __attribute__((target("avx512f,avx512bw,avx512vl")))
inline bool use_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl");
  return ok;
}
using tgi_common::lanes16;
TGI_V512 inline __m512 load16(const float* p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
TGI_V512 inline __m512 load16(const at::BFloat16* p, __mmask16 k) {
  return tgi_common::bf16x16_to_float(_mm256_maskz_loadu_epi16(k, p));
}
TGI_V512 inline void store16(float* p, __m512 v, __mmask16 k) { _mm512_mask_storeu_ps(p, k, v); }
TGI_V512 inline void store16(at::BFloat16* p, __m512 v, __mmask16 k) {  // v already bfloat16-exact
  _mm256_mask_storeu_epi16(p, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
}
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_V256 __attribute__((target("avx2,fma")))
#endif
// AVX2 + FMA present (fused_ops_avx2.cpp's rows run here)
bool use_avx2();
// SiLU(g) * u of one row of n (a multiple of 8) on AVX2 (fused_ops_avx2.cpp), float or at::BFloat16
template <typename T> void silu_mul_row_avx2(const T* g, const T* u, T* out, int64_t n);
// the greedy pick of one row on AVX2 (fused_ops_avx2.cpp): false, leaving the row to the scalar rules, where
// it has a NaN or an infinite maximum, or V is not a multiple of 8
template <typename T> bool greedy_row_avx2(const T* row, int64_t V, int64_t* id, float* logprob);

}  // namespace tgi_fused
