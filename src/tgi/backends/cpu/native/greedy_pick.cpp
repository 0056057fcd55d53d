// The greedy pick over the logits: each row's argmax and its log-softmax, with no float32 copy of the logits.
#include <torch/types.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <tuple>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"
#include "fused_ops.h"
#include "ops.h"

namespace tgi_fused {

// Greedy choice over one row of logits: the first index of the maximum (a NaN wins, as in torch.argmax)
// and that token's log-softmax, max + log(sum(exp(x - max))) subtracted, in float32.
inline float load_logit(const float* row, int64_t i) { return row[i]; }
inline float load_logit(const at::BFloat16* row, int64_t i) { return static_cast<float>(row[i]); }

template <typename T>
void greedy_row_scalar(const T* row, int64_t V, int64_t* id, float* logprob) {
  int64_t best = 0;
  float m = load_logit(row, 0);
  for (int64_t i = 1; i < V && m == m; ++i) {
    const float v = load_logit(row, i);
    if (v > m || v != v) {
      m = v;
      best = i;
    }
  }
  *id = best;
  if (m != m || std::isinf(m)) {  // NaN; all -inf (logsumexp -inf) or a +inf logit: x - lse as torch has it
    *logprob = m != m ? NAN : load_logit(row, best) - m;
    return;
  }
  // double accumulation: a float running sum over a 50k vocabulary drifts by ~1e-4 (relative), which the
  // vector path avoids by its 16 partial sums
  double sum = 0.0;
  for (int64_t i = 0; i < V; ++i) sum += tgi_common::exp_nonpos(load_logit(row, i) - m);
  *logprob = load_logit(row, best) - (m + static_cast<float>(std::log(sum)));
}

#ifdef TGI_FUSED_AVX512
template <typename T>
TGI_V512 void greedy_row_avx512(const T* row, int64_t V, int64_t* id, float* logprob) {
  // pass 1: the maximum, each lane keeping its first index of it; NaN sends the row to the scalar rules
  __m512 best = _mm512_set1_ps(-INFINITY);
  __m512i best_i = _mm512_setzero_si512();
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  __mmask16 nan = 0;
  for (int64_t i = 0; i < V; i += 16) {
    const __mmask16 k = lanes16(V - i);
    const __m512 v = load16(row + i, k);
    nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
    const __mmask16 gt = _mm512_mask_cmp_ps_mask(k, v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, gt, v);
    best_i = _mm512_mask_mov_epi32(best_i, gt, idx);
    idx = _mm512_add_epi32(idx, step);
  }
  const float m = _mm512_reduce_max_ps(best);
  if (nan || std::isinf(m) || V >= (int64_t(1) << 31)) {
    greedy_row_scalar(row, V, id, logprob);
    return;
  }
  const __mmask16 at_max = _mm512_cmp_ps_mask(best, _mm512_set1_ps(m), _CMP_EQ_OQ);
  const int64_t b = _mm512_mask_reduce_min_epi32(at_max, best_i);
  *id = b;
  // pass 2: sum of exp(x - max)
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < V; i += 16) {
    const __mmask16 k = lanes16(V - i);
    const __m512 e = tgi_common::exp16_nonpos(_mm512_sub_ps(load16(row + i, k), mv));
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
  }
  *logprob = load_logit(row, b) - (m + std::log(_mm512_reduce_add_ps(sum)));
}
#endif

template <typename T>
void greedy_row(const T* row, int64_t V, int64_t* id, float* logprob) {
#ifdef TGI_FUSED_AVX512
  if (use_avx512()) {
    greedy_row_avx512(row, V, id, logprob);
    return;
  }
#endif
  if (use_avx2() && greedy_row_avx2(row, V, id, logprob)) return;
  greedy_row_scalar(row, V, id, logprob);
}

}  // namespace tgi_fused

std::tuple<torch::Tensor, torch::Tensor> greedy_pick(torch::Tensor logits) {
  using namespace tgi_fused;
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) > 0, "logits must be [N, V]");
  TORCH_CHECK(logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16,
              "float32 or bfloat16 only");
  logits = logits.contiguous();
  const int64_t n = logits.size(0), V = logits.size(1);
  auto ids = torch::empty({n}, logits.options().dtype(at::kLong));
  auto logprobs = torch::empty({n}, logits.options().dtype(at::kFloat));
  int64_t* ip = ids.data_ptr<int64_t>();
  float* lp = logprobs.data_ptr<float>();
  dispatch(logits, [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* x = logits.data_ptr<scalar_t>();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) greedy_row<scalar_t>(x + r * V, V, ip + r, lp + r);
    });
  });
  return {ids, logprobs};
}
