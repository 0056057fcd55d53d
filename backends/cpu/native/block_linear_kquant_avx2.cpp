// The K-quants' int8 path on AVX2 (impl "avx2-int8"), what llama.cpp computes on an AVX2 CPU: the input
// quantized per row and 256 columns to int8 (`quantize_rows_q8k`, the AVX512-VNNI path's q8_K, stored in its
// column order), and `vpmaddubsw` multiplies the weights' unsigned integers (4 to 6 bits) with those signed
// bytes, two per 16-bit lane. Integer sums throughout a super-block (exact), then in float32 per super-block:
// y += (d dx) * sum_j sc_j sum(q x8) - (dmin dx) * sum_j m_j sum(x8) (Q6_K: sc_i (sum(q x8) - 32 sum(x8))).
//
// The packed layout is the one every K-quant path reads (block_linear_kquant.h): chunk c's 32 bytes hold, at
// byte 2r + i, row r's low nibble of column 4c + i and high nibble of column 4c + 2 + i. So one `maddubs` of
// a chunk's low (high) nibbles with the broadcast pair of columns 4c, 4c + 1 (4c + 2, 4c + 3) leaves row r's
// two-column sum in 16-bit lane r. `maddubs` saturates its int16 sums: a pair of u8 weights times s8 inputs
// (|x8| <= 127) is at most 2 * 15 * 127 = 3810 for Q4_K, 2 * 31 * 127 = 7874 for Q5_K and 2 * 63 * 127 =
// 16002 for Q6_K, so never saturates; the 16-bit sums are added exactly for as many chunks as stay under
// 32767 (Q4_K four chunks, 30480; Q5_K two, 31496; Q6_K one, 32004), then `vpmaddwd` with the sub-block
// scale in the even (odd) 16-bit lanes and zeros in the others widens the even (odd) rows to int32 and
// multiplies them by their scales in one step. Rows are thus held as even and odd halves (E: rows 0, 2, ..,
// 14; O: rows 1, 3, .., 15) until the end of a group.
//
// Its accuracy is the AVX512-VNNI path's (same q8_K input): each output within half an input step per column
// weighted by |w| of the exact-input product; each row is quantized alone, so rows do not depend on the batch.
//
// Measured on the AMD EPYC family 23 model 1 (Zen 1: AVX2, FMA, F16C; no AVX-512), one thread, [M, 2048] x
// [2048, 8192] Q4_K, medians of interleaved runs on a shared machine: M=1 1.23 ms against 76.6 for the float32
// loop nest it replaces and 4.19 for the dense float32 product; M=64 85 against 121 dense (backends/cpu/README.md).
#include <cstdint>
#include <cstring>

#include "block_linear_kquant.h"

namespace tgi_blocks {

#if defined(__x86_64__)

namespace {

// 16 fp16 values (rows 0-15) as float32 even rows (E) and odd rows (O)
TGI_AVX2_TARGET inline void halves_eo(const uint8_t* p, __m256* e, __m256* o) {
  const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  // shuffle: [a0 a2 b0 b2 | a4 a6 b4 b6]; the 64-bit permutation puts them in row order
  *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
  *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

// 16 per-row scale bytes as 16-bit lanes, kept in the even (odd) lanes of each 32-bit pair for `maddwd`
TGI_AVX2_TARGET inline __m256i scales16(const uint8_t* p, bool is_signed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return is_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

// a chunk's lane mask (bit b: byte b) as bytes of `bit` where set, else 0
TGI_AVX2_TARGET inline __m256i mask_bytes(const uint8_t* p, __m256i spread, __m256i select, __m256i bit) {
  uint32_t m;
  std::memcpy(&m, p, 4);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(m)), spread);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, select), select), bit);
}

TGI_AVX2_TARGET inline __m256i bcast_pair(const int8_t* p) {
  int16_t v;
  std::memcpy(&v, p, 2);
  return _mm256_set1_epi16(v);
}

