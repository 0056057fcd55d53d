// The quantized KV cache's writer: the op `kv_write_quantized`. Each token's key and value of each kv head,
// float32 or bfloat16, becomes one-byte codes and a float32 scale (tgi.backends.cpu.kv_quant says how, and holds
// the torch reference this matches byte for byte): the same float32 operations in the same order, and torch's
// own conversions to float8 (c10's), so the two writers store the same cache.
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kv_quant.h"
#include "kv_quant_ops.h"

namespace {

using tgi_kvq::Kind;

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const at::BFloat16* p, int64_t i) { return static_cast<float>(p[i]); }

// one row x [dh] -> codes [dh], returns its scale (`fixed` > 0: that one)
template <typename T>
float quantize_row(const T* x, int64_t dh, Kind kind, float fixed, uint8_t* codes) {
  const float top = kind == tgi_kvq::kInt8 ? 127.0f : kind == tgi_kvq::kE4M3 ? 448.0f : 57344.0f;
  float scale = fixed;
  if (!(fixed > 0.0f)) {
    float amax = 0.0f;
    for (int64_t d = 0; d < dh; ++d) amax = std::max(amax, std::fabs(load(x, d)));
    scale = amax > 0.0f ? amax / top : 1.0f;
  }
  for (int64_t d = 0; d < dh; ++d) {
    const float y = std::min(std::max(load(x, d) / scale, -top), top);
    if (kind == tgi_kvq::kInt8) {
      codes[d] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(y)));
    } else if (kind == tgi_kvq::kE4M3) {
      codes[d] = c10::Float8_e4m3fn(y).x;
    } else {
      codes[d] = c10::Float8_e5m2(y).x;
    }
  }
  return scale;
}

template <typename T>
void write_all(const torch::Tensor& key, const torch::Tensor& value, const int64_t* slots, int64_t n, int64_t hkv,
               int64_t dh, Kind kind, float k_fixed, float v_fixed, uint8_t* kc, uint8_t* vc, float* ks, float* vs) {
  const T* kp = key.data_ptr<T>();
  const T* vp = value.data_ptr<T>();
  const int64_t k_stride = key.stride(0), v_stride = value.stride(0);
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t slot = slots[i];
      if (slot < 0) continue;  // padding
      for (int64_t h = 0; h < hkv; ++h) {
        const int64_t at = slot * hkv + h;
        ks[at] = quantize_row(kp + i * k_stride + h * dh, dh, kind, k_fixed, kc + at * dh);
        vs[at] = quantize_row(vp + i * v_stride + h * dh, dh, kind, v_fixed, vc + at * dh);
      }
    }
  });
}

}  // namespace

void kv_write_quantized(torch::Tensor k_codes, torch::Tensor v_codes, torch::Tensor k_scales,
                        torch::Tensor v_scales, torch::Tensor key, torch::Tensor value, torch::Tensor slots,
                        int64_t kind, double k_fixed, double v_fixed) {
  TORCH_CHECK(kind >= 0 && kind <= 2, "unknown code kind ", kind);
  TORCH_CHECK(kind != 0 || (k_fixed <= 0 && v_fixed <= 0), "an int8 cache computes its scales (no fixed scale)");
  TORCH_CHECK(k_codes.dim() == 4 && v_codes.sizes() == k_codes.sizes() && k_codes.element_size() == 1 &&
                  v_codes.element_size() == 1 && k_codes.is_contiguous() && v_codes.is_contiguous(),
              "codes must be contiguous one-byte [num_blocks, block_size, Hkv, Dh]");
  const int64_t hkv = k_codes.size(2), dh = k_codes.size(3);
  TORCH_CHECK(k_scales.scalar_type() == at::kFloat && v_scales.scalar_type() == at::kFloat &&
                  k_scales.is_contiguous() && v_scales.is_contiguous() &&
                  k_scales.numel() == k_codes.numel() / dh && v_scales.numel() == k_scales.numel(),
              "scales must be contiguous float32 [num_blocks, block_size, Hkv]");
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes() && key.size(1) == hkv && key.size(2) == dh,
              "key/value must be [n, Hkv, Dh] of the caches' heads");
  TORCH_CHECK(key.scalar_type() == value.scalar_type() &&
                  (key.scalar_type() == at::kFloat || key.scalar_type() == at::kBFloat16),
              "key/value must be float32 or bfloat16");
  TORCH_CHECK(key.stride(2) == 1 && key.stride(1) == dh && value.stride(2) == 1 && value.stride(1) == dh,
              "each token's heads must be contiguous");
  slots = slots.to(at::kLong).contiguous();
  const int64_t n = std::min<int64_t>(slots.numel(), key.size(0));
  const int64_t capacity = k_codes.size(0) * k_codes.size(1);
  const int64_t* sp = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(sp[i] < capacity, "slot ", sp[i], " is outside the cache (", capacity, " slots)");
  auto* kc = static_cast<uint8_t*>(k_codes.data_ptr());
  auto* vc = static_cast<uint8_t*>(v_codes.data_ptr());
  float* ks = k_scales.data_ptr<float>();
  float* vs = v_scales.data_ptr<float>();
  const auto k = static_cast<Kind>(kind);
  const float kf = static_cast<float>(k_fixed), vf = static_cast<float>(v_fixed);
  if (key.scalar_type() == at::kFloat)
    write_all<float>(key, value, sp, n, hkv, dh, k, kf, vf, kc, vc, ks, vs);
  else
    write_all<at::BFloat16>(key, value, sp, n, hkv, dh, k, kf, vf, kc, vc, ks, vs);
}
