// The CPU block linear for float32 activations: the path of CPUs without bfloat16 arithmetic, whose models
// run in float32 (AVX-512, AVX2 or plain x86-64: one clone of the same loops each, chosen at load time).
// Each block's integers are widened to float32 rows of 16 (one group), multiplied with x exactly, summed in
// float32 per block and scaled: y += d * sum(x q) + m * sum(x), as the bfloat16 paths do.
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "block_linear.h"

namespace tgi_blocks {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_F32_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TGI_F32_CLONES
#endif

TGI_F32_CLONES void group_f32(const float* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed,
                              int64_t qtype, int64_t g, float* y /* [M, R] */) {
  const int64_t nb = K / QK, vb = value_bytes(qtype), S = packed_stride(qtype);
  for (int64_t i = 0; i < M * R; ++i) y[i] = 0.0f;
  alignas(64) float w[QK][R];  // w[k][r]: the block's integer of row r, column k
  alignas(64) float d[R], mn[R];
  const float offset = static_cast<float>(q_offset(qtype));
  const bool q5 = is_q5(qtype);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = packed + (g * nb + b) * S;
    if (qtype == kQ8_0) {  // chunk p: byte 2r + j is row r, column 2p + j
      for (int p = 0; p < QK / 2; ++p)
        for (int r = 0; r < R; ++r) {
          w[2 * p][r] = static_cast<float>(static_cast<int8_t>(o[32 * p + 2 * r]));
          w[2 * p + 1][r] = static_cast<float>(static_cast<int8_t>(o[32 * p + 2 * r + 1]));
        }
    } else {  // chunk c: byte 2r + j is row r, low nibble column 4c + j, high nibble column 4c + 2 + j
      for (int c = 0; c < QK / 4; ++c)
        for (int r = 0; r < R; ++r) {
          const uint8_t lo = o[32 * c + 2 * r], hi = o[32 * c + 2 * r + 1];
          // Q5: the fifth bits of columns 4c + i (mask a) and 4c + 2 + i (mask b), row r's lanes 2r + i
          const uint32_t ha = q5 ? q5_mask(o, c, 0) >> (2 * r) : 0, hb = q5 ? q5_mask(o, c, 1) >> (2 * r) : 0;
          w[4 * c][r] = static_cast<float>((lo & 0x0F) | ((ha & 1u) << 4)) - offset;
          w[4 * c + 1][r] = static_cast<float>((hi & 0x0F) | ((ha & 2u) << 3)) - offset;
          w[4 * c + 2][r] = static_cast<float>((lo >> 4) | ((hb & 1u) << 4)) - offset;
          w[4 * c + 3][r] = static_cast<float>((hi >> 4) | ((hb & 2u) << 3)) - offset;
        }
    }
    for (int r = 0; r < R; ++r) {
      uint16_t h;
      std::memcpy(&h, o + vb + 2 * r, 2);
      d[r] = half_to_float(h);
      std::memcpy(&h, o + vb + 2 * R + 2 * r, 2);
      mn[r] = half_to_float(h);
    }
    for (int64_t m = 0; m < M; ++m) {
      const float* xb = x + m * K + b * QK;
      alignas(64) float acc[R] = {};
      for (int k = 0; k < QK; ++k) {
        const float xv = xb[k];
        for (int r = 0; r < R; ++r) acc[r] += w[k][r] * xv;
      }
      const float s = sx[m * nb + b];
      float* ym = y + m * R;
      for (int r = 0; r < R; ++r) ym[r] += d[r] * acc[r] + mn[r] * s;
    }
  }
}

#if defined(__x86_64__)
// ---- AVX2 + FMA (any x86-64 server of the last decade): 8 rows a vector, a group's 16 rows in two -----------
#define TGI_F32_AVX2 __attribute__((target("avx2,fma,f16c")))

bool has_avx2_fma() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

// the 16 rows' values of one 32-byte chunk as two 8-row halves, each lane a row: (byte 2r + 1) << 8 | byte 2r
TGI_F32_AVX2 inline void chunk_words(const uint8_t* chunk, __m256i& lo_rows, __m256i& hi_rows) {
  lo_rows = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk)));
  hi_rows = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + 16)));
}

