// LoRA's segmented pair (lora_sgmv.h): the checks, the dispatch, the scalar reference and the float32 AVX2
// path. One call per adapted linear and step: a decode step's few tokens cost microseconds here, where a
// chain of torch ops (gather, two products, mask, scatter) costs tens per linear in dispatch alone.
#include <torch/extension.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common.h"
#include "lora_sgmv.h"

namespace tgi_lora {
namespace {

enum Impl : int64_t { kAuto = 0, kReference = 1, kAvx512Bf16 = 2, kAvx2 = 3 };

//: below this many multiply-adds a step runs on one thread (an OpenMP fork costs more than the work)
constexpr int64_t kParallelMacs = int64_t(1) << 21;
//: the bfloat16 path splits a step of several tokens over the threads from this many multiply-adds (measured:
//: a decode step of 8 tokens of 4 adapters, bound by reading their weights, +48 % -> +33 % on 2 cores)
constexpr int64_t kSplitMacs = int64_t(1) << 14;
//: its work items: blocks of ranks of a tile's shrink, blocks of columns of its expand
constexpr int64_t kRanksPerItem = 8;
constexpr int64_t kColumnsPerItem = 256;

bool avx2_ready() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

// The reference: every column of every rank, float32 sums in index order.
template <typename T>
void token_reference(const T* x, const T* a, const T* bt, T* y, int64_t in, int64_t out, int64_t rank,
                     float* h) {
  for (int64_t r = 0; r < rank; ++r) {
    float s = 0.0f;
    for (int64_t k = 0; k < in; ++k) s += static_cast<float>(x[k]) * static_cast<float>(a[r * in + k]);
    h[r] = static_cast<float>(static_cast<T>(s));  // rounded to the dtype, as torch's x @ a.T is
  }
  for (int64_t o = 0; o < out; ++o) {
    float s = static_cast<float>(y[o]);
    for (int64_t r = 0; r < rank; ++r) s += h[r] * static_cast<float>(bt[r * out + o]);
    y[o] = static_cast<T>(s);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_LORA_AVX2 __attribute__((target("avx2,fma")))
TGI_LORA_AVX2 inline __m256i lanes8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(n, 8))), idx);
}

TGI_LORA_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// float32 on AVX2 + FMA: the shrink 8 inputs a step, the expand over the columns each rank reaches
TGI_LORA_AVX2 void token_f32_avx2(const float* x, const float* a, const float* bt, float* y, int64_t in,
                                  int64_t out, int64_t rank, const int32_t* cols, float* h) {
  for (int64_t r = 0; r < rank; ++r) {
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= in; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * in + k), _mm256_loadu_ps(x + k), acc);
    if (k < in) {
      const __m256i m = lanes8(in - k);
      acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + r * in + k, m), _mm256_maskload_ps(x + k, m), acc);
    }
    h[r] = hsum8(acc);
  }
  for (int64_t q = 0; q < rank; ++q) {
    const int64_t lo = cols[2 * q], hi = cols[2 * q + 1];
    const __m256 hv = _mm256_set1_ps(h[q]);
    const float* row = bt + q * out;
    int64_t o = lo;
    for (; o + 8 <= hi; o += 8)
      _mm256_storeu_ps(y + o, _mm256_fmadd_ps(hv, _mm256_loadu_ps(row + o), _mm256_loadu_ps(y + o)));
    if (o < hi) {
      const __m256i m = lanes8(hi - o);
      _mm256_maskstore_ps(y + o, m, _mm256_fmadd_ps(hv, _mm256_maskload_ps(row + o, m), _mm256_maskload_ps(y + o, m)));
    }
  }
}
#else
void token_f32_avx2(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t, const int32_t*,
                    float*) {}
#endif

