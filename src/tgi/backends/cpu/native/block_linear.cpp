// The CPU linear over GGUF block-quantized weights: the ops `block_pack`, `block_linear` (which picks an
// implementation) and `block_impls`. The layout and the implementations: block_linear.h.
#include <torch/types.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "block_linear.h"
#include "block_linear_kquant.h"
#include "ops.h"

namespace {
bool has_avx2_int8() {
#if defined(__x86_64__)
  return tgi_blocks::has_avx2_fma();
#else
  return false;
#endif
}

// the formats of 32-weight blocks the avx2-int8 path takes (block_linear_q8_avx2.cpp); it takes the K-quants too
bool int8_q32(int64_t qtype) {
  using namespace tgi_blocks;
  return qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ8_0;
}
bool avx2_int8_type(int64_t qtype) { return int8_q32(qtype) || tgi_blocks::is_kquant(qtype); }
constexpr const char* kAvx2Int8Refusal =
    "the avx2-int8 block kernel needs AVX2, FMA and F16C and computes Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K";

// the block type's check of K, and the packed size of [n, k] (groups of 16 rows)
int64_t packed_bytes(int64_t qtype, int64_t n, int64_t k) {
  using namespace tgi_blocks;
  TORCH_CHECK(qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ8_0 || is_q5(qtype) || is_kquant(qtype),
              "unknown block type ", qtype);
  TORCH_CHECK(n > 0, "N must be positive, got ", n);
  const int64_t groups = (n + R - 1) / R;
  if (is_kquant(qtype)) {
    TORCH_CHECK(k > 0 && k % QKK == 0, "K-quant weights need K a positive multiple of 256, got ", k);
    return groups * (k / QKK) * kq_stride(qtype);
  }
  TORCH_CHECK(k > 0 && k % QK == 0, "K must be a positive multiple of 32, got ", k);
  return groups * (k / QK) * packed_stride(qtype);
}
}  // namespace

torch::Tensor block_pack(torch::Tensor raw, int64_t qtype, int64_t n, int64_t k) {
  using namespace tgi_blocks;
  const int64_t size = packed_bytes(qtype, n, k);
  TORCH_CHECK(raw.scalar_type() == at::kByte, "raw blocks must be uint8");
  raw = raw.contiguous();
  if (is_kquant(qtype)) {
    const int64_t expected = n * (k / QKK) * kq_raw_bytes(qtype);
    TORCH_CHECK(raw.numel() == expected, "raw blocks hold ", raw.numel(), " bytes, expected ", expected);
    auto out = torch::empty({size}, raw.options());
    pack_k(raw.data_ptr<uint8_t>(), qtype, n, k, out.data_ptr<uint8_t>());
    return out;
  }
  TORCH_CHECK(raw.numel() == n * (k / QK) * raw_block_bytes(qtype), "raw blocks hold ", raw.numel(),
              " bytes, expected ", n * (k / QK) * raw_block_bytes(qtype));
  const int64_t groups = (n + R - 1) / R;
  auto out = torch::empty({groups * (k / QK) * packed_stride(qtype)}, raw.options());
  pack(raw.data_ptr<uint8_t>(), qtype, n, k, out.data_ptr<uint8_t>());
  return out;
}

namespace {
// the sum of each of x's `count` blocks of 32, in float32: the mins' term (Q4_1, Q5_1, Q4_K, Q5_K)
std::vector<float> block_sums(const float* x, int64_t count) {
  std::vector<float> sx(count);
  for (int64_t i = 0; i < count; ++i) {
    float s = 0.0f;
    for (int j = 0; j < tgi_blocks::QK; ++j) s += x[i * tgi_blocks::QK + j];
    sx[i] = s;
  }
  return sx;
}

// The same for bfloat16 inputs on the vector unit: they run on the calling thread before the products' threads
// start, and the scalar loop (bfloat16 widened one value at a time) took ~2 ms of the default model's batch-32
// decode step on the AMD EPYC Zen 4 while the other thread waited.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
std::vector<float> block_sums_bf16(const uint16_t* x, int64_t count) {
  std::vector<float> sx(count);
  for (int64_t i = 0; i < count; ++i) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < tgi_blocks::QK; ++j) s += tgi_blocks::bf16_to_float(x[i * tgi_blocks::QK + j]);
    sx[i] = s;
  }
  return sx;
}

