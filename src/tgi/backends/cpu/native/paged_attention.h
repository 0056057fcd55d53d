// Shared by the paged decode attention's vector path (paged_attention.cpp) and its AMX path
// (paged_attention_amx.cpp): element loads and stores, and the AVX-512 value pass both use.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"

namespace tgi_attention {

// Element loads as float. bfloat16 is the top half of a float32.
inline float load_f(const float* p, int64_t i) { return p[i]; }
inline float load_f(const uint16_t* p, int64_t i) {
  uint32_t u = static_cast<uint32_t>(p[i]) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline void store_f(float* p, int64_t i, float v) { p[i] = v; }
inline void store_f(uint16_t* p, int64_t i, float v) {
  // round to nearest even (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  u += 0x7FFFu + ((u >> 16) & 1u);
  p[i] = static_cast<uint16_t>(u >> 16);
}


// One (sequence, kv head) pair's decode: q [G, Dh] of the group's query heads, the caches [NB, BS, Hkv, Dh],
// the block table, seq_len, the first key (window), bs, hkv, the kv head, G, Dh, scale, softcap, out [G, Dh],
// and scratch: qf [G * Dh], kf [Dh], scores [G * (seq_len - start)], acc [G * Dh].
template <typename T>
using DecodeFn = void (*)(const T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t, int64_t, float, float, T*, float*, float*, float*, float*);

using tgi_common::exp_nonpos;

// Soft-capping (when `softcap` > 0) of a score array, in place.
inline void soft_cap(float* __restrict scores, int64_t count, float softcap) {
  if (softcap > 0.0f)
    for (int64_t i = 0; i < count; ++i) scores[i] = softcap * std::tanh(scores[i] / softcap);
}

// Where a softmax's G reciprocal sums go: `small` for up to 64 heads, else `large`.
inline float* sums_array(int64_t g_heads, float (&small)[64], std::vector<float>& large) {
  if (g_heads <= 64) return small;
  large.resize(g_heads);
  return large.data();
}

// Soft-capping, then the softmax of each of the G query heads' n scores, in place and left unnormalised:
// `scores` gets the exponentials, the returned array 1 / each head's sum (the caller divides it out at the end).
// The plain loops' (CPUs without AVX2, head sizes no vector path has); the vector paths have their own below:
// these loops compile for the baseline target, where `exp_nonpos` does not vectorise, and on the AVX-512 path
// they had cost as much as the rest of a decode.
inline const float* softmax_unnormalised(float* __restrict scores, int64_t g_heads, int64_t n, float softcap,
                                         float (&small)[64], std::vector<float>& large) {
  soft_cap(scores, g_heads * n, softcap);
  float* inv_p = sums_array(g_heads, small, large);
  for (int64_t g = 0; g < g_heads; ++g) {
    float* sg = scores + g * n;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; ++j) m = sg[j] > m ? sg[j] : m;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      float e = exp_nonpos(sg[j] - m);
      sg[j] = e;
      sum += e;
    }
    inv_p[g] = 1.0f / sum;
  }
  return inv_p;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// softmax_unnormalised on 8 lanes (callers check for AVX2 and FMA at run time).
__attribute__((target("avx2,fma"))) inline const float* softmax8_unnormalised(
    float* __restrict scores, int64_t g_heads, int64_t n, float softcap, float (&small)[64],
    std::vector<float>& large) {
  soft_cap(scores, g_heads * n, softcap);
  float* inv_p = sums_array(g_heads, small, large);
  const int64_t whole = n - n % 8;
  for (int64_t g = 0; g < g_heads; ++g) {
    float* sg = scores + g * n;
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (int64_t j = 0; j < whole; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(sg + j));
    float m = tgi_common::hmax8_ps(mv);
    for (int64_t j = whole; j < n; ++j) m = std::max(m, sg[j]);
    mv = _mm256_set1_ps(m);
    __m256 sv = _mm256_setzero_ps();
    for (int64_t j = 0; j < whole; j += 8) {
      const __m256 e = tgi_common::exp8_nonpos(_mm256_sub_ps(_mm256_loadu_ps(sg + j), mv));
      _mm256_storeu_ps(sg + j, e);
      sv = _mm256_add_ps(sv, e);
    }
    float sum = tgi_common::hsum8_ps(sv);
    for (int64_t j = whole; j < n; ++j) {
      sg[j] = exp_nonpos(sg[j] - m);
      sum += sg[j];
    }
    inv_p[g] = 1.0f / sum;
  }
  return inv_p;
}

// One head's n scores `sg` replaced in place by exp(score - m), 16 lanes at a time (the last group masked);
// returns their sum. The vector path's softmax and the AMX path share it (callers check for AVX-512F).
__attribute__((target("avx512f"))) inline float exp_sum16(float* __restrict sg, int64_t n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 live = tgi_common::lanes16(n - j);
    const __m512 e = tgi_common::exp16_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, sg + j), mv));
    _mm512_mask_storeu_ps(sg + j, live, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(live, e));
  }
  return _mm512_reduce_add_ps(sum);
}

