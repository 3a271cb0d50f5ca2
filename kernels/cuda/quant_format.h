// GGUF Q4_1 / Q8_0 block layouts as the CUDA dequantizers read them, and the exact host reference
// of what they produce. Same bytes as kernels/cpu/quant.h (BlockQ4_1 / BlockQ8_0); kept separate so
// that nvcc never compiles CPU-backend headers.
//   Q4_1 (20 bytes / 32 values): f16 d, f16 m, 16 bytes; byte j = element j (low nibble) | element
//        j+16 (high nibble); value = q * d + m.
//   Q8_0 (34 bytes / 32 values): f16 d, 32 int8; value = q * d.
// The GPU computes each value in float as fma(q, d, m) (Q4_1) or q * d (Q8_0) and rounds once to
// bf16; the reference below does the same, so GPU and reference agree bit for bit.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/bf16_host.h"

namespace kvgate::cuda {

inline constexpr int kQuantBlock = 32;
inline constexpr int kQ4_1BlockBytes = 20;
inline constexpr int kQ8_0BlockBytes = 34;

// out [n] (bf16 bits) from n / 32 Q4_1 blocks at `blocks`. REQUIRES: n % 32 == 0.
inline void DequantQ4_1Reference(const uint8_t* blocks, size_t n, uint16_t* out) {
  for (size_t b = 0; b < n / kQuantBlock; ++b) {
    const uint8_t* p = blocks + b * kQ4_1BlockBytes;
    uint16_t dh, mh;
    std::memcpy(&dh, p, 2);
    std::memcpy(&mh, p + 2, 2);
    const float d = HalfToFloat(dh), m = HalfToFloat(mh);
    for (int j = 0; j < 16; ++j) {
      const float lo = static_cast<float>(p[4 + j] & 15), hi = static_cast<float>(p[4 + j] >> 4);
      out[b * kQuantBlock + j] = FloatToBf16(std::fma(lo, d, m));
      out[b * kQuantBlock + j + 16] = FloatToBf16(std::fma(hi, d, m));
    }
  }
}

// out [n] (bf16 bits) from n / 32 Q8_0 blocks. REQUIRES: n % 32 == 0.
inline void DequantQ8_0Reference(const uint8_t* blocks, size_t n, uint16_t* out) {
  for (size_t b = 0; b < n / kQuantBlock; ++b) {
    const uint8_t* p = blocks + b * kQ8_0BlockBytes;
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = HalfToFloat(dh);
    for (int j = 0; j < kQuantBlock; ++j) {
      const auto q = static_cast<int8_t>(p[2 + j]);
      out[b * kQuantBlock + j] = FloatToBf16(static_cast<float>(q) * d);
    }
  }
}

}  // namespace kvgate::cuda
