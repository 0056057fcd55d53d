// Dequantization of GGUF blocks straight from the file's layout into a dense float32 or bfloat16 weight, one
// pass per tensor (rows in parallel). The values are those of `gguf.quants.dequantize` bit for bit: each
// format's float32 operations in its order (d * q, d * q + m, (d * sc) * q - dmin * m), never fused into one
// rounding (the products are formed exactly in double and rounded to float32 before the sum), then
// bfloat16's round to nearest even for a bfloat16 output.
//
// Two implementations: the scalar reference, and AVX-512 (F + BW) taking 16 weights at a time: the integers
// widened from their bytes, each product and sum one instruction with its own rounding (the `_round_`
// forms, which the compiler never contracts into a fused multiply-add), bfloat16 rounded in integers as
// `float_to_bf16` does. Impl 0 picks AVX-512 where the CPU has it.
#include <torch/types.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "block_linear.h"
#include "block_linear_kquant.h"
#include "ops.h"

namespace {
using namespace tgi_blocks;

// fl(a * q): exact in double (a float32, q a small integer), then one rounding to float32
inline float mul(float a, int q) { return static_cast<float>(static_cast<double>(a) * q); }

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// the fields of a Q4_0 / Q4_1 / Q5_0 / Q5_1 block after its scale d (Q8_0 has none): the min m (Q4_1, Q5_1;
// else 0), the packed nibbles, and the fifth bits (Q5_0, Q5_1; else 0)
struct Block32 {
  bool has_min;
  float m;
  const uint8_t* qs;
  uint32_t qh;
};

inline Block32 block32_fields(const uint8_t* blk, int64_t t) {
  Block32 b{has_min(t), 0.0f, nullptr, 0};
  if (b.has_min) b.m = half_to_float(load_u16(blk + 2));
  const uint8_t* after_scales = blk + (b.has_min ? 4 : 2);
  if (is_q5(t)) std::memcpy(&b.qh, after_scales, 4);
  b.qs = after_scales + (is_q5(t) ? 4 : 0);
  return b;
}

// one 32-weight block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) -> out[32]
void block32(const uint8_t* blk, int64_t t, float* out) {
  const float d = half_to_float(load_u16(blk));
  if (t == kQ8_0) {
    for (int i = 0; i < 32; ++i) out[i] = mul(d, static_cast<int8_t>(blk[2 + i]));
    return;
  }
  const Block32 b = block32_fields(blk, t);
  const bool min = b.has_min;
  const float m = b.m;
  const uint8_t* qs = b.qs;
  const uint32_t qh = b.qh;
  const int offset = q_offset(t);
  for (int i = 0; i < 32; ++i) {
    int q = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
    q |= static_cast<int>((qh >> i) & 1u) << 4;
    out[i] = min ? mul(d, q) + m : mul(d, q - offset);
  }
}

// Q4_K / Q5_K: eight 6-bit scales and mins in 12 bytes (see block_linear_kquant_pack.cpp)
inline void scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// one 256-weight super-block (Q4_K, Q5_K, Q6_K) -> out[256]
void block256(const uint8_t* blk, int64_t t, float* out) {
  if (t == kQ6_K) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = half_to_float(load_u16(blk + 208));
    for (int v = 0; v < QKK; ++v) {
      const int h = v / 128, w = v % 128;
      const int lo = (ql[64 * h + w % 64] >> (4 * (w / 64))) & 0x0F;
      const int hi = (qh[32 * h + w % 32] >> (2 * (w / 32))) & 3;
      out[v] = mul(static_cast<float>(d * static_cast<float>(sc[v / 16])), (lo | (hi << 4)) - 32);
    }
    return;
  }
  const float d = half_to_float(load_u16(blk)), dmin = half_to_float(load_u16(blk + 2));
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;                           // Q5_K only
  const uint8_t* qs = blk + (t == kQ5_K ? 16 + 32 : 16);  // nibbles: sub-blocks 2p (low), 2p + 1 (high)
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min(scales, j, &sc, &m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
      if (t == kQ5_K) q |= ((qh[l] >> j) & 1) << 4;
      out[32 * j + l] = mul(ds, q) - dm;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_DEQ_AVX512 __attribute__((target("avx512f,avx512bw")))

bool has_avx512_f_bw() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return ok;
}

// 16 weights: fl(fl(a * q) + b) (or fl(a * q) without `add`: adding 0 would turn -0 into +0), stored as
// float32 or bfloat16 (round to nearest even in integers; NaN quieted as float_to_bf16 does)
TGI_DEQ_AVX512 inline void emit16(__m512i q, float a, float b, bool add, void* dst, int64_t at, bool bf16) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m512 y = _mm512_mul_round_ps(_mm512_set1_ps(a), _mm512_cvtepi32_ps(q), kRound);
  if (add) y = _mm512_add_round_ps(y, _mm512_set1_ps(b), kRound);
  if (!bf16) {
    _mm512_storeu_ps(static_cast<float*>(dst) + at, y);
    return;
  }
  const __m512i u = _mm512_castps_si512(y);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(dst) + at), _mm512_cvtepi32_epi16(r));
}