// softmax_unnormalised on 16 lanes (callers check for AVX-512F at run time).
__attribute__((target("avx512f"))) inline const float* softmax16_unnormalised(
    float* __restrict scores, int64_t g_heads, int64_t n, float softcap, float (&small)[64],
    std::vector<float>& large) {
  soft_cap(scores, g_heads * n, softcap);
  float* inv_p = sums_array(g_heads, small, large);
  for (int64_t g = 0; g < g_heads; ++g) {
    float* sg = scores + g * n;
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 live = tgi_common::lanes16(n - j);
      mv = _mm512_mask_max_ps(mv, live, mv, _mm512_maskz_loadu_ps(live, sg + j));
    }
    inv_p[g] = 1.0f / exp_sum16(sg, n, _mm512_reduce_max_ps(mv));
  }
  return inv_p;
}
#endif

// The AVX2 + FMA path (paged_attention_avx2.cpp): the kernel for head size `dh` (a multiple of 8 it has a
// variant for), else nullptr; callers check `has_avx2_fma_attention()` first.
bool has_avx2_fma_attention();
DecodeFn<float> pick_avx2_float(int64_t dh);
DecodeFn<uint16_t> pick_avx2_bf16(int64_t dh);

// The cache blocks of a sequence lie wherever its block table puts them, so the hardware prefetchers do not
// find the next one: while a block's rows are read, each row's counterpart in the next block (`next`, nullptr
// for the last) is prefetched, its E elements. AMD EPYC Zen 4, two threads, 32 sequences of 230 tokens, 9 heads
// on 3 kv heads of 64, bfloat16, 16-token blocks, 30 layers' caches in turn (the default model's decode at batch
// 32): 0.67-0.69 -> 0.51-0.52 ms a call on the AVX-512 path, the same bits.
template <typename T, int E>
inline void prefetch_next_row(const T* next, int64_t o, int64_t row) {
#if defined(__x86_64__)
  if (next == nullptr) return;
  const char* p = reinterpret_cast<const char*>(next + o * row);
  for (int64_t l = 0; l < E * static_cast<int64_t>(sizeof(T)); l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
#else
  (void)next, (void)o, (void)row;
#endif
}

// The start of kv head `kh`'s rows in block `b + 1` of a block table, or nullptr past the sequence's last block.
template <typename T>
inline const T* next_block(const T* cache, const int32_t* table, int64_t b, int64_t seq_len, int64_t bs,
                           int64_t row, int64_t head_offset) {
  if (b >= (seq_len - 1) / bs) return nullptr;
  return cache + static_cast<int64_t>(table[b + 1]) * bs * row + head_offset;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_AVX512_PATH 1
// AVX-512 path, compiled for AVX-512F only inside these functions and used only when the CPU has it
// (checked at run time), for head sizes that are a multiple of 16 (C = head_dim / 16 vectors per row).
__attribute__((target("avx512f"))) inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* p) {
  return tgi_common::bf16x16_to_float(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <typename T, int C, int GB>
__attribute__((target("avx512f"))) inline void pass2_group(
    const T* __restrict vc, const int32_t* __restrict table, int64_t seq_len, int64_t start, int64_t bs,
    int64_t row, int64_t kh, int64_t g0, int64_t n, const float* __restrict scores,
    const float* __restrict inv_p, float* __restrict acc) {
  __m512 a[GB][C];
  for (int h = 0; h < GB; ++h)
    for (int c = 0; c < C; ++c) a[h][c] = _mm512_setzero_ps();
  const float* pg = scores + g0 * n;
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* vb = vc + static_cast<int64_t>(table[b]) * bs * row + kh * C * 16;
    const T* vn = next_block(vc, table, b, seq_len, bs, row, kh * C * 16);
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* vp = vb + o * row;
      prefetch_next_row<T, C * 16>(vn, o, row);
      __m512 vv[C];
      for (int c = 0; c < C; ++c) vv[c] = load16(vp + 16 * c);
      for (int h = 0; h < GB; ++h) {
        const __m512 p = _mm512_set1_ps(pg[h * n + (t - start)]);
        for (int c = 0; c < C; ++c) a[h][c] = _mm512_fmadd_ps(p, vv[c], a[h][c]);
      }
    }
  }
  for (int h = 0; h < GB; ++h) {
    const __m512 s = _mm512_set1_ps(inv_p[g0 + h]);
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + (g0 + h) * C * 16 + 16 * c, _mm512_mul_ps(a[h][c], s));
  }
}

