// Helpers shared by the CPU's native kernels (tgi_common::...): AVX-512 lanes, exp on 16 and 8 lanes, AVX2 loads
// and reductions of 8 lanes, CPU feature checks,
// the AMX tile configuration.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tgi_common {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// the first min(n, 16) lanes: the mask of a row's last, possibly partial, group of 16
inline __mmask16 lanes16(int64_t n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }

// 16 bfloat16 values as float32 (a bfloat16 is the top half of a float32)
__attribute__((target("avx512f"))) inline __m512 bf16x16_to_float(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// exp_nonpos's polynomial, 16 lanes at a time (callers check for AVX-512F at run time)
__attribute__((target("avx512f"))) inline __m512 exp16_nonpos(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 y = _mm512_fnmadd_ps(r, _mm512_set1_ps(0.693359375f), x);
  y = _mm512_fmadd_ps(r, _mm512_set1_ps(2.12194440e-4f), y);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, y), y, y), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, r);
}
// the same on 8 lanes (callers check for AVX2 and FMA at run time)
__attribute__((target("avx2,fma"))) inline __m256 exp8_nonpos(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 r = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 y = _mm256_fnmadd_ps(r, _mm256_set1_ps(0.693359375f), x);
  y = _mm256_fmadd_ps(r, _mm256_set1_ps(2.12194440e-4f), y);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, y), y, y), _mm256_set1_ps(1.0f));
  // 2^r built in the exponent bits, as exp_nonpos does (r >= -126 after the clamp)
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(r), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
}
#endif

#if defined(__x86_64__)
// AVX2 lanes of 8 (callers check for AVX2 at run time): 8 float32 values, or 8 bfloat16 widened exactly (a
// bfloat16 is the top half of a float32), and the maximum or sum of a vector's lanes
__attribute__((target("avx2"))) inline __m256 load8_ps(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2"))) inline __m256 load8_ps(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
__attribute__((target("avx2"))) inline float hmax8_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
__attribute__((target("avx2"))) inline float hsum8_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#endif

// AVX-512 with the bfloat16 dot product (and F16C for GGUF's fp16 scales)
inline bool has_avx512_bf16() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
                         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

// The AMX tile configuration (palette 1) that `_tile_loadconfig` takes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// AMX-TILE and AMX-BF16 present, the OS grants this process the tile state, and AVX512-BF16 is there too.
inline bool amx_ready() {
#if defined(__x86_64__)
  static const bool ok = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1u) || !((d >> 22) & 1u)) return false;  // AMX-TILE, AMX-BF16
    // Linux hands out the tile state on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return ok && has_avx512_bf16();
#else
  return false;
#endif
}

// exp(x) for x <= 0 (Cephes' expf polynomial after range reduction; ~1 ulp), written so that the
// compiler vectorises it (glibc's expf is only vectorised under -ffast-math).
inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  float t = x * 1.44269504088896341f;
  float r = (t + 12582912.0f) - 12582912.0f;  // round to nearest integer
  float y = x - r * 0.693359375f;
  y = y + r * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * y + 1.3981999507e-3f;
  p = p * y + 8.3334519073e-3f;
  p = p * y + 4.1665795894e-2f;
  p = p * y + 1.6666665459e-1f;
  p = p * y + 5.0000001201e-1f;
  float e = p * y * y + y + 1.0f;
  int32_t bits = (static_cast<int32_t>(r) + 127) << 23;
  float s;
  std::memcpy(&s, &bits, sizeof(s));
  return e * s;
}

}  // namespace tgi_common
