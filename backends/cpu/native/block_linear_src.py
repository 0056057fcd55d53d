"""C++ source of the CPU linear over GGUF block-quantized weights (compiled by `tgi.backends.cpu.native`).

`block_pack(raw, qtype, N, K)` repacks llama.cpp blocks (Q4_0, Q4_1, Q8_0: 32 weights, fp16 scale, and
for Q4_1 an fp16 min) into groups of 16 rows: for each group and block, the 16 rows' values interleaved
by pairs of columns (what one `vdpbf16ps` lane takes), then the 16 scales and 16 mins (fp16). Same size as
the file's blocks (0.625 bytes per Q4 weight).

`block_linear(x, packed, qtype, N, K, bias, reference)` computes `x @ W.T + bias` for bfloat16 x [M, K]:
each lane of a 512-bit register is one weight row; the 4-bit (or 8-bit) values become bfloat16 exactly
(a table lookup), `vdpbf16ps` multiplies them with broadcast pairs of x exactly and sums in float32; per
block, `y += d * sum(x q) + m * sum(x)`. No activation is quantized: the result is the bfloat16 model's
product with float32 accumulation (the weights are not even rounded to bfloat16). `reference=true` (or a
CPU without AVX512-BF16) takes a scalar path over the same layout.
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tgi_blocks {

using tgi_common::amx_ready;
using tgi_common::has_avx512_bf16;
using tgi_common::TileConfig;

enum QType : int64_t { kQ4_0 = 0, kQ4_1 = 1, kQ8_0 = 2 };
constexpr int64_t QK = 32;  // weights per block
constexpr int64_t R = 16;   // rows per group (lanes of a 512-bit float vector)

inline int64_t raw_block_bytes(int64_t t) { return t == kQ4_0 ? 18 : t == kQ4_1 ? 20 : 34; }
inline int64_t value_bytes(int64_t t) { return t == kQ8_0 ? R * QK : R * QK / 2; }  // per group and block
inline int64_t packed_stride(int64_t t) { return value_bytes(t) + 2 * R * 2; }      // + 16 d, 16 m (fp16)

inline float half_to_float(uint16_t h) {  // exact, subnormals included
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float v) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// the stored integer of weight k (0..31) of one raw block (Q4_0 without its -8 offset)
inline int raw_value(const uint8_t* blk, int64_t qtype, int k) {
  if (qtype == kQ8_0) return static_cast<int8_t>(blk[2 + k]);
  const uint8_t* qs = blk + (qtype == kQ4_1 ? 4 : 2);
  return k < 16 ? (qs[k] & 0x0F) : (qs[k - 16] >> 4);
}

// ---- packing -----------------------------------------------------------------------------------------------
// Q4: 8 chunks of 32 bytes per group and block; byte w of chunk c holds row w/2: low nibble column
// 4c + w%2, high nibble column 4c + 2 + w%2. Q8: 16 chunks of 32 bytes; byte w of chunk p: row w/2,
// column 2p + w%2. Then d[16], m[16] as fp16 (m = 0 but for Q4_1). Rows past N are zero.
void pack(const uint8_t* raw, int64_t qtype, int64_t N, int64_t K, uint8_t* out) {
  const int64_t nb = K / QK, rb = raw_block_bytes(qtype), vb = value_bytes(qtype), S = packed_stride(qtype);
  const int64_t groups = (N + R - 1) / R;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g)
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* o = out + (g * nb + b) * S;
        std::memset(o, 0, S);
        uint16_t* d = reinterpret_cast<uint16_t*>(o + vb);
        uint16_t* m = d + R;
        for (int64_t r = 0; r < R && g * R + r < N; ++r) {
          const uint8_t* blk = raw + (g * R + r) * (nb * rb) + b * rb;
          std::memcpy(&d[r], blk, 2);
          if (qtype == kQ4_1) std::memcpy(&m[r], blk + 2, 2);
          for (int j = 0; j < 2; ++j) {
            if (qtype == kQ8_0) {
              for (int p = 0; p < 16; ++p)
                o[p * 32 + 2 * r + j] = static_cast<uint8_t>(raw_value(blk, qtype, 2 * p + j));
            } else {
              for (int c = 0; c < 8; ++c)
                o[c * 32 + 2 * r + j] = static_cast<uint8_t>(raw_value(blk, qtype, 4 * c + j) |
                                                             (raw_value(blk, qtype, 4 * c + 2 + j) << 4));
            }
          }
        }
      }
  });
}

// the value of (group, block)'s row r, column k as the kernel sees it (Q4_0 offset applied)
inline float packed_value(const uint8_t* o, int64_t qtype, int r, int k) {
  if (qtype == kQ8_0) return static_cast<float>(static_cast<int8_t>(o[(k / 2) * 32 + 2 * r + k % 2]));
  const uint8_t byte = o[(k / 4) * 32 + 2 * r + k % 2];
  const int q = (k % 4) < 2 ? (byte & 0x0F) : (byte >> 4);
  return static_cast<float>(qtype == kQ4_0 ? q - 8 : q);
}

// ---- reference path (any CPU) ----------------------------------------------------------------------------
void group_ref(const uint16_t* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed, int64_t qtype,
               int64_t g, float* y /* [M, R] */) {
  const int64_t nb = K / QK, vb = value_bytes(qtype), S = packed_stride(qtype);
  for (int64_t m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* o = packed + (g * nb + b) * S;
        uint16_t dh, mh;
        std::memcpy(&dh, o + vb + 2 * r, 2);
        std::memcpy(&mh, o + vb + 2 * R + 2 * r, 2);
        float dot = 0.0f;
        for (int k = 0; k < QK; ++k) dot += bf16_to_float(x[m * K + b * QK + k]) * packed_value(o, qtype, r, k);
        acc += half_to_float(dh) * dot + half_to_float(mh) * sx[m * nb + b];
      }
      y[m * R + r] = acc;
    }
}

#if defined(__x86_64__)
// ---- AVX-512 BF16 path -------------------------------------------------------------------------------------
#define TGI_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,fma")))

// out[m, c] = bf16(y[m, c] + bias[c]) for rows [0, rows) and columns [0, cols) of a float32 block y with
// leading dimension ldy, 16 columns at a time (with a scalar loop here, the default model's block products at
// batch 32 took 24-25 ms a step instead of 15-16)
TGI_BF16_TARGET void store_rows_bf16(const float* y, int64_t ldy, const float* bias, int64_t rows, int64_t cols,
                                     uint16_t* out, int64_t ldo) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 k = tgi_common::lanes16(cols - c);
      __m512 v = _mm512_maskz_loadu_ps(k, y + m * ldy + c);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + c));
      _mm256_mask_storeu_epi16(out + m * ldo + c, k, (__m256i)_mm512_cvtneps_pbh(v));
    }
}

// MT input rows against one group of 16 weight rows.
template <int MT>
TGI_BF16_TARGET void group_tile(const uint16_t* x, int64_t K, const float* sx, const uint8_t* packed,
                                int64_t qtype, int64_t g, float* y /* [MT, R] */) {
  const int64_t nb = K / QK, vb = value_bytes(qtype), S = packed_stride(qtype);
  const int32_t* x32 = reinterpret_cast<const int32_t*>(x);  // pairs of bfloat16
  const int64_t K2 = K / 2;
  alignas(64) uint16_t lut_words[32];
  for (int i = 0; i < 32; ++i) lut_words[i] = float_to_bf16(static_cast<float>((i & 15) - (qtype == kQ4_0 ? 8 : 0)));
  const __m512i lut = _mm512_load_si512(lut_words);
  const __m512i low4 = _mm512_set1_epi16(0x0F);
  __m512 out[MT];
  for (int m = 0; m < MT; ++m) out[m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = packed + (g * nb + b) * S;
    __m512 acc[MT];
    for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
    if (qtype == kQ8_0) {
      for (int p = 0; p < 16; ++p) {
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p))));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 * p + 16))));
        const __m512bh w = _mm512_cvtne2ps_pbh(hi, lo);
        for (int m = 0; m < MT; ++m)
          acc[m] = _mm512_dpbf16_ps(acc[m], w, (__m512bh)_mm512_set1_epi32(x32[m * K2 + b * 16 + p]));
      }
    } else {
      for (int c = 0; c < 8; ++c) {
        const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 32 * c)));
        const __m512bh wa = (__m512bh)_mm512_permutexvar_epi16(_mm512_and_si512(v, low4), lut);
        const __m512bh wb = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), lut);
        for (int m = 0; m < MT; ++m) {
          acc[m] = _mm512_dpbf16_ps(acc[m], wa, (__m512bh)_mm512_set1_epi32(x32[m * K2 + b * 16 + 2 * c]));
          acc[m] = _mm512_dpbf16_ps(acc[m], wb, (__m512bh)_mm512_set1_epi32(x32[m * K2 + b * 16 + 2 * c + 1]));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + vb)));
    for (int m = 0; m < MT; ++m) out[m] = _mm512_fmadd_ps(acc[m], d, out[m]);
    if (qtype == kQ4_1) {
      const __m512 mins = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + vb + 2 * R)));
      for (int m = 0; m < MT; ++m) out[m] = _mm512_fmadd_ps(mins, _mm512_set1_ps(sx[m * nb + b]), out[m]);
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_storeu_ps(y + m * R, out[m]);
}

TGI_BF16_TARGET void group_avx512(const uint16_t* x, int64_t M, int64_t K, const float* sx,
                                  const uint8_t* packed, int64_t qtype, int64_t g, float* y) {
  const int64_t nb = K / QK;
  int64_t m = 0;
  for (; m + 8 <= M; m += 8) group_tile<8>(x + m * K, K, sx + m * nb, packed, qtype, g, y + m * R);
  const uint16_t* xm = x + m * K;
  const float* sm = sx + m * nb;
  float* ym = y + m * R;
  switch (M - m) {
    case 7: group_tile<7>(xm, K, sm, packed, qtype, g, ym); break;
    case 6: group_tile<6>(xm, K, sm, packed, qtype, g, ym); break;
    case 5: group_tile<5>(xm, K, sm, packed, qtype, g, ym); break;
    case 4: group_tile<4>(xm, K, sm, packed, qtype, g, ym); break;
    case 3: group_tile<3>(xm, K, sm, packed, qtype, g, ym); break;
    case 2: group_tile<2>(xm, K, sm, packed, qtype, g, ym); break;
    case 1: group_tile<1>(xm, K, sm, packed, qtype, g, ym); break;
    default: break;
  }
}
#endif

#if defined(__x86_64__)
// ---- AMX path ----------------------------------------------------------------------------------------------
// Per group and block, the 16 rows x 32 columns are dequantized exactly as the dense bfloat16 weights are
// (d * q (+ m) in float32, rounded to bfloat16) into a 16 x 64-byte B tile (our packed layout is already
// the pair-interleaved layout TDPBF16PS takes); A is 16 (or fewer) rows of x for the block's 32 columns
// straight from memory; C accumulates over all blocks in float32.
#define TGI_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,f16c")))

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
#endif

}  // namespace tgi_blocks

torch::Tensor block_pack(torch::Tensor raw, int64_t qtype, int64_t n, int64_t k) {
  using namespace tgi_blocks;
  TORCH_CHECK(qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ8_0, "unknown block type ", qtype);
  TORCH_CHECK(n > 0 && k > 0 && k % QK == 0, "K must be a positive multiple of 32, got ", k);
  TORCH_CHECK(raw.scalar_type() == at::kByte, "raw blocks must be uint8");
  raw = raw.contiguous();
  TORCH_CHECK(raw.numel() == n * (k / QK) * raw_block_bytes(qtype), "raw blocks hold ", raw.numel(),
              " bytes, expected ", n * (k / QK) * raw_block_bytes(qtype));
  const int64_t groups = (n + R - 1) / R;
  auto out = torch::empty({groups * (k / QK) * packed_stride(qtype)}, raw.options());
  pack(raw.data_ptr<uint8_t>(), qtype, n, k, out.data_ptr<uint8_t>());
  return out;
}

torch::Tensor block_linear(torch::Tensor x, torch::Tensor packed, int64_t qtype, int64_t n, int64_t k,
                           c10::optional<torch::Tensor> bias, int64_t impl) {
  using namespace tgi_blocks;
  TORCH_CHECK(qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ8_0, "unknown block type ", qtype);
  TORCH_CHECK(n > 0 && k > 0 && k % QK == 0, "K must be a positive multiple of 32, got ", k);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == k, "x must be [M, ", k, "]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "block_linear takes bfloat16 inputs");
  const int64_t nb = k / QK, groups = (n + R - 1) / R;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
                  packed.numel() == groups * nb * packed_stride(qtype),
              "packed weights do not match [", n, ", ", k, "] (see block_pack)");
  if (bias.has_value()) TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n, "bias must be [", n, "]");
  x = x.contiguous();
  const int64_t M = x.size(0);
  auto out = torch::empty({M, n}, x.options());
  if (M == 0) return out;
  const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  torch::Tensor bias_f;
  const float* bp = nullptr;
  if (bias.has_value()) {
    bias_f = bias->to(at::kFloat).contiguous();
    bp = bias_f.data_ptr<float>();
  }
  uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  // impl: 0 the fastest this CPU has, 1 scalar reference, 2 AVX512-BF16, 3 AMX
  TORCH_CHECK(impl >= 0 && impl <= 3, "unknown implementation ", impl);
#if defined(__x86_64__)
  TORCH_CHECK(impl != 2 || has_avx512_bf16(), "this CPU has no AVX512-BF16");
  TORCH_CHECK(impl != 3 || amx_ready(), "AMX is not available here");
  // auto: one or two rows read the weights fastest on the AVX512-BF16 path; more rows share each
  // dequantized tile on AMX (decode step of the default model, 2 cores: batch 1 17.4 vs 21.5 ms on AMX,
  // batch 8 24.6 ms on AMX vs 30.2)
  const bool few_rows = M <= 2 && has_avx512_bf16();
  if (impl == 3 || (impl == 0 && !few_rows && amx_ready())) {
    const int64_t pass_rows = 48;  // three 16-row tiles of x per dequantized weight tile
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      std::unique_ptr<float[]> y(new float[pass_rows * (end - begin) * R]);  // every element is stored first
      for (int64_t m0 = 0; m0 < M; m0 += pass_rows) {
        const int64_t mt = std::min<int64_t>(pass_rows, M - m0);
        const int64_t mts[3] = {std::min<int64_t>(16, mt), std::min<int64_t>(16, std::max<int64_t>(0, mt - 16)),
                                std::max<int64_t>(0, mt - 32)};
        const uint16_t* xm = xp + m0 * k;
        if (mt > 32) groups_amx<3>(xm, k, mts, wp, qtype, begin, end, y.get());
        else if (mt > 16) groups_amx<2>(xm, k, mts, wp, qtype, begin, end, y.get());
        else groups_amx<1>(xm, k, mts, wp, qtype, begin, end, y.get());
        const int64_t width = (end - begin) * R, col0 = begin * R;
        store_rows_bf16(y.get(), width, bp ? bp + col0 : nullptr, mt, std::min(width, n - col0),
                        op + m0 * n + col0, n);
      }
    });
    return out;
  }
  const bool fast = impl == 2 || (impl == 0 && has_avx512_bf16());
#else
  TORCH_CHECK(impl < 2, "no vector implementation on this architecture");
  const bool fast = false;
#endif
  std::vector<float> sx(M * nb);  // sum of each block of x (for the Q4_1 mins; the AMX path needs none)
  for (int64_t i = 0; i < M * nb; ++i) {
    float s = 0.0f;
    for (int j = 0; j < QK; ++j) s += bf16_to_float(xp[i * QK + j]);
    sx[i] = s;
  }
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> y(M * R);
    for (int64_t g = begin; g < end; ++g) {
      const int64_t rows = std::min<int64_t>(R, n - g * R);
#if defined(__x86_64__)
      if (fast) {
        group_avx512(xp, M, k, sx.data(), wp, qtype, g, y.data());
        store_rows_bf16(y.data(), R, bp ? bp + g * R : nullptr, M, rows, op + g * R, n);
        continue;
      }
#endif
      group_ref(xp, M, k, sx.data(), wp, qtype, g, y.data());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t col = g * R + r;
          op[m * n + col] = float_to_bf16(y[m * R + r] + (bp ? bp[col] : 0.0f));
        }
    }
  });
  return out;
}

std::vector<std::string> block_impls() {
  using namespace tgi_blocks;
  std::vector<std::string> out{"reference"};
#if defined(__x86_64__)
  if (has_avx512_bf16()) out.push_back("avx512-bf16");
  if (amx_ready()) out.push_back("amx");
#endif
  return out;
}
"""
