// The CPU block linear's AMX path.
#include <cstdint>

#include "block_linear.h"

namespace tgi_blocks {

#if defined(__x86_64__)
// ---- AMX path ----------------------------------------------------------------------------------------------
// Per group and block, the 16 rows x 32 columns are dequantized exactly as the dense bfloat16 weights are
// (d * q (+ m) in float32, rounded to bfloat16) into a 16 x 64-byte B tile (our packed layout is already
// the pair-interleaved layout TDPBF16PS takes); A is 16 (or fewer) rows of x for the block's 32 columns
// straight from memory; C accumulates over all blocks in float32.
// (TGI_AMX_TARGET: block_linear.h)

TGI_AMX_TARGET void dequant_tile(const uint8_t* o, int64_t qtype, uint16_t* tile /* [16][32] */) {
  const int64_t vb = value_bytes(qtype);
  const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + vb)));
  const __m512i ia = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512i ib = _mm512_add_epi32(ia, _mm512_set1_epi32(8));
  const __m512 da = _mm512_permutexvar_ps(ia, d16), db = _mm512_permutexvar_ps(ib, d16);
  __m512i* out = reinterpret_cast<__m512i*>(tile);
  if (qtype == kQ8_0) {
    for (int p = 0; p < 16; ++p) {
      const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p))));
      const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p + 16))));
      _mm512_store_si512(out + p, (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(q1, db), _mm512_mul_ps(q0, da)));
    }
    return;
  }
  const __m512i low4 = _mm512_set1_epi32(0x0F);
  const bool has_min = qtype == kQ4_1;
  const __m512i off = _mm512_set1_epi32(qtype == kQ4_0 ? 8 : 0);
  __m512 ma = _mm512_setzero_ps(), mb = _mm512_setzero_ps();
  if (has_min) {
    const __m512 m16 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + vb + 2 * R)));
    ma = _mm512_permutexvar_ps(ia, m16);
    mb = _mm512_permutexvar_ps(ib, m16);
  }
  for (int c = 0; c < 8; ++c) {
    const __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * c)));
    const __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * c + 16)));
    __m512 lo0 = _mm512_mul_ps(da, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(v0, low4), off)));
    __m512 lo1 = _mm512_mul_ps(db, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(v1, low4), off)));
    __m512 hi0 = _mm512_mul_ps(da, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(v0, 4), off)));
    __m512 hi1 = _mm512_mul_ps(db, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(v1, 4), off)));
    if (has_min) {
      lo0 = _mm512_add_ps(lo0, ma);
      lo1 = _mm512_add_ps(lo1, mb);
      hi0 = _mm512_add_ps(hi0, ma);
      hi1 = _mm512_add_ps(hi1, mb);
    }
    _mm512_store_si512(out + 2 * c, (__m512i)_mm512_cvtne2ps_pbh(lo1, lo0));
    _mm512_store_si512(out + 2 * c + 1, (__m512i)_mm512_cvtne2ps_pbh(hi1, hi0));
  }
}

// groups [g0, g1) for the T = mts.size() (1-3) row tiles of x starting at x, x + 16 K, ...: each B tile
// (one dequantization) serves every row tile. y [sum(mts), (g1 - g0) * 16] float32.
template <int T>
TGI_AMX_TARGET void groups_amx(const uint16_t* x, int64_t K, const int64_t* mts, const uint8_t* packed,
                               int64_t qtype, int64_t g0, int64_t g1, float* y) {
  const int64_t nb = K / QK, S = packed_stride(qtype), ldy = (g1 - g0) * R * 4;
  TileConfig cfg;
  for (int t = 0; t < T; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(mts[t]);  // C tiles 0..T-1
    cfg.colsb[t] = 64;
    cfg.rows[3 + t] = static_cast<uint8_t>(mts[t]);  // A tiles 3..3+T-1
    cfg.colsb[3 + t] = 64;
  }
  cfg.rows[6] = 16;  // B
  cfg.colsb[6] = 64;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t tile[16 * 32];
  for (int64_t g = g0; g < g1; ++g) {
    _tile_zero(0);
    if (T > 1) _tile_zero(1);
    if (T > 2) _tile_zero(2);
    for (int64_t b = 0; b < nb; ++b) {
      dequant_tile(packed + (g * nb + b) * S, qtype, tile);
      _tile_loadd(6, tile, 64);
      _tile_loadd(3, x + b * QK, K * 2);
      _tile_dpbf16ps(0, 3, 6);
      if (T > 1) {
        _tile_loadd(4, x + 16 * K + b * QK, K * 2);
        _tile_dpbf16ps(1, 4, 6);
      }
      if (T > 2) {
        _tile_loadd(5, x + 32 * K + b * QK, K * 2);
        _tile_dpbf16ps(2, 5, 6);
      }
    }
    char* yg = reinterpret_cast<char*>(y + (g - g0) * R);
    _tile_stored(0, yg, ldy);
    if (T > 1) _tile_stored(1, yg + 16 * ldy, ldy);
    if (T > 2) _tile_stored(2, yg + 32 * ldy, ldy);
  }
  _tile_release();
}

template void groups_amx<1>(const uint16_t*, int64_t, const int64_t*, const uint8_t*, int64_t, int64_t, int64_t,
                            float*);
template void groups_amx<2>(const uint16_t*, int64_t, const int64_t*, const uint8_t*, int64_t, int64_t, int64_t,
                            float*);
template void groups_amx<3>(const uint16_t*, int64_t, const int64_t*, const uint8_t*, int64_t, int64_t, int64_t,
                            float*);
#endif

}  // namespace tgi_blocks
