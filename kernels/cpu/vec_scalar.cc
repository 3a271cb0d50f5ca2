// Portable reference implementations of vec.h; also the oracle for the AVX2 tests.
#include "kernels/cpu/vec.h"

#include "kernels/cpu/kv_quant.h"

namespace kvgate::kernels::cpu {
namespace {

void DotQ4_1TileScalar(const BlockQ4_1* w, const BlockQ8A* a, size_t a_stride, int ntok, int nb,
                       float* out, size_t out_stride) {
  for (int t = 0; t < ntok; ++t) {
    const BlockQ8A* at = a + t * a_stride;
    float acc = 0.0f;
    for (int b = 0; b < nb; ++b) {
      int isum = 0;
      for (int j = 0; j < 16; ++j) {
        isum += (w[b].qs[j] & 0x0f) * at[b].qs[j] + (w[b].qs[j] >> 4) * at[b].qs[j + 16];
      }
      acc += F16ToF32(w[b].d) * at[b].d * static_cast<float>(isum) + F16ToF32(w[b].m) * at[b].s;
    }
    out[t * out_stride] = acc;
  }
}

void DotQ8_0TileScalar(const BlockQ8_0* w, const BlockQ8A* a, size_t a_stride, int ntok, int nb,
                       float* out, size_t out_stride) {
  for (int t = 0; t < ntok; ++t) {
    const BlockQ8A* at = a + t * a_stride;
    float acc = 0.0f;
    for (int b = 0; b < nb; ++b) {
      int isum = 0;
      for (int j = 0; j < 32; ++j) isum += w[b].qs[j] * at[b].qs[j];
      acc += F16ToF32(w[b].d) * at[b].d * static_cast<float>(isum);
    }
    out[t * out_stride] = acc;
  }
}

void F16ToF32Scalar(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = F16ToF32(x[i]);
}
void F32ToF16Scalar(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = F32ToF16(x[i]);
}
float DotF32F16Scalar(const float* a, const uint16_t* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * F16ToF32(b[i]);
  return s;
}
void AxpyF16Scalar(float alpha, const uint16_t* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * F16ToF32(x[i]);
}

float DotF32Bf16Scalar(const float* a, const uint16_t* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * Bf16ToF32(b[i]);
  return s;
}
void AxpyBf16Scalar(float alpha, const uint16_t* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * Bf16ToF32(x[i]);
}
float DotF32I8Scalar(const float* a, const int8_t* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * static_cast<float>(b[i]);
  return s;
}
void AxpyI8Scalar(float alpha, const int8_t* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * static_cast<float>(x[i]);
}
float DotF32E4M3Scalar(const float* a, const uint8_t* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * DecodeE4M3(b[i]);
  return s;
}
void AxpyE4M3Scalar(float alpha, const uint8_t* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * DecodeE4M3(x[i]);
}

constexpr VecKernels kScalar = {
    Isa::kScalar,     QuantizeRowQ8AScalar, DotQ4_1TileScalar, DotQ8_0TileScalar,
    F16ToF32Scalar,   F32ToF16Scalar,       DotF32F16Scalar,   AxpyF16Scalar,
    DotF32Bf16Scalar, AxpyBf16Scalar,       DotF32I8Scalar,    AxpyI8Scalar,
    DotF32E4M3Scalar, AxpyE4M3Scalar,
};

}  // namespace

std::string_view IsaName(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "scalar"; }

bool CpuHasAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

Isa BestIsa() { return CpuHasAvx2() ? Isa::kAvx2 : Isa::kScalar; }

const VecKernels& ScalarKernels() { return kScalar; }

const VecKernels& KernelsFor(Isa isa) { return isa == Isa::kAvx2 ? Avx2Kernels() : kScalar; }

}  // namespace kvgate::kernels::cpu
