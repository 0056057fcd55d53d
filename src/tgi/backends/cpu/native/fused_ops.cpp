// The CPU's fused elementwise ops: RMSNorm with its residual add, rotary embedding of q and k in place,
// SiLU(gate) * up, and the KV cache write.
//
// One call each instead of 4-12 small torch ops per layer. Each rounds where the torch ops it replaces round
// (after every op in bfloat16), so results match them up to the order of the variance sum (and SiLU's exp and
// reciprocal, within an ulp of float32).
//
// With AVX-512 each row is done in one pass in registers, 16 lanes at a time (measured alone, 2 cores, bf16:
// rotary over [2048, 12 x 64] 2.7 -> 0.47 ms, RMSNorm [2048, 576] 1.3 -> 0.6 ms; in the default model's
// decode step at batch 32, successive runs, the three ops went 7.4 -> 3.4 ms); with AVX2 and no AVX-512,
// SiLU * up in registers too (fused_ops_avx2.cpp); elsewhere, float32 row buffers and loops the compiler
// vectorises.
#include <torch/types.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"
#include "fused_ops.h"
#include "ops.h"

namespace tgi_fused {

// Rows are processed in float32 buffers by branch-free loops the compiler vectorises (one clone per
// instruction set); `bf16` rounds each intermediate to bfloat16 where the torch op would store one.
#define TGI_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

inline float round_bf16(float v) {  // nearest even; NaN/inf pass through the same rule (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&v, &u, 4);
  return v;
}
inline void to_float(const float* p, float* out, int64_t n) { std::memcpy(out, p, n * 4); }
inline void to_float(const at::BFloat16* p, float* out, int64_t n) {
  const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(q[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}
inline void from_float(const float* in, float* p, int64_t n) { std::memcpy(p, in, n * 4); }
inline void from_float(const float* in, at::BFloat16* p, int64_t n) {  // values already bf16-exact
  uint16_t* q = reinterpret_cast<uint16_t*>(p);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &in[i], 4);
    q[i] = static_cast<uint16_t>(u >> 16);
  }
}
inline bool is_bf16(const float*) { return false; }
inline bool is_bf16(const at::BFloat16*) { return true; }

TGI_CLONES void round_all(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = round_bf16(v[i]);
}

// x (+ res) -> res_out; normalised * w -> out (all [d] float buffers)
TGI_CLONES void rms_norm_row(float* x, const float* res, const float* w, float* out, int64_t d, float eps,
                             bool bf16) {
  if (res) {
    for (int64_t i = 0; i < d; ++i) x[i] += res[i];
    if (bf16) round_all(x, d);
  }
  float part[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16)
    for (int j = 0; j < 16; ++j) part[j] += x[i + j] * x[i + j];
  for (; i < d; ++i) part[0] += x[i] * x[i];
  float ss = 0.0f;
  for (int j = 0; j < 16; ++j) ss += part[j];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  for (int64_t k = 0; k < d; ++k) out[k] = x[k] * inv;
  if (bf16) round_all(out, d);
  for (int64_t k = 0; k < d; ++k) out[k] = w[k] * out[k];
  if (bf16) round_all(out, d);
}

// x1, x2 [half] rotated in place with c, s [half]; t1..t4 scratch
TGI_CLONES void rotary_row(float* x1, float* x2, const float* c, const float* s, int64_t half, bool bf16,
                           float* t1, float* t2, float* t3, float* t4) {
  for (int64_t i = 0; i < half; ++i) {
    t1[i] = x1[i] * c[i];
    t2[i] = x2[i] * s[i];
    t3[i] = x2[i] * c[i];
    t4[i] = x1[i] * s[i];
  }
  if (bf16) {
    round_all(t1, half);
    round_all(t2, half);
    round_all(t3, half);
    round_all(t4, half);
  }
  for (int64_t i = 0; i < half; ++i) {
    x1[i] = t1[i] - t2[i];
    x2[i] = t3[i] + t4[i];
  }
  if (bf16) {
    round_all(x1, half);
    round_all(x2, half);
  }
}

TGI_CLONES void silu_mul_row(float* g, const float* u, int64_t n, bool bf16) {
  for (int64_t i = 0; i < n; ++i) {
    const float gv = g[i];
    const float e = tgi_common::exp_nonpos(gv >= 0.0f ? -gv : gv);  // sigmoid without overflow
    const float inv = 1.0f / (1.0f + e);
    g[i] = gv * (gv >= 0.0f ? inv : e * inv);
  }
  if (bf16) round_all(g, n);
  for (int64_t i = 0; i < n; ++i) g[i] *= u[i];
  if (bf16) round_all(g, n);
}

#ifdef TGI_FUSED_AVX512
// ---- AVX-512: one pass per row in registers, the same rounding points as the loops above ----------------
// round_bf16 on 16 lanes when the tensor is bfloat16
template <bool BF16> TGI_V512 inline __m512 rnd16(__m512 v) {
  if (!BF16) return v;
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// a product the compiler must not fuse into the next add (the torch ops round each product on its own)
TGI_V512 inline __m512 kept(__m512 v) {
  asm("" : "+v"(v));
  return v;
}

template <typename T, bool BF16>
TGI_V512 void rms_norm_row512(const T* x, const T* res, const T* w, T* out, T* res_out, int64_t d, float eps) {
  __m512 ss = _mm512_setzero_ps();
  for (int64_t i = 0; i < d; i += 16) {
    const __mmask16 k = lanes16(d - i);
    __m512 v = load16(x + i, k);
    if (res) v = rnd16<BF16>(_mm512_add_ps(v, load16(res + i, k)));
    store16(res_out + i, v, k);
    ss = _mm512_fmadd_ps(v, v, ss);
  }
  const float inv = 1.0f / std::sqrt(_mm512_reduce_add_ps(ss) / static_cast<float>(d) + eps);
  const __m512 iv = _mm512_set1_ps(inv);
  for (int64_t i = 0; i < d; i += 16) {
    const __mmask16 k = lanes16(d - i);
    const __m512 v = rnd16<BF16>(_mm512_mul_ps(load16(res_out + i, k), iv));
    store16(out + i, rnd16<BF16>(_mm512_mul_ps(load16(w + i, k), v)), k);
  }
}

template <typename T, bool BF16>
TGI_V512 void rotary_head512(T* x, const T* c, const T* s, int64_t half) {
  for (int64_t i = 0; i < half; i += 16) {
    const __mmask16 k = lanes16(half - i);
    const __m512 a = load16(x + i, k), b = load16(x + half + i, k);
    const __m512 cv = load16(c + i, k), sv = load16(s + i, k);
    const __m512 t1 = rnd16<BF16>(kept(_mm512_mul_ps(a, cv))), t2 = rnd16<BF16>(kept(_mm512_mul_ps(b, sv)));
    const __m512 t3 = rnd16<BF16>(kept(_mm512_mul_ps(b, cv))), t4 = rnd16<BF16>(kept(_mm512_mul_ps(a, sv)));
    store16(x + i, rnd16<BF16>(_mm512_sub_ps(t1, t2)), k);
    store16(x + half + i, rnd16<BF16>(_mm512_add_ps(t3, t4)), k);
  }
}

template <typename T, bool BF16>
TGI_V512 void silu_mul_row512(const T* g, const T* u, T* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes16(n - i);
    const __m512 gv = load16(g + i, k);
    const __mmask16 pos = _mm512_cmp_ps_mask(gv, _mm512_setzero_ps(), _CMP_GE_OQ);
    // sigmoid without overflow: exp(-|g|) / (1 + exp(-|g|)) or 1 / (1 + exp(-|g|))
    const __m512 e = tgi_common::exp16_nonpos(_mm512_mask_sub_ps(gv, pos, _mm512_setzero_ps(), gv));
    const __m512 den = _mm512_add_ps(one, e);  // in [1, 2]: rcp14 + one Newton step is within 1 ulp
    __m512 inv = _mm512_rcp14_ps(den);
    inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(den, inv, _mm512_set1_ps(2.0f)));
    const __m512 sg = _mm512_mask_mov_ps(_mm512_mul_ps(e, inv), pos, inv);
    const __m512 act = rnd16<BF16>(_mm512_mul_ps(gv, sg));
    store16(out + i, rnd16<BF16>(_mm512_mul_ps(act, load16(u + i, k))), k);
  }
}
#endif

