// FP8 E4M3 ("e4m3fn", OCP FP8): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits. No infinities;
// 0x7f and 0xff are NaN; the largest finite magnitude is 448 (0x7e). Subnormals: code 0x01..0x07 =
// m * 2^-9. Encoding rounds to nearest, ties to even, and saturates every finite or infinite
// magnitude above 448 to +-448 (the behaviour of cvt.rn.satfinite.e4m3x2.f32); NaN encodes to 0x7f.
//
// Per-block scales of the FP8 KV cache: a stored value is decode(code) * scale, where
// scale = amax / 448 over the block's (one kv head's) values, so the largest one maps onto 448.
// Header-only and usable from host and device code (pure integer/float arithmetic, C++20).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVGATE_HD __host__ __device__ __forceinline__
#else
#define KVGATE_HD inline
#endif

namespace kvgate::cuda {

inline constexpr float kFp8E4M3Max = 448.0f;

KVGATE_HD uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
KVGATE_HD float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// Shifts `mant` right by `shift` (1..31) rounding to nearest, ties to even.
KVGATE_HD uint32_t ShiftRightRne(uint32_t mant, uint32_t shift) {
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

KVGATE_HD uint8_t EncodeE4M3(float x) {
  const uint32_t u = FloatBits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                  // NaN
  if (a > 0x43e00000u) return sign | 0x7e;           // > 448 (incl. inf): saturate
  const int exp = static_cast<int>(a >> 23) - 127;   // unbiased float exponent
  if (exp < -6) {                                    // below the smallest E4M3 normal, 2^-6
    if ((a >> 23) == 0) return sign;                 // float zero / subnormal (< 2^-126)
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);  // value in units of 2^-9
    if (shift >= 25) return sign;                    // < 0.5 unit (shift 25: [0.25, 0.5) unit)
    return sign | static_cast<uint8_t>(ShiftRightRne(mant, shift));  // 8 = smallest normal
  }
  uint32_t e = static_cast<uint32_t>(exp + 7);
  uint32_t m = ShiftRightRne(a & 0x7fffffu, 20);
  if (m == 8) {
    m = 0;
    ++e;
  }
  if (e > 15 || (e == 15 && m == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>((e << 3) | m);
}

KVGATE_HD float DecodeE4M3(uint8_t c) {
  const uint32_t e = (c >> 3) & 15u;
  const uint32_t m = c & 7u;
  float v;
  if (e == 15 && m == 7) {
    v = BitsFloat(0x7fc00000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * (1.0f / 512.0f);
  } else {
    v = BitsFloat(((e + 120u) << 23) | (m << 20));  // 2^(e-7) * (1 + m/8)
  }
  return (c & 0x80u) ? -v : v;
}

// The scale a block gets for values of magnitude up to `amax` (>= 0): amax / 448; a block of zeros
// gets scale 1 so that division stays finite.
KVGATE_HD float Fp8BlockScale(float amax) {
  return amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
}

// The scale a block has after new values of magnitude up to `amax` arrive, given the scale it had
// (0 for a block that starts empty): it only grows, so earlier codes stay in range after a rescale.
// 0 means unset: a block (so far) of zeros keeps scale 0, its codes are 0 (Fp8CodeFor), and the
// first nonzero values set the scale from their own amax. (A scale of 1 for zeros, as before,
// would have stayed the floor of every later scale: values of 0.01 then kept 2 of FP8's bits.)
KVGATE_HD float Fp8RaisedScale(float old_scale, float amax) {
  return amax / kFp8E4M3Max > old_scale ? amax / kFp8E4M3Max : old_scale;
}

}  // namespace kvgate::cuda
