// The K-quants' int8 path (AVX512-VNNI), what llama.cpp computes on the CPU with finer input scales: the input
// is quantized per row and 32 columns to int8 (`quantize_rows_int8` with G = 32: scale max|x| / 127, nearest
// integer; llama.cpp's q8_K takes one scale per 256 columns, which a few large columns of an input, as SiLU *
// up has before ffn_down, make coarse for all the others; the sums below are scaled per sub-block anyway, so a
// scale per 32 columns costs one load per sub-block), and `vpdpbusd` multiplies the weights' unsigned integers
// (4 to 6 bits) with those bytes, four per 32-bit lane, summing in int32 (exact: no order, no rounding). Per
// sub-block, in float32:
// y += (d sc dx) * sum(q x8) - (dmin m dx) * sum(x8) (Q6_K: (d sc dx) * (sum(q x8) - 32 sum(x8))).
//
// The packed layout is the one every K-quant path reads (block_linear_kquant.h): a chunk's 32 bytes hold,
// at byte 2r + i, row r's low nibble of column 4c + i and high nibble of column 4c + 2 + i. Two chunks
// (64 bytes) are loaded at once and one `vpermb` gathers each row's four bytes into its 32-bit lane r:
// [chunk c byte 2r, 2r + 1, chunk c + 1 byte 2r, 2r + 1], so the low nibbles are columns 4c + {0, 1, 4, 5},
// the high nibbles 4c + {2, 3, 6, 7}; the quantized input is stored in that column order (each 8 columns
// as 0, 1, 4, 5, 2, 3, 6, 7) for one broadcast per product. The fifth and sixth bits (lane masks of the
// bytes as stored) are added before the permutation.
//
// Its error against the product with the exact input is what int8 inputs give: at most half a step of the
// input's quantization per column, |y - x W^T| <= sum over 32-column blocks of (dx / 2) sum |w| (plus float32
// rounding), tested against that bound; each row is quantized alone, so a row's result does not depend on
// the rows beside it.
#include <cmath>
#include <cstdint>

#include "block_linear_kquant.h"

namespace tgi_blocks {

namespace {
inline float input_float(uint16_t v) { return bf16_to_float(v); }
inline float input_float(float v) { return v; }

// bfloat16 (the VNNI path) or float32 (the AVX2 path's float32 models) x, one scale per G columns
template <typename X>
void quantize_rows(const X* x, int64_t M, int64_t K, int64_t G, int8_t* q, float* dx, int32_t* bsum) {
  static const int order[8] = {0, 1, 4, 5, 2, 3, 6, 7};
  const int64_t ng = K / G;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t s = 0; s < ng; ++s) {
      const X* xs = x + m * K + s * G;
      float amax = 0.0f;
      for (int64_t k = 0; k < G; ++k) amax = std::fmax(amax, std::fabs(input_float(xs[k])));
      const float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
      dx[m * ng + s] = amax / 127.0f;
      int8_t* qs = q + m * K + s * G;
      int32_t* bs = bsum + m * (K / 16) + s * (G / 16);
      for (int64_t b = 0; b < G / 16; ++b) bs[b] = 0;
      for (int64_t k = 0; k < G; ++k) {
        const float v = std::nearbyint(input_float(xs[k]) * iscale);
        const int iv = static_cast<int>(std::fmax(-127.0f, std::fmin(127.0f, v)));
        qs[(k & ~7) + order[k & 7]] = static_cast<int8_t>(iv);
        bs[k / 16] += iv;
      }
    }
}
}  // namespace

// the same bits on AVX2 where the CPU has it (block_linear_kquant_avx2.cpp), else the loop above
void quantize_rows_int8(const uint16_t* x, int64_t M, int64_t K, int64_t G, int8_t* q, float* dx,
                        int32_t* bsum) {
#if defined(__x86_64__)
  if (has_avx2_fma()) return quantize_rows_int8_avx2(x, M, K, G, q, dx, bsum);
#endif
  quantize_rows(x, M, K, G, q, dx, bsum);
}