inline int64_t grain(int64_t width) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1)); }

template <typename T>
void rms_norm_rows(const T* x, const T* res, const T* w, T* out, T* res_out, int64_t rows, int64_t d,
                   float eps) {
  const bool bf16 = is_bf16(x);
#ifdef TGI_FUSED_AVX512
  if (use_avx512()) {
    at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* rr = res ? res + r * d : nullptr;
        if (bf16) rms_norm_row512<T, true>(x + r * d, rr, w, out + r * d, res_out + r * d, d, eps);
        else rms_norm_row512<T, false>(x + r * d, rr, w, out + r * d, res_out + r * d, d, eps);
      }
    });
    return;
  }
#endif
  std::vector<float> wf(d);
  to_float(w, wf.data(), d);
  at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
    std::vector<float> xf(d), rf(d), of(d);
    for (int64_t r = begin; r < end; ++r) {
      to_float(x + r * d, xf.data(), d);
      if (res) to_float(res + r * d, rf.data(), d);
      rms_norm_row(xf.data(), res ? rf.data() : nullptr, wf.data(), of.data(), d, eps, bf16);
      from_float(xf.data(), res_out + r * d, d);
      from_float(of.data(), out + r * d, d);
    }
  });
}

template <typename T>
void rotary_rows(T* qkv, const T* cos, const T* sin, int64_t rows, int64_t width, int64_t heads, int64_t dh) {
  const int64_t half = dh / 2;
  const bool bf16 = is_bf16(qkv);
#ifdef TGI_FUSED_AVX512
  if (use_avx512()) {
    at::parallel_for(0, rows, grain(heads * dh), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t h = 0; h < heads; ++h) {
          T* x = qkv + r * width + h * dh;
          if (bf16) rotary_head512<T, true>(x, cos + r * half, sin + r * half, half);
          else rotary_head512<T, false>(x, cos + r * half, sin + r * half, half);
        }
    });
    return;
  }
