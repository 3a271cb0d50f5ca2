#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvgate::kernels::cpu {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24 is exact in f32
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (mant << 13));
  return FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t F32ToF16(float f) {
  const uint32_t x = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: inf
  if (ax < 0x38800000u) {                        // below the smallest normal half
    const float scaled = FromBits(ax) * 16777216.0f;  // exact: * 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t h = (ax >> 13) - (112u << 10);
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float Bf16ToF32(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

uint16_t F32ToBf16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void DequantizeQ4_1(const BlockQ4_1* blocks, size_t n, float* out) {
  for (size_t b = 0; b < n / kQBlock; ++b) {
    const float d = F16ToF32(blocks[b].d), m = F16ToF32(blocks[b].m);
    for (int j = 0; j < 16; ++j) {
      out[b * 32 + j] = static_cast<float>(blocks[b].qs[j] & 0x0f) * d + m;
      out[b * 32 + j + 16] = static_cast<float>(blocks[b].qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeQ8_0(const BlockQ8_0* blocks, size_t n, float* out) {
  for (size_t b = 0; b < n / kQBlock; ++b) {
    const float d = F16ToF32(blocks[b].d);
    for (int j = 0; j < 32; ++j) out[b * 32 + j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

void DequantizeQ8A(const BlockQ8A* blocks, size_t n, float* out) {
  for (size_t b = 0; b < n / kQBlock; ++b) {
    for (int j = 0; j < 32; ++j) out[b * 32 + j] = static_cast<float>(blocks[b].qs[j]) * blocks[b].d;
  }
}

void QuantizeRowQ8AScalar(const float* x, size_t k, BlockQ8A* out) {
  for (size_t b = 0; b < k / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      // nearbyint = round-half-even, the same rounding as the AVX2 path.
      const int q = static_cast<int>(std::nearbyint(xb[j] * id));
      out[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    // Scale and sum go through f16, like ggml's q8_1 blocks, so results track llama.cpp's.
    out[b].d = F16ToF32(F32ToF16(d));
    out[b].s = F16ToF32(F32ToF16(d * static_cast<float>(sum)));
  }
}

void QuantizeRowQ4_1(const float* x, size_t k, BlockQ4_1* out) {
  for (size_t b = 0; b < k / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    float lo = xb[0], hi = xb[0];
    for (int j = 1; j < 32; ++j) lo = std::min(lo, xb[j]), hi = std::max(hi, xb[j]);
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = F32ToF16(d);
    out[b].m = F32ToF16(lo);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>((xb[j] - lo) * id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((xb[j + 16] - lo) * id + 0.5f));
      out[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeRowQ8_0(const float* x, size_t k, BlockQ8_0* out) {
  for (size_t b = 0; b < k / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = F32ToF16(d);
    for (int j = 0; j < 32; ++j) out[b].qs[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
  }
}

}  // namespace kvgate::kernels::cpu
