// The CPU paged decode attention: the op `paged_decode`, its dispatch, and the vector path (AVX-512 for head
// sizes that are a multiple of 16, else scalar loops the compiler vectorises; float32 or bfloat16). The AMX
// path is in paged_attention_amx.cpp, what both share in paged_attention.h.
#include <torch/types.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"
#include "ops.h"
#include "paged_attention.h"

#include <type_traits>

namespace {

using namespace tgi_attention;  // load_f, store_f, the AVX-512 load16 and value pass, decode_all_amx

// One (sequence, kv head) pair: the G query heads sharing the kv head attend to its keys/values, read once.
template <typename T>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void decode_one(const T* __restrict q,        // [G, Dh] at this sequence's first query head of the group
                const T* __restrict kc, const T* __restrict vc,  // caches, [NB, BS, Hkv, Dh]
                const int32_t* __restrict table, int64_t seq_len, int64_t start,
                int64_t bs, int64_t hkv, int64_t kh, int64_t g_heads, int64_t dh, float scale,
                float softcap, T* __restrict out,  // [G, Dh]
                float* __restrict qf, float* __restrict kf, float* __restrict scores,
                float* __restrict acc) {
  const int64_t n = seq_len - start;
  const int64_t row = hkv * dh;  // elements between consecutive slots
  if (n <= 0) {
    for (int64_t i = 0; i < g_heads * dh; ++i) store_f(out, i, 0.0f);
    return;
  }
  for (int64_t i = 0; i < g_heads * dh; ++i) qf[i] = load_f(q, i) * scale;

  // pass 1: scores
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* kb = kc + static_cast<int64_t>(table[b]) * bs * row + kh * dh;
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* kp = kb + o * row;
      for (int64_t d = 0; d < dh; ++d) kf[d] = load_f(kp, d);
      for (int64_t g = 0; g < g_heads; ++g) {
        const float* qg = qf + g * dh;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t d = 0; d < dh; ++d) s += qg[d] * kf[d];
        scores[g * n + (t - start)] = s;
      }
    }
  }
  // softmax per query head (probabilities left unnormalised; divided out at the end)
  float inv_small[64];
  std::vector<float> inv_large;
  const float* inv_p = softmax_unnormalised(scores, g_heads, n, softcap, inv_small, inv_large);
  // pass 2: weighted sum of values
  for (int64_t i = 0; i < g_heads * dh; ++i) acc[i] = 0.0f;
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* vb = vc + static_cast<int64_t>(table[b]) * bs * row + kh * dh;
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* vp = vb + o * row;
      for (int64_t d = 0; d < dh; ++d) kf[d] = load_f(vp, d);
      for (int64_t g = 0; g < g_heads; ++g) {
        const float p = scores[g * n + (t - start)];
        float* ag = acc + g * dh;
#pragma omp simd
        for (int64_t d = 0; d < dh; ++d) ag[d] += p * kf[d];
      }
    }
  }
  for (int64_t g = 0; g < g_heads; ++g)
    for (int64_t d = 0; d < dh; ++d) store_f(out, g * dh + d, acc[g * dh + d] * inv_p[g]);
}

