// The CPU's weight-only float8 linear (tgi_fp8::...): `x @ (W * scale[:, None]).T + bias` with W float8_e4m3fn
// [N, K] kept as its bytes (one per weight) and x bfloat16 or float32.
//
// Layout (`fp8_pack`): groups of 16 weight rows (N padded to 16 with zero codes), and in each group, for every
// pair of columns p (K padded to even), 32 bytes: byte 2r + j is row r, column 2p + j. That is what one
// `vdpbf16ps` lane takes (a row's pair of columns), so the bytes go to the products without a shuffle.
//
// Widening: a code's byte, sign-extended to 16 bits and shifted left by 7 with bit 14 cleared, is the float16
// whose value is the code's times 2^-8, exactly, zeros and subnormals included (float16's 5-bit exponent holds
// float8's 4 bits, its subnormals float8's; F16C converts float16 subnormals exactly). From float16 the values
// go to float32 (AVX2) or to bfloat16 pairs (AVX512-BF16: every such value is a normal bfloat16, so the dot
// product, which flushes bfloat16 denormals, sees none). The 2^8 goes into the row scales.
// NaN codes (0x7f, 0xff) would widen to 480: `fp8_pack` refuses a weight holding any.
//
// Implementations: fp8_linear_avx512_bf16.cpp (bfloat16 x: products in `vdpbf16ps`, float32 sums; two groups
// of 16 rows at a time share each broadcast of x), fp8_linear_avx2.cpp (float32 sums of float32 products:
// float32 x, or bfloat16 x widened to float32 on CPUs without AVX512-BF16), and a scalar reference in
// fp8_linear.cpp. Each tiles the input rows (8 or 2 at a time): the first tile widens the codes and keeps
// them in a scratch buffer the next tiles read, so large inputs widen each weight once.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

// ops (fp8_linear.cpp): see tgi.backends.cpu.native for the Python side
torch::Tensor fp8_pack(torch::Tensor codes, int64_t n, int64_t k);
torch::Tensor fp8_linear(torch::Tensor x, torch::Tensor packed, torch::Tensor scale, int64_t n, int64_t k,
                         c10::optional<torch::Tensor> bias, int64_t impl);
torch::Tensor fp8_widen(torch::Tensor packed, int64_t n, int64_t k, bool bf16);
std::vector<std::string> fp8_impls();

namespace tgi_fp8 {

constexpr int64_t R = 16;  // weight rows per group

// the float8_e4m3fn value of a code (exact; NaN codes give 480 and are refused at packing)
inline float code_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float mag = e ? static_cast<float>(8 + m) * static_cast<float>(1 << e) / 1024.0f  // (1 + m/8) 2^(e-7)
                      : static_cast<float>(m) / 512.0f;                                    // m 2^-9
  return (b & 0x80) ? -mag : mag;
}

// out[m * ldo + r] = (sum over k of x[m, k] * code[r, k] * 2^-8) * sc[r] + bias[r] for `rows` weight rows from
// the group at `codes` (AVX512-BF16: up to 32, that group and the next; AVX2: up to 16) and M rows of x (K2
// pairs per row, K padded to even); sc = scale * 2^8 (padded to whole groups), bias may be null. `scratch`:
// 2 * K2 * 64 bytes (AVX512-BF16) or K2 * 128 (AVX2), 64-byte aligned.
void group_avx512_bf16(const uint16_t* x, int64_t M, int64_t K2, const uint8_t* codes, const float* sc,
                       const float* bias, int64_t rows, uint16_t* out, int64_t ldo, void* scratch);
void group_avx2(const float* x, int64_t M, int64_t K2, const uint8_t* codes, const float* sc, const float* bias,
                int64_t rows, float* out, int64_t ldo, void* scratch);
bool avx512_bf16_ready();
bool avx2_ready();

}  // namespace tgi_fp8
