// CPU references for the device checks (kvgate_cuda_checks) and their unit tests. Straightforward
// loops in double precision over host copies of the device buffers; bf16 values are uint16_t bits.
// Plain C++20 (no CUDA include) so the GPU-less CI tests them. Dimension letters: geometry.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/cuda/geometry.h"

namespace kvgate::cuda::ref {

// Runs fn(i) for i in [0, n) on all hardware threads.
void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

// Norm-wise relative error ||out - ref|| / ||ref||; +inf when out holds a NaN or inf (an unwritten
// poisoned element) or when ref is all zeros and out is not.
double RelError(std::span<const float> out, std::span<const double> ref);

// FP8 E4M3 encoding straight from the format's definition: the finite code nearest to x (ties to
// the code with an even mantissa), magnitudes above 448 saturate, NaN -> 0x7f. Slow (scans all
// codes); the oracle for EncodeE4M3 in fp8.h.
uint8_t EncodeE4M3ByDefinition(float x);
double DecodeE4M3ByDefinition(uint8_t code);

// Host copy of one layer's paged cache ([NB][B][Hkv][D]); bf16 (or, with f16 set, IEEE half) bits,
// or FP8 codes + scales [NB][Hkv].
struct HostPagedKv {
  std::vector<uint16_t> k16, v16;
  bool f16 = false;
  std::vector<uint8_t> k8, v8;
  std::vector<float> k_scale, v_scale;
  int num_blocks = 0, num_kv_heads = 0, head_dim = 0;
  bool fp8 = false;

  double K(int64_t slot, int h, int d) const;
  double V(int64_t slot, int h, int d) const;
};

// out [D] = softmax(q . K[key] * scale over keys 0..n_keys-1) V for kv head `kvh`, keys found via
// `block_row` (the sequence's block table row). q [D] float.
void AttendOne(const HostPagedKv& kv, const int32_t* block_row, int n_keys, int kvh,
               const float* q, double scale, double* out);

// out [cols] = x / sqrt(mean(x^2) + eps) * w, x and w bf16 bits.
void RmsNormRow(const uint16_t* x, const uint16_t* w, int cols, double eps, double* out);

// Rotates pair (x0, x1) = dims (2i, 2i+1) of a head of size d at position pos.
void RopePair(double x0, double x1, int i, int d, int32_t pos, double theta, double* y0, double* y1);

double SiluMul(double gate, double up);

// Applies an FP8 cache write exactly as CacheWriteFp8Kernel does (same scale rule, same encoder
// through EncodeE4M3, same re-encode of earlier tokens): x [T][Hkv][D] bf16 bits, stride in elements.
void Fp8CacheWrite(const uint16_t* x, int64_t stride, std::span<const CacheSegment> segments,
                   int num_kv_heads, int head_dim, std::vector<uint8_t>* cache,
                   std::vector<float>* scales);

}  // namespace kvgate::cuda::ref
