// Packing of GGUF blocks for the CPU block linear (the layout: block_linear.h).
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

#include "block_linear.h"

namespace tgi_blocks {

// the stored integer of weight k (0..31) of one raw block (Q4_0 without its -8 offset)
inline int raw_value(const uint8_t* blk, int64_t qtype, int k) {
  if (qtype == kQ8_0) return static_cast<int8_t>(blk[2 + k]);
  const uint8_t* qs = blk + (qtype == kQ4_1 ? 4 : 2);
  return k < 16 ? (qs[k] & 0x0F) : (qs[k - 16] >> 4);
}

// ---- packing -----------------------------------------------------------------------------------------------
// Q4: 8 chunks of 32 bytes per group and block; byte w of chunk c holds row w/2: low nibble column
// 4c + w%2, high nibble column 4c + 2 + w%2. Q8: 16 chunks of 32 bytes; byte w of chunk p: row w/2,
// column 2p + w%2. Then d[16], m[16] as fp16 (m = 0 but for Q4_1). Rows past N are zero.
void pack(const uint8_t* raw, int64_t qtype, int64_t N, int64_t K, uint8_t* out) {
  const int64_t nb = K / QK, rb = raw_block_bytes(qtype), vb = value_bytes(qtype), S = packed_stride(qtype);
  const int64_t groups = (N + R - 1) / R;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g)
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* o = out + (g * nb + b) * S;
        std::memset(o, 0, S);
        uint16_t* d = reinterpret_cast<uint16_t*>(o + vb);
        uint16_t* m = d + R;
        for (int64_t r = 0; r < R && g * R + r < N; ++r) {
          const uint8_t* blk = raw + (g * R + r) * (nb * rb) + b * rb;
          std::memcpy(&d[r], blk, 2);
          if (qtype == kQ4_1) std::memcpy(&m[r], blk + 2, 2);
          for (int j = 0; j < 2; ++j) {
            if (qtype == kQ8_0) {
              for (int p = 0; p < 16; ++p)
                o[p * 32 + 2 * r + j] = static_cast<uint8_t>(raw_value(blk, qtype, 2 * p + j));
            } else {
              for (int c = 0; c < 8; ++c)
                o[c * 32 + 2 * r + j] = static_cast<uint8_t>(raw_value(blk, qtype, 4 * c + j) |
                                                             (raw_value(blk, qtype, 4 * c + 2 + j) << 4));
            }
          }
        }
      }
  });
}

}  // namespace tgi_blocks