TGI_DEQ_AVX512 inline __m512i bytes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// one 32-weight block (see block32) at out + at
TGI_DEQ_AVX512 void block32_avx512(const uint8_t* blk, int64_t t, void* dst, int64_t at, bool bf16) {
  const float d = half_to_float(load_u16(blk));
  if (t == kQ8_0) {
    for (int c = 0; c < 2; ++c) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 16 * c)));
      emit16(q, d, 0.0f, false, dst, at + 16 * c, bf16);
    }
    return;
  }
  const Block32 b = block32_fields(blk, t);
  const bool min = b.has_min;
  const float m = b.m;
  const uint8_t* qs = b.qs;
  const uint32_t qh = b.qh;
  const __m512i nibbles = bytes16(qs), low = _mm512_set1_epi32(0x0F), offset = _mm512_set1_epi32(q_offset(t));
  for (int c = 0; c < 2; ++c) {  // weights 0-15: the low nibbles, 16-31: the high ones
    __m512i q = c == 0 ? _mm512_and_si512(nibbles, low) : _mm512_srli_epi32(nibbles, 4);
    q = _mm512_mask_or_epi32(q, static_cast<__mmask16>(qh >> (16 * c)), q, _mm512_set1_epi32(16));
    if (!min) q = _mm512_sub_epi32(q, offset);
    emit16(q, d, m, min, dst, at + 16 * c, bf16);
  }
}

// one 256-weight super-block (see block256) at out + at
TGI_DEQ_AVX512 void block256_avx512(const uint8_t* blk, int64_t t, void* dst, int64_t at, bool bf16) {
  const __m512i low = _mm512_set1_epi32(0x0F);
  if (t == kQ6_K) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = half_to_float(load_u16(blk + 208));
    for (int v = 0; v < QKK; v += 16) {  // 16 weights share h, w / 64, w / 32 and their scale
      const int h = v / 128, w = v % 128;
      const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(bytes16(ql + 64 * h + w % 64), 4 * (w / 64)), low);
      const __m512i hi =
          _mm512_and_si512(_mm512_srli_epi32(bytes16(qh + 32 * h + w % 32), 2 * (w / 32)), _mm512_set1_epi32(3));
      const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
      emit16(q, static_cast<float>(d * static_cast<float>(sc[v / 16])), 0.0f, false, dst, at + v, bf16);
    }
    return;
  }
  const float d = half_to_float(load_u16(blk)), dmin = half_to_float(load_u16(blk + 2));
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (t == kQ5_K ? 16 + 32 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min(scales, j, &sc, &m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    for (int c = 0; c < 2; ++c) {
      __m512i q = _mm512_and_si512(_mm512_srli_epi32(bytes16(qs + 32 * (j / 2) + 16 * c), 4 * (j % 2)), low);
      if (t == kQ5_K) {
        const __m512i bit = _mm512_and_si512(_mm512_srli_epi32(bytes16(qh + 16 * c), j), _mm512_set1_epi32(1));
        q = _mm512_or_si512(q, _mm512_slli_epi32(bit, 4));
      }
      emit16(q, ds, -dm, true, dst, at + 32 * j + 16 * c, bf16);  // fl(x - dm) == fl(x + (-dm))
    }
  }
}
#else
bool has_avx512_f_bw() { return false; }
void block32_avx512(const uint8_t*, int64_t, void*, int64_t, bool) {}
void block256_avx512(const uint8_t*, int64_t, void*, int64_t, bool) {}
#endif
}  // namespace

std::vector<std::string> dequantize_impls() {
  std::vector<std::string> impls{"reference"};
  if (has_avx512_f_bw()) impls.push_back("avx512");
  return impls;
}

torch::Tensor block_dequantize(torch::Tensor raw, int64_t qtype, int64_t n, int64_t k, bool bf16, int64_t impl) {
  TORCH_CHECK(impl >= 0 && impl <= 2, "unknown dequantization implementation ", impl);
  TORCH_CHECK(impl != 2 || has_avx512_f_bw(), "the AVX-512 dequantization needs AVX-512 F and BW");
  const bool vector = impl == 2 || (impl == 0 && has_avx512_f_bw());
  TORCH_CHECK(raw.scalar_type() == at::kByte, "raw blocks must be uint8");
  const bool kquant = is_kquant(qtype);
  TORCH_CHECK(kquant || qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ8_0 || is_q5(qtype),
              "unknown block type ", qtype);
  const int64_t qk = kquant ? QKK : QK, rb = kquant ? kq_raw_bytes(qtype) : raw_block_bytes(qtype);
  TORCH_CHECK(k % qk == 0, "K = ", k, " is no multiple of the block size ", qk);
  TORCH_CHECK(raw.numel() == n * (k / qk) * rb, "raw blocks hold ", raw.numel(), " bytes, expected ",
              n * (k / qk) * rb);
  raw = raw.contiguous();
  auto out = torch::empty({n, k}, raw.options().dtype(bf16 ? at::kBFloat16 : at::kFloat));
  const uint8_t* src = raw.data_ptr<uint8_t>();
  void* dst = out.data_ptr();
  const int64_t nb = k / qk;
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    float buf[QKK];
    for (int64_t r = begin; r < end; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + (r * nb + b) * rb;
        if (vector) {
          if (kquant)
            block256_avx512(blk, qtype, dst, r * k + b * qk, bf16);
          else
            block32_avx512(blk, qtype, dst, r * k + b * qk, bf16);
          continue;
        }
        if (kquant)
          block256(blk, qtype, buf);
        else
          block32(blk, qtype, buf);
        const int64_t at = r * k + b * qk;
        if (bf16) {
          uint16_t* o = static_cast<uint16_t*>(dst) + at;
          for (int64_t i = 0; i < qk; ++i) o[i] = float_to_bf16(buf[i]);
        } else {
          std::memcpy(static_cast<float*>(dst) + at, buf, qk * sizeof(float));
        }
      }
  });
  return out;
}
