// The K-quants' int8 path on AVX2 (impl "avx2-int8"), what llama.cpp computes on an AVX2 CPU: the input
// quantized per row and 256 columns to int8 (`quantize_rows_int8` with G = 256, llama.cpp's q8_K, stored in
// the AVX512-VNNI path's column order; that path takes a scale per 32 columns, which here would cost a float32
// conversion and scaling per sub-block instead of one per super-block), and `vpmaddubsw` multiplies the
// weights' unsigned integers (4 to 6 bits) with those signed bytes, two per 16-bit lane. Integer sums
// throughout a super-block (exact), then in float32 per super-block:
// y += (d dx) * sum_j sc_j sum(q x8) - (dmin dx) * sum_j m_j sum(x8) (Q6_K: sc_i (sum(q x8) - 32 sum(x8))).
//
// The packed layout is the one every K-quant path reads (block_linear_kquant.h): chunk c's 32 bytes hold, at
// byte 2r + i, row r's low nibble of column 4c + i and high nibble of column 4c + 2 + i. So one `maddubs` of
// a chunk's low (high) nibbles with the broadcast pair of columns 4c, 4c + 1 (4c + 2, 4c + 3) leaves row r's
// two-column sum in 16-bit lane r. `maddubs` saturates its int16 sums: a pair of u8 weights times s8 inputs
// (|x8| <= 127) is at most 2 * 15 * 127 = 3810 for Q4_K, 2 * 31 * 127 = 7874 for Q5_K and 2 * 63 * 127 =
// 16002 for Q6_K, so never saturates; the 16-bit sums are added exactly for as many chunks as stay under
// 32767 (Q4_K four chunks, 30480; Q5_K two, 31496; Q6_K one, 32004). Two such runs of one sub-block are then
// interleaved (`unpacklo/hi_epi16`: each 32-bit lane one row's two sums) and `vpmaddwd` with the row's scale
// in both halves widens them to int32, adds them and scales them in one step: two `maddwd` per two runs for
// 16 rows. Rows are thus held as halves A (rows 0-3, 8-11) and B (4-7, 12-15) until the end of a group.
//
// The high bits (Q5_K, Q6_K) are set into each chunk's bytes before the products: from lane masks (the layout
// the AVX-512 paths read) each mask takes ~6 operations to widen into bytes, so a Q6_K chunk spends ~28 on
// its four masks; from fields (the layout packed for CPUs without AVX512-BF16) a shift and a mask per half.
// Zen 1, one thread, [1, 8192] x [8192, 2048] Q6_K: see src/tgi/backends/cpu/README.md.
//
// Its accuracy is int8 inputs': each output within half an input step per column weighted by |w| of the
// exact-input product; each row is quantized alone, so rows do not depend on the batch.
//
// Measured on the AMD EPYC family 23 model 1 (Zen 1: AVX2, FMA, F16C; no AVX-512), one thread, [M, 2048] x
// [2048, 8192] Q4_K, medians of interleaved runs on a shared machine: M=1 1.23 ms against 76.6 for the float32
// loop nest it replaces and 4.19 for the dense float32 product; M=64 85 against 121 dense (src/tgi/backends/cpu/README.md).
#include <cstdint>
#include <cstring>

#include "block_linear_kquant.h"

