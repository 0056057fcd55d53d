// Dequantization of GGUF blocks straight from the file's layout into a dense float32 or bfloat16 weight, one
// pass per tensor (rows in parallel). The values are those of `gguf.quants.dequantize` bit for bit: each
// format's float32 operations in its order (d * q, d * q + m, (d * sc) * q - dmin * m), never fused into one
// rounding (the products are formed exactly in double and rounded to float32 before the sum), then
// bfloat16's round to nearest even for a bfloat16 output.
#include <torch/types.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

#include "block_linear.h"
#include "block_linear_kquant.h"
#include "ops.h"

namespace {
using namespace tgi_blocks;

// fl(a * q): exact in double (a float32, q a small integer), then one rounding to float32
inline float mul(float a, int q) { return static_cast<float>(static_cast<double>(a) * q); }

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// one 32-weight block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) -> out[32]
void block32(const uint8_t* blk, int64_t t, float* out) {
  const float d = half_to_float(load_u16(blk));
  if (t == kQ8_0) {
    for (int i = 0; i < 32; ++i) out[i] = mul(d, static_cast<int8_t>(blk[2 + i]));
    return;
  }
  const bool min = has_min(t);
  const float m = min ? half_to_float(load_u16(blk + 2)) : 0.0f;
  const uint8_t* qs = blk + (min ? 4 : 2) + (is_q5(t) ? 4 : 0);
  uint32_t qh = 0;
  if (is_q5(t)) std::memcpy(&qh, blk + (min ? 4 : 2), 4);
  const int offset = q_offset(t);
  for (int i = 0; i < 32; ++i) {
    int q = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
    q |= static_cast<int>((qh >> i) & 1u) << 4;
    out[i] = min ? mul(d, q) + m : mul(d, q - offset);
  }
}

// Q4_K / Q5_K: eight 6-bit scales and mins in 12 bytes (see block_linear_kquant_pack.cpp)
inline void scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// one 256-weight super-block (Q4_K, Q5_K, Q6_K) -> out[256]
void block256(const uint8_t* blk, int64_t t, float* out) {
  if (t == kQ6_K) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = half_to_float(load_u16(blk + 208));
    for (int v = 0; v < QKK; ++v) {
      const int h = v / 128, w = v % 128;
      const int lo = (ql[64 * h + w % 64] >> (4 * (w / 64))) & 0x0F;
      const int hi = (qh[32 * h + w % 32] >> (2 * (w / 32))) & 3;
      out[v] = mul(static_cast<float>(d * static_cast<float>(sc[v / 16])), (lo | (hi << 4)) - 32);
    }
    return;
  }
  const float d = half_to_float(load_u16(blk)), dmin = half_to_float(load_u16(blk + 2));
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;                           // Q5_K only
  const uint8_t* qs = blk + (t == kQ5_K ? 16 + 32 : 16);  // nibbles: sub-blocks 2p (low), 2p + 1 (high)
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min(scales, j, &sc, &m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
      if (t == kQ5_K) q |= ((qh[l] >> j) & 1) << 4;
      out[32 * j + l] = mul(ds, q) - dm;
    }
  }
}
}  // namespace

torch::Tensor block_dequantize(torch::Tensor raw, int64_t qtype, int64_t n, int64_t k, bool bf16) {
  TORCH_CHECK(raw.scalar_type() == at::kByte, "raw blocks must be uint8");
  const bool kquant = is_kquant(qtype);
  TORCH_CHECK(kquant || qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ8_0 || is_q5(qtype),
              "unknown block type ", qtype);
  const int64_t qk = kquant ? QKK : QK, rb = kquant ? kq_raw_bytes(qtype) : raw_block_bytes(qtype);
  TORCH_CHECK(k % qk == 0, "K = ", k, " is no multiple of the block size ", qk);
  TORCH_CHECK(raw.numel() == n * (k / qk) * rb, "raw blocks hold ", raw.numel(), " bytes, expected ",
              n * (k / qk) * rb);
  raw = raw.contiguous();
  auto out = torch::empty({n, k}, raw.options().dtype(bf16 ? at::kBFloat16 : at::kFloat));
  const uint8_t* src = raw.data_ptr<uint8_t>();
  void* dst = out.data_ptr();
  const int64_t nb = k / qk;
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    float buf[QKK];
    for (int64_t r = begin; r < end; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + (r * nb + b) * rb;
        if (kquant)
          block256(blk, qtype, buf);
        else
          block32(blk, qtype, buf);
        const int64_t at = r * k + b * qk;
        if (bf16) {
          uint16_t* o = static_cast<uint16_t*>(dst) + at;
          for (int64_t i = 0; i < qk; ++i) o[i] = float_to_bf16(buf[i]);
        } else {
          std::memcpy(static_cast<float*>(dst) + at, buf, qk * sizeof(float));
        }
      }
  });
  return out;
}