// How a block's integers become float32 lanes (lane l of half h is row 8h + l), shared by both loops below.
struct Widen {
  __m256i nib, one, lane_bit[2];
  __m256 offset;
  bool q5;
};

TGI_F32_AVX2 inline Widen widen_for(int64_t qtype) {
  Widen w;
  w.nib = _mm256_set1_epi32(0x0F);
  w.one = _mm256_set1_epi32(1);
  // row 8h + l's bits in a chunk's fifth-bit masks are 2 (8h + l) + i
  w.lane_bit[0] = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  w.lane_bit[1] = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
  w.offset = _mm256_set1_ps(static_cast<float>(q_offset(qtype)));
  w.q5 = is_q5(qtype);
  return w;
}

// Q8_0, chunk p: column 2p + j (j = 0, 1) of half h's rows, signed
TGI_F32_AVX2 inline __m256 q8_column(__m256i v, int j) {
  return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, j ? 16 : 24), 24));
}

// 4- and 5-bit types, chunk c: column 4c + j of half h's rows (low nibbles 4c, 4c + 1; high 4c + 2, 4c + 3)
TGI_F32_AVX2 inline __m256 nibble_column(const Widen& w, __m256i v, const uint8_t* o, int c, int j, int h) {
  static constexpr int kShifts[4] = {0, 8, 4, 12};
  __m256i q = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_set1_epi32(kShifts[j])), w.nib);
  if (w.q5) {  // column 4c + j: mask a (j < 2) or b, bit 2 row + j % 2
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(q5_mask(o, c, j >= 2)));
    const __m256i bit = _mm256_add_epi32(w.lane_bit[h], _mm256_set1_epi32(j % 2));
    q = _mm256_or_si256(q, _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(mask, bit), w.one), 4));
  }
  return _mm256_sub_ps(_mm256_cvtepi32_ps(q), w.offset);
}

// a block's scales and mins of the 16 rows, as two halves
struct BlockScales {
  __m256 d[2], mn[2];
};

TGI_F32_AVX2 inline BlockScales block_scales(const uint8_t* o, int64_t vb) {
  BlockScales sc;
  for (int h = 0; h < 2; ++h) {
    sc.d[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + vb + 16 * h)));
    sc.mn[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + vb + 2 * R + 16 * h)));
  }
  return sc;
}

// y[0 .. 15] += d * acc + min * s: a block's share of one input row's outputs (s: the row's block sum)
TGI_F32_AVX2 inline void add_block(const BlockScales& sc, float s_value, __m256 acc0, __m256 acc1, float* ym) {
  const __m256 s = _mm256_set1_ps(s_value);
  _mm256_storeu_ps(ym, _mm256_fmadd_ps(sc.mn[0], s, _mm256_fmadd_ps(sc.d[0], acc0, _mm256_loadu_ps(ym))));
  _mm256_storeu_ps(ym + 8, _mm256_fmadd_ps(sc.mn[1], s, _mm256_fmadd_ps(sc.d[1], acc1, _mm256_loadu_ps(ym + 8))));
}

// column k of the 16 rows (two halves) times input rows 0 .. MM - 1's value k, into their sums
template <int MM>
TGI_F32_AVX2 inline void fma_column(const float* xk, int64_t K, __m256 w0, __m256 w1, __m256 (&acc)[MM][2]) {
  for (int m = 0; m < MM; ++m) {
    const __m256 xv = _mm256_broadcast_ss(xk + m * K);
    acc[m][0] = _mm256_fmadd_ps(w0, xv, acc[m][0]);
    acc[m][1] = _mm256_fmadd_ps(w1, xv, acc[m][1]);
  }
}

