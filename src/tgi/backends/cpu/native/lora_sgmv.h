// LoRA's segmented low-rank pair on the CPU (SGMV-like), for decode-sized steps: every token t of x with an
// adapter (slots[t] >= 0) gets y[t] += (x[t] @ a[s].T) @ bt[s], s = slots[t], in one call per linear.
// lora_sgmv.cpp holds the checks, the dispatch, the reference and the float32 AVX2 path;
// lora_sgmv_avx512_bf16.cpp the bfloat16 AVX-512 path.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

// y [T', out] (updated in place; rows past slots' length are left alone), x [>= T, in], a [S, R, in],
// bt [S, R, out] (B transposed, scaling applied), all one dtype (bfloat16 or float32), rows contiguous;
// slots [T] int32 (-1: no adapter); cols [S, R, 2] int32: the columns [lo, hi) where row r of bt[s] may be
// non-zero (the fast paths skip the others; the reference computes every column). The shrink x[t] @ a[s].T accumulates in float32 and rounds to the dtype
// (as torch's product does); the expand accumulates y[t] + h @ bt[s] in float32 and rounds once.
// impl: 0 auto, 1 reference (scalar), 2 avx512-bf16 (bfloat16), 3 avx2 (float32). Returns y.
torch::Tensor lora_sgmv(torch::Tensor y, torch::Tensor x, torch::Tensor a, torch::Tensor bt, torch::Tensor cols,
                        torch::Tensor slots, int64_t impl);
// the implementations this CPU offers, by name
std::vector<std::string> lora_impls();

namespace tgi_lora {
// bfloat16 <-> float32 (round to nearest even)
inline float bf16_round(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return v;  // NaN
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&v, &u, 4);
  return v;
}
// The AVX-512 BF16 path, for n (1..8) tokens of one adapter (xs[j], ys[j]: token j's rows), each row of
// a [R, in] and bt [R, out] read once for all of them: ranks [r0, r1) of the shrink, h[j * R + r] =
// bf16(xs[j] . a[r]); then columns [o0, o1) of the expand, ys[j] = bf16(ys[j] + h_j @ bt), where rank q's row
// of bt is non-zero only in columns [cols[2q], cols[2q+1]).
void shrink_bf16_avx512(const uint16_t* const* xs, int n, const uint16_t* a, int64_t in, int64_t r0, int64_t r1,
                        int64_t rank, float* h);
void expand_bf16_avx512(uint16_t* const* ys, int n, const uint16_t* bt, int64_t out, int64_t o0, int64_t o1,
                        int64_t rank, const int32_t* cols, const float* h);
bool avx512_bf16_ready();
}  // namespace tgi_lora