#if defined(__x86_64__)
// the threads split the output groups (never a row's sums): each thread computes a group's float32 sums
// [M, R] into its own buffer with `compute(g, y)` and hands them to `store(g, y)`
template <typename Store, typename Compute>
void for_each_group(int64_t M, int64_t groups, Store& store, Compute compute) {
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> y(M * tgi_blocks::R);
    for (int64_t g = begin; g < end; ++g) {
      compute(g, y.data());
      store(g, y.data());
    }
  });
}

// the K-quants on int8 inputs with AVX2 (block_linear_kquant_avx2.cpp): x (float32 or bfloat16 bits) quantized
// per row and 256 columns, then each group's float32 sums [M, R] handed to `store(g, y)`
template <typename X, typename Store>
void kquant_int8_avx2(const X* xp, int64_t M, int64_t k, const uint8_t* wp, int64_t qtype, int64_t groups,
                      Store store) {
  using namespace tgi_blocks;
  const Int8Rows xi(xp, M, k, QKK);
  for_each_group(M, groups, store, [&](int64_t g, float* y) {
    group_avx2_k(xi.q.data(), xi.dx.data(), xi.bsum.data(), M, k, wp, qtype, g, y);
  });
}

// Q4_0, Q4_1 and Q8_0 on int8 inputs with AVX2 (block_linear_q8_avx2.cpp): x (float32 or bfloat16 bits)
// quantized per row and block of 32 columns, then each group's float32 sums [M, R] handed to `store(g, y)`
template <typename X, typename Store>
void q32_int8_avx2(const X* xp, int64_t M, int64_t k, const uint8_t* wp, int64_t qtype, int64_t groups,
                   Store store) {
  using namespace tgi_blocks;
  const int64_t nb = k / QK;
  std::vector<uint32_t> xw(M * k / 2);
  std::vector<float> dx(M * nb);
  std::vector<int32_t> bsum(M * nb);
  quantize_rows_q8_32(xp, M, k, qtype, xw.data(), dx.data(), bsum.data());
  for_each_group(M, groups, store, [&](int64_t g, float* y) {
    group_q8_avx2(xw.data(), dx.data(), bsum.data(), M, k, wp, qtype, g, y);
  });
}

// either int8 path on AVX2, by the block type
template <typename X, typename Store>
void int8_avx2(const X* xp, int64_t M, int64_t k, const uint8_t* wp, int64_t qtype, int64_t groups,
               Store store) {
  if (tgi_blocks::is_kquant(qtype)) kquant_int8_avx2(xp, M, k, wp, qtype, groups, store);
  else q32_int8_avx2(xp, M, k, wp, qtype, groups, store);
}
#endif

// x float32 [M, k] -> out float32 [M, n] (see block_linear_f32.cpp)
torch::Tensor block_linear_f32(const torch::Tensor& x, const torch::Tensor& packed, int64_t qtype, int64_t n,
                               int64_t k, const c10::optional<torch::Tensor>& bias, int64_t impl,
                               torch::Tensor out) {
  using namespace tgi_blocks;
  const int64_t M = x.size(0), nb = k / QK, groups = (n + R - 1) / R;
  const float* xp = x.data_ptr<float>();
  torch::Tensor bias_f;
  const float* bp = nullptr;
  if (bias.has_value()) {
    bias_f = bias->to(at::kFloat).contiguous();
    bp = bias_f.data_ptr<float>();
  }
  float* op = out.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
#if defined(__x86_64__)
  const bool vector = impl == 0 && has_avx2_fma();  // impl 1: the plain loops, the reference
  // auto: the K-quants on int8 inputs where the CPU has AVX2 and no AVX512-VNNI (block_linear_kquant_avx2.cpp;
  // the row limits are linear.py's). Q4_0, Q4_1 and Q8_0 take int8 inputs only when asked (impl 5,
  // block_linear_q8_avx2.cpp): "auto" keeps their exact-input product, the float32 parity with transformers
  // that the default model (Q4_1) is held to
  const bool auto_int8 = vector && !has_avx512_vnni() && tgi_blocks::is_kquant(qtype);
  if (avx2_int8_type(qtype) && (impl == 5 || auto_int8)) {
    int8_avx2(xp, M, k, wp, qtype, groups, [&](int64_t g, const float* y) {
      const int64_t rows = std::min<int64_t>(R, n - g * R);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < rows; ++r) op[m * n + g * R + r] = y[m * R + r] + (bp ? bp[g * R + r] : 0.0f);
    });
    return out;
  }
