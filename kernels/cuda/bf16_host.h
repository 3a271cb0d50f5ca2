// Host-side bf16 and f16 conversions for code that must not include CUDA headers (references, tests).
// Bit patterns are uint16_t, identical to __nv_bfloat16 / __half storage.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvgate::cuda {

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest, ties to even (what __float2bfloat16_rn does); NaN stays a quiet NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

// IEEE binary16 -> float, exact for every finite half; inf and NaN preserved.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 31u;
  uint32_t m = h & 0x3ffu;
  uint32_t u;
  if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    if (m == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int ex = -1;
      do {
        m <<= 1;
        ++ex;
      } while ((m & 0x400u) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - ex) << 23) | ((m & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace kvgate::cuda
