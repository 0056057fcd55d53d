// The AMX path of the decode attention over a quantized KV cache (kv_quant_decode.cpp has the op): bfloat16
// queries, head size 32, 64, 96 or 128, block size a multiple of 16, at most 16 query heads per kv head.
// Per 16 keys (consecutive slots of one block): their codes widened to bfloat16 (exactly, kv_quant.h) into a
// tile, S[16 keys, G] = K . Q^T on AMX with float32 sums, each score then times its key's scale. Softmax and
// the value pass on AVX-512 in float32, as the AVX-512 path does them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common.h"
#include "kv_quant.h"
#include "paged_attention.h"

namespace tgi_kvq {

#ifdef TGI_AMX_ATTENTION
#define TGI_KVQ_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

// 16 widened codes as bfloat16 (exact: every widened code is a bfloat16)
template <typename C>
TGI_KVQ_AMX inline __m256i bf16x16(const C* p) {
  return (__m256i)_mm512_cvtneps_pbh(load16(p));
}

// tiles: 0 C (scores [16 keys][G]), 1 A (16 keys x 32 of Dh), 2..5 B (Q^T, one per 32 of Dh)
TGI_KVQ_AMX void config_tiles(int64_t G) {
  tgi_common::TileConfig cfg;
  for (int t = 0; t < 6; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = t == 1 ? 64 : static_cast<uint16_t>(4 * G);
  }
  _tile_loadconfig(&cfg);
}

template <typename C, int CH>
TGI_KVQ_AMX void pair_amx(const Pair& a, Scratch& s) {
  constexpr int64_t dh = 32 * CH;
  const int64_t n = a.seq_len - a.start, G = a.G;
  if (n <= 0) {
    std::fill(a.out, a.out + G * dh, 0.0f);
    return;
  }
  prepare(a, s, kUnit<C>);
  // Q^T, pair-interleaved: qt[c][r][g][e] = q[g][32c + 2r + e] (the queries are bfloat16 values: exact)
  s.qt.resize(CH * 16 * G * 2);
  for (int64_t c = 0; c < CH; ++c)
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t e = 0; e < 2; ++e) {
          uint32_t bits;
          std::memcpy(&bits, a.q + g * dh + 32 * c + 2 * r + e, 4);
          s.qt[((c * 16 + r) * G + g) * 2 + e] = static_cast<uint16_t>(bits >> 16);
        }
  config_tiles(G);
  if (CH > 0) _tile_loadd(2, s.qt.data(), G * 4);
  if (CH > 1) _tile_loadd(3, s.qt.data() + 16 * G * 2, G * 4);
  if (CH > 2) _tile_loadd(4, s.qt.data() + 2 * 16 * G * 2, G * 4);
  if (CH > 3) _tile_loadd(5, s.qt.data() + 3 * 16 * G * 2, G * 4);
  const int64_t t0 = a.start / 16 * 16, tiles = (a.seq_len - t0 + 15) / 16;
  s.tile.resize(16 * dh);
  s.tile_scores.resize(tiles * 16 * G);
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t ta = t0 + 16 * j;  // 16 slots of one block (block sizes are multiples of 16)
    const C* k0 = code_row<C>(a.kc, a, ta);
    const int64_t row = a.hkv * dh;
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t d = 0; d < dh; d += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.tile.data() + r * dh + d), bf16x16(k0 + r * row + d));
    _tile_zero(0);
#define TGI_KVQ_CHUNK(c, b)                         \
  if (CH > c) {                                     \
    _tile_loadd(1, s.tile.data() + 32 * c, dh * 2); \
    _tile_dpbf16ps(0, 1, b);                        \
  }
    TGI_KVQ_CHUNK(0, 2)
    TGI_KVQ_CHUNK(1, 3)
    TGI_KVQ_CHUNK(2, 4)
    TGI_KVQ_CHUNK(3, 5)
#undef TGI_KVQ_CHUNK
    _tile_stored(0, s.tile_scores.data() + j * 16 * G, G * 4);
  }
  _tile_release();
  // scores [G][n]: the softmax scale, each key's scale; soft-capped where asked; their maximum per head
  const int64_t skip = a.start - t0;
  float* scores = s.scores.data();
  float mx[16];
  for (int64_t g = 0; g < G; ++g) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      float v = s.tile_scores[(skip + i) * G + g] * a.scale * s.km[i];
      if (a.softcap > 0.0f) v = a.softcap * std::tanh(v / a.softcap);
      scores[g * n + i] = v;
      m = std::max(m, v);
    }
    mx[g] = m;
  }
  float inv[16];
  for (int64_t g = 0; g < G; ++g) inv[g] = 1.0f / tgi_attention::exp_sum16(scores + g * n, n, mx[g]);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = 0; i < n; ++i) scores[g * n + i] *= s.vm[i];
  tgi_attention::pass2_all<C, 2 * CH>(reinterpret_cast<const C*>(a.vc), a.table, a.seq_len, a.start, a.bs,
                                      a.hkv * dh, a.kh, G, n, scores, inv, a.out);
}

template <typename C>
PairFn pick_size(int64_t dh) {
  switch (dh) {
    case 32: return &pair_amx<C, 1>;
    case 64: return &pair_amx<C, 2>;
    case 96: return &pair_amx<C, 3>;
    case 128: return &pair_amx<C, 4>;
    default: return nullptr;
  }
}

}  // namespace

bool amx_ready() { return tgi_common::amx_ready(); }

PairFn pick_amx(Kind kind, int64_t dh) {
  return kind == kInt8 ? pick_size<I8>(dh) : kind == kE4M3 ? pick_size<E4M3>(dh) : pick_size<E5M2>(dh);
}

#else

bool amx_ready() { return false; }
PairFn pick_amx(Kind, int64_t) { return nullptr; }

#endif

}  // namespace tgi_kvq
