// The K-quants' scalar reference path (bfloat16 x, any CPU) and their float32 path (float32 x: the models of
// CPUs without bfloat16 arithmetic). Layout: block_linear_kquant.h.
#include <cstdint>
#include <cstring>

#include "block_linear_kquant.h"

namespace tgi_blocks {

void group_ref_k(const uint16_t* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed, int64_t t,
                 int64_t g, float* y /* [M, R] */) {
  const int64_t ns = K / QKK, nb = K / QK, S = kq_stride(t), f = kq_format(t);
  const int per = f == kQ6_K ? 16 : 32;  // weights per scale
  for (int64_t m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) {
      float acc = 0.0f;
      for (int64_t s = 0; s < ns; ++s) {
        const uint8_t* o = packed + (g * ns + s) * S;
        for (int i = 0; i < QKK / per; ++i) {
          float dot = 0.0f;
          for (int k = i * per; k < (i + 1) * per; ++k) {
            const int q = kq_value(o, t, r, k) - (f == kQ6_K ? 32 : 0);
            dot += bf16_to_float(x[m * K + s * QKK + k]) * static_cast<float>(q);
          }
          float scale, min;
          kq_scale(o, t, r, i, &scale, &min);
          acc += scale * dot;
          if (f != kQ6_K) acc -= min * sx[m * nb + s * 8 + i];
        }
      }
      y[m * R + r] = acc;
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_KF32_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TGI_KF32_CLONES
#endif

// Per 32-weight sub-block, the 16 rows' integers widened to float32 (w[k][r]), multiplied with x exactly and
// summed in float32 (one sum per 16 columns for Q6_K), then scaled. One loop nest cloned for AVX-512, AVX2
// and plain x86-64 (picked at load time): the 16 rows of a group are one AVX-512 vector or two AVX2 ones.
TGI_KF32_CLONES void group_f32_k(const float* x, int64_t M, int64_t K, const float* sx, const uint8_t* packed,
                                 int64_t t, int64_t g, float* y /* [M, R] */) {
  const int64_t ns = K / QKK, nb = K / QK, S = kq_stride(t), f = kq_format(t);
  for (int64_t i = 0; i < M * R; ++i) y[i] = 0.0f;
  alignas(64) float w[QK][R];
  alignas(64) float sc0[R], sc1[R], mn[R];
  const float offset = f == kQ6_K ? 32.0f : 0.0f;
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* o = packed + (g * ns + s) * S;
    for (int j = 0; j < 8; ++j) {
      for (int c = 0; c < 8; ++c) {  // chunk c: lane 2r + i is row r, columns 4c + i (a) and 4c + 2 + i (b)
        for (int r = 0; r < R; ++r)
          for (int i = 0; i < 2; ++i) {
            const int lane = 2 * r + i;
            const uint8_t byte = o[256 * j + 32 * c + lane];
            const int qa = (byte & 0x0F) | kq_high(o, t, j, c, lane, 0);
            const int qb = (byte >> 4) | kq_high(o, t, j, c, lane, 1);
            w[4 * c + i][r] = static_cast<float>(qa) - offset;
            w[4 * c + 2 + i][r] = static_cast<float>(qb) - offset;
          }
      }
      for (int r = 0; r < R; ++r) {
        if (f == kQ6_K) {
          kq_scale(o, t, r, 2 * j, &sc0[r], &mn[r]);
          kq_scale(o, t, r, 2 * j + 1, &sc1[r], &mn[r]);
        } else {
          kq_scale(o, t, r, j, &sc0[r], &mn[r]);
          sc1[r] = sc0[r];
        }
      }
      for (int64_t m = 0; m < M; ++m) {
        const float* xb = x + m * K + s * QKK + 32 * j;
        alignas(64) float a0[R] = {}, a1[R] = {};
        for (int k = 0; k < 16; ++k)
          for (int r = 0; r < R; ++r) a0[r] += w[k][r] * xb[k];
        for (int k = 16; k < 32; ++k)
          for (int r = 0; r < R; ++r) a1[r] += w[k][r] * xb[k];
        const float sum = sx[m * nb + s * 8 + j];
        float* ym = y + m * R;
        if (f == kQ6_K) {
          for (int r = 0; r < R; ++r) ym[r] += sc0[r] * a0[r] + sc1[r] * a1[r];
        } else {
          for (int r = 0; r < R; ++r) ym[r] += sc0[r] * (a0[r] + a1[r]) - mn[r] * sum;
        }
      }
    }
  }
}

}  // namespace tgi_blocks
