// Random inputs for kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/vec.h"

namespace kvgate::kernels::cpu::testing {

inline std::vector<float> RandomFloats(std::mt19937_64& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Both dispatch paths when the CPU has AVX2, else only the scalar one.
inline std::vector<Isa> TestedIsas() {
  std::vector<Isa> v{Isa::kScalar};
  if (CpuHasAvx2()) v.push_back(Isa::kAvx2);
  return v;
}

}  // namespace kvgate::kernels::cpu::testing
