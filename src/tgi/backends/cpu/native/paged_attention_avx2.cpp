// The AVX2 + FMA path of the CPU paged decode attention (CPUs without AVX-512: AMD Zen 1-3, older Xeons), for
// head sizes that are a multiple of 8 (C = head_dim / 8 vectors per row), float32 or bfloat16 caches.
// What the plain loops (paged_attention.cpp's decode_one) do, with the work where the vector unit is: the
// scores of 8 keys at a time, so that one horizontal reduction serves 8 dot products instead of one, and the
// values' weighted sums kept in registers (8 vectors, 64 lanes of a head, at a time) instead of in memory.
#include "paged_attention.h"

#include <cmath>
#include <vector>

namespace tgi_attention {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_ATTN_AVX2 __attribute__((target("avx2,fma")))

namespace {

using tgi_common::load8_ps;

// lane j = the sum of a[j]'s lanes: 8 dot products' partial vectors reduced at once
TGI_ATTN_AVX2 inline __m256 hsum8(const __m256 (&a)[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// the scores of the G heads for keys `keys[0 .. 7]` (rows of C vectors), into scores[g * n + first + j]
template <typename T, int C>
TGI_ATTN_AVX2 inline void score8(const float* __restrict qf, const T* const (&keys)[8], int64_t g_heads, int64_t n,
                                 int64_t first, float* __restrict scores) {
  for (int64_t g = 0; g < g_heads; ++g) {
    const float* qg = qf + g * C * 8;
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_mul_ps(_mm256_loadu_ps(qg), load8_ps(keys[j]));
    for (int c = 1; c < C; ++c) {
      const __m256 qc = _mm256_loadu_ps(qg + 8 * c);
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(qc, load8_ps(keys[j] + 8 * c), a[j]);
    }
    _mm256_storeu_ps(scores + g * n + first, hsum8(a));
  }
}

template <typename T, int C>
TGI_ATTN_AVX2 inline void score1(const float* __restrict qf, const T* key, int64_t g_heads, int64_t n, int64_t at,
                                 float* __restrict scores) {
  for (int64_t g = 0; g < g_heads; ++g) {
    const float* qg = qf + g * C * 8;
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), load8_ps(key));
    for (int c = 1; c < C; ++c) a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), load8_ps(key + 8 * c), a);
    scores[g * n + at] = tgi_common::hsum8_ps(a);
  }
}

// acc[g][c0 * 8 .. (c0 + CB) * 8) = sum over keys of scores[g] * V, CB vectors of the row in registers
template <typename T, int C, int CB>
TGI_ATTN_AVX2 inline void values_part(const T* __restrict vc, const int32_t* __restrict table, int64_t seq_len,
                                      int64_t start, int64_t bs, int64_t row, int64_t kh, int64_t g, int64_t c0,
                                      int64_t n, const float* __restrict scores, float* __restrict acc,
                                      bool prefetch) {
  __m256 a[CB];
  for (int c = 0; c < CB; ++c) a[c] = _mm256_setzero_ps();
  const float* pg = scores + g * n;
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* vb = vc + static_cast<int64_t>(table[b]) * bs * row + kh * C * 8 + c0 * 8;
    const T* vn = prefetch ? next_block(vc, table, b, seq_len, bs, row, kh * C * 8) : nullptr;
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const __m256 p = _mm256_set1_ps(pg[t - start]);
      const T* vp = vb + o * row;
      prefetch_next_row<T, C * 8>(vn, o, row);
      for (int c = 0; c < CB; ++c) a[c] = _mm256_fmadd_ps(p, load8_ps(vp + 8 * c), a[c]);
    }
  }
  for (int c = 0; c < CB; ++c) _mm256_storeu_ps(acc + g * C * 8 + (c0 + c) * 8, a[c]);
}

template <typename T, int C>
TGI_ATTN_AVX2 void decode_one_avx2(const T* __restrict q, const T* __restrict kc, const T* __restrict vc,
                                   const int32_t* __restrict table, int64_t seq_len, int64_t start, int64_t bs,
                                   int64_t hkv, int64_t kh, int64_t g_heads, int64_t dh, float scale, float softcap,
                                   T* __restrict out, float* __restrict qf, float* __restrict kf,
                                   float* __restrict scores, float* __restrict acc) {
  (void)kf;
  (void)dh;
  const int64_t n = seq_len - start;
  const int64_t row = hkv * C * 8;  // elements between consecutive slots
  if (n <= 0) {
    for (int64_t i = 0; i < g_heads * C * 8; ++i) store_f(out, i, 0.0f);
    return;
  }
  for (int64_t i = 0; i < g_heads * C * 8; ++i) qf[i] = load_f(q, i) * scale;
  // pass 1: scores, 8 keys at a time (the last few one by one)
  const T* keys[8];
  int gathered = 0;
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* kb = kc + static_cast<int64_t>(table[b]) * bs * row + kh * C * 8;
    const T* kn = next_block(kc, table, b, seq_len, bs, row, kh * C * 8);
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      prefetch_next_row<T, C * 8>(kn, o, row);
      keys[gathered++] = kb + o * row;
      if (gathered == 8) {
        score8<T, C>(qf, keys, g_heads, n, t - 7 - start, scores);
        gathered = 0;
      }
    }
  }
  for (int j = 0; j < gathered; ++j) score1<T, C>(qf, keys[j], g_heads, n, n - gathered + j, scores);
  float inv_small[64];
  std::vector<float> inv_large;
  const float* inv_p = softmax8_unnormalised(scores, g_heads, n, softcap, inv_small, inv_large);
  // pass 2: each head's weighted sum of values, up to 8 vectors of the row at a time (the first reads the rows
  // from memory, prefetching the next block's; the others find them in cache)
  constexpr int kParts = (C + 7) / 8;
  for (int64_t g = 0; g < g_heads; ++g) {
    for (int part = 0; part < kParts; ++part) {
      constexpr int kRest = C % 8 == 0 ? 8 : C % 8;
      const bool first = g == 0 && part == 0;
      if (part + 1 < kParts || C % 8 == 0)
        values_part<T, C, (C < 8 ? C : 8)>(vc, table, seq_len, start, bs, row, kh, g, part * 8, n, scores, acc,
                                           first);
      else
        values_part<T, C, kRest>(vc, table, seq_len, start, bs, row, kh, g, part * 8, n, scores, acc, first);
    }
  }
  for (int64_t g = 0; g < g_heads; ++g)
    for (int64_t d = 0; d < C * 8; ++d) store_f(out, g * C * 8 + d, acc[g * C * 8 + d] * inv_p[g]);
}

template <typename T>
DecodeFn<T> pick(int64_t dh) {
  switch (dh) {
    case 32: return &decode_one_avx2<T, 4>;
    case 64: return &decode_one_avx2<T, 8>;
    case 80: return &decode_one_avx2<T, 10>;
    case 96: return &decode_one_avx2<T, 12>;
    case 128: return &decode_one_avx2<T, 16>;
    case 256: return &decode_one_avx2<T, 32>;
    default: return nullptr;
  }
}

}  // namespace

bool has_avx2_fma_attention() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

DecodeFn<float> pick_avx2_float(int64_t dh) { return pick<float>(dh); }
DecodeFn<uint16_t> pick_avx2_bf16(int64_t dh) { return pick<uint16_t>(dh); }

#else

bool has_avx2_fma_attention() { return false; }
DecodeFn<float> pick_avx2_float(int64_t) { return nullptr; }
DecodeFn<uint16_t> pick_avx2_bf16(int64_t) { return nullptr; }

#endif

}  // namespace tgi_attention
