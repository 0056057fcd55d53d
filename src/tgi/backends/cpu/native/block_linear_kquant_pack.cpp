// Packing of GGUF K-quant super-blocks (Q4_K, Q5_K, Q6_K) for the CPU block linear (the layouts:
// block_linear_kquant.h).
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

#include "block_linear_kquant.h"

namespace tgi_blocks {

namespace {

// one raw super-block decoded: the integers q[256], sub-block scales (8 for Q4_K/Q5_K, 16 for Q6_K, stored
// as the bytes they are) and mins, fp16 d and dmin
struct Super {
  uint8_t q[QKK];
  uint8_t sc[16];
  uint8_t m[8];
  uint16_t d, dmin;
};

// Q4_K / Q5_K: eight 6-bit scales and mins in 12 bytes; sub-blocks 0-3 in the low 6 bits of bytes 0-3
// (scales) and 4-7 (mins); sub-blocks 4-7 in the nibbles of bytes 8-11 plus the top 2 bits of bytes 0-7
void scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

void decode(const uint8_t* blk, int64_t t, Super& out) {
  if (t == kQ6_K) {
    const uint8_t *ql = blk, *qh = blk + 128, *sc = blk + 192;
    std::memcpy(&out.d, blk + 208, 2);
    out.dmin = 0;
    for (int i = 0; i < 16; ++i) out.sc[i] = sc[i];
    // weight v = 128 h + 64 s + i: low nibble (ql[64 h + i] >> 4 s); v = 128 h + 32 u + l: top two bits
    // (qh[32 h + l] >> 2 u) & 3
    for (int v = 0; v < QKK; ++v) {
      const int h = v / 128, w = v % 128;
      const int lo = (ql[64 * h + w % 64] >> (4 * (w / 64))) & 0x0F;
      const int hi = (qh[32 * h + w % 32] >> (2 * (w / 32))) & 3;
      out.q[v] = static_cast<uint8_t>(lo | (hi << 4));
    }
    return;
  }
  std::memcpy(&out.d, blk, 2);
  std::memcpy(&out.dmin, blk + 2, 2);
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;                           // Q5_K only
  const uint8_t* qs = blk + (t == kQ5_K ? 16 + 32 : 16);  // nibbles: sub-blocks 2p (low), 2p + 1 (high)
  for (int j = 0; j < 8; ++j) {
    scale_min(scales, j, &out.sc[j], &out.m[j]);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
      if (t == kQ5_K) q |= ((qh[l] >> j) & 1) << 4;
      out.q[32 * j + l] = static_cast<uint8_t>(q);
    }
  }
}

// the high bits of qa (half 0) and qb (half 1) at lane `lane` of chunk c in sub-block j's high bytes `p`
void pack_high(int64_t t, int c, int lane, int qa, int qb, uint8_t* p) {
  const int halves[2] = {qa, qb};
  for (int h = 0; h < 2; ++h) {
    const int q = halves[h];
    switch (t) {
      case kQ5_K:
        reinterpret_cast<uint32_t*>(p + 8 * c)[h] |= static_cast<uint32_t>((q >> 4) & 1) << lane;
        break;
      case kQ6_K:
        reinterpret_cast<uint32_t*>(p + 16 * c)[h] |= static_cast<uint32_t>((q >> 4) & 1) << lane;
        reinterpret_cast<uint32_t*>(p + 16 * c + 8)[h] |= static_cast<uint32_t>((q >> 5) & 1) << lane;
        break;
      case kQ5_KF:
        p[32 * (c / 4) + lane] |= static_cast<uint8_t>(((q >> 4) & 1) << (2 * (c % 4) + h));
        break;
      case kQ6_KF:
        p[32 * (c / 2) + lane] |= static_cast<uint8_t>(((q >> 4) & 3) << (2 * (2 * (c % 2) + h)));
        break;
      default:
        break;
    }
  }
}

}  // namespace

void pack_k(const uint8_t* raw, int64_t t, int64_t N, int64_t K, uint8_t* out) {
  const int64_t ns = K / QKK, rb = kq_raw_bytes(t), S = kq_stride(t), H = kq_header(t);
  const int64_t f = kq_format(t), per = kq_high_bytes(t) / 8;
  const int64_t groups = (N + R - 1) / R;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    Super sb;
    for (int64_t g = begin; g < end; ++g)
      for (int64_t s = 0; s < ns; ++s) {
        uint8_t* o = out + (g * ns + s) * S;
        std::memset(o, 0, S);
        uint16_t* d = reinterpret_cast<uint16_t*>(o + H);
        uint8_t* scales = o + H + 4 * R;
        for (int64_t r = 0; r < R && g * R + r < N; ++r) {
          decode(raw + (g * R + r) * (ns * rb) + s * rb, f, sb);
          d[r] = sb.d;
          d[R + r] = sb.dmin;
          for (int i = 0; i < (f == kQ6_K ? 16 : 8); ++i) scales[i * R + r] = sb.sc[i];
          if (f != kQ6_K)
            for (int j = 0; j < 8; ++j) scales[8 * R + j * R + r] = sb.m[j];
          for (int j = 0; j < 8; ++j)
            for (int c = 0; c < 8; ++c)
              for (int i = 0; i < 2; ++i) {
                const int lane = static_cast<int>(2 * r + i);
                const int qa = sb.q[32 * j + 4 * c + i], qb = sb.q[32 * j + 4 * c + 2 + i];
                o[256 * j + 32 * c + lane] = static_cast<uint8_t>((qa & 0x0F) | ((qb & 0x0F) << 4));
                pack_high(t, c, lane, qa, qb, o + kLowBytes + per * j);
              }
        }
      }
  });
}

}  // namespace tgi_blocks