#ifdef TGI_AVX512_PATH
// AVX-512 path (see paged_attention.h)
template <typename T, int C>
__attribute__((target("avx512f"))) void decode_one_avx512(
    const T* __restrict q, const T* __restrict kc, const T* __restrict vc,
    const int32_t* __restrict table, int64_t seq_len, int64_t start, int64_t bs, int64_t hkv, int64_t kh,
    int64_t g_heads, int64_t dh, float scale, float softcap, T* __restrict out, float* __restrict qf,
    float* __restrict kf, float* __restrict scores, float* __restrict acc) {
  (void)kf;
  const int64_t n = seq_len - start;
  const int64_t row = hkv * C * 16;
  if (n <= 0) {
    for (int64_t i = 0; i < g_heads * C * 16; ++i) store_f(out, i, 0.0f);
    return;
  }
  for (int64_t i = 0; i < g_heads * C * 16; ++i) qf[i] = load_f(q, i) * scale;
  // pass 1: scores, each key row loaded (and widened) once for the G heads
  for (int64_t b = start / bs, t = start; t < seq_len; ++b) {
    const T* kb = kc + static_cast<int64_t>(table[b]) * bs * row + kh * C * 16;
    const T* kn = next_block(kc, table, b, seq_len, bs, row, kh * C * 16);
    const int64_t stop = std::min(seq_len, (b + 1) * bs);
    for (int64_t o = t - b * bs; t < stop; ++t, ++o) {
      const T* kp = kb + o * row;
      prefetch_next_row<T, C * 16>(kn, o, row);
      __m512 kv[C];
      for (int c = 0; c < C; ++c) kv[c] = load16(kp + 16 * c);
      for (int64_t g = 0; g < g_heads; ++g) {
        const float* qg = qf + g * C * 16;
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qg), kv[0]);
        for (int c = 1; c < C; ++c) a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c), kv[c], a);
        scores[g * n + (t - start)] = _mm512_reduce_add_ps(a);
      }
    }
  }
  float inv_small[64];
  std::vector<float> inv_large;
  const float* inv_p = softmax16_unnormalised(scores, g_heads, n, softcap, inv_small, inv_large);
  pass2_all<T, C>(vc, table, seq_len, start, bs, row, kh, g_heads, n, scores, inv_p, acc);
  for (int64_t i = 0; i < g_heads * C * 16; ++i) store_f(out, i, acc[i]);
}
#endif

template <typename T>
DecodeFn<T> pick_kernel(int64_t dh) {
#ifdef TGI_AVX512_PATH
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    switch (dh) {
      case 32: return &decode_one_avx512<T, 2>;
      case 64: return &decode_one_avx512<T, 4>;
      case 80: return &decode_one_avx512<T, 5>;
      case 96: return &decode_one_avx512<T, 6>;
      case 128: return &decode_one_avx512<T, 8>;
      case 256: return &decode_one_avx512<T, 16>;
      default: break;
    }
  }
#endif
  if (has_avx2_fma_attention()) {  // no AVX-512: 8 lanes
    DecodeFn<T> avx2 = nullptr;
    if constexpr (std::is_same_v<T, float>) avx2 = pick_avx2_float(dh);
    else avx2 = pick_avx2_bf16(dh);
    if (avx2 != nullptr) return avx2;
  }
  return &decode_one<T>;
}

template <typename T>
void decode_all(const T* q, const T* kc, const T* vc, const int32_t* tables, const int32_t* lens,
                T* out, int64_t D, int64_t H, int64_t hkv, int64_t dh, int64_t bs, int64_t max_blocks,
                float scale, int64_t window, float softcap) {
  const int64_t G = H / hkv;
  int64_t max_len = 0;
  for (int64_t i = 0; i < D; ++i) max_len = std::max<int64_t>(max_len, lens[i]);
  if (window > 0) max_len = std::min(max_len, window);
  const DecodeFn<T> kernel = pick_kernel<T>(dh);
  at::parallel_for(0, D * hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(G * dh), kf(dh), acc(G * dh), scores(G * std::max<int64_t>(max_len, 1));
    for (int64_t w = begin; w < end; ++w) {
      const int64_t i = w / hkv, kh = w % hkv;
      const int64_t len = lens[i];
      const int64_t start = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      kernel(q + (i * H + kh * G) * dh, kc, vc, tables + i * max_blocks, len, start, bs, hkv, kh, G,
                    dh, scale, softcap, out + (i * H + kh * G) * dh, qf.data(), kf.data(), scores.data(),
                    acc.data());
    }
  });
}

}  // namespace