#endif
  at::parallel_for(0, rows, grain(heads * dh), [&](int64_t begin, int64_t end) {
    std::vector<float> buf(dh), c(half), s(half), t(4 * half);
    for (int64_t r = begin; r < end; ++r) {
      to_float(cos + r * half, c.data(), half);
      to_float(sin + r * half, s.data(), half);
      for (int64_t h = 0; h < heads; ++h) {
        T* x = qkv + r * width + h * dh;
        to_float(x, buf.data(), dh);
        rotary_row(buf.data(), buf.data() + half, c.data(), s.data(), half, bf16, t.data(), t.data() + half,
                   t.data() + 2 * half, t.data() + 3 * half);
        from_float(buf.data(), x, dh);
      }
    }
  });
}

template <typename T>
void silu_mul_rows(const T* gu, T* out, int64_t rows, int64_t inter) {
  const bool bf16 = is_bf16(gu);
#ifdef TGI_FUSED_AVX512
  if (use_avx512()) {
    at::parallel_for(0, rows, grain(inter), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* g = gu + r * 2 * inter;
        if (bf16) silu_mul_row512<T, true>(g, g + inter, out + r * inter, inter);
        else silu_mul_row512<T, false>(g, g + inter, out + r * inter, inter);
      }
    });
    return;
  }
#endif
  if (use_avx2() && inter % 8 == 0) {
    at::parallel_for(0, rows, grain(inter), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* g = gu + r * 2 * inter;
        silu_mul_row_avx2(g, g + inter, out + r * inter, inter);
      }
    });
    return;
  }
  at::parallel_for(0, rows, grain(inter), [&](int64_t begin, int64_t end) {
    std::vector<float> g(inter), u(inter);
    for (int64_t r = begin; r < end; ++r) {
      to_float(gu + r * 2 * inter, g.data(), inter);
      to_float(gu + r * 2 * inter + inter, u.data(), inter);
      silu_mul_row(g.data(), u.data(), inter, bf16);
      from_float(g.data(), out + r * inter, inter);
    }
  });
}

}  // namespace tgi_fused

std::tuple<torch::Tensor, torch::Tensor> rms_norm(torch::Tensor x, c10::optional<torch::Tensor> residual,
                                                  torch::Tensor weight, double eps) {
  using namespace tgi_fused;
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "x must be a contiguous [T, D] tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "float32 or bfloat16 only");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type() && weight.numel() == x.size(1), "weight must be [D]");
  if (residual.has_value())
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->scalar_type() == x.scalar_type() &&
                    residual->is_contiguous(), "residual must match x");
  auto out = torch::empty_like(x);
  auto res_out = torch::empty_like(x);
  const int64_t rows = x.size(0), d = x.size(1);
  auto w = weight.contiguous();
  dispatch(x, [&](auto tag) {
    using scalar_t = decltype(tag);
    rms_norm_rows<scalar_t>(x.data_ptr<scalar_t>(), residual.has_value() ? residual->data_ptr<scalar_t>() : nullptr,
                            w.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), res_out.data_ptr<scalar_t>(), rows,
                            d, static_cast<float>(eps));
  });
  return {out, res_out};
}