namespace tgi_blocks {

#if defined(__x86_64__)

namespace {

// 16 fp16 values (rows 0-15) as float32 halves A (rows 0-3, 8-11) and B (rows 4-7, 12-15): the order in which
// `unpacklo/hi_epi16` leave the rows of two 16-lane sums (see group_tile_avx2)
TGI_AVX2_TARGET inline void halves_ab(const uint8_t* p, __m256* a, __m256* b) {
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  *a = _mm256_permute2f128_ps(lo, hi, 0x20);
  *b = _mm256_permute2f128_ps(lo, hi, 0x31);
}

// 16 per-row scale bytes as 16-bit lanes (row r in lane r)
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

// the field at bit `at` of each byte of the fields vector `v` moved to bit `to` (the bits around it are
// masked off by the caller: 16-bit shifts of at most 4 never carry another byte's bits into the field)
TGI_AVX2_TARGET inline __m256i field_at(__m256i v, int at, int to) {
  return at < to ? _mm256_slli_epi16(v, to - at) : at > to ? _mm256_srli_epi16(v, at - to) : v;
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
  // chunks whose 16-bit sums are added before widening (see the top of the file); two such runs of one scale
  // are widened together
  constexpr int64_t F = kq_format(T);
  constexpr int RUN = F == kQ4_K ? 4 : F == kQ5_K ? 2 : 1;
  const int64_t ns = K / QKK, S = kq_stride(T), H = kq_header(T);
  const __m256i low4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i bit4 = _mm256_set1_epi8(16), bit5 = _mm256_set1_epi8(32), bits45 = _mm256_set1_epi8(48);
  __m256 ya[MT], yb[MT];
  for (int m = 0; m < MT; ++m) ya[m] = yb[m] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* o = packed + (g * ns + s) * S;
    const uint8_t* scales = o + H + 4 * R;
    __m256i acc_a[MT], acc_b[MT];
    for (int m = 0; m < MT; ++m) acc_a[m] = acc_b[m] = zero;
    for (int j = 0; j < 8; ++j) {
      const int8_t* xs = xq + s * QKK + 32 * j;
      // the sub-block's scales, each row's in both 16-bit lanes of its 32-bit lane, for rows A and B (Q6_K:
      // set at chunks 0 and 4, its sub-blocks of 16)
      __m256i sc_a = zero, sc_b = zero, fields = zero;
      if (F != kQ6_K) {
        const __m256i sc = scales16(scales + j * R, false);
        sc_a = _mm256_unpacklo_epi16(sc, sc);
        sc_b = _mm256_unpackhi_epi16(sc, sc);
      }
      __m256i run[MT], held[MT];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        if (c % 2 == 0) kq_prefetch_ahead<T>(o, S, 4 * j + c / 2);  // (one step per two chunks)
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
        } else if (T == kQ5_KF) {  // bits 2(c % 4) (a) and 2(c % 4) + 1 (b) of the vector of chunks 4v..4v + 3
          if (c % 4 == 0)
            fields = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kLowBytes + 64 * j + 32 * (c / 4)));
          lo = _mm256_or_si256(lo, _mm256_and_si256(field_at(fields, 2 * (c % 4), 4), bit4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(field_at(fields, 2 * (c % 4) + 1, 4), bit4));
        } else if (T == kQ6_KF) {  // bits 4(c % 2) (a) and 4(c % 2) + 2 (b), two each, of chunks 2v, 2v + 1
          if (c % 2 == 0)
            fields = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kLowBytes + 128 * j + 32 * (c / 2)));
          lo = _mm256_or_si256(lo, _mm256_and_si256(field_at(fields, 4 * (c % 2), 4), bits45));
          hi = _mm256_or_si256(hi, _mm256_and_si256(field_at(fields, 4 * (c % 2) + 2, 4), bits45));
        }
        if (F == kQ6_K && c % 4 == 0) {
          const __m256i sc = scales16(scales + (2 * j + c / 4) * R, true);
          sc_a = _mm256_unpacklo_epi16(sc, sc);
          sc_b = _mm256_unpackhi_epi16(sc, sc);
        }
        // the input's column order: each 8 columns as 0, 1, 4, 5, 2, 3, 6, 7 (quantize_rows_int8)
        const int64_t xo = 8 * (c / 2) + 2 * (c % 2);
        for (int m = 0; m < MT; ++m) {
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast_pair(xs + m * K + xo)),
                                             _mm256_maddubs_epi16(hi, bcast_pair(xs + m * K + xo + 4)));
          run[m] = c % RUN == 0 ? p : _mm256_add_epi16(run[m], p);
        }
        if (c % RUN == RUN - 1 && (c / RUN) % 2 == 0) {
          for (int m = 0; m < MT; ++m) held[m] = run[m];
        } else if (c % RUN == RUN - 1) {
          // two runs' 16-bit sums interleaved: each 32-bit lane holds one row's two sums, and `maddwd` with
          // that row's scale in both halves adds them widened (rows A: 0-3, 8-11; B: 4-7, 12-15)
          for (int m = 0; m < MT; ++m) {
            acc_a[m] = _mm256_add_epi32(acc_a[m], _mm256_madd_epi16(_mm256_unpacklo_epi16(held[m], run[m]), sc_a));
            acc_b[m] = _mm256_add_epi32(acc_b[m], _mm256_madd_epi16(_mm256_unpackhi_epi16(held[m], run[m]), sc_b));
          }
        }
      }
    }
    // the mins' (Q6_K: the -32's) term, sum_j m_j * sum(x8 of sub-block j), exact in int32
    __m256 d_a, d_b, dmin_a, dmin_b;
    halves_ab(o + H, &d_a, &d_b);
    halves_ab(o + H + 2 * R, &dmin_a, &dmin_b);
    for (int m = 0; m < MT; ++m) {
      const int32_t* bs = bsum + (m * ns + s) * (QKK / 16);
      __m256i min_a = zero, min_b = zero;
      for (int i = 0; i < (F == kQ6_K ? 16 : 8); ++i) {
        const __m256i mi = F == kQ6_K ? scales16(scales + i * R, true) : scales16(scales + (8 + i) * R, false);
        // |sum of 16 or 32 x8| <= 4064: one 16-bit lane
        const __m256i b = _mm256_set1_epi16(static_cast<int16_t>(F == kQ6_K ? bs[i] : bs[2 * i] + bs[2 * i + 1]));
        min_a = _mm256_add_epi32(min_a, _mm256_madd_epi16(_mm256_unpacklo_epi16(mi, zero), b));
        min_b = _mm256_add_epi32(min_b, _mm256_madd_epi16(_mm256_unpackhi_epi16(mi, zero), b));
      }
      const __m256 dxs = _mm256_set1_ps(dx[m * ns + s]);
      if (F == kQ6_K) {  // sc (q - 32): |sum| < 2^29
        acc_a[m] = _mm256_sub_epi32(acc_a[m], _mm256_slli_epi32(min_a, 5));
        acc_b[m] = _mm256_sub_epi32(acc_b[m], _mm256_slli_epi32(min_b, 5));
      }
      ya[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_a[m]), _mm256_mul_ps(d_a, dxs), ya[m]);
      yb[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_b[m]), _mm256_mul_ps(d_b, dxs), yb[m]);
      if (F != kQ6_K) {
        ya[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_a), _mm256_mul_ps(dmin_a, dxs), ya[m]);
        yb[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_b), _mm256_mul_ps(dmin_b, dxs), yb[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) {  // rows A and B back to row order
    _mm256_storeu_ps(y + m * R, _mm256_permute2f128_ps(ya[m], yb[m], 0x20));
    _mm256_storeu_ps(y + m * R + 8, _mm256_permute2f128_ps(ya[m], yb[m], 0x31));
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

// quantize_rows (block_linear_kquant_avx512_vnni.cpp) with 8 columns per operation: the same float32
// products, rounded to nearest even as `nearbyint` does, clamped, the same column order and sums; one scale
// per G columns (a multiple of 32)
template <typename X>
TGI_AVX2_TARGET void quantize_rows_avx2(const X* x, int64_t M, int64_t K, int64_t G, int8_t* q, float* dx,
                                        int32_t* bsum) {
  const int64_t ng = K / G;
  const __m256 sign = _mm256_set1_ps(-0.0f), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  // within each 8 columns (4 pairs of bytes): pairs 0, 2, 1, 3, i.e. columns 0, 1, 4, 5, 2, 3, 6, 7
  const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15, 0, 1, 4, 5, 2, 3, 6,
                                         7, 8, 9, 12, 13, 10, 11, 14, 15);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t s = 0; s < ng; ++s) {
      const X* xs = x + m * K + s * G;
      __m256 amax = _mm256_setzero_ps();
      for (int64_t k = 0; k < G; k += 8)
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, tgi_common::load8_ps(xs + k)));
      const float am = tgi_common::hmax8_ps(amax);
      const __m256 iscale = _mm256_set1_ps(am > 0.0f ? 127.0f / am : 0.0f);
      dx[m * ng + s] = am / 127.0f;
      int8_t* qs = q + m * K + s * G;
      int32_t* bs = bsum + m * (K / 16) + s * (G / 16);
      for (int64_t k = 0; k < G; k += 32) {
        __m256i v[4];
        for (int i = 0; i < 4; ++i) {
          const __m256 r = _mm256_round_ps(_mm256_mul_ps(tgi_common::load8_ps(xs + k + 8 * i), iscale),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          v[i] = _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, r)));
        }
        // the sums of columns k..k + 15 and k + 16..k + 31
        for (int h = 0; h < 2; ++h) {
          const __m256i t = _mm256_add_epi32(v[2 * h], v[2 * h + 1]);
          __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
          t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4E));
          t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xB1));
          bs[k / 16 + h] = _mm_cvtsi128_si32(t4);
        }
        // int32 -> int8: the packs work per 128-bit lane, leaving columns 4i..4i + 3 in dword (0, 2, 4, 6, 1,
        // 3, 5, 7)[i]; one permutation puts them in order
        const __m256i w8 = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        const __m256i bytes = _mm256_permutevar8x32_epi32(w8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + k), _mm256_shuffle_epi8(bytes, order));
      }
    }
}

}  // namespace

