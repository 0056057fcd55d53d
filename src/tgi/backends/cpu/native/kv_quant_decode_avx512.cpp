// The AVX-512 path of the decode attention over a quantized KV cache (kv_quant_decode.cpp has the op): head sizes
// that are a multiple of 16 it has a variant for (CH = head_dim / 16 vectors per row). Each key's codes are
// widened once (16 at a time) for the G query heads; the value pass is the dense kernels' (`pass2_all`,
// paged_attention.h) reading codes, after each probability took its value's scale.
#include <algorithm>
#include <vector>

#include "kv_quant.h"
#include "paged_attention.h"

namespace tgi_kvq {

#ifdef TGI_AVX512_PATH
namespace {

template <typename C, int CH>
__attribute__((target("avx512f"))) void pair_avx512(const Pair& a, Scratch& s) {
  constexpr int64_t dh = CH * 16;
  const int64_t n = a.seq_len - a.start, G = a.G;
  if (n <= 0) {
    std::fill(a.out, a.out + G * dh, 0.0f);
    return;
  }
  prepare(a, s, kUnit<C>);
  const int64_t row = a.hkv * dh;  // codes between consecutive slots
  const C* kc = reinterpret_cast<const C*>(a.kc);
  float* scores = s.scores.data();
  // pass 1: scores, each key's codes widened once for the G heads
  for (int64_t b = a.start / a.bs, t = a.start; t < a.seq_len; ++b) {
    const C* kb = kc + static_cast<int64_t>(a.table[b]) * a.bs * row + a.kh * dh;
    const C* kn = tgi_attention::next_block(kc, a.table, b, a.seq_len, a.bs, row, a.kh * dh);
    const int64_t stop = std::min(a.seq_len, (b + 1) * a.bs);
    for (int64_t o = t - b * a.bs; t < stop; ++t, ++o) {
      const C* kp = kb + o * row;
      tgi_attention::prefetch_next_row<C, dh>(kn, o, row);
      __m512 kv[CH];
      for (int c = 0; c < CH; ++c) kv[c] = load16(kp + 16 * c);
      const int64_t i = t - a.start;
      for (int64_t g = 0; g < G; ++g) {
        const float* qg = s.qf.data() + g * dh;
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qg), kv[0]);
        for (int c = 1; c < CH; ++c) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c), kv[c], acc);
        scores[g * n + i] = _mm512_reduce_add_ps(acc) * s.km[i];
      }
    }
  }
  float inv_small[64];
  std::vector<float> inv_large;
  const float* inv_p = tgi_attention::softmax16_unnormalised(scores, G, n, a.softcap, inv_small, inv_large);
  // each probability times its value's scale, then the dense kernels' value pass over the codes
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 live = tgi_common::lanes16(n - i);
      const __m512 p = _mm512_maskz_loadu_ps(live, scores + g * n + i);
      _mm512_mask_storeu_ps(scores + g * n + i, live, _mm512_mul_ps(p, _mm512_maskz_loadu_ps(live, s.vm.data() + i)));
    }
  tgi_attention::pass2_all<C, CH>(reinterpret_cast<const C*>(a.vc), a.table, a.seq_len, a.start, a.bs, row, a.kh,
                                  G, n, scores, inv_p, a.out);
}

template <typename C>
PairFn pick_size(int64_t dh) {
  switch (dh) {
    case 32: return &pair_avx512<C, 2>;
    case 64: return &pair_avx512<C, 4>;
    case 80: return &pair_avx512<C, 5>;
    case 96: return &pair_avx512<C, 6>;
    case 128: return &pair_avx512<C, 8>;
    case 256: return &pair_avx512<C, 16>;
    default: return nullptr;
  }
}

}  // namespace

bool avx512_ready() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

PairFn pick_avx512(Kind kind, int64_t dh) {
  return kind == kInt8 ? pick_size<I8>(dh) : kind == kE4M3 ? pick_size<E4M3>(dh) : pick_size<E5M2>(dh);
}

#else

bool avx512_ready() { return false; }
PairFn pick_avx512(Kind, int64_t) { return nullptr; }

#endif

}  // namespace tgi_kvq
