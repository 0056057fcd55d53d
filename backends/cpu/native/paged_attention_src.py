"""C++ source of the CPU paged decode attention kernel (compiled at first use by `tgi.backends.cpu.native`).

Kept as a Python string so that it ships inside the wheel with no package-data configuration.
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using tgi_common::exp_nonpos;

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

// One (sequence, kv head) pair: the G query heads sharing the kv head attend to its keys/values, read once.
template <typename T>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void decode_one(const T* __restrict q,        // [G, Dh] at this sequence's first query head of the group
                const T* __restrict kc, const T* __restrict vc,  // caches, [NB, BS, Hkv, Dh]
                const int32_t* __restrict table, int64_t seq_len, int64_t start,
                int64_t bs, int64_t hkv, int64_t kh, int64_t g_heads, int64_t dh, float scale,
                float softcap, T* __restrict out,  // [G, Dh]
                float* __restrict qf, float* __restrict kf, float* __restrict scores,
                float* __restrict acc) {
  const int64_t n = seq_len - start;
  const int64_t row = hkv * dh;  // elements between consecutive slots
  if (n <= 0) {
    for (int64_t i = 0; i < g_heads * dh; ++i) store_f(out, i, 0.0f);
    return;
  }
  for (int64_t i = 0; i < g_heads * dh; ++i) qf[i] = load_f(q, i) * scale;

  // pass 1: scores
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* kb = kc + static_cast<int64_t>(table[b]) * bs * row + kh * dh;
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* kp = kb + o * row;
      for (int64_t d = 0; d < dh; ++d) kf[d] = load_f(kp, d);
      for (int64_t g = 0; g < g_heads; ++g) {
        const float* qg = qf + g * dh;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t d = 0; d < dh; ++d) s += qg[d] * kf[d];
        scores[g * n + (t - start)] = s;
      }
    }
  }
  if (softcap > 0.0f)
    for (int64_t i = 0; i < g_heads * n; ++i) scores[i] = softcap * std::tanh(scores[i] / softcap);
  // softmax per query head (probabilities left unnormalised; divided out at the end)
  float inv[64];
  float* inv_p = g_heads <= 64 ? inv : nullptr;
  std::vector<float> inv_heap;
  if (inv_p == nullptr) {
    inv_heap.resize(g_heads);
    inv_p = inv_heap.data();
  }
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
  // pass 2: weighted sum of values
  for (int64_t i = 0; i < g_heads * dh; ++i) acc[i] = 0.0f;
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* vb = vc + static_cast<int64_t>(table[b]) * bs * row + kh * dh;
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* vp = vb + o * row;
      for (int64_t d = 0; d < dh; ++d) kf[d] = load_f(vp, d);
      for (int64_t g = 0; g < g_heads; ++g) {
        const float p = scores[g * n + (t - start)];
        float* ag = acc + g * dh;
#pragma omp simd
        for (int64_t d = 0; d < dh; ++d) ag[d] += p * kf[d];
      }
    }
  }
  for (int64_t g = 0; g < g_heads; ++g)
    for (int64_t d = 0; d < dh; ++d) store_f(out, g * dh + d, acc[g * dh + d] * inv_p[g]);
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
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* vp = vb + o * row;
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

template <typename T, int C>
__attribute__((target("avx512f"))) void decode_one_avx512(
    const T* __restrict q, const T* __restrict kc, const T* __restrict vc,
    const int32_t* __restrict table, int64_t seq_len, int64_t start, int64_t bs, int64_t hkv, int64_t kh,
    int64_t g_heads, int64_t dh, float scale, float softcap, T* __restrict out, float* __restrict qf,
    float* __restrict kf, float* __restrict scores, float* __restrict acc) {
  (void)kf;
  const int64_t n = seq_len - start;
  const int64_t row = hkv * C * 16;
  if (n <= 0) {
    for (int64_t i = 0; i < g_heads * C * 16; ++i) store_f(out, i, 0.0f);
    return;
  }
  for (int64_t i = 0; i < g_heads * C * 16; ++i) qf[i] = load_f(q, i) * scale;
  // pass 1: scores, each key row loaded (and widened) once for the G heads
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* kb = kc + static_cast<int64_t>(table[b]) * bs * row + kh * C * 16;
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* kp = kb + o * row;
      __m512 kv[C];
      for (int c = 0; c < C; ++c) kv[c] = load16(kp + 16 * c);
      for (int64_t g = 0; g < g_heads; ++g) {
        const float* qg = qf + g * C * 16;
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qg), kv[0]);
        for (int c = 1; c < C; ++c) a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c), kv[c], a);
        scores[g * n + (t - start)] = _mm512_reduce_add_ps(a);
      }
    }
  }
  if (softcap > 0.0f)
    for (int64_t i = 0; i < g_heads * n; ++i) scores[i] = softcap * std::tanh(scores[i] / softcap);
  float inv[64];
  std::vector<float> inv_heap;
  float* inv_p = inv;
  if (g_heads > 64) {
    inv_heap.resize(g_heads);
    inv_p = inv_heap.data();
  }
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
  pass2_all<T, C>(vc, table, seq_len, start, bs, row, kh, g_heads, n, scores, inv_p, acc);
  for (int64_t i = 0; i < g_heads * C * 16; ++i) store_f(out, i, acc[i]);
}
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_AMX_ATTENTION 1
// ---- AMX path (bfloat16, head_dim a multiple of 32, block size a multiple of 16, G <= 16) -----------------
// Pass 1, per 16 keys: S[16 keys, G] = K[16 keys, Dh] . Q^T, with K read as A tiles straight from the cache
// (16 consecutive slots of one block; rows past the sequence give scores that are never read) and Q^T as
// pair-interleaved B tiles built once per (sequence, kv head). Scores, softmax and the value pass in float32
// on AVX-512, as on the vector path.
#define TGI_ATTN_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

struct AmxScratch {
  std::vector<uint16_t> qt;     // [Dh / 32][16][G][2]
  std::vector<float> sc;        // [tiles * 16][G], pass 1's C tiles as stored
  std::vector<float> scores;    // [G][n], then exp(score - max)
  std::vector<float> acc;       // [G][Dh]
};

// Pass 1's tiles: 0 and 6 C (scores [16 keys][G]), 1 and 7 A (16 keys x 32 of Dh), 2..5 B (Q^T, one per 32
// of Dh). Two 16-key tiles are in flight at a time, so one's loads overlap the other's products.
TGI_ATTN_AMX_TARGET void amx_config_scores(int64_t G) {
  tgi_common::TileConfig cfg;
  const uint16_t gcols = static_cast<uint16_t>(4 * G);
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = (t == 1 || t == 7) ? 64 : gcols;
  }
  _tile_loadconfig(&cfg);
}

template <int CH>
TGI_ATTN_AMX_TARGET inline void scores_pair(const uint16_t* k0, const uint16_t* k1, int64_t stride, bool two,
                                            float* out0, float* out1, int64_t ldo) {
  _tile_zero(0);
  if (two) _tile_zero(6);
#define TGI_CHUNK(c, b)                       \
  if (CH > c) {                               \
    _tile_loadd(1, k0 + 32 * c, stride);      \
    _tile_dpbf16ps(0, 1, b);                  \
    if (two) {                                \
      _tile_loadd(7, k1 + 32 * c, stride);    \
      _tile_dpbf16ps(6, 7, b);                \
    }                                         \
  }
  TGI_CHUNK(0, 2)
  TGI_CHUNK(1, 3)
  TGI_CHUNK(2, 4)
  TGI_CHUNK(3, 5)
#undef TGI_CHUNK
  _tile_stored(0, out0, ldo);
  if (two) _tile_stored(6, out1, ldo);
}

template <int CH>
TGI_ATTN_AMX_TARGET void decode_one_amx(const uint16_t* __restrict q, const uint16_t* __restrict kc,
                                        const uint16_t* __restrict vc, const int32_t* __restrict table,
                                        int64_t seq_len, int64_t start, int64_t bs, int64_t hkv, int64_t kh,
                                        int64_t G, float scale, float softcap, uint16_t* __restrict out,
                                        AmxScratch& s) {
  constexpr int64_t dh = 32 * CH;
  const int64_t n = seq_len - start;
  if (n <= 0) {
    for (int64_t i = 0; i < G * dh; ++i) out[i] = 0;
    return;
  }
  const int64_t row = hkv * dh;  // elements between consecutive slots
  // Q^T, pair-interleaved: qt[c][r][g][e] = q[g][32c + 2r + e]
  s.qt.resize(CH * 16 * G * 2);
  for (int64_t c = 0; c < CH; ++c)
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t e = 0; e < 2; ++e) s.qt[((c * 16 + r) * G + g) * 2 + e] = q[g * dh + 32 * c + 2 * r + e];
  amx_config_scores(G);
  if (CH > 0) _tile_loadd(2, s.qt.data(), G * 4);
  if (CH > 1) _tile_loadd(3, s.qt.data() + 16 * G * 2, G * 4);
  if (CH > 2) _tile_loadd(4, s.qt.data() + 2 * 16 * G * 2, G * 4);
  if (CH > 3) _tile_loadd(5, s.qt.data() + 3 * 16 * G * 2, G * 4);
  // pass 1 over 16-key groups aligned to the block starts
  const int64_t t0 = start / 16 * 16;
  const int64_t tiles = (seq_len - t0 + 15) / 16;
  s.sc.resize(tiles * 16 * G);
  for (int64_t j = 0; j < tiles; j += 2) {
    const int64_t ta = t0 + 16 * j, tb = ta + 16;
    const bool two = j + 1 < tiles;
    const uint16_t* ka = kc + (static_cast<int64_t>(table[ta / bs]) * bs + ta % bs) * row + kh * dh;
    const uint16_t* kb = two ? kc + (static_cast<int64_t>(table[tb / bs]) * bs + tb % bs) * row + kh * dh : ka;
    scores_pair<CH>(ka, kb, row * 2, two, s.sc.data() + j * 16 * G, s.sc.data() + (j + 1) * 16 * G, G * 4);
  }
  // scores [G][n] for keys start..seq_len-1, unnormalised probabilities exp(score - max) in float32
  s.scores.resize(G * n);
  const int64_t skip = start - t0;
  float mx[16];
  if (softcap > 0.0f) {
    for (int64_t g = 0; g < G; ++g) mx[g] = -INFINITY;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t g = 0; g < G; ++g) {
        const float v = softcap * std::tanh(s.sc[(skip + i) * G + g] * scale / softcap);
        s.scores[g * n + i] = v;
        mx[g] = v > mx[g] ? v : mx[g];
      }
  } else {  // [keys][G] -> [G][keys], 16 keys at a time
    const __m512i lane = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(static_cast<int>(G)));
    const __m512 sv = _mm512_set1_ps(scale);
    for (int64_t g = 0; g < G; ++g) {
      __m512 m = _mm512_set1_ps(-INFINITY);
      for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 live = tgi_common::lanes16(n - j);
        const float* base = s.sc.data() + (skip + j) * G + g;
        const __m512 v = _mm512_mul_ps(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, lane, base, 4), sv);
        _mm512_mask_storeu_ps(s.scores.data() + g * n + j, live, v);
        m = _mm512_mask_max_ps(m, live, m, v);
      }
      mx[g] = _mm512_reduce_max_ps(m);
    }
  }
  float inv[16];
  for (int64_t g = 0; g < G; ++g) {
    float* sg = s.scores.data() + g * n;
    const __m512 m = _mm512_set1_ps(mx[g]);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 live = tgi_common::lanes16(n - j);
      const __m512 e = tgi_common::exp16_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, sg + j), m));
      _mm512_mask_storeu_ps(sg + j, live, e);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(live, e));
    }
    inv[g] = 1.0f / _mm512_reduce_add_ps(sum);
  }
  // pass 2 on AVX-512 in float32 (as the vector path): bfloat16 probabilities on AMX cost greedy agreement
  // with the float32 model, and their exact two-part form costs more than it saves
  s.acc.resize(G * dh);
  pass2_all<uint16_t, 2 * CH>(vc, table, seq_len, start, bs, row, kh, G, n, s.scores.data(), inv, s.acc.data());
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < dh; d += 16) {
      const __m512 o = _mm512_loadu_ps(s.acc.data() + g * dh + d);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + g * dh + d), (__m256i)_mm512_cvtneps_pbh(o));
    }
}

template <int CH>
TGI_ATTN_AMX_TARGET void decode_range_amx(int64_t begin, int64_t end, const uint16_t* q, const uint16_t* kc,
                                          const uint16_t* vc, const int32_t* tables, const int32_t* lens,
                                          uint16_t* out, int64_t H, int64_t hkv, int64_t bs, int64_t max_blocks,
                                          float scale, int64_t window, float softcap) {
  constexpr int64_t dh = 32 * CH;
  const int64_t G = H / hkv;
  AmxScratch scratch;
  for (int64_t w = begin; w < end; ++w) {
    const int64_t i = w / hkv, kh = w % hkv;
    const int64_t len = lens[i];
    const int64_t start = window > 0 ? std::max<int64_t>(0, len - window) : 0;
    decode_one_amx<CH>(q + (i * H + kh * G) * dh, kc, vc, tables + i * max_blocks, len, start, bs, hkv, kh, G,
                       scale, softcap, out + (i * H + kh * G) * dh, scratch);
  }
  _tile_release();
}

void decode_all_amx(const uint16_t* q, const uint16_t* kc, const uint16_t* vc, const int32_t* tables,
                    const int32_t* lens, uint16_t* out, int64_t D, int64_t H, int64_t hkv, int64_t dh, int64_t bs,
                    int64_t max_blocks, float scale, int64_t window, float softcap) {
  auto range = dh == 32 ? &decode_range_amx<1> : dh == 64 ? &decode_range_amx<2>
             : dh == 96 ? &decode_range_amx<3> : &decode_range_amx<4>;
  at::parallel_for(0, D * hkv, 1, [&](int64_t begin, int64_t end) {
    range(begin, end, q, kc, vc, tables, lens, out, H, hkv, bs, max_blocks, scale, window, softcap);
  });
}
#endif

template <typename T>
using DecodeFn = void (*)(const T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t, int64_t, float, float, T*, float*, float*, float*, float*);

template <typename T>
DecodeFn<T> pick_kernel(int64_t dh) {
#ifdef TGI_AVX512_PATH
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    switch (dh) {
      case 32: return &decode_one_avx512<T, 2>;
      case 64: return &decode_one_avx512<T, 4>;
      case 80: return &decode_one_avx512<T, 5>;
      case 96: return &decode_one_avx512<T, 6>;
      case 128: return &decode_one_avx512<T, 8>;
      case 256: return &decode_one_avx512<T, 16>;
      default: break;
    }
  }
#endif
  return &decode_one<T>;
}

template <typename T>
void decode_all(const T* q, const T* kc, const T* vc, const int32_t* tables, const int32_t* lens,
                T* out, int64_t D, int64_t H, int64_t hkv, int64_t dh, int64_t bs, int64_t max_blocks,
                float scale, int64_t window, float softcap) {
  const int64_t G = H / hkv;
  int64_t max_len = 0;
  for (int64_t i = 0; i < D; ++i) max_len = std::max<int64_t>(max_len, lens[i]);
  if (window > 0) max_len = std::min(max_len, window);
  const DecodeFn<T> kernel = pick_kernel<T>(dh);
  at::parallel_for(0, D * hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(G * dh), kf(dh), acc(G * dh), scores(G * std::max<int64_t>(max_len, 1));
    for (int64_t w = begin; w < end; ++w) {
      const int64_t i = w / hkv, kh = w % hkv;
      const int64_t len = lens[i];
      const int64_t start = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      kernel(q + (i * H + kh * G) * dh, kc, vc, tables + i * max_blocks, len, start, bs, hkv, kh, G,
                    dh, scale, softcap, out + (i * H + kh * G) * dh, qf.data(), kf.data(), scores.data(),
                    acc.data());
    }
  });
}

}  // namespace

torch::Tensor paged_decode(torch::Tensor q, torch::Tensor key_cache, torch::Tensor value_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens, double scale,
                           int64_t sliding_window, double softcap, int64_t impl) {
  TORCH_CHECK(q.dim() == 3, "q must be [D, H, Dh]");
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(),
              "key/value caches must be [num_blocks, block_size, Hkv, Dh]");
  TORCH_CHECK(key_cache.scalar_type() == q.scalar_type() && value_cache.scalar_type() == q.scalar_type(),
              "q and the caches must share a dtype");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16,
              "paged_decode supports float32 and bfloat16");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous(), "caches must be contiguous");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && seq_lens.scalar_type() == at::kInt,
              "block_tables and seq_lens must be int32");
  const int64_t D = q.size(0), H = q.size(1), dh = q.size(2);
  const int64_t bs = key_cache.size(1), hkv = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == dh, "head_dim mismatch");
  TORCH_CHECK(H % hkv == 0, "query heads must be a multiple of kv heads");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == D, "block_tables must be [D, max_blocks]");
  TORCH_CHECK(seq_lens.numel() == D, "seq_lens must be [D]");
  q = q.contiguous();
  block_tables = block_tables.contiguous();
  seq_lens = seq_lens.contiguous();
  const int64_t max_blocks = block_tables.size(1);
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  for (int64_t i = 0; i < D; ++i)
    TORCH_CHECK(lens[i] >= 0 && lens[i] <= max_blocks * bs, "seq_len exceeds the block table");
  auto out = torch::empty_like(q);
  if (D == 0) return out;
  TORCH_CHECK(impl >= 0 && impl <= 2, "unknown paged_decode implementation ", impl);
  TORCH_CHECK(impl != 2 || q.scalar_type() == at::kBFloat16, "the AMX decode needs bfloat16");
  if (q.scalar_type() == at::kFloat) {
    decode_all<float>(q.data_ptr<float>(), key_cache.data_ptr<float>(), value_cache.data_ptr<float>(),
                      block_tables.data_ptr<int32_t>(), lens, out.data_ptr<float>(), D, H, hkv, dh, bs,
                      max_blocks, static_cast<float>(scale), sliding_window, static_cast<float>(softcap));
    return out;
  }
  // impl: 0 the fastest this CPU has for the shapes, 1 the vector path, 2 AMX
  const int64_t G = H / hkv;
  const bool amx_shapes = dh % 32 == 0 && dh <= 128 && bs % 16 == 0 && G <= 16;
#ifdef TGI_AMX_ATTENTION
  const bool amx = tgi_common::amx_ready();
#else
  const bool amx = false;
#endif
  TORCH_CHECK(impl != 2 || amx, "AMX is not available here");
  TORCH_CHECK(impl != 2 || amx_shapes,
              "the AMX decode needs bfloat16, a head size of 32, 64, 96 or 128, a block size that is a "
              "multiple of 16 and at most 16 query heads per kv head");
#ifdef TGI_AMX_ATTENTION
  if (impl == 2 || (impl == 0 && amx && amx_shapes)) {
    decode_all_amx(reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>()),
                   reinterpret_cast<const uint16_t*>(key_cache.data_ptr<at::BFloat16>()),
                   reinterpret_cast<const uint16_t*>(value_cache.data_ptr<at::BFloat16>()),
                   block_tables.data_ptr<int32_t>(), lens, reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()),
                   D, H, hkv, dh, bs, max_blocks, static_cast<float>(scale), sliding_window,
                   static_cast<float>(softcap));
    return out;
  }
#endif
  {
    decode_all<uint16_t>(reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>()),
                         reinterpret_cast<const uint16_t*>(key_cache.data_ptr<at::BFloat16>()),
                         reinterpret_cast<const uint16_t*>(value_cache.data_ptr<at::BFloat16>()),
                         block_tables.data_ptr<int32_t>(), lens,
                         reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()), D, H, hkv, dh, bs,
                         max_blocks, static_cast<float>(scale), sliding_window, static_cast<float>(softcap));
  }
  return out;
}
"""