TGI_AVX2_TARGET void quantize_rows_int8_avx2(const float* x, int64_t M, int64_t K, int64_t G, int8_t* q,
                                            float* dx, int32_t* bsum) {
  quantize_rows_avx2(x, M, K, G, q, dx, bsum);
}

TGI_AVX2_TARGET void quantize_rows_int8_avx2(const uint16_t* x, int64_t M, int64_t K, int64_t G, int8_t* q,
                                            float* dx, int32_t* bsum) {
  quantize_rows_avx2(x, M, K, G, q, dx, bsum);
}

TGI_AVX2_TARGET void group_avx2_k(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  switch (qtype) {
    case kQ4_K: group_rows_avx2<kQ4_K>(xq, dx, bsum, M, K, packed, g, y); break;
    case kQ5_K: group_rows_avx2<kQ5_K>(xq, dx, bsum, M, K, packed, g, y); break;
    case kQ6_K: group_rows_avx2<kQ6_K>(xq, dx, bsum, M, K, packed, g, y); break;
    case kQ5_KF: group_rows_avx2<kQ5_KF>(xq, dx, bsum, M, K, packed, g, y); break;
    default: group_rows_avx2<kQ6_KF>(xq, dx, bsum, M, K, packed, g, y); break;
  }
}
#endif

}  // namespace tgi_blocks
