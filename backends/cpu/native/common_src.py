"""C++ helpers shared by the CPU's native kernels (placed first in the compiled source)."""

CPP_SOURCE = r"""
#include <cstdint>
#include <cstring>

namespace tgi_common {

// exp(x) for x <= 0 (Cephes' expf polynomial after range reduction; ~1 ulp), written so that the
// compiler vectorises it (glibc's expf is only vectorised under -ffast-math).
inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  float t = x * 1.44269504088896341f;
  float r = (t + 12582912.0f) - 12582912.0f;  // round to nearest integer
  float y = x - r * 0.693359375f;
  y = y + r * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * y + 1.3981999507e-3f;
  p = p * y + 8.3334519073e-3f;
  p = p * y + 4.1665795894e-2f;
  p = p * y + 1.6666665459e-1f;
  p = p * y + 5.0000001201e-1f;
  float e = p * y * y + y + 1.0f;
  int32_t bits = (static_cast<int32_t>(r) + 127) << 23;
  float s;
  std::memcpy(&s, &bits, sizeof(s));
  return e * s;
}

}  // namespace tgi_common
"""
