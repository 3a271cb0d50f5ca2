// Single-precision RoPE without a per-element double-precision range reduction (CudaBackend's f32
// path). The angle of pair i at position p is p * f_i with f_i = theta^(-2i / D); at p ~ 1e5 an f32
// product p * f_i is off by up to ~4e-3 rad, so the old kernel reduced it in double precision per
// element (slow on a GPU: 0.20 of copy bandwidth measured for the bf16 kernel). Instead the
// rotation by p * f_i is composed from two rotations read from tables computed once in double and
// rounded to f32: (p >> 8) * 256 * f_i (`high`) and (p & 255) * f_i (`low`). cos(a + b) and
// sin(a + b) from four f32 table values cost 4 FMAs and are within ~3e-7 of the exact rotation.
// Plain C++20 (host): built and unit-tested without a GPU; backend_ops.cu reads the same layout.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_status.h"

namespace kvgate::cuda {

inline constexpr int kRopeLowBits = 8;
inline constexpr int kRopeLowPositions = 1 << kRopeLowBits;
// Positions the tables cover: [0, kRopeMaxPositions). The backend uses the double-precision kernel
// for a batch with a position outside.
inline constexpr int32_t kRopeMaxPositions = 1 << 20;

// Both tables are [rows][D / 2][2] floats: (cos, sin) of row * step * f_i.
struct RopeTable {
  float theta = 0.0f;
  int head_dim = 0;
  std::vector<float> low;   // kRopeLowPositions rows, step 1
  std::vector<float> high;  // kRopeMaxPositions / kRopeLowPositions rows, step kRopeLowPositions
};

// f_i as the double-precision kernel and the CPU backend compute it: exp2(-log2(theta) * 2i / D).
double RopeFrequency(float theta, int head_dim, int i);

// Errors: head_dim not even and positive, theta not positive.
CudaStatus BuildRopeTable(float theta, int head_dim, RopeTable* out);

// (cos, sin) of pos * f_i as the table kernel computes them (f32, the same operation order).
// REQUIRES: 0 <= pos < kRopeMaxPositions, 0 <= i < head_dim / 2.
void RopeTableRotation(const RopeTable& t, int32_t pos, int i, float* c, float* s);

}  // namespace kvgate::cuda