// pass 2 for all G query heads of a kv head: GB heads at a time (accumulators in registers, each value row
// widened once per group). acc [G][C * 16] = sum over keys of scores * V, times inv_p per head.
template <typename T, int C>
__attribute__((target("avx512f"))) void pass2_all(
    const T* __restrict vc, const int32_t* __restrict table, int64_t seq_len, int64_t start, int64_t bs,
    int64_t row, int64_t kh, int64_t G, int64_t n, const float* __restrict scores,
    const float* __restrict inv_p, float* __restrict acc) {
  constexpr int kMaxGB = (16 / C) < 4 ? (16 / C > 0 ? 16 / C : 1) : 4;
  for (int64_t g = 0; g < G;) {
    const int64_t gb = std::min<int64_t>(G - g, kMaxGB);
    switch (gb) {
      case 4: pass2_group<T, C, (kMaxGB >= 4 ? 4 : 1)>(vc, table, seq_len, start, bs, row, kh, g, n, scores, inv_p, acc); break;
      case 3: pass2_group<T, C, (kMaxGB >= 3 ? 3 : 1)>(vc, table, seq_len, start, bs, row, kh, g, n, scores, inv_p, acc); break;
      case 2: pass2_group<T, C, (kMaxGB >= 2 ? 2 : 1)>(vc, table, seq_len, start, bs, row, kh, g, n, scores, inv_p, acc); break;
      default: pass2_group<T, C, 1>(vc, table, seq_len, start, bs, row, kh, g, n, scores, inv_p, acc); break;
    }
    g += gb;
  }
}
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_AMX_ATTENTION 1
// The AMX path (paged_attention_amx.cpp): bfloat16, head size 32, 64, 96 or 128, block size a multiple of 16,
// at most 16 query heads per kv head.
void decode_all_amx(const uint16_t* q, const uint16_t* kc, const uint16_t* vc, const int32_t* tables,
                    const int32_t* lens, uint16_t* out, int64_t D, int64_t H, int64_t hkv, int64_t dh, int64_t bs,
                    int64_t max_blocks, float scale, int64_t window, float softcap);
#endif

}  // namespace tgi_attention
