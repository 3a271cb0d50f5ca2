#include "kernels/cpu/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/quant.h"

namespace kvgate::kernels::cpu {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Shifts `mant` right by `shift` (1..31) rounding to nearest, ties to even.
uint32_t ShiftRightRne(uint32_t mant, uint32_t shift) {
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

// The f16 scale for a row whose largest magnitude is `amax`, mapped onto `top`: amax / top rounded
// up to an f16, so that no value of the row lands beyond `top` (where it would clip); 0 for a row
// of zeros, the largest finite f16 for a row too large for one (none is, in a model). Below
// f16's normal range (amax < 7.8e-3 for int8) the scale is coarser than amax / top, which costs
// at most the subnormal step, 6e-8 per value.
uint16_t RowScale(float amax, float top) {
  if (!(amax > 0.0f)) return 0;
  const float want = amax / top;
  uint16_t s = F32ToF16(want);
  if ((s & 0x7fffu) >= 0x7c00u) return 0x7bff;
  if (F16ToF32(s) < want) ++s;  // the next f16 up (positive halves order as their bits)
  return s;
}

float RowAbsMax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

uint8_t EncodeE4M3(float x) {
  const uint32_t u = Bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0;             // NaN: never a NaN code in the cache
  if (a > 0x43e00000u) return sign | 0x7e;   // > 448 (inf included): saturate
  const int exp = static_cast<int>(a >> 23) - 127;
  if (exp < -6) {                            // below the smallest E4M3 normal, 2^-6
    if ((a >> 23) == 0) return sign;         // float zero or subnormal
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);  // value in units of 2^-9
    if (shift >= 25) return sign;
    return sign | static_cast<uint8_t>(ShiftRightRne(mant, shift));
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

float DecodeE4M3(uint8_t code) {
  // E4M3's exponent and mantissa bits placed in an f16 (5 exponent bits, bias 15) are the value
  // times 2^-8, subnormals included; the vector kernels decode the same way with F16C.
  const uint16_t h = static_cast<uint16_t>(((code & 0x80u) << 8) | ((code & 0x7fu) << 7));
  return F16ToF32(h) * 256.0f;
}

uint16_t QuantizeKvRowInt8(const float* x, int n, int8_t* codes) {
  const uint16_t s16 = RowScale(RowAbsMax(x, n), 127.0f);
  const float s = F16ToF32(s16);
  for (int i = 0; i < n; ++i) {
    const float q = s > 0.0f ? std::nearbyint(x[i] / s) : 0.0f;
    codes[i] = static_cast<int8_t>(std::isnan(q) ? 0.0f : std::clamp(q, -127.0f, 127.0f));
  }
  return s16;
}

uint16_t QuantizeKvRowFp8(const float* x, int n, uint8_t* codes) {
  const uint16_t s16 = RowScale(RowAbsMax(x, n), 448.0f);
  const float s = F16ToF32(s16);
  for (int i = 0; i < n; ++i) codes[i] = s > 0.0f ? EncodeE4M3(x[i] / s) : 0;
  return s16;
}

void DequantizeKvRowInt8(const int8_t* codes, uint16_t scale, int n, float* out) {
  const float s = F16ToF32(scale);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(codes[i]) * s;
}

void DequantizeKvRowFp8(const uint8_t* codes, uint16_t scale, int n, float* out) {
  const float s = F16ToF32(scale);
  for (int i = 0; i < n; ++i) out[i] = DecodeE4M3(codes[i]) * s;
}

void ReadKvRow(const KvLayout& layout, const void* block, int64_t row, int64_t head, float* out) {
  const auto* b = static_cast<const std::byte*>(block);
  const int64_t kv_dim = layout.kv_heads * layout.head_dim;
  const int64_t elem = row * kv_dim + head * layout.head_dim;
  const int n = static_cast<int>(layout.head_dim);
  if (!KvFormatHasScales(layout.format)) {
    const auto* v = reinterpret_cast<const uint16_t*>(b) + elem;
    for (int i = 0; i < n; ++i) {
      out[i] = layout.format == KvFormat::kF16 ? F16ToF32(v[i]) : Bf16ToF32(v[i]);
    }
    return;
  }
  uint16_t scale;
  std::memcpy(&scale,
              b + layout.block_size * kv_dim + (row * layout.kv_heads + head) * sizeof(uint16_t),
              sizeof scale);
  if (layout.format == KvFormat::kInt8) {
    DequantizeKvRowInt8(reinterpret_cast<const int8_t*>(b) + elem, scale, n, out);
  } else {
    DequantizeKvRowFp8(reinterpret_cast<const uint8_t*>(b) + elem, scale, n, out);
  }
}

}  // namespace kvgate::kernels::cpu
