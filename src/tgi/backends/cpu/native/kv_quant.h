// The quantized KV cache's codes (tgi_kvq::...): their types, widened to float32 by each ISA path, and what the
// decode attention over them shares (kv_quant_decode*.cpp, written by kv_quant_write.cpp).
//
// A cache stores one byte a value (int8, float8_e4m3fn or float8_e5m2) and a float32 scale per token and kv head:
// value = code * scale. The scale is taken out of the dot products: a key's score is (q . codes) * scale, and
// a value's scale multiplies its probability before the weighted sum, so the paths widen codes, never scale them.
//
// Widening is exact, in a unit of the code type (`kUnit`, folded into the scales):
// - int8: the integer (unit 1);
// - float8_e5m2: its byte is the top half of a float16 (unit 1), converted by F16C / AVX-512;
// - float8_e4m3fn: its byte, sign-extended to 16 bits, shifted left by 7 with bit 14 cleared, is the float16 of
//   its value times 2^-8, zeros and subnormals included (as fp8_linear.h widens its weights; unit 2^8). Its
//   NaN codes (0x7f, 0xff) would widen to 480 * 2^-8: the writer never stores them (it clamps to +-448).
// Every widened value is also a bfloat16 exactly (at most 8 significant bits, exponents in range): the AMX path
// multiplies them on bfloat16 tiles without rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tgi_kvq {

// The code types (one byte each, so that pointer arithmetic counts elements as the dense paths do).
struct I8 {
  int8_t v;
};
struct E4M3 {
  uint8_t v;
};
struct E5M2 {
  uint8_t v;
};
enum Kind : int64_t { kInt8 = 0, kE4M3 = 1, kE5M2 = 2 };

template <typename C>
constexpr float kUnit = 1.0f;
template <>
constexpr float kUnit<E4M3> = 256.0f;

// float16 bits -> float32 (plain code for the reference path)
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int e = (h >> 10) & 31;
  const uint32_t m = h & 1023u;
  float mag;
  if (e == 0) {
    mag = static_cast<float>(m) * (1.0f / 16777216.0f);  // m 2^-24
  } else if (e == 31) {
    mag = m ? NAN : INFINITY;
  } else {
    const uint32_t bits = (static_cast<uint32_t>(e - 15 + 127) << 23) | (m << 13);
    std::memcpy(&mag, &bits, 4);
  }
  uint32_t out;
  std::memcpy(&out, &mag, 4);
  out |= sign;
  std::memcpy(&mag, &out, 4);
  return mag;
}

// one code widened, in its unit
inline float widen(const I8* p, int64_t i) { return static_cast<float>(p[i].v); }
inline float widen(const E5M2* p, int64_t i) { return half_to_float(static_cast<uint16_t>(p[i].v << 8)); }
inline float widen(const E4M3* p, int64_t i) {
  const uint16_t ext = static_cast<uint16_t>(static_cast<int16_t>(static_cast<int8_t>(p[i].v)));
  return half_to_float(static_cast<uint16_t>((ext << 7) & 0xBFFFu));
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_KVQ_X86 1
// 8 codes widened (AVX2 with F16C; callers check for them at run time)
__attribute__((target("avx2,f16c"))) inline __m256 widen8(const I8* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx2,f16c"))) inline __m256 widen8(const E5M2* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_slli_epi16(b, 8));
}
__attribute__((target("avx2,f16c"))) inline __m256 widen8(const E4M3* p) {
  const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(static_cast<short>(0xBFFF))));
}

// 16 codes widened (AVX-512F, which implies AVX2). Named load16, as the dense paths' loads of paged_attention.h,
// so that its value pass (`pass2_all`) reads codes too (found by argument-dependent lookup).
__attribute__((target("avx512f"))) inline __m512 load16(const I8* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx512f"))) inline __m512 load16(const E5M2* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_cvtph_ps(_mm256_slli_epi16(b, 8));
}
__attribute__((target("avx512f"))) inline __m512 load16(const E4M3* p) {
  const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(static_cast<short>(0xBFFF))));
}
#endif

// One (sequence, kv head) pair of a decode over a quantized cache: its G query heads' rows of q (float32, [G, Dh])
// against the codes [NB, BS, Hkv, Dh] and scales [NB, BS, Hkv] of keys `start` .. `seq_len` - 1 through `table`.
struct Pair {
  const float* q;
  const uint8_t* kc;
  const uint8_t* vc;
  const float* ks;
  const float* vs;
  const int32_t* table;
  int64_t seq_len, start, bs, hkv, kh, G, dh;
  float scale, softcap;
  float* out;  // [G, Dh] float32
};

// What a pair's work needs besides its inputs, kept per thread across pairs.
struct Scratch {
  std::vector<int64_t> at;  // each key's (slot * Hkv + kv head): its scale's index, its codes' row over Dh
  std::vector<float> qf, km, vm, scores, acc, tile_scores;
  std::vector<uint16_t> tile, qt;  // the AMX path's bfloat16 keys and transposed queries
};

using PairFn = void (*)(const Pair&, Scratch&);

// qf = q * scale; for keys start .. seq_len - 1 (walked block by block: no division per key) their `at` and
// their key's and value's scale, in the code type's unit (km, vm).
inline void prepare(const Pair& a, Scratch& s, float unit) {
  const int64_t n = a.seq_len - a.start;
  s.qf.resize(a.G * a.dh);
  for (int64_t i = 0; i < a.G * a.dh; ++i) s.qf[i] = a.q[i] * a.scale;
  s.at.resize(n);
  s.km.resize(n);
  s.vm.resize(n);
  for (int64_t b = a.start / a.bs, t = a.start; t < a.seq_len; ++b) {
    const int64_t base = static_cast<int64_t>(a.table[b]) * a.bs;
    const int64_t stop = std::min(a.seq_len, (b + 1) * a.bs);
    for (int64_t o = t - b * a.bs; t < stop; ++t, ++o) {
      const int64_t i = t - a.start, at = (base + o) * a.hkv + a.kh;
      s.at[i] = at;
      s.km[i] = a.ks[at] * unit;
      s.vm[i] = a.vs[at] * unit;
    }
  }
  s.scores.resize(a.G * n);
  s.acc.resize(a.G * a.dh);
}

// The codes of key (or value) i of the pair (`prepare`'s `at`), and of the one at position t (with a division).
template <typename C>
inline const C* code_at(const uint8_t* cache, const Pair& a, int64_t at) {
  return reinterpret_cast<const C*>(cache + at * a.dh);
}
template <typename C>
inline const C* code_row(const uint8_t* cache, const Pair& a, int64_t t) {
  const int64_t at = static_cast<int64_t>(a.table[t / a.bs]) * a.bs + t % a.bs;
  return code_at<C>(cache, a, at * a.hkv + a.kh);
}

// The paths (kv_quant_decode*.cpp): the kernel for a code kind and head size, or nullptr where the path has none.
PairFn pick_reference(Kind kind);
PairFn pick_avx2(Kind kind, int64_t dh);
PairFn pick_avx512(Kind kind, int64_t dh);
PairFn pick_amx(Kind kind, int64_t dh);
bool avx2_ready();
bool avx512_ready();
bool amx_ready();

}  // namespace tgi_kvq