// MT input rows against one group of 16 weight rows; y [MT, R] in row order
template <int MT, int64_t T>
TGI_AVX2_TARGET void group_tile_avx2(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t K,
                                     const uint8_t* packed, int64_t g, float* y) {
  // chunks whose 16-bit sums are added before widening (see the top of the file)
  constexpr int RUN = T == kQ4_K ? 4 : T == kQ5_K ? 2 : 1;
  const int64_t ns = K / QKK, S = kq_stride(T), H = kq_header(T);
  const __m256i low4 = _mm256_set1_epi8(0x0F), even = _mm256_set1_epi32(0xFFFF);
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i bit4 = _mm256_set1_epi8(16), bit5 = _mm256_set1_epi8(32);
  __m256 ye[MT], yo[MT];
  for (int m = 0; m < MT; ++m) ye[m] = yo[m] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* o = packed + (g * ns + s) * S;
    const uint8_t* scales = o + H + 4 * R;
    __m256i acc_e[MT], acc_o[MT];
    for (int m = 0; m < MT; ++m) acc_e[m] = acc_o[m] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const int8_t* xs = xq + s * QKK + 32 * j;
      __m256i sc = T == kQ6_K ? _mm256_setzero_si256() : scales16(scales + j * R, false);
      __m256i run[MT];
      for (int c = 0; c < 8; ++c) {
        // 4 KiB ahead of the stream of groups, as on the AVX512-VNNI path (one line per two chunks)
        if (c % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(o + 256 * j + 32 * c + 4096), _MM_HINT_T0);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 256 * j + 32 * c));
        __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        if (T == kQ5_K) {
          const uint8_t* h = o + kLowBytes + 64 * j + 8 * c;
          lo = _mm256_or_si256(lo, mask_bytes(h, spread, select, bit4));
          hi = _mm256_or_si256(hi, mask_bytes(h + 4, spread, select, bit4));
        } else if (T == kQ6_K) {
          const uint8_t* h = o + kLowBytes + 128 * j + 16 * c;
          lo = _mm256_or_si256(lo, mask_bytes(h, spread, select, bit4));
          hi = _mm256_or_si256(hi, mask_bytes(h + 4, spread, select, bit4));
          lo = _mm256_or_si256(lo, mask_bytes(h + 8, spread, select, bit5));
          hi = _mm256_or_si256(hi, mask_bytes(h + 12, spread, select, bit5));
          if (c % 4 == 0) sc = scales16(scales + (2 * j + c / 4) * R, true);  // Q6_K's sub-blocks of 16
        }
        // the input's column order: each 8 columns as 0, 1, 4, 5, 2, 3, 6, 7 (quantize_rows_q8k)
        const int64_t xo = 8 * (c / 2) + 2 * (c % 2);
        for (int m = 0; m < MT; ++m) {
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast_pair(xs + m * K + xo)),
                                             _mm256_maddubs_epi16(hi, bcast_pair(xs + m * K + xo + 4)));
          run[m] = c % RUN == 0 ? p : _mm256_add_epi16(run[m], p);
        }
        if (c % RUN == RUN - 1) {
          const __m256i sc_e = _mm256_and_si256(sc, even), sc_o = _mm256_andnot_si256(even, sc);
          for (int m = 0; m < MT; ++m) {
            acc_e[m] = _mm256_add_epi32(acc_e[m], _mm256_madd_epi16(run[m], sc_e));
            acc_o[m] = _mm256_add_epi32(acc_o[m], _mm256_madd_epi16(run[m], sc_o));
          }
        }
      }
    }
    // the mins' (Q6_K: the -32's) term, sum_j m_j * sum(x8 of sub-block j), exact in int32
    __m256 d_e, d_o, dmin_e, dmin_o;
    halves_eo(o + H, &d_e, &d_o);
    halves_eo(o + H + 2 * R, &dmin_e, &dmin_o);
    for (int m = 0; m < MT; ++m) {
      const int32_t* bs = bsum + (m * ns + s) * (QKK / 16);
      __m256i min_e = _mm256_setzero_si256(), min_o = _mm256_setzero_si256();
      for (int i = 0; i < (T == kQ6_K ? 16 : 8); ++i) {
        const __m256i mi = T == kQ6_K ? scales16(scales + i * R, true) : scales16(scales + (8 + i) * R, false);
        // |sum of 16 or 32 x8| <= 4064: one 16-bit lane
        const __m256i b = _mm256_set1_epi16(static_cast<int16_t>(T == kQ6_K ? bs[i] : bs[2 * i] + bs[2 * i + 1]));
        min_e = _mm256_add_epi32(min_e, _mm256_madd_epi16(_mm256_and_si256(mi, even), b));
        min_o = _mm256_add_epi32(min_o, _mm256_madd_epi16(_mm256_andnot_si256(even, mi), b));
      }
      const __m256 dxs = _mm256_set1_ps(dx[m * ns + s]);
      if (T == kQ6_K) {  // sc (q - 32): |sum| < 2^29
        acc_e[m] = _mm256_sub_epi32(acc_e[m], _mm256_slli_epi32(min_e, 5));
        acc_o[m] = _mm256_sub_epi32(acc_o[m], _mm256_slli_epi32(min_o, 5));
      }
      ye[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_e[m]), _mm256_mul_ps(d_e, dxs), ye[m]);
      yo[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_o[m]), _mm256_mul_ps(d_o, dxs), yo[m]);
      if (T != kQ6_K) {
        ye[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_e), _mm256_mul_ps(dmin_e, dxs), ye[m]);
        yo[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_o), _mm256_mul_ps(dmin_o, dxs), yo[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) {  // even and odd rows back to row order
    const __m256 lo = _mm256_unpacklo_ps(ye[m], yo[m]), hi = _mm256_unpackhi_ps(ye[m], yo[m]);
    _mm256_storeu_ps(y + m * R, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(y + m * R + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
}

template <int64_t T>
TGI_AVX2_TARGET void group_rows_avx2(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                                     const uint8_t* packed, int64_t g, float* y) {
  const int64_t ns = K / QKK, nbs = ns * (QKK / 16);
  int64_t m = 0;
  for (; m + 4 <= M; m += 4)
    group_tile_avx2<4, T>(xq + m * K, dx + m * ns, bsum + m * nbs, K, packed, g, y + m * R);
  const int8_t* xm = xq + m * K;
  const float* dm = dx + m * ns;
  const int32_t* bm = bsum + m * nbs;
  float* ym = y + m * R;
  switch (M - m) {
    case 3: group_tile_avx2<3, T>(xm, dm, bm, K, packed, g, ym); break;
    case 2: group_tile_avx2<2, T>(xm, dm, bm, K, packed, g, ym); break;
    case 1: group_tile_avx2<1, T>(xm, dm, bm, K, packed, g, ym); break;
    default: break;
  }
}

}  // namespace

TGI_AVX2_TARGET void group_avx2_k(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  if (qtype == kQ4_K) group_rows_avx2<kQ4_K>(xq, dx, bsum, M, K, packed, g, y);
  else if (qtype == kQ5_K) group_rows_avx2<kQ5_K>(xq, dx, bsum, M, K, packed, g, y);
  else group_rows_avx2<kQ6_K>(xq, dx, bsum, M, K, packed, g, y);
}
#endif

}  // namespace tgi_blocks
