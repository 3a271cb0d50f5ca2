// Per-tensor FP8 (E4M3) scaling math for the FP8 GEMM path: the host and device share these so that
// a tensor quantized on the GPU matches the CPU reference bit for bit. Header-only (KVGATE_HD from
// fp8.h), plain C++ on the host so it is unit-tested without a GPU.
//
// Convention (the one cuBLASLt's A/B scale pointers expect): a stored code c stands for
// DecodeE4M3(c) * scale, with scale = amax / 448 so the largest magnitude maps onto 448.
#pragma once

#include "kernels/cuda/fp8.h"

namespace kvgate::cuda {

// Scale of a tensor whose largest magnitude is `amax`; an all-zero (or empty) tensor gets 1 so the
// inverse stays finite. Same rule as the KV cache blocks (Fp8BlockScale).
KVGATE_HD float Fp8TensorScale(float amax) { return Fp8BlockScale(amax); }

// The inverse the quantize step multiplies by (a multiply, not a divide, on both sides).
KVGATE_HD float Fp8TensorInvScale(float amax) { return 1.0f / Fp8TensorScale(amax); }

// One value quantized with the inverse scale: x * inv_scale rounded to nearest even, saturated to
// +-448 (EncodeE4M3 mirrors cvt.rn.satfinite.e4m3x2.f32).
KVGATE_HD uint8_t QuantizeE4M3(float x, float inv_scale) { return EncodeE4M3(x * inv_scale); }

// The value a code stands for under `scale`.
KVGATE_HD float DequantizeE4M3(uint8_t code, float scale) { return DecodeE4M3(code) * scale; }

}  // namespace kvgate::cuda