int64_t resolve(int64_t impl, bool bf16) {
  if (impl == kAuto) {
    if (bf16 && avx512_bf16_ready()) return kAvx512Bf16;
    if (!bf16 && avx2_ready()) return kAvx2;
    return kReference;
  }
  TORCH_CHECK(impl >= kReference && impl <= kAvx2, "lora_sgmv: unknown impl ", impl);
  TORCH_CHECK(impl != kAvx512Bf16 || (bf16 && avx512_bf16_ready()),
              "lora_sgmv: avx512-bf16 takes bfloat16 on a CPU with AVX512-BF16");
  TORCH_CHECK(impl != kAvx2 || (!bf16 && avx2_ready()), "lora_sgmv: avx2 takes float32 on a CPU with AVX2+FMA");
  return impl;
}

}  // namespace
}  // namespace tgi_lora

torch::Tensor lora_sgmv(torch::Tensor y, torch::Tensor x, torch::Tensor a, torch::Tensor bt, torch::Tensor cols,
                        torch::Tensor slots, int64_t impl) {
  using namespace tgi_lora;
  TORCH_CHECK(y.dim() == 2 && x.dim() == 2 && a.dim() == 3 && bt.dim() == 3 && cols.dim() == 3 && slots.dim() == 1,
              "lora_sgmv: y [T, out], x [T, in], a [S, R, in], bt [S, R, out], cols [S, R, 2], slots [T]");
  const auto dtype = y.scalar_type();
  TORCH_CHECK(dtype == torch::kBFloat16 || dtype == torch::kFloat32, "lora_sgmv: bfloat16 or float32, got ", dtype);
  TORCH_CHECK(x.scalar_type() == dtype && a.scalar_type() == dtype && bt.scalar_type() == dtype,
              "lora_sgmv: y, x, a and bt must share one dtype");
  TORCH_CHECK(slots.scalar_type() == torch::kInt32 && cols.scalar_type() == torch::kInt32,
              "lora_sgmv: slots and cols are int32");
  const int64_t T = slots.size(0), out = y.size(1), in = x.size(1), S = a.size(0), R = a.size(1);
  TORCH_CHECK(y.size(0) >= T && x.size(0) >= T, "lora_sgmv: fewer rows in x or y than slots");
  TORCH_CHECK(a.size(2) == in && bt.size(0) == S && bt.size(1) == R && bt.size(2) == out,
              "lora_sgmv: a [S, R, in] and bt [S, R, out] do not match x and y");
  TORCH_CHECK(cols.size(0) == S && cols.size(1) == R && cols.size(2) == 2, "lora_sgmv: cols is [S, R, 2]");
  TORCH_CHECK(y.stride(1) == 1 && x.stride(1) == 1 && a.is_contiguous() && bt.is_contiguous() &&
                  cols.is_contiguous() && slots.is_contiguous(),
              "lora_sgmv: rows must be contiguous");
  const bool bf16 = dtype == torch::kBFloat16;
  const int64_t path = resolve(impl, bf16);
  const int32_t* slot = slots.data_ptr<int32_t>();
  const int32_t* col = cols.data_ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    TORCH_CHECK(slot[t] >= -1 && slot[t] < S, "lora_sgmv: slot ", slot[t], " of token ", t, " outside [-1, ", S, ")");
  for (int64_t i = 0; i < S * R; ++i)
    TORCH_CHECK(0 <= col[2 * i] && col[2 * i] <= col[2 * i + 1] && col[2 * i + 1] <= out, "lora_sgmv: bad cols");
  const int64_t ldy = y.stride(0), ldx = x.stride(0);
  const bool parallel = T > 1 && T * R * (in + out) >= kParallelMacs;
  if (path == kAvx512Bf16) {
    // The tokens of each adapter in tiles of at most 8 (its A and B read once a tile, not once a token), the
    // work split over the threads in two phases: the shrink by blocks of ranks, then the expand by blocks of
    // columns (a decode step's pair is bound by reading the adapters' weights: both cores read them).
    std::vector<std::vector<int64_t>> tokens(S);
    for (int64_t t = 0; t < T; ++t)
      if (slot[t] >= 0) tokens[slot[t]].push_back(t);
    struct Tile {
      int64_t slot;
      int n;
      const uint16_t* xs[8];
      uint16_t* ys[8];
    };
    auto* yp = reinterpret_cast<uint16_t*>(y.data_ptr<c10::BFloat16>());
    const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<c10::BFloat16>());
    const auto* ap = reinterpret_cast<const uint16_t*>(a.data_ptr<c10::BFloat16>());
    const auto* bp = reinterpret_cast<const uint16_t*>(bt.data_ptr<c10::BFloat16>());
    std::vector<Tile> tiles;
    for (int64_t s = 0; s < S; ++s)
      for (size_t i = 0; i < tokens[s].size(); i += 8) {
        Tile tile{s, static_cast<int>(std::min<size_t>(8, tokens[s].size() - i)), {}, {}};
        for (int j = 0; j < tile.n; ++j) {
          tile.xs[j] = xp + tokens[s][i + j] * ldx;
          tile.ys[j] = yp + tokens[s][i + j] * ldy;
        }
        tiles.push_back(tile);
      }
    const int64_t num_tiles = static_cast<int64_t>(tiles.size());
    std::vector<float> h(num_tiles * 8 * R);
    const int64_t rank_blocks = (R + kRanksPerItem - 1) / kRanksPerItem;
    const int64_t col_blocks = (out + kColumnsPerItem - 1) / kColumnsPerItem;
    const bool split = parallel || (T > 1 && T * R * (in + out) >= kSplitMacs);
#pragma omp parallel if (split)
    {
#pragma omp for schedule(static)
      for (int64_t w = 0; w < num_tiles * rank_blocks; ++w) {
        const Tile& tile = tiles[w / rank_blocks];
        const int64_t r0 = (w % rank_blocks) * kRanksPerItem, r1 = std::min(R, r0 + kRanksPerItem);
        shrink_bf16_avx512(tile.xs, tile.n, ap + tile.slot * R * in, in, r0, r1, R, h.data() + (w / rank_blocks) * 8 * R);
      }
#pragma omp for schedule(static)
      for (int64_t w = 0; w < num_tiles * col_blocks; ++w) {
        const Tile& tile = tiles[w / col_blocks];
        const int64_t o0 = (w % col_blocks) * kColumnsPerItem, o1 = std::min(out, o0 + kColumnsPerItem);
        expand_bf16_avx512(tile.ys, tile.n, bp + tile.slot * R * out, out, o0, o1, R, col + tile.slot * R * 2,
                           h.data() + (w / col_blocks) * 8 * R);
      }
    }
    return y;
  }
  auto run = [&](auto* yp, const auto* xp, const auto* ap, const auto* bp) {
#pragma omp parallel if (parallel)
    {
      std::vector<float> h(R);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t s = slot[t];
        if (s < 0) continue;
        const auto* as = ap + s * R * in;
        const auto* bs = bp + s * R * out;
        auto* yt = yp + t * ldy;
        const auto* xt = xp + t * ldx;
        if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(yp)>>, float>) {
          if (path == kAvx2)
            token_f32_avx2(xt, as, bs, yt, in, out, R, col + s * R * 2, h.data());
          else
            token_reference(xt, as, bs, yt, in, out, R, h.data());
        } else {
          token_reference(xt, as, bs, yt, in, out, R, h.data());
        }
      }
    }
  };
  if (bf16)
    run(y.data_ptr<c10::BFloat16>(), x.data_ptr<c10::BFloat16>(), a.data_ptr<c10::BFloat16>(),
        bt.data_ptr<c10::BFloat16>());
  else
    run(y.data_ptr<float>(), x.data_ptr<float>(), a.data_ptr<float>(), bt.data_ptr<float>());
  return y;
}

std::vector<std::string> lora_impls() {
  std::vector<std::string> impls{"reference"};
  if (tgi_lora::avx512_bf16_ready()) impls.push_back("avx512-bf16");
  if (tgi_lora::avx2_ready()) impls.push_back("avx2");
  return impls;
}
