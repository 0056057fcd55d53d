// The paged decode attention over a quantized KV cache: the op `paged_decode_quantized`, its dispatch over the
// paths (reference here; AVX2, AVX-512, AMX in kv_quant_decode_*.cpp) and the reference path itself: plain
// loops, what a CPU without AVX2 runs, and what the others are held to (tests/unit/backends/cpu).
//
// Each (sequence, kv head) pair: the scores of its G query heads (q . codes, times each key's scale), the
// softmax (shared with the dense kernels, paged_attention.h), each probability times its value's scale, the
// weighted sum of the widened value codes, normalised. Queries and sums in float32.
#include <ATen/Parallel.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kv_quant.h"
#include "kv_quant_ops.h"
#include "paged_attention.h"

namespace tgi_kvq {
namespace {

template <typename C>
void pair_reference(const Pair& a, Scratch& s) {
  const int64_t n = a.seq_len - a.start, G = a.G, dh = a.dh;
  if (n <= 0) {
    std::fill(a.out, a.out + G * dh, 0.0f);
    return;
  }
  prepare(a, s, kUnit<C>);
  std::vector<float> row(dh);
  for (int64_t i = 0; i < n; ++i) {
    const C* k = code_at<C>(a.kc, a, s.at[i]);
    for (int64_t d = 0; d < dh; ++d) row[d] = widen(k, d);
    for (int64_t g = 0; g < G; ++g) {
      float dot = 0.0f;
      for (int64_t d = 0; d < dh; ++d) dot += s.qf[g * dh + d] * row[d];
      s.scores[g * n + i] = dot * s.km[i];
    }
  }
  float inv_small[64];
  std::vector<float> inv_large;
  const float* inv_p =
      tgi_attention::softmax_unnormalised(s.scores.data(), G, n, a.softcap, inv_small, inv_large);
  std::fill(s.acc.begin(), s.acc.end(), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const C* v = code_at<C>(a.vc, a, s.at[i]);
    for (int64_t d = 0; d < dh; ++d) row[d] = widen(v, d);
    for (int64_t g = 0; g < G; ++g) {
      const float p = s.scores[g * n + i] * s.vm[i];
      for (int64_t d = 0; d < dh; ++d) s.acc[g * dh + d] += p * row[d];
    }
  }
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < dh; ++d) a.out[g * dh + d] = s.acc[g * dh + d] * inv_p[g];
}

}  // namespace

PairFn pick_reference(Kind kind) {
  return kind == kInt8 ? &pair_reference<I8> : kind == kE4M3 ? &pair_reference<E4M3> : &pair_reference<E5M2>;
}

}  // namespace tgi_kvq

using namespace tgi_kvq;

std::vector<std::string> kv_decode_impls() {
  std::vector<std::string> out{"reference"};
  if (avx2_ready()) out.push_back("avx2");
  if (avx512_ready()) out.push_back("avx512");
  if (amx_ready()) out.push_back("amx");
  return out;
}

namespace {

// The path `impl` asks for (0: the fastest this CPU has for the shapes); raises where it cannot run. "auto" takes
// AVX-512 before AMX: the AMX path widens each key's codes into a tile, as much work as the AVX-512 path's whole
// score pass (Intel Xeon with AMX, one thread, 9 heads on 3 kv heads of 64, int8: 32 sequences of 230 tokens
// 0.43 ms AVX-512, 0.56 ms AMX; one of 8,192 tokens 0.46 vs 0.61 ms).
PairFn pick(int64_t impl, Kind kind, int64_t dh, int64_t bs, int64_t G, bool bf16) {
  const bool amx_shapes = bf16 && dh % 32 == 0 && dh <= 128 && bs % 16 == 0 && G <= 16;
  if (impl == 0) {
    if (avx512_ready() && pick_avx512(kind, dh) != nullptr) return pick_avx512(kind, dh);
    if (amx_ready() && amx_shapes) return pick_amx(kind, dh);
    if (avx2_ready() && pick_avx2(kind, dh) != nullptr) return pick_avx2(kind, dh);
    return pick_reference(kind);
  }
  if (impl == 1) return pick_reference(kind);
  const char* names[] = {"", "", "avx2", "avx512", "amx"};
  TORCH_CHECK(impl >= 2 && impl <= 4, "unknown paged_decode_quantized implementation ", impl);
  const bool ready = impl == 2 ? avx2_ready() : impl == 3 ? avx512_ready() : amx_ready();
  TORCH_CHECK(ready, "the ", names[impl], " decode is not available on this CPU");
  TORCH_CHECK(impl != 4 || amx_shapes,
              "the amx decode needs bfloat16 queries, a head size of 32, 64, 96 or 128, a block size that is a "
              "multiple of 16 and at most 16 query heads per kv head");
  const PairFn fn = impl == 2 ? pick_avx2(kind, dh) : impl == 3 ? pick_avx512(kind, dh) : pick_amx(kind, dh);
  TORCH_CHECK(fn != nullptr, "the ", names[impl], " decode has no kernel for head size ", dh,
              " (32, 64, 80, 96, 128, 256)");
  return fn;
}

}  // namespace