void quantize_rows_int8(const float* x, int64_t M, int64_t K, int64_t G, int8_t* q, float* dx, int32_t* bsum) {
#if defined(__x86_64__)
  if (has_avx2_fma()) return quantize_rows_int8_avx2(x, M, K, G, q, dx, bsum);
#endif
  quantize_rows(x, M, K, G, q, dx, bsum);
}

#if defined(__x86_64__)

namespace {

TGI_VNNI_TARGET inline __m512 scales_ps(const uint8_t* p, bool is_signed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

// the lane masks of chunks c and c + 1 (at p and p + step) as one mask of the 64 bytes they are loaded as
TGI_VNNI_TARGET inline __mmask64 mask_pair(const uint8_t* p, int64_t step) {
  uint32_t a, b;
  std::memcpy(&a, p, 4);
  std::memcpy(&b, p + step, 4);
  return static_cast<__mmask64>(a) | (static_cast<__mmask64>(b) << 32);
}

// MT input rows against one group of 16 weight rows; NA int32 sums per row (their order changes nothing)
template <int MT, int64_t T>
TGI_VNNI_TARGET void group_tile_vnni(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t K,
                                     const uint8_t* packed, int64_t g, float* y /* [MT, R] */) {
  constexpr int NA = MT <= 2 ? 4 : 1;
  const int64_t ns = K / QKK, nd = K / kVnniScaleCols, nbs = K / 16, S = kq_stride(T), H = kq_header(T);
  alignas(64) uint8_t perm_bytes[64];
  for (int r = 0; r < 16; ++r) {
    perm_bytes[4 * r] = static_cast<uint8_t>(2 * r);
    perm_bytes[4 * r + 1] = static_cast<uint8_t>(2 * r + 1);
    perm_bytes[4 * r + 2] = static_cast<uint8_t>(32 + 2 * r);
    perm_bytes[4 * r + 3] = static_cast<uint8_t>(32 + 2 * r + 1);
  }
  const __m512i perm = _mm512_load_si512(perm_bytes);
  const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(16), bit5 = _mm512_set1_epi8(32);
  __m512 out[MT];
  for (int m = 0; m < MT; ++m) out[m] = _mm512_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* o = packed + (g * ns + s) * S;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + H)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + H + 2 * R)));
    const uint8_t* scales = o + H + 4 * R;
    for (int j = 0; j < 8; ++j) {
      float dxs[MT];  // the input's scale of these 32 columns
      for (int m = 0; m < MT; ++m) dxs[m] = dx[m * nd + s * 8 + j];
      __m512i acc[MT][NA];
      for (int m = 0; m < MT; ++m)
        for (int a = 0; a < NA; ++a) acc[m][a] = _mm512_setzero_si512();
      const int8_t* xs = xq + s * QKK + 32 * j;
      for (int p = 0; p < 4; ++p) {
        kq_prefetch_ahead<T>(o, S, 4 * j + p);
        const __m512i v = _mm512_loadu_si512(o + 256 * j + 64 * p);
        __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        if (T == kQ5_K) {
          const uint8_t* h = o + kLowBytes + 64 * j + 16 * p;
          lo = _mm512_mask_add_epi8(lo, mask_pair(h, 8), lo, bit4);
          hi = _mm512_mask_add_epi8(hi, mask_pair(h + 4, 8), hi, bit4);
        } else if (T == kQ6_K) {
          const uint8_t* h = o + kLowBytes + 128 * j + 32 * p;
          lo = _mm512_mask_add_epi8(lo, mask_pair(h, 16), lo, bit4);
          hi = _mm512_mask_add_epi8(hi, mask_pair(h + 4, 16), hi, bit4);
          lo = _mm512_mask_add_epi8(lo, mask_pair(h + 8, 16), lo, bit5);
          hi = _mm512_mask_add_epi8(hi, mask_pair(h + 12, 16), hi, bit5);
        }
        lo = _mm512_permutexvar_epi8(perm, lo);
        hi = _mm512_permutexvar_epi8(perm, hi);
        const int a0 = NA == 4 ? 2 * (p & 1) : 0, a1 = NA == 4 ? a0 + 1 : 0;
        for (int m = 0; m < MT; ++m) {
          int32_t x0, x1;
          std::memcpy(&x0, xs + m * K + 8 * p, 4);
          std::memcpy(&x1, xs + m * K + 8 * p + 4, 4);
          acc[m][a0] = _mm512_dpbusd_epi32(acc[m][a0], lo, _mm512_set1_epi32(x0));
          acc[m][a1] = _mm512_dpbusd_epi32(acc[m][a1], hi, _mm512_set1_epi32(x1));
        }
        if (T == kQ6_K && (p & 1)) {  // 16 columns done: Q6_K's sub-block 2j + p / 2
          const int i = 2 * j + p / 2;
          const __m512 sc = _mm512_mul_ps(d, scales_ps(scales + i * R, true));
          for (int m = 0; m < MT; ++m) {
            __m512i sum = acc[m][0];
            for (int a = 1; a < NA; ++a) sum = _mm512_add_epi32(sum, acc[m][a]);
            sum = _mm512_sub_epi32(sum, _mm512_set1_epi32(32 * bsum[m * nbs + s * (QKK / 16) + i]));
            out[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(sc, _mm512_set1_ps(dxs[m])), out[m]);
            for (int a = 0; a < NA; ++a) acc[m][a] = _mm512_setzero_si512();
          }
        }
      }
      if (T != kQ6_K) {
        const __m512 sc = _mm512_mul_ps(d, scales_ps(scales + j * R, false));
        const __m512 mn = _mm512_mul_ps(dmin, scales_ps(scales + (8 + j) * R, false));
        for (int m = 0; m < MT; ++m) {
          __m512i sum = acc[m][0];
          for (int a = 1; a < NA; ++a) sum = _mm512_add_epi32(sum, acc[m][a]);
          const int32_t* bs = bsum + m * nbs + s * (QKK / 16) + 2 * j;
          const float xsum = static_cast<float>(bs[0] + bs[1]) * dxs[m];
          out[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(sc, _mm512_set1_ps(dxs[m])), out[m]);
          out[m] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(xsum), out[m]);
        }
      }
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_storeu_ps(y + m * R, out[m]);
}

