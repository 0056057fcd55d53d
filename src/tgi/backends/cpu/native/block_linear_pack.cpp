// Packing of GGUF blocks for the CPU block linear (the layout: block_linear.h).
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

#include "block_linear.h"

namespace tgi_blocks {

// the stored integer of weight k (0..31) of one raw block (Q4_0 / Q5_0 without their -8 / -16 offset)
inline int raw_value(const uint8_t* blk, int64_t qtype, int k) {
  if (qtype == kQ8_0) return static_cast<int8_t>(blk[2 + k]);
  const int64_t head = has_min(qtype) ? 4 : 2;  // fp16 d (and m)
  const uint8_t* qs = blk + head + (is_q5(qtype) ? 4 : 0);
  int q = k < 16 ? (qs[k] & 0x0F) : (qs[k - 16] >> 4);
  if (is_q5(qtype)) {  // Q5: the fifth bits of the 32 weights, a little-endian uint32 after d (and m)
    uint32_t qh;
    std::memcpy(&qh, blk + head, 4);
    q |= static_cast<int>((qh >> k) & 1u) << 4;
  }
  return q;
}

// ---- packing -----------------------------------------------------------------------------------------------
// Q4 (and Q5's low bits): 8 chunks of 32 bytes per group and block; byte w of chunk c holds row w/2: low
// nibble column 4c + w%2, high nibble column 4c + 2 + w%2 (Q5: then the chunks' fifth-bit masks). Q8: 16 chunks of 32 bytes; byte w of chunk p: row w/2,
// column 2p + w%2. Then d[16], m[16] as fp16 (m = 0 but for Q4_1 / Q5_1). Rows past N are zero.
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
          if (has_min(qtype)) std::memcpy(&m[r], blk + 2, 2);
          for (int j = 0; j < 2; ++j) {
            if (qtype == kQ8_0) {
              for (int p = 0; p < 16; ++p)
                o[p * 32 + 2 * r + j] = static_cast<uint8_t>(raw_value(blk, qtype, 2 * p + j));
            } else {
              for (int c = 0; c < 8; ++c) {
                const int qa = raw_value(blk, qtype, 4 * c + j), qb = raw_value(blk, qtype, 4 * c + 2 + j);
                o[c * 32 + 2 * r + j] = static_cast<uint8_t>((qa & 0x0F) | ((qb & 0x0F) << 4));
                if (is_q5(qtype)) {  // fifth bits: lane 2r + j of chunk c's masks (a: column 4c + j, b: 4c + 2 + j)
                  uint32_t* masks = reinterpret_cast<uint32_t*>(o + R * QK / 2 + 8 * c);
                  masks[0] |= static_cast<uint32_t>(qa >> 4) << (2 * r + j);
                  masks[1] |= static_cast<uint32_t>(qb >> 4) << (2 * r + j);
                }
              }
            }
          }
        }
      }
  });
}

}  // namespace tgi_blocks
