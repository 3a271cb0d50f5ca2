// Portable reference implementations of vec.h; also the oracle for the AVX2 tests.
#include "kernels/cpu/vec.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/kv_quant.h"

namespace kvgate::kernels::cpu {
namespace {

void DotQ4_1RowsScalar(const BlockQ4_1* w, int64_t rows, const BlockQ8A* a, size_t a_stride,
                       int ntok, int nb, float* out, size_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const BlockQ4_1* wr = w + r * nb;
    for (int t = 0; t < ntok; ++t) {
      const BlockQ8A* at = a + t * a_stride;
      float acc = 0.0f;
      for (int b = 0; b < nb; ++b) {
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
          isum += (wr[b].qs[j] & 0x0f) * at[b].qs[j] + (wr[b].qs[j] >> 4) * at[b].qs[j + 16];
        }
        acc += F16ToF32(wr[b].d) * at[b].d * static_cast<float>(isum) +
               F16ToF32(wr[b].m) * at[b].s;
      }
      out[t * out_stride + r] = acc;
    }
  }
}

void DotQ8_0RowsScalar(const BlockQ8_0* w, int64_t rows, const BlockQ8A* a, size_t a_stride,
                       int ntok, int nb, float* out, size_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const BlockQ8_0* wr = w + r * nb;
    for (int t = 0; t < ntok; ++t) {
      const BlockQ8A* at = a + t * a_stride;
      float acc = 0.0f;
      for (int b = 0; b < nb; ++b) {
        int isum = 0;
        for (int j = 0; j < 32; ++j) isum += wr[b].qs[j] * at[b].qs[j];
        acc += F16ToF32(wr[b].d) * at[b].d * static_cast<float>(isum);
      }
      out[t * out_stride + r] = acc;
    }
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

// The reference step: per key one dot and one axpy, in the order the vector kernel must match.
template <class T, float (*Dot)(const float*, const T*, int),
          void (*Axpy)(float, const T*, float*, int)>
void AttendBlockScalar(const AttendBlockArgs& a) {
  const auto* k = static_cast<const T*>(a.k);
  const auto* v = static_cast<const T*>(a.v);
  float scores[64];
  float bm = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < a.n; ++j) {
    const float dot = Dot(a.q, k + j * a.stride, a.head_dim);
    scores[j] = dot * (a.k_scale ? a.k_scale[j] : a.scale);
    bm = std::max(bm, scores[j]);
  }
  const float nm = std::max(*a.m, bm);
  const float corr = std::exp(*a.m - nm);
  if (corr != 1.0f) {
    *a.l *= corr;
    for (int d = 0; d < a.head_dim; ++d) a.acc[d] *= corr;
  }
  for (int j = 0; j < a.n; ++j) {
    const float e = std::exp(scores[j] - nm);
    *a.l += e;
    Axpy(a.v_scale ? e * a.v_scale[j] : e, v + j * a.stride, a.acc, a.head_dim);
  }
  *a.m = nm;
}

static_assert(static_cast<int>(KvFormat::kF16) == 0 && static_cast<int>(KvFormat::kBf16) == 1 &&
              static_cast<int>(KvFormat::kInt8) == 2 && static_cast<int>(KvFormat::kFp8) == 3,
              "VecKernels::attend_block is indexed by KvFormat");

constexpr VecKernels kScalar = {
    Isa::kScalar,     QuantizeRowQ8AScalar, DotQ4_1RowsScalar, DotQ8_0RowsScalar,
    F16ToF32Scalar,   F32ToF16Scalar,       DotF32F16Scalar,   AxpyF16Scalar,
    DotF32Bf16Scalar, AxpyBf16Scalar,       DotF32I8Scalar,    AxpyI8Scalar,
    DotF32E4M3Scalar, AxpyE4M3Scalar,
    {
        // Indexed by KvFormat: f16, bf16, int8, FP8.
        &AttendBlockScalar<uint16_t, DotF32F16Scalar, AxpyF16Scalar>,
        &AttendBlockScalar<uint16_t, DotF32Bf16Scalar, AxpyBf16Scalar>,
        &AttendBlockScalar<int8_t, DotF32I8Scalar, AxpyI8Scalar>,
        &AttendBlockScalar<uint8_t, DotF32E4M3Scalar, AxpyE4M3Scalar>,
    },
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
