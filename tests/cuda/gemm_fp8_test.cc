// GemmFp8 and the FP8 quantize kernels against a CPU reference on the same E4M3 codes. Skips
// without a GPU, except the host-side argument checks and the no-device error. Never run on a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/fp8_quant_math.h"
#include "kernels/cuda/gemm_fp8.h"
#include "tests/cuda/have_device.h"

namespace kvgate::cuda {
namespace {

TEST(GemmFp8Test, NoDeviceIsAClearError) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  std::unique_ptr<GemmFp8> g;
  EXPECT_EQ(GemmFp8::Create(1 << 20, &g).kind, CudaStatusKind::kNoDevice);
}

// Quantizes x [m][k] and w [n][k] on the device, multiplies with GemmFp8 (f32 out), and compares
// with a double-precision CPU product of the same codes times the same scales. Both sides see
// identical inputs, so the only difference is summation order and f32 accumulation: |err| is
// bounded by ~k * 2^-24 * sum|x||w|; we allow 1e-4 relative to sum|x_i w_i| per output (k <= 1536
// gives ~1e-4 at worst-case, typical errors are far smaller).
void CheckShape(int64_t m, int64_t n, int64_t k) {
  std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 7 + k));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
  for (float& v : x) v = d(rng);
  for (float& v : w) v = 0.05f * d(rng);
  float *dx = nullptr, *dw = nullptr, *dy = nullptr, *dsc = nullptr;  // dsc: amax, scale, inv x 2
  uint8_t *qx = nullptr, *qw = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dx), x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dw), w.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dy), static_cast<size_t>(m * n) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dsc), 6 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&qx), x.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&qw), w.size()), cudaSuccess);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
  ASSERT_TRUE(LaunchAmaxF32(dx, static_cast<int64_t>(x.size()), dsc + 0, nullptr).ok());
  ASSERT_TRUE(LaunchFp8ScaleFromAmax(dsc + 0, dsc + 1, dsc + 2, nullptr).ok());
  ASSERT_TRUE(LaunchAmaxF32(dw, static_cast<int64_t>(w.size()), dsc + 3, nullptr).ok());
  ASSERT_TRUE(LaunchFp8ScaleFromAmax(dsc + 3, dsc + 4, dsc + 5, nullptr).ok());
  ASSERT_TRUE(LaunchQuantizeE4M3F32(dx, static_cast<int64_t>(x.size()), dsc + 2, qx, nullptr).ok());
  ASSERT_TRUE(LaunchQuantizeE4M3F32(dw, static_cast<int64_t>(w.size()), dsc + 5, qw, nullptr).ok());
  std::unique_ptr<GemmFp8> g;
  ASSERT_TRUE(GemmFp8::Create(32 << 20, &g).ok());
  ASSERT_TRUE(g->Run(reinterpret_cast<const __nv_fp8_e4m3*>(qx), k, dsc + 1,
                     reinterpret_cast<const __nv_fp8_e4m3*>(qw), k, dsc + 4, dy, n, m, n, k, 0.0f, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y(static_cast<size_t>(m * n)), sc(6);
  std::vector<uint8_t> hx(x.size()), hw(w.size());
  cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(sc.data(), dsc, 24, cudaMemcpyDeviceToHost);
  cudaMemcpy(hx.data(), qx, hx.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(hw.data(), qw, hw.size(), cudaMemcpyDeviceToHost);
  // The device codes must be the host codec's, bit for bit.
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(hx[i], QuantizeE4M3(x[i], sc[2])) << i;
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(hw[i], QuantizeE4M3(w[i], sc[5])) << i;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(DequantizeE4M3(hx[r * k + i], sc[1])) *
                         DequantizeE4M3(hw[c * k + i], sc[4]);
        sum += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(y[r * n + c], sum, 1e-4 * mag + 1e-6) << r << "," << c;
    }
  cudaFree(dx); cudaFree(dw); cudaFree(dy); cudaFree(dsc); cudaFree(qx); cudaFree(qw);
}

TEST(GemmFp8Test, MatchesCpuOnQuantizedInputs) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device found";
  CheckShape(64, 576, 576);
  CheckShape(7, 1536, 576);
}

}  // namespace
}  // namespace kvgate::cuda
