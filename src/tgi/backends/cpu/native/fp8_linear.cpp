// The float8 linear's ops (fp8_linear.h): `fp8_pack`, `fp8_linear` (checks, the choice of implementation, the
// scalar reference), `fp8_widen` and `fp8_impls`.
#include <torch/types.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fp8_linear.h"

namespace {
using tgi_fp8::R;

enum Impl : int64_t { kAuto = 0, kReference = 1, kAvx512Bf16 = 2, kAvx2 = 3 };

int64_t packed_size(int64_t n, int64_t k) {
  TORCH_CHECK(n > 0 && k > 0, "float8 weights need positive sizes, got [", n, ", ", k, "]");
  return (n + R - 1) / R * ((k + 1) / 2) * 2 * R;
}

// 64-byte aligned scratch of `bytes` bytes, one per thread's range of groups
struct Scratch {
  std::vector<uint8_t> raw;
  void* ptr;
  explicit Scratch(int64_t bytes) : raw(bytes + 64) {
    const auto a = reinterpret_cast<uintptr_t>(raw.data());
    ptr = raw.data() + ((64 - a % 64) % 64);
  }
};

// The scalar reference: float32 products and sums in column order, the exact code values, then scale, bias.
template <typename T>
void reference(const T* x, int64_t M, int64_t K2, const uint8_t* packed, const float* scale, const float* bias,
               int64_t n, float* out) {
  const int64_t groups = (n + R - 1) / R;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* codes = packed + g * K2 * 2 * R;
      const int64_t rows = std::min<int64_t>(R, n - g * R);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < rows; ++r) {
          float s = 0.0f;
          for (int64_t p = 0; p < K2; ++p)
            for (int j = 0; j < 2; ++j)
              s += static_cast<float>(x[m * 2 * K2 + 2 * p + j]) * tgi_fp8::code_value(codes[32 * p + 2 * r + j]);
          const int64_t col = g * R + r;
          out[m * n + col] = s * scale[col] + (bias ? bias[col] : 0.0f);
        }
    }
  });
}
}  // namespace

torch::Tensor fp8_pack(torch::Tensor codes, int64_t n, int64_t k) {
  const int64_t size = packed_size(n, k);
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.dim() == 2 && codes.size(0) == n && codes.size(1) == k,
              "float8 codes must be uint8 [", n, ", ", k, "] (the weight's bytes)");
  codes = codes.contiguous();
  const uint8_t* c = codes.data_ptr<uint8_t>();
  int64_t nans = 0;
  for (int64_t i = 0; i < n * k; ++i) nans += (c[i] & 0x7F) == 0x7F;
  TORCH_CHECK(nans == 0, "the float8_e4m3fn weight holds ", nans, " NaN codes (0x7f / 0xff): refused");
  auto out = torch::zeros({size}, codes.options());
  uint8_t* o = out.data_ptr<uint8_t>();
  const int64_t K2 = (k + 1) / 2;
  for (int64_t row = 0; row < n; ++row) {
    const int64_t g = row / R, r = row % R;
    for (int64_t col = 0; col < k; ++col) o[(g * K2 + col / 2) * 2 * R + 2 * r + col % 2] = c[row * k + col];
  }
  return out;
}