// At most 4 input rows (decode steps): each column goes from the packed bytes straight into the rows' sums,
// instead of through the block's 2 KB table of widened weights (`group_f32_avx2`), whose stores and loads
// cost, at one row, about as much as the widening itself. The same operations on each output in the same
// order: the result is bit for bit that of the table's loop.
template <int MM>
TGI_F32_AVX2 void group_f32_avx2_few(const float* x, int64_t K, const float* sx, const uint8_t* packed,
                                     int64_t qtype, int64_t g, float* y /* [MM, R] */) {
  const int64_t nb = K / QK, vb = value_bytes(qtype), S = packed_stride(qtype);
  for (int64_t i = 0; i < MM * R; ++i) y[i] = 0.0f;
  const Widen w = widen_for(qtype);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = packed + (g * nb + b) * S;
    const float* xb = x + b * QK;
    __m256 acc[MM][2];
    for (int m = 0; m < MM; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    if (qtype == kQ8_0) {
      for (int p = 0; p < QK / 2; ++p) {
        __m256i v[2];
        chunk_words(o + 32 * p, v[0], v[1]);
        for (int j = 0; j < 2; ++j) fma_column<MM>(xb + 2 * p + j, K, q8_column(v[0], j), q8_column(v[1], j), acc);
      }
    } else {
      for (int c = 0; c < QK / 4; ++c) {
        __m256i v[2];
        chunk_words(o + 32 * c, v[0], v[1]);
        for (int j = 0; j < 4; ++j)
          fma_column<MM>(xb + 4 * c + j, K, nibble_column(w, v[0], o, c, j, 0), nibble_column(w, v[1], o, c, j, 1),
                         acc);
      }
    }
    const BlockScales sc = block_scales(o, vb);
    for (int m = 0; m < MM; ++m) add_block(sc, sx[m * nb + b], acc[m][0], acc[m][1], y + m * R);
  }
}

// input rows m0 .. m0 + MM - 1 (`xb` at row m0's block) times a block's table of widened weights, into y
template <int MM>
TGI_F32_AVX2 inline void table_rows(const __m256 (&table)[QK][2], const float* xb, int64_t K,
                                    const BlockScales& sc, const float* sxb, int64_t nb, float* ym) {
  __m256 acc[MM][2];
  for (int m = 0; m < MM; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  for (int k = 0; k < QK; ++k) fma_column<MM>(xb + k, K, table[k][0], table[k][1], acc);
  for (int m = 0; m < MM; ++m) add_block(sc, sxb[m * nb], acc[m][0], acc[m][1], ym + m * R);
}

TGI_F32_AVX2 void group_f32_avx2(const float* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed,
                                 int64_t qtype, int64_t g, float* y /* [M, R] */) {
  switch (M) {  // decode steps: no table of widened weights
    case 1: return group_f32_avx2_few<1>(x, K, sx, packed, qtype, g, y);
    case 2: return group_f32_avx2_few<2>(x, K, sx, packed, qtype, g, y);
    case 3: return group_f32_avx2_few<3>(x, K, sx, packed, qtype, g, y);
    case 4: return group_f32_avx2_few<4>(x, K, sx, packed, qtype, g, y);
    default: break;
  }
  const int64_t nb = K / QK, vb = value_bytes(qtype), S = packed_stride(qtype);
  for (int64_t i = 0; i < M * R; ++i) y[i] = 0.0f;
  __m256 table[QK][2];  // table[k][h]: column k of rows 8h .. 8h + 7
  const Widen w = widen_for(qtype);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = packed + (g * nb + b) * S;
    if (qtype == kQ8_0) {
      for (int p = 0; p < QK / 2; ++p) {
        __m256i v[2];
        chunk_words(o + 32 * p, v[0], v[1]);
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 2; ++j) table[2 * p + j][h] = q8_column(v[h], j);
      }
    } else {
      for (int c = 0; c < QK / 4; ++c) {
        __m256i v[2];
        chunk_words(o + 32 * c, v[0], v[1]);
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j) table[4 * c + j][h] = nibble_column(w, v[h], o, c, j, h);
      }
    }
    const BlockScales sc = block_scales(o, vb);
    int64_t m = 0;  // 4 input rows at a time: 8 independent sums hide the FMA's latency, 2 would not
    for (; m + 4 <= M; m += 4) table_rows<4>(table, x + m * K + b * QK, K, sc, sx + m * nb + b, nb, y + m * R);
    switch (M - m) {
      case 3: table_rows<3>(table, x + m * K + b * QK, K, sc, sx + m * nb + b, nb, y + m * R); break;
      case 2: table_rows<2>(table, x + m * K + b * QK, K, sc, sx + m * nb + b, nb, y + m * R); break;
      case 1: table_rows<1>(table, x + m * K + b * QK, K, sc, sx + m * nb + b, nb, y + m * R); break;
      default: break;
    }
  }
}
#endif

}  // namespace tgi_blocks