#endif
  const std::vector<float> sx = block_sums(xp, M * nb);
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> y(M * R);
    for (int64_t g = begin; g < end; ++g) {
      if (is_kquant(qtype)) {
        group_f32_k(xp, M, k, sx.data(), wp, qtype, g, y.data());
      } else {
#if defined(__x86_64__)
      if (vector) group_f32_avx2(xp, M, k, sx.data(), wp, qtype, g, y.data());
      else group_f32(xp, M, k, sx.data(), wp, qtype, g, y.data());
#else
      group_f32(xp, M, k, sx.data(), wp, qtype, g, y.data());
#endif
      }
      const int64_t rows = std::min<int64_t>(R, n - g * R);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < rows; ++r) op[m * n + g * R + r] = y[m * R + r] + (bp ? bp[g * R + r] : 0.0f);
    }
  });
  return out;
}
}  // namespace

torch::Tensor block_linear(torch::Tensor x, torch::Tensor packed, int64_t qtype, int64_t n, int64_t k,
                           c10::optional<torch::Tensor> bias, int64_t impl) {
  using namespace tgi_blocks;
  const int64_t size = packed_bytes(qtype, n, k);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == k, "x must be [M, ", k, "]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat,
              "block_linear takes bfloat16 or float32 inputs");
  const int64_t nb = k / QK, groups = (n + R - 1) / R;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
                  packed.numel() == size,
              "packed weights do not match [", n, ", ", k, "] (see block_pack)");
  if (bias.has_value()) TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n, "bias must be [", n, "]");
  x = x.contiguous();
  const int64_t M = x.size(0);
  auto out = torch::empty({M, n}, x.options());
  if (M == 0) return out;
  if (x.scalar_type() == at::kFloat) {
    TORCH_CHECK(impl <= 1 || impl == 5,
                "float32 inputs have one implementation (auto), besides reference and avx2-int8 (int8 inputs)");
    TORCH_CHECK(impl != 5 || (has_avx2_int8() && avx2_int8_type(qtype)), kAvx2Int8Refusal);
    return block_linear_f32(x, packed, qtype, n, k, bias, impl, out);
  }
  const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  torch::Tensor bias_f;
  const float* bp = nullptr;
  if (bias.has_value()) {
    bias_f = bias->to(at::kFloat).contiguous();
    bp = bias_f.data_ptr<float>();
  }
  uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  // impl: 0 the fastest this CPU has, 1 scalar reference, 2 AVX512-BF16, 3 AMX, 4 AVX512-VNNI (K-quants,
  // int8 inputs), 5 AVX2 (K-quants, Q4_0, Q4_1, Q8_0; int8 inputs; bfloat16 x only when asked for)
  TORCH_CHECK(impl >= 0 && impl <= 5, "unknown implementation ", impl);
  TORCH_CHECK(impl != 5 || (has_avx2_int8() && avx2_int8_type(qtype)), kAvx2Int8Refusal);
  // the AVX-512 K-quant paths read the high bits as lane masks; weights packed with fields (for CPUs without
  // them) take the scalar reference there under "auto"
  TORCH_CHECK((impl != 2 && impl != 4) || !kq_fields(qtype), "the AVX-512 K-quant kernels read weights packed "
              "with lane masks, not fields (block_pack's layout for CPUs without AVX512-BF16)");
