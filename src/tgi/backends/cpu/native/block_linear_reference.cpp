// The CPU block linear's scalar reference path (any CPU).
#include <cstdint>
#include <cstring>

#include "block_linear.h"

namespace tgi_blocks {

// the value of (group, block)'s row r, column k as the kernel sees it (Q4_0 / Q5_0 offset applied)
inline float packed_value(const uint8_t* o, int64_t qtype, int r, int k) {
  if (qtype == kQ8_0) return static_cast<float>(static_cast<int8_t>(o[(k / 2) * 32 + 2 * r + k % 2]));
  const uint8_t byte = o[(k / 4) * 32 + 2 * r + k % 2];
  int q = (k % 4) < 2 ? (byte & 0x0F) : (byte >> 4);
  if (is_q5(qtype)) q |= static_cast<int>((q5_mask(o, k / 4, (k % 4) >= 2) >> (2 * r + k % 2)) & 1u) << 4;
  return static_cast<float>(q - q_offset(qtype));
}

// ---- reference path (any CPU) ----------------------------------------------------------------------------
void group_ref(const uint16_t* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed, int64_t qtype,
               int64_t g, float* y /* [M, R] */) {
  const int64_t nb = K / QK, vb = value_bytes(qtype), S = packed_stride(qtype);
  for (int64_t m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* o = packed + (g * nb + b) * S;
        uint16_t dh, mh;
        std::memcpy(&dh, o + vb + 2 * r, 2);
        std::memcpy(&mh, o + vb + 2 * R + 2 * r, 2);
        float dot = 0.0f;
        for (int k = 0; k < QK; ++k) dot += bf16_to_float(x[m * K + b * QK + k]) * packed_value(o, qtype, r, k);
        acc += half_to_float(dh) * dot + half_to_float(mh) * sx[m * nb + b];
      }
      y[m * R + r] = acc;
    }
}

}  // namespace tgi_blocks
