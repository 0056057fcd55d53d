"""C++ source of the CPU's fused elementwise ops (compiled by `tgi.backends.cpu.native`).

One call each instead of 4-12 small torch ops per layer: RMSNorm with its residual add, rotary embedding of
q and k in place, SiLU(gate) * up. Each rounds where the torch ops it replaces round (after every op in
bfloat16), so results match them up to the order of the variance sum.
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

namespace tgi_fused {

// calls f(scalar_t{}) with the tensor's element type: float or at::BFloat16
template <typename F> void dispatch(const torch::Tensor& t, F f) {
  if (t.scalar_type() == at::kFloat) f(float{});
  else f(at::BFloat16{});
}

inline float ld(const float* p, int64_t i) { return p[i]; }
inline float ld(const at::BFloat16* p, int64_t i) { return static_cast<float>(p[i]); }
// the value a torch op of this dtype stores: float32 as is, bfloat16 rounded to nearest even
inline float rnd(float v, const float*) { return v; }
inline float rnd(float v, const at::BFloat16*) { return static_cast<float>(at::BFloat16(v)); }
template <typename T> inline void st(T* p, int64_t i, float v) { p[i] = static_cast<T>(v); }

inline int64_t grain(int64_t width) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1)); }

template <typename T>
void rms_norm_rows(const T* x, const T* res, const T* w, T* out, T* res_out, int64_t rows, int64_t d,
                   float eps) {
  at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * d;
      T* orow = out + r * d;
      T* rrow = res_out + r * d;
      float ss = 0.0f;
      for (int64_t i = 0; i < d; ++i) {
        float v = ld(xr, i);
        if (res) v = rnd(v + ld(res + r * d, i), xr);  // x + residual in the dtype
        st(rrow, i, v);
        ss += v * v;
      }
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      for (int64_t i = 0; i < d; ++i) {
        const float n = rnd(ld(rrow, i) * inv, xr);  // normalised, back in the dtype
        st(orow, i, ld(w, i) * n);
      }
    }
  });
}

template <typename T>
void rotary_rows(T* qkv, const T* cos, const T* sin, int64_t rows, int64_t width, int64_t heads, int64_t dh) {
  const int64_t half = dh / 2;
  at::parallel_for(0, rows, grain(heads * dh), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* c = cos + r * half;
      const T* s = sin + r * half;
      for (int64_t h = 0; h < heads; ++h) {
        T* x = qkv + r * width + h * dh;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = ld(x, i), x2 = ld(x, i + half), ci = ld(c, i), si = ld(s, i);
          const float a = rnd(rnd(x1 * ci, x) - rnd(x2 * si, x), x);
          const float b = rnd(rnd(x2 * ci, x) + rnd(x1 * si, x), x);
          st(x, i, a);
          st(x, i + half, b);
        }
      }
    }
  });
}

template <typename T>
void silu_mul_rows(const T* gu, T* out, int64_t rows, int64_t inter) {
  at::parallel_for(0, rows, grain(inter), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* g = gu + r * 2 * inter;
      const T* u = g + inter;
      T* o = out + r * inter;
      for (int64_t i = 0; i < inter; ++i) {
        const float gv = ld(g, i);
        const float e = tgi_common::exp_nonpos(-std::fabs(gv));  // sigmoid without overflow
        const float act = rnd(gv * (gv >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e)), g);
        st(o, i, act * ld(u, i));
      }
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
"""