#if defined(__x86_64__)
  if (impl == 5) {
    int8_avx2(xp, M, k, wp, qtype, groups, [&](int64_t g, const float* y) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < std::min<int64_t>(R, n - g * R); ++r)
          op[m * n + g * R + r] = float_to_bf16(y[m * R + r] + (bp ? bp[g * R + r] : 0.0f));
    });
    return out;
  }
  TORCH_CHECK(impl != 2 || has_avx512_bf16(), "this CPU has no AVX512-BF16");
  TORCH_CHECK(impl != 3 || amx_ready(), "AMX is not available here");
  // Q5_0, Q5_1 and the K-quants have no AMX path (see src/tgi/backends/cpu/README.md): "auto" takes AVX512-BF16
  const bool amx_type = qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ8_0;
  TORCH_CHECK(impl != 3 || amx_type, "the AMX block kernel computes Q4_0, Q4_1 and Q8_0, not Q5_0, Q5_1 or K-quants");
  // auto: one or two rows read the weights fastest on the AVX512-BF16 path; more rows share each
  // dequantized tile on AMX (decode step of the default model, 2 cores: batch 1 17.4 vs 21.5 ms on AMX,
  // batch 8 24.6 ms on AMX vs 30.2)
  const bool few_rows = M <= 2 && has_avx512_bf16();
  if (impl == 3 || (impl == 0 && !few_rows && amx_ready() && amx_type)) {
    const int64_t pass_rows = 48;  // three 16-row tiles of x per dequantized weight tile
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      std::unique_ptr<float[]> y(new float[pass_rows * (end - begin) * R]);  // every element is stored first
      for (int64_t m0 = 0; m0 < M; m0 += pass_rows) {
        const int64_t mt = std::min<int64_t>(pass_rows, M - m0);
        const int64_t mts[3] = {std::min<int64_t>(16, mt), std::min<int64_t>(16, std::max<int64_t>(0, mt - 16)),
                                std::max<int64_t>(0, mt - 32)};
        const uint16_t* xm = xp + m0 * k;
        if (mt > 32) groups_amx<3>(xm, k, mts, wp, qtype, begin, end, y.get());
        else if (mt > 16) groups_amx<2>(xm, k, mts, wp, qtype, begin, end, y.get());
        else groups_amx<1>(xm, k, mts, wp, qtype, begin, end, y.get());
        const int64_t width = (end - begin) * R, col0 = begin * R;
        store_rows_bf16(y.get(), width, bp ? bp + col0 : nullptr, mt, std::min(width, n - col0),
                        op + m0 * n + col0, n);
      }
    });
    return out;
  }
  TORCH_CHECK(impl != 4 || has_avx512_vnni(), "this CPU has no AVX512-VNNI with VBMI and BF16 (the int8 path)");
  TORCH_CHECK(impl != 4 || is_kquant(qtype), "the int8 (AVX512-VNNI) block kernel computes Q4_K, Q5_K and Q6_K");
  // auto: the K-quants on int8 inputs (a scale per 32 columns), as llama.cpp computes them, where the CPU has
  // VNNI (a decode step of the 1B-class Q4_K_M model reads its weights 2-5x faster per core than on the
  // bfloat16 path)
  if (is_kquant(qtype) && !kq_fields(qtype) && (impl == 4 || (impl == 0 && has_avx512_vnni()))) {
    const Int8Rows xi(xp, M, k, kVnniScaleCols);
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> y(M * R);
      for (int64_t g = begin; g < end; ++g) {
        group_vnni_k(xi.q.data(), xi.dx.data(), xi.bsum.data(), M, k, wp, qtype, g, y.data());
        store_rows_bf16(y.data(), R, bp ? bp + g * R : nullptr, M, std::min<int64_t>(R, n - g * R), op + g * R, n);
      }
    });
    return out;
  }
  const bool fast = (impl == 2 || (impl == 0 && has_avx512_bf16())) && !kq_fields(qtype);
#else
  TORCH_CHECK(impl < 2, "no vector implementation on this architecture");
  const bool fast = false;
#endif
  const std::vector<float> sx = block_sums_bf16(xp, M * nb);  // (the AMX path needs none)
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> y(M * R);
    for (int64_t g = begin; g < end; ++g) {
      const int64_t rows = std::min<int64_t>(R, n - g * R);
#if defined(__x86_64__)
      if (fast && is_kquant(qtype)) {
        group_avx512_k(xp, M, k, sx.data(), wp, qtype, g, y.data());
        store_rows_bf16(y.data(), R, bp ? bp + g * R : nullptr, M, rows, op + g * R, n);
        continue;
      }
      if (fast) {
        group_avx512(xp, M, k, sx.data(), wp, qtype, g, y.data());
        store_rows_bf16(y.data(), R, bp ? bp + g * R : nullptr, M, rows, op + g * R, n);
        continue;
      }
#endif
      if (is_kquant(qtype)) group_ref_k(xp, M, k, sx.data(), wp, qtype, g, y.data());
      else group_ref(xp, M, k, sx.data(), wp, qtype, g, y.data());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t col = g * R + r;
          op[m * n + col] = float_to_bf16(y[m * R + r] + (bp ? bp[col] : 0.0f));
        }
    }
  });
  return out;
}

std::vector<std::string> block_impls() {
  using namespace tgi_blocks;
  std::vector<std::string> out{"reference"};
#if defined(__x86_64__)
  if (has_avx512_bf16()) out.push_back("avx512-bf16");
  if (amx_ready()) out.push_back("amx");
  if (has_avx512_vnni()) out.push_back("avx512-vnni");
#endif
  if (has_avx2_int8()) out.push_back("avx2-int8");
  return out;
}
