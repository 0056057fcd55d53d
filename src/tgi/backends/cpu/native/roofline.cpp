// The machine's own limits, measured rather than read from a data sheet (`tgi benchmark roofline`): a
// streaming read of a buffer on every thread, and tight loops of each product instruction the kernels are
// built on. Each loop keeps enough independent accumulators in flight that the instruction's throughput, not
// its latency, bounds it, and its operands stay in registers (or tiles): what is measured is the core's
// arithmetic ceiling, which a kernel that also loads its weights can approach but not pass.
#include <omp.h>

#include <string>
#include <vector>

#include "block_linear.h"
#include "block_linear_kquant.h"
#include "common.h"
#include "ops.h"

namespace {

using tgi_common::TileConfig;

// A sink the compiler cannot see through, so that no loop's result is optimised away.
volatile int64_t g_sink = 0;

#if defined(__x86_64__)
// Reads [p, p + n) 64 bytes at a time into four XOR chains (one cycle each: the loads bound the loop).
__attribute__((target("avx2"))) int64_t read_avx2(const uint8_t* p, int64_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return _mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3);
}

__attribute__((target("avx512f"))) int64_t read_avx512(const uint8_t* p, int64_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
  }
  return _mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d)));
}

constexpr int kChains = 12;  // independent accumulators: latency (4-6 cycles) x issue width (2) and some

// float32 FMA, 8 lanes: 8 multiply-adds per instruction
__attribute__((target("avx2,fma"))) int64_t fma_avx2(const float* in, int64_t iters) {
  const __m256 a = _mm256_loadu_ps(in), b = _mm256_loadu_ps(in + 8);
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(in[16 + c]);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(a, b, acc[c]);
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  return static_cast<int64_t>(tgi_common::hsum8_ps(s));
}

// float32 FMA, 16 lanes
__attribute__((target("avx512f"))) int64_t fma_avx512(const float* in, int64_t iters) {
  const __m512 a = _mm512_loadu_ps(in), b = _mm512_loadu_ps(in + 16);
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(in[32 + c]);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(a, b, acc[c]);
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return static_cast<int64_t>(_mm512_reduce_add_ps(s));
}

// bfloat16 pairs into float32 (vdpbf16ps), 16 lanes of 2: 32 multiply-adds per instruction
__attribute__((target("avx512f,avx512bf16"))) int64_t bf16_avx512(const float* in, int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_loadu_si512(in), b = (__m512bh)_mm512_loadu_si512(in + 16);
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(in[32 + c]);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return static_cast<int64_t>(_mm512_reduce_add_ps(s));
}

// unsigned x signed int8 in groups of 4 into int32 (vpdpbusd), 16 lanes of 4: 64 multiply-adds
__attribute__((target("avx512f,avx512vnni"))) int64_t int8_vnni512(const float* in, int64_t iters) {
  const __m512i a = _mm512_loadu_si512(in), b = _mm512_loadu_si512(in + 16);
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(static_cast<int>(in[32 + c]));
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  __m512i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_epi32(s, acc[c]);
  return _mm512_reduce_add_epi32(s);
}

// AVX2's int8 product as the avx2-int8 kernels do it: vpmaddubsw (pairs into int16), vpmaddwd by ones (into
// int32), vpaddd: 32 multiply-adds per three instructions. The unsigned operand is the chain's own
// accumulator: with two loop-invariant operands the compiler hoists both products out of the loop (they are
// pure), leaving only the additions. Each chain is then ~11 cycles long, and twelve of them still issue about
// one product a cycle, the two multiply ports' limit.
__attribute__((target("avx2"))) int64_t int8_avx2(const float* in, int64_t iters) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 8));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(static_cast<int>(in[16 + c]));
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c)
      acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(acc[c], b), ones));
  __m256i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_epi32(s, acc[c]);
  return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

// AMX: four accumulator tiles fed by two A and two B tiles (the 2 x 2 block a GEMM kernel keeps), 16 x 16
// results per tile. int8: tdpbusd, 16 x 16 x 64 multiply-adds; bfloat16: tdpbf16ps, 16 x 16 x 32.
TileConfig amx_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  return cfg;
}

// One loop for both tile products (kInt8: tdpbusd, else tdpbf16ps); the accumulators are read back as raw
// 32-bit lanes, only to feed the sink.
template <bool kInt8>
__attribute__((target("amx-tile,amx-int8,amx-bf16"))) int64_t amx_loop(const float* in, int64_t iters) {
  const TileConfig cfg = amx_config();
  _tile_loadconfig(&cfg);
  alignas(64) int32_t out[16 * 16];
  _tile_loadd(4, in, 64);
  _tile_loadd(5, in + 256, 64);
  _tile_loadd(6, in, 64);
  _tile_loadd(7, in + 256, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    if constexpr (kInt8) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0] + out[255];
}
int64_t amx_int8(const float* in, int64_t iters) { return amx_loop<true>(in, iters); }
int64_t amx_bf16(const float* in, int64_t iters) { return amx_loop<false>(in, iters); }
#endif