torch::Tensor paged_decode_quantized(torch::Tensor q, torch::Tensor k_codes, torch::Tensor v_codes,
                                     torch::Tensor k_scales, torch::Tensor v_scales, torch::Tensor block_tables,
                                     torch::Tensor seq_lens, double scale, int64_t sliding_window, double softcap,
                                     int64_t kind, int64_t impl) {
  TORCH_CHECK(q.dim() == 3, "q must be [D, H, Dh]");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16,
              "paged_decode_quantized takes float32 or bfloat16 queries");
  TORCH_CHECK(k_codes.dim() == 4 && v_codes.sizes() == k_codes.sizes() && k_codes.element_size() == 1 &&
                  v_codes.element_size() == 1 && k_codes.is_contiguous() && v_codes.is_contiguous(),
              "codes must be contiguous one-byte [num_blocks, block_size, Hkv, Dh]");
  TORCH_CHECK(k_scales.scalar_type() == at::kFloat && v_scales.scalar_type() == at::kFloat &&
                  k_scales.is_contiguous() && v_scales.is_contiguous() && k_scales.dim() == 3 &&
                  v_scales.sizes() == k_scales.sizes() && k_scales.size(0) == k_codes.size(0) &&
                  k_scales.size(1) == k_codes.size(1) && k_scales.size(2) == k_codes.size(2),
              "scales must be contiguous float32 [num_blocks, block_size, Hkv]");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && seq_lens.scalar_type() == at::kInt,
              "block_tables and seq_lens must be int32");
  TORCH_CHECK(kind >= 0 && kind <= 2, "unknown code kind ", kind);
  const int64_t D = q.size(0), H = q.size(1), dh = q.size(2);
  const int64_t bs = k_codes.size(1), hkv = k_codes.size(2);
  TORCH_CHECK(k_codes.size(3) == dh, "head_dim mismatch");
  TORCH_CHECK(H % hkv == 0, "query heads must be a multiple of kv heads");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == D, "block_tables must be [D, max_blocks]");
  TORCH_CHECK(seq_lens.numel() == D, "seq_lens must be [D]");
  block_tables = block_tables.contiguous();
  seq_lens = seq_lens.contiguous();
  const int64_t max_blocks = block_tables.size(1), G = H / hkv;
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  for (int64_t i = 0; i < D; ++i)
    TORCH_CHECK(lens[i] >= 0 && lens[i] <= max_blocks * bs, "seq_len exceeds the block table");
  const PairFn fn = pick(impl, static_cast<Kind>(kind), dh, bs, G, q.scalar_type() == at::kBFloat16);
  auto qf = q.to(at::kFloat).contiguous();
  auto out = torch::empty({D, H, dh}, q.options().dtype(at::kFloat));
  if (D == 0) return out.to(q.scalar_type());
  const float* qp = qf.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const auto* kc = static_cast<const uint8_t*>(k_codes.data_ptr());
  const auto* vc = static_cast<const uint8_t*>(v_codes.data_ptr());
  const float* ks = k_scales.data_ptr<float>();
  const float* vs = v_scales.data_ptr<float>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  at::parallel_for(0, D * hkv, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t w = begin; w < end; ++w) {
      const int64_t i = w / hkv, kh = w % hkv, len = lens[i];
      const int64_t start = sliding_window > 0 ? std::max<int64_t>(0, len - sliding_window) : 0;
      const Pair a{qp + (i * H + kh * G) * dh, kc, vc, ks, vs, tables + i * max_blocks, len, start, bs, hkv, kh,
                   G, dh, static_cast<float>(scale), static_cast<float>(softcap), op + (i * H + kh * G) * dh};
      fn(a, scratch);
    }
  });
  return out.scalar_type() == q.scalar_type() ? out : out.to(q.scalar_type());
}
