#include "kernels/cuda/rope_table.h"

#include <cmath>

namespace kvgate::cuda {
namespace {

constexpr double kTwoPi = 6.283185307179586;

void Fill(double step, double freq, int rows, int half, int i, std::vector<float>* t) {
  for (int r = 0; r < rows; ++r) {
    double a = static_cast<double>(r) * step * freq;
    a -= kTwoPi * std::nearbyint(a / kTwoPi);
    (*t)[(static_cast<size_t>(r) * half + i) * 2] = static_cast<float>(std::cos(a));
    (*t)[(static_cast<size_t>(r) * half + i) * 2 + 1] = static_cast<float>(std::sin(a));
  }
}

}  // namespace

double RopeFrequency(float theta, int head_dim, int i) {
  return std::exp2(-std::log2(static_cast<double>(theta)) * (2.0 * i) / static_cast<double>(head_dim));
}

CudaStatus BuildRopeTable(float theta, int head_dim, RopeTable* out) {
  if (head_dim <= 0 || head_dim % 2 != 0) return CudaStatus::Invalid("rope table: head_dim must be even");
  if (!(theta > 0.0f)) return CudaStatus::Invalid("rope table: theta must be positive");
  const int half = head_dim / 2, high_rows = kRopeMaxPositions / kRopeLowPositions;
  out->theta = theta;
  out->head_dim = head_dim;
  out->low.assign(static_cast<size_t>(kRopeLowPositions) * half * 2, 0.0f);
  out->high.assign(static_cast<size_t>(high_rows) * half * 2, 0.0f);
  for (int i = 0; i < half; ++i) {
    const double f = RopeFrequency(theta, head_dim, i);
    Fill(1.0, f, kRopeLowPositions, half, i, &out->low);
    Fill(static_cast<double>(kRopeLowPositions), f, high_rows, half, i, &out->high);
  }
  return CudaStatus::Ok();
}

void RopeTableRotation(const RopeTable& t, int32_t pos, int i, float* c, float* s) {
  const int half = t.head_dim / 2;
  const float* lo = &t.low[(static_cast<size_t>(pos & (kRopeLowPositions - 1)) * half + i) * 2];
  const float* hi = &t.high[(static_cast<size_t>(pos >> kRopeLowBits) * half + i) * 2];
  // The kernel's expressions exactly (fmaf there; std::fma here: the same single rounding).
  *c = std::fma(hi[0], lo[0], -hi[1] * lo[1]);
  *s = std::fma(hi[1], lo[0], hi[0] * lo[1]);
}

}  // namespace kvgate::cuda
