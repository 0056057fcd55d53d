// The AMX path of the CPU paged decode attention (the op and its vector path: paged_attention.cpp).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"
#include "paged_attention.h"

#ifdef TGI_AMX_ATTENTION
// ---- AMX path (bfloat16, head_dim a multiple of 32, block size a multiple of 16, G <= 16) -----------------
// Pass 1, per 16 keys: S[16 keys, G] = K[16 keys, Dh] . Q^T, with K read as A tiles straight from the cache
// (16 consecutive slots of one block; rows past the sequence give scores that are never read) and Q^T as
// pair-interleaved B tiles built once per (sequence, kv head). Scores, softmax and the value pass in float32
// on AVX-512, as on the vector path.
#define TGI_ATTN_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

using namespace tgi_attention;  // pass2_all, exp_sum16

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
  for (int64_t g = 0; g < G; ++g) inv[g] = 1.0f / exp_sum16(s.scores.data() + g * n, n, mx[g]);
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

}  // namespace

namespace tgi_attention {

void decode_all_amx(const uint16_t* q, const uint16_t* kc, const uint16_t* vc, const int32_t* tables,
                    const int32_t* lens, uint16_t* out, int64_t D, int64_t H, int64_t hkv, int64_t dh, int64_t bs,
                    int64_t max_blocks, float scale, int64_t window, float softcap) {
  auto range = dh == 32 ? &decode_range_amx<1> : dh == 64 ? &decode_range_amx<2>
             : dh == 96 ? &decode_range_amx<3> : &decode_range_amx<4>;
  at::parallel_for(0, D * hkv, 1, [&](int64_t begin, int64_t end) {
    range(begin, end, q, kc, vc, tables, lens, out, H, hkv, bs, max_blocks, scale, window, softcap);
  });
}

}  // namespace tgi_attention
#endif