torch::Tensor fp8_linear(torch::Tensor x, torch::Tensor packed, torch::Tensor scale, int64_t n, int64_t k,
                         c10::optional<torch::Tensor> bias, int64_t impl) {
  using namespace tgi_fp8;
  const int64_t size = packed_size(n, k), K2 = (k + 1) / 2, groups = (n + R - 1) / R;
  TORCH_CHECK(x.dim() == 2 && x.size(1) == k, "x must be [M, ", k, "]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat,
              "fp8_linear takes bfloat16 or float32 inputs");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() && packed.numel() == size,
              "packed weights do not match [", n, ", ", k, "] (see fp8_pack)");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.dim() == 1 && scale.size(0) == n,
              "scale must be float32 [", n, "]");
  if (bias.has_value()) TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n, "bias must be [", n, "]");
  TORCH_CHECK(impl >= kAuto && impl <= kAvx2, "unknown implementation ", impl);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  TORCH_CHECK(impl != kAvx512Bf16 || avx512_bf16_ready(), "this CPU has no AVX512-BF16");
  TORCH_CHECK(impl != kAvx512Bf16 || bf16, "the avx512-bf16 implementation takes bfloat16 inputs");
  TORCH_CHECK(impl != kAvx2 || avx2_ready(), "this CPU has no AVX2 + FMA + F16C");
  if (impl == kAuto) impl = bf16 && avx512_bf16_ready() ? kAvx512Bf16 : avx2_ready() ? kAvx2 : kReference;
  const int64_t M = x.size(0);
  if (M == 0) return torch::empty({0, n}, x.options());
  x = x.contiguous();
  if (k % 2) x = torch::constant_pad_nd(x, {0, 1});  // the packed weight's pad column is zero
  scale = scale.contiguous();
  torch::Tensor bias_f;
  const float* bp = nullptr;
  if (bias.has_value()) {
    bias_f = bias->to(at::kFloat).contiguous();
    bp = bias_f.data_ptr<float>();
  }
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  if (impl == kReference) {
    auto out = torch::empty({M, n}, x.options().dtype(at::kFloat));
    if (bf16) reference(x.data_ptr<at::BFloat16>(), M, K2, wp, scale.data_ptr<float>(), bp, n, out.data_ptr<float>());
    else reference(x.data_ptr<float>(), M, K2, wp, scale.data_ptr<float>(), bp, n, out.data_ptr<float>());
    return bf16 ? out.to(at::kBFloat16) : out;
  }
  // the vector paths' row scales: 2^8 (their widened values are the codes' times 2^-8), 16 per group
  auto sc = torch::zeros({groups * R}, scale.options());
  sc.narrow(0, 0, n).copy_(scale * 256.0f);
  const float* sp = sc.data_ptr<float>();
  if (impl == kAvx512Bf16) {
    auto out = torch::empty({M, n}, x.options());
    const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
    uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    // pairs of groups: the two share each broadcast of x
    at::parallel_for(0, (groups + 1) / 2, 1, [&](int64_t begin, int64_t end) {
      Scratch scratch(M > 8 ? 2 * K2 * 64 : 0);
      for (int64_t g = 2 * begin; g < std::min(2 * end, groups); g += 2)
        group_avx512_bf16(xp, M, K2, wp + g * K2 * 2 * R, sp + g * R, bp ? bp + g * R : nullptr,
                          std::min<int64_t>(2 * R, n - g * R), op + g * R, n, scratch.ptr);
    });
    return out;
  }
  const torch::Tensor xf = bf16 ? x.to(at::kFloat) : x;
  auto out = torch::empty({M, n}, x.options().dtype(at::kFloat));
  const float* xp = xf.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(M > 2 ? K2 * 128 : 0);
    for (int64_t g = begin; g < end; ++g)
      group_avx2(xp, M, K2, wp + g * K2 * 2 * R, sp + g * R, bp ? bp + g * R : nullptr,
                 std::min<int64_t>(R, n - g * R), op + g * R, n, scratch.ptr);
  });
  return bf16 ? out.to(at::kBFloat16) : out;
}

torch::Tensor fp8_widen(torch::Tensor packed, int64_t n, int64_t k, bool bf16) {
  using tgi_fp8::code_value;
  const int64_t size = packed_size(n, k), K2 = (k + 1) / 2, groups = (n + R - 1) / R;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() && packed.numel() == size,
              "packed weights do not match [", n, ", ", k, "] (see fp8_pack)");
  float values[256];
  uint16_t halves[256];  // the values as bfloat16: exact (at most 4 significant bits)
  for (int b = 0; b < 256; ++b) {
    values[b] = code_value(static_cast<uint8_t>(b));
    uint32_t u;
    std::memcpy(&u, &values[b], 4);
    halves[b] = static_cast<uint16_t>(u >> 16);
  }
  auto out = torch::empty({n, k}, packed.options().dtype(bf16 ? at::kBFloat16 : at::kFloat));
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  uint16_t* oh = bf16 ? reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()) : nullptr;
  float* of = bf16 ? nullptr : out.data_ptr<float>();
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t rows = std::min<int64_t>(R, n - g * R);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* c = wp + g * K2 * 2 * R + 2 * r;
        const int64_t row = (g * R + r) * k;
        if (bf16)
          for (int64_t col = 0; col < k; ++col) oh[row + col] = halves[c[(col / 2) * 2 * R + col % 2]];
        else
          for (int64_t col = 0; col < k; ++col) of[row + col] = values[c[(col / 2) * 2 * R + col % 2]];
      }
    }
  });
  return out;
}

std::vector<std::string> fp8_impls() {
  std::vector<std::string> out{"reference"};
  if (tgi_fp8::avx512_bf16_ready()) out.push_back("avx512-bf16");
  if (tgi_fp8::avx2_ready()) out.push_back("avx2");
  return out;
}
