// The AVX2 path of the decode attention over a quantized KV cache (CPUs without AVX-512: AMD Zen 1-3; the op is in
// kv_quant_decode.cpp): head sizes that are a multiple of 8 it has a variant for (C8 = head_dim / 8 vectors per
// row), as the dense AVX2 path (paged_attention_avx2.cpp) does it: the scores of 8 keys at a time, one horizontal
// reduction for 8 dot products; the values' weighted sums in registers, up to 8 vectors of a row at a time.
#include <algorithm>
#include <vector>

#include "kv_quant.h"
#include "paged_attention.h"

namespace tgi_kvq {

#ifdef TGI_KVQ_X86
#define TGI_KVQ_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace {

// lane j = the sum of a[j]'s lanes
TGI_KVQ_AVX2 inline __m256 hsum8(const __m256 (&a)[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// the G heads' scores of `m` (1 or 8) keys whose codes start at keys[0 .. m - 1], into scores[g * n + first + j]
// times each key's scale
template <typename C, int C8>
TGI_KVQ_AVX2 inline void score_keys(const Scratch& s, const C* const (&keys)[8], int m, int64_t G, int64_t n,
                                    int64_t first, float* __restrict scores) {
  const __m256 km = m == 8 ? _mm256_loadu_ps(s.km.data() + first) : _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    const float* qg = s.qf.data() + g * C8 * 8;
    if (m == 8) {
      __m256 a[8];
      for (int j = 0; j < 8; ++j) a[j] = _mm256_mul_ps(_mm256_loadu_ps(qg), widen8(keys[j]));
      for (int c = 1; c < C8; ++c) {
        const __m256 qc = _mm256_loadu_ps(qg + 8 * c);
        for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(qc, widen8(keys[j] + 8 * c), a[j]);
      }
      _mm256_storeu_ps(scores + g * n + first, _mm256_mul_ps(hsum8(a), km));
    } else {
      __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), widen8(keys[0]));
      for (int c = 1; c < C8; ++c) a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), widen8(keys[0] + 8 * c), a);
      scores[g * n + first] = tgi_common::hsum8_ps(a) * s.km[first];
    }
  }
}

// out[g][c0 * 8 .. (c0 + CB) * 8) = sum over keys of p[g] * values, CB vectors of the row in registers
template <typename C, int C8, int CB>
TGI_KVQ_AVX2 inline void values_part(const Pair& a, const Scratch& s, const float* __restrict p, int64_t g,
                                     int64_t c0) {
  __m256 acc[CB];
  for (int c = 0; c < CB; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < a.seq_len - a.start; ++i) {
    const __m256 w = _mm256_set1_ps(p[i]);
    const C* vp = code_at<C>(a.vc, a, s.at[i]) + c0 * 8;
    for (int c = 0; c < CB; ++c) acc[c] = _mm256_fmadd_ps(w, widen8(vp + 8 * c), acc[c]);
  }
  for (int c = 0; c < CB; ++c) _mm256_storeu_ps(a.out + g * C8 * 8 + (c0 + c) * 8, acc[c]);
}

template <typename C, int C8>
TGI_KVQ_AVX2 void pair_avx2(const Pair& a, Scratch& s) {
  constexpr int64_t dh = C8 * 8;
  const int64_t n = a.seq_len - a.start, G = a.G;
  if (n <= 0) {
    std::fill(a.out, a.out + G * dh, 0.0f);
    return;
  }
  prepare(a, s, kUnit<C>);
  float* scores = s.scores.data();
  // pass 1: 8 keys at a time, the last few one by one
  const C* keys[8];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) keys[j] = code_at<C>(a.kc, a, s.at[i + j]);
    score_keys<C, C8>(s, keys, 8, G, n, i, scores);
  }
  for (; i < n; ++i) {
    keys[0] = code_at<C>(a.kc, a, s.at[i]);
    score_keys<C, C8>(s, keys, 1, G, n, i, scores);
  }
  float inv_small[64];
  std::vector<float> inv_large;
  const float* inv_p = tgi_attention::softmax8_unnormalised(scores, G, n, a.softcap, inv_small, inv_large);
  // each probability times its value's scale; the weighted sums up to 8 vectors of the row at a time
  for (int64_t g = 0; g < G; ++g) {
    float* pg = scores + g * n;
    for (int64_t j = 0; j < n; ++j) pg[j] *= s.vm[j] * inv_p[g];
    constexpr int kParts = (C8 + 7) / 8;
    for (int part = 0; part < kParts; ++part) {
      if (part + 1 < kParts || C8 % 8 == 0)
        values_part<C, C8, (C8 < 8 ? C8 : 8)>(a, s, pg, g, part * 8);
      else
        values_part<C, C8, (C8 % 8 == 0 ? 8 : C8 % 8)>(a, s, pg, g, part * 8);
    }
  }
}

template <typename C>
PairFn pick_size(int64_t dh) {
  switch (dh) {
    case 32: return &pair_avx2<C, 4>;
    case 64: return &pair_avx2<C, 8>;
    case 80: return &pair_avx2<C, 10>;
    case 96: return &pair_avx2<C, 12>;
    case 128: return &pair_avx2<C, 16>;
    case 256: return &pair_avx2<C, 32>;
    default: return nullptr;
  }
}

}  // namespace

bool avx2_ready() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

PairFn pick_avx2(Kind kind, int64_t dh) {
  return kind == kInt8 ? pick_size<I8>(dh) : kind == kE4M3 ? pick_size<E4M3>(dh) : pick_size<E5M2>(dh);
}

#else

bool avx2_ready() { return false; }
PairFn pick_avx2(Kind, int64_t) { return nullptr; }

#endif

}  // namespace tgi_kvq
