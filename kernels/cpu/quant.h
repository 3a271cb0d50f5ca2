// Quantized block formats (GGUF/ggml layouts) and scalar conversions shared by every CPU kernel.
// Letters used in shape comments across kernels/cpu: T tokens, K input features (a multiple of 32),
// N output features, B = K / 32 blocks per row.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvgate::kernels::cpu {

inline constexpr int kQBlock = 32;  // elements per Q4_1 / Q8_0 / Q8A block

// GGUF Q4_1: value = q * d + m, q in [0, 15]. Byte j holds element j (low nibble) and j + 16 (high).
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// GGUF Q8_0: value = q * d.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Activation block (kvgate-internal, like ggml's q8_1): value = q * d and s = d * sum(q), which lets
// a Q4_1 dot add m * s once per block instead of m * sum(x). d and s are f32 fields holding values
// rounded to f16 (as ggml stores them), so kvgate's greedy output tracks llama.cpp's.
struct BlockQ8A {
  float d;
  float s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8A) == 40);

// IEEE half <-> float, round-to-nearest-even, exact for every finite half, inf and NaN preserved.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
// bfloat16 <-> float (round-to-nearest-even; NaN stays NaN).
float Bf16ToF32(uint16_t h);
uint16_t F32ToBf16(float f);

// Scalar reference dequantizers: `n` elements (a multiple of 32) from `blocks` into `out` [n].
void DequantizeQ4_1(const BlockQ4_1* blocks, size_t n, float* out);
void DequantizeQ8_0(const BlockQ8_0* blocks, size_t n, float* out);
void DequantizeQ8A(const BlockQ8A* blocks, size_t n, float* out);

// Scalar reference quantizer of one activation row x [K] into K / 32 blocks (round half to even
// with 127 / max|x|; d = max|x| / 127 and s then rounded to f16).
void QuantizeRowQ8AScalar(const float* x, size_t k, BlockQ8A* out);
// Reference quantizers for weights (tests and tools only; the model ships quantized).
void QuantizeRowQ4_1(const float* x, size_t k, BlockQ4_1* out);
void QuantizeRowQ8_0(const float* x, size_t k, BlockQ8_0* out);

}  // namespace kvgate::kernels::cpu