template <int64_t T>
TGI_VNNI_TARGET void group_rows_vnni(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                                     const uint8_t* packed, int64_t g, float* y) {
  const int64_t nd = K / kVnniScaleCols, nbs = K / 16;
  int64_t m = 0;
  for (; m + 8 <= M; m += 8)
    group_tile_vnni<8, T>(xq + m * K, dx + m * nd, bsum + m * nbs, K, packed, g, y + m * R);
  const int8_t* xm = xq + m * K;
  const float* dm = dx + m * nd;
  const int32_t* bm = bsum + m * nbs;
  float* ym = y + m * R;
  switch (M - m) {
    case 7: group_tile_vnni<7, T>(xm, dm, bm, K, packed, g, ym); break;
    case 6: group_tile_vnni<6, T>(xm, dm, bm, K, packed, g, ym); break;
    case 5: group_tile_vnni<5, T>(xm, dm, bm, K, packed, g, ym); break;
    case 4: group_tile_vnni<4, T>(xm, dm, bm, K, packed, g, ym); break;
    case 3: group_tile_vnni<3, T>(xm, dm, bm, K, packed, g, ym); break;
    case 2: group_tile_vnni<2, T>(xm, dm, bm, K, packed, g, ym); break;
    case 1: group_tile_vnni<1, T>(xm, dm, bm, K, packed, g, ym); break;
    default: break;
  }
}

}  // namespace

TGI_VNNI_TARGET void group_vnni_k(const int8_t* xq, const float* dx, const int32_t* bsum, int64_t M, int64_t K,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  if (qtype == kQ4_K) group_rows_vnni<kQ4_K>(xq, dx, bsum, M, K, packed, g, y);
  else if (qtype == kQ5_K) group_rows_vnni<kQ5_K>(xq, dx, bsum, M, K, packed, g, y);
  else group_rows_vnni<kQ6_K>(xq, dx, bsum, M, K, packed, g, y);
}
#endif

}  // namespace tgi_blocks