struct Peak {
  const char* name;
  double macs_per_iteration;  // multiply-adds one iteration of the loop does
  bool (*available)();
  int64_t (*loop)(const float*, int64_t);
};

#if defined(__x86_64__)
bool avx2() { return tgi_blocks::has_avx2_fma(); }
bool avx512() { return __builtin_cpu_supports("avx512f"); }
bool avx512_bf16() { return tgi_common::has_avx512_bf16(); }
bool avx512_vnni() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"); }
bool amx_int8_ready() {
  unsigned a, b, c, d;
  return tgi_common::amx_ready() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 25) & 1u);
}

const std::vector<Peak>& peaks() {
  static const std::vector<Peak> all = {
      {"f32-fma-avx2", 8.0 * kChains, avx2, fma_avx2},
      {"f32-fma-avx512", 16.0 * kChains, avx512, fma_avx512},
      {"bf16-dot-avx512", 32.0 * kChains, avx512_bf16, bf16_avx512},
      {"int8-avx2", 32.0 * kChains, avx2, int8_avx2},
      {"int8-vnni-avx512", 64.0 * kChains, avx512_vnni, int8_vnni512},
      {"bf16-amx", 4.0 * 16 * 16 * 32, tgi_common::amx_ready, amx_bf16},
      {"int8-amx", 4.0 * 16 * 16 * 64, amx_int8_ready, amx_int8},
  };
  return all;
}
#else
const std::vector<Peak>& peaks() {
  static const std::vector<Peak> none;
  return none;
}
#endif

}  // namespace

std::vector<std::string> roofline_peaks() {
  std::vector<std::string> names;
  for (const Peak& p : peaks())
    if (p.available()) names.push_back(p.name);
  return names;
}

std::tuple<double, double> roofline_peak(const std::string& name, int64_t iterations, int64_t threads) {
  for (const Peak& p : peaks()) {
    if (name != p.name) continue;
    TORCH_CHECK(p.available(), "roofline_peak: this CPU cannot run ", name);
    // operands the compiler cannot know (read through the volatile sink), so that no loop folds away; their
    // values do not change the instructions' cost
    alignas(64) float operands[512];
    const int64_t seed = g_sink & 1;
    for (int i = 0; i < 512; ++i) operands[i] = static_cast<float>(i % 7 + seed);
    int64_t sink = 0, used = 1;
    const double start = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(^ : sink)
    {
      if (omp_get_thread_num() == 0) used = omp_get_num_threads();
      sink ^= p.loop(operands, iterations);
    }
    const double seconds = omp_get_wtime() - start;
    g_sink = g_sink ^ sink;
    return {seconds, p.macs_per_iteration * static_cast<double>(iterations) * static_cast<double>(used)};
  }
  TORCH_CHECK(false, "roofline_peak: no loop named ", name);
}

std::tuple<double, double> roofline_read(torch::Tensor buffer, int64_t passes, int64_t threads) {
  TORCH_CHECK(buffer.is_contiguous() && buffer.scalar_type() == torch::kUInt8, "roofline_read: contiguous uint8");
  const uint8_t* p = buffer.data_ptr<uint8_t>();
  TORCH_CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0, "roofline_read: the buffer must be 64-byte aligned");
  const int64_t n = buffer.numel();
#if defined(__x86_64__)
  TORCH_CHECK(avx2(), "roofline_read: needs AVX2");
  const bool wide = avx512();
  int64_t sink = 0, used = 1;
  const double start = omp_get_wtime();
  for (int64_t pass = 0; pass < passes; ++pass) {
#pragma omp parallel num_threads(threads) reduction(^ : sink)
    {
      // each thread its contiguous share, in whole 256-byte lines
      const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
      const int64_t share = (n / T) & ~int64_t{255};
      const uint8_t* q = p + t * share;
      if (t == 0) used = T;
      sink ^= wide ? read_avx512(q, share) : read_avx2(q, share);
    }
  }
  const double seconds = omp_get_wtime() - start;
  g_sink = g_sink ^ sink;
  return {seconds, static_cast<double>(((n / used) & ~int64_t{255}) * used) * static_cast<double>(passes)};
#else
  TORCH_CHECK(false, "roofline_read: x86-64 only");
#endif
}