void rotary_inplace(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, int64_t heads, int64_t head_dim) {
  using namespace tgi_fused;
  TORCH_CHECK(qkv.dim() == 2 && qkv.is_contiguous(), "qkv must be a contiguous [T, W] tensor");
  TORCH_CHECK(qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16, "float32 or bfloat16 only");
  TORCH_CHECK(head_dim % 2 == 0 && heads * head_dim <= qkv.size(1), "heads * head_dim exceeds the row");
  TORCH_CHECK(cos.scalar_type() == qkv.scalar_type() && sin.scalar_type() == qkv.scalar_type(),
              "cos/sin must have qkv's dtype");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.numel() == qkv.size(0) * head_dim / 2 &&
                  sin.numel() == cos.numel(), "cos/sin must be contiguous [T, head_dim / 2]");
  dispatch(qkv, [&](auto tag) {
    using scalar_t = decltype(tag);
    rotary_rows<scalar_t>(qkv.data_ptr<scalar_t>(), cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>(),
                          qkv.size(0), qkv.size(1), heads, head_dim);
  });
}

torch::Tensor silu_mul(torch::Tensor gate_up) {
  using namespace tgi_fused;
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.is_contiguous() && gate_up.size(1) % 2 == 0,
              "gate_up must be a contiguous [T, 2 * I] tensor");
  TORCH_CHECK(gate_up.scalar_type() == at::kFloat || gate_up.scalar_type() == at::kBFloat16,
              "float32 or bfloat16 only");
  const int64_t rows = gate_up.size(0), inter = gate_up.size(1) / 2;
  auto out = torch::empty({rows, inter}, gate_up.options());
  dispatch(gate_up, [&](auto tag) {
    using scalar_t = decltype(tag);
    silu_mul_rows<scalar_t>(gate_up.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, inter);
  });
  return out;
}

void kv_write(torch::Tensor key_cache, torch::Tensor value_cache, torch::Tensor key, torch::Tensor value,
              torch::Tensor slots) {
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous() && key_cache.dim() == 4 &&
                  value_cache.sizes() == key_cache.sizes(), "caches must be contiguous [blocks, block_size, Hkv, Dh]");
  TORCH_CHECK(key.dim() == 3 && value.dim() == 3 && key.sizes() == value.sizes(), "key/value must be [n, Hkv, Dh]");
  TORCH_CHECK(key.scalar_type() == key_cache.scalar_type() && value.scalar_type() == key_cache.scalar_type() &&
                  value_cache.scalar_type() == key_cache.scalar_type(), "key/value must have the caches' dtype");
  const int64_t row = key_cache.size(2) * key_cache.size(3);
  TORCH_CHECK(key.size(1) * key.size(2) == row, "key/value heads do not match the caches");
  TORCH_CHECK(key.stride(2) == 1 && key.stride(1) == key.size(2) && value.stride(2) == 1 &&
                  value.stride(1) == value.size(2), "each token's heads must be contiguous");
  slots = slots.to(at::kLong).contiguous();
  const int64_t n = std::min<int64_t>(slots.numel(), key.size(0));
  const int64_t capacity = key_cache.size(0) * key_cache.size(1);
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t bytes = row * key.element_size();
  char* kc = static_cast<char*>(key_cache.data_ptr());
  char* vc = static_cast<char*>(value_cache.data_ptr());
  const char* kp = static_cast<const char*>(key.data_ptr());
  const char* vp = static_cast<const char*>(value.data_ptr());
  const int64_t ks = key.stride(0) * key.element_size(), vs = value.stride(0) * value.element_size();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = sp[i];
    if (slot < 0) continue;  // padding
    TORCH_CHECK(slot < capacity, "slot ", slot, " is outside the cache (", capacity, " slots)");
    std::memcpy(kc + slot * bytes, kp + i * ks, bytes);
    std::memcpy(vc + slot * bytes, vp + i * vs, bytes);
  }
}