torch::Tensor paged_decode(torch::Tensor q, torch::Tensor key_cache, torch::Tensor value_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens, double scale,
                           int64_t sliding_window, double softcap, int64_t impl) {
  TORCH_CHECK(q.dim() == 3, "q must be [D, H, Dh]");
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(),
              "key/value caches must be [num_blocks, block_size, Hkv, Dh]");
  TORCH_CHECK(key_cache.scalar_type() == q.scalar_type() && value_cache.scalar_type() == q.scalar_type(),
              "q and the caches must share a dtype");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16,
              "paged_decode supports float32 and bfloat16");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous(), "caches must be contiguous");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && seq_lens.scalar_type() == at::kInt,
              "block_tables and seq_lens must be int32");
  const int64_t D = q.size(0), H = q.size(1), dh = q.size(2);
  const int64_t bs = key_cache.size(1), hkv = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == dh, "head_dim mismatch");
  TORCH_CHECK(H % hkv == 0, "query heads must be a multiple of kv heads");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == D, "block_tables must be [D, max_blocks]");
  TORCH_CHECK(seq_lens.numel() == D, "seq_lens must be [D]");
  q = q.contiguous();
  block_tables = block_tables.contiguous();
  seq_lens = seq_lens.contiguous();
  const int64_t max_blocks = block_tables.size(1);
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  for (int64_t i = 0; i < D; ++i)
    TORCH_CHECK(lens[i] >= 0 && lens[i] <= max_blocks * bs, "seq_len exceeds the block table");
  auto out = torch::empty_like(q);
  if (D == 0) return out;
  TORCH_CHECK(impl >= 0 && impl <= 2, "unknown paged_decode implementation ", impl);
  TORCH_CHECK(impl != 2 || q.scalar_type() == at::kBFloat16, "the AMX decode needs bfloat16");
  if (q.scalar_type() == at::kFloat) {
    decode_all<float>(q.data_ptr<float>(), key_cache.data_ptr<float>(), value_cache.data_ptr<float>(),
                      block_tables.data_ptr<int32_t>(), lens, out.data_ptr<float>(), D, H, hkv, dh, bs,
                      max_blocks, static_cast<float>(scale), sliding_window, static_cast<float>(softcap));
    return out;
  }
  // impl: 0 the fastest this CPU has for the shapes, 1 the vector path, 2 AMX
  const int64_t G = H / hkv;
  const bool amx_shapes = dh % 32 == 0 && dh <= 128 && bs % 16 == 0 && G <= 16;
#ifdef TGI_AMX_ATTENTION
  const bool amx = tgi_common::amx_ready();
#else
  const bool amx = false;
#endif
  TORCH_CHECK(impl != 2 || amx, "AMX is not available here");
  TORCH_CHECK(impl != 2 || amx_shapes,
              "the AMX decode needs bfloat16, a head size of 32, 64, 96 or 128, a block size that is a "
              "multiple of 16 and at most 16 query heads per kv head");
#ifdef TGI_AMX_ATTENTION
  if (impl == 2 || (impl == 0 && amx && amx_shapes)) {
    decode_all_amx(reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>()),
                   reinterpret_cast<const uint16_t*>(key_cache.data_ptr<at::BFloat16>()),
                   reinterpret_cast<const uint16_t*>(value_cache.data_ptr<at::BFloat16>()),
                   block_tables.data_ptr<int32_t>(), lens, reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()),
                   D, H, hkv, dh, bs, max_blocks, static_cast<float>(scale), sliding_window,
                   static_cast<float>(softcap));
    return out;
  }
#endif
  {
    decode_all<uint16_t>(reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>()),
                         reinterpret_cast<const uint16_t*>(key_cache.data_ptr<at::BFloat16>()),
                         reinterpret_cast<const uint16_t*>(value_cache.data_ptr<at::BFloat16>()),
                         block_tables.data_ptr<int32_t>(), lens,
                         reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()), D, H, hkv, dh, bs,
                         max_blocks, static_cast<float>(scale), sliding_window, static_cast<float>(softcap));
  }
  return out;
}
