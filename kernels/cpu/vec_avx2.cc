// AVX2 + FMA + F16C implementations of vec.h. Every function here carries the target attribute
// instead of the file being built with -mavx2, so no AVX2 code can leak into shared inline functions
// and the binary still runs (scalar path) on CPUs without AVX2.
#include "kernels/cpu/vec.h"

#include "kernels/cpu/kv_quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define KVGATE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kvgate::kernels::cpu {
namespace {

KVGATE_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

KVGATE_AVX2 inline int HsumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

KVGATE_AVX2 inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// 16 bytes of Q4 nibbles -> 32 unsigned bytes in element order (low nibbles, then high nibbles).
KVGATE_AVX2 inline __m256i UnpackQ4(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(b, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

// sum over pairs of u8 * s8 -> 8 int32 lanes as floats.
KVGATE_AVX2 inline __m256 MulSumU8S8(__m256i u, __m256i s) {
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

template <int NT>
KVGATE_AVX2 void DotQ4_1TileN(const BlockQ4_1* w, const BlockQ8A* a, size_t a_stride, int nb,
                              float* out, size_t out_stride) {
  __m256 acc[NT];
  float macc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), macc[t] = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const float d = Half(w[b].d), m = Half(w[b].m);
    const __m256i q = UnpackQ4(w[b].qs);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& ab = a[t * a_stride + b];
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.qs));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), MulSumU8S8(q, y), acc[t]);
      macc[t] += m * ab.s;
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = Hsum(acc[t]) + macc[t];
}

template <int NT>
KVGATE_AVX2 void DotQ8_0TileN(const BlockQ8_0* w, const BlockQ8A* a, size_t a_stride, int nb,
                              float* out, size_t out_stride) {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const float d = Half(w[b].d);
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i ax = _mm256_sign_epi8(x, x);  // |x| as unsigned (-128 -> 128)
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& ab = a[t * a_stride + b];
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.qs));
      const __m256i sy = _mm256_sign_epi8(y, x);  // move x's sign onto y
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), MulSumU8S8(ax, sy), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = Hsum(acc[t]);
}

KVGATE_AVX2 void DotQ4_1TileAvx2(const BlockQ4_1* w, const BlockQ8A* a, size_t a_stride, int ntok,
                                 int nb, float* out, size_t out_stride) {
  switch (ntok) {
    case 1: return DotQ4_1TileN<1>(w, a, a_stride, nb, out, out_stride);
    case 2: return DotQ4_1TileN<2>(w, a, a_stride, nb, out, out_stride);
    case 3: return DotQ4_1TileN<3>(w, a, a_stride, nb, out, out_stride);
    default: return DotQ4_1TileN<4>(w, a, a_stride, nb, out, out_stride);
  }
}

KVGATE_AVX2 void DotQ8_0TileAvx2(const BlockQ8_0* w, const BlockQ8A* a, size_t a_stride, int ntok,
                                 int nb, float* out, size_t out_stride) {
  switch (ntok) {
    case 1: return DotQ8_0TileN<1>(w, a, a_stride, nb, out, out_stride);
    case 2: return DotQ8_0TileN<2>(w, a, a_stride, nb, out, out_stride);
    case 3: return DotQ8_0TileN<3>(w, a, a_stride, nb, out, out_stride);
    default: return DotQ8_0TileN<4>(w, a, a_stride, nb, out, out_stride);
  }
}

KVGATE_AVX2 void QuantizeRowQ8AAvx2(const float* x, size_t k, BlockQ8A* out) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (size_t b = 0; b < k / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
    __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
    __m256 mx = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v0), _mm256_andnot_ps(sign_bit, v1));
    mx = _mm256_max_ps(mx, _mm256_max_ps(_mm256_andnot_ps(sign_bit, v2),
                                         _mm256_andnot_ps(sign_bit, v3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), kRound));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), kRound));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), kRound));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), kRound));
    const int sum =
        HsumI32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    // packs interleave 128-bit lanes; the permute restores element order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    const __m256i q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), q);
    out[b].d = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    out[b].s = _cvtsh_ss(_cvtss_sh(d * static_cast<float>(sum), _MM_FROUND_TO_NEAREST_INT));
  }
}

KVGATE_AVX2 void F16ToF32Avx2(const uint16_t* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) y[i] = _cvtsh_ss(x[i]);
}

KVGATE_AVX2 void F32ToF16Avx2(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

KVGATE_AVX2 float DotF32F16Avx2(const float* a, const uint16_t* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    const __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i + 8)));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), b1, acc1);
  }
  float s = Hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * _cvtsh_ss(b[i]);
  return s;
}

KVGATE_AVX2 void AxpyF16Avx2(float alpha, const uint16_t* x, float* y, int n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * _cvtsh_ss(x[i]);
}

// Loaders of 8 cache values as floats, one per KV format (kv_quant.h), and the scalar tail.
struct Bf16Codec {  // a bf16 is the top half of a float
  using T = uint16_t;
  KVGATE_AVX2 static __m256 Load(const T* x) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static float One(T x) { return Bf16ToF32(x); }
};
struct I8Codec {
  using T = int8_t;
  KVGATE_AVX2 static __m256 Load(const T* x) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x))));
  }
  static float One(T x) { return static_cast<float>(x); }
};
// E4M3 codes times 2^-8: the code's exponent and mantissa bits shifted into an f16's (kv_quant.cc
// DecodeE4M3), converted by F16C. Callers multiply by 256 (exact: a power of two).
struct E4M3Div256Codec {
  using T = uint8_t;
  KVGATE_AVX2 static __m256 Load(const T* x) {
    const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x)));
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x80)), 8);
    const __m128i mag = _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x7f)), 7);
    return _mm256_cvtph_ps(_mm_or_si128(sign, mag));
  }
  static float One(T x) { return DecodeE4M3(x) * (1.0f / 256.0f); }
};

template <class C>
KVGATE_AVX2 float DotF32(const float* a, const typename C::T* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), C::Load(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), C::Load(b + i + 8), acc1);
  }
  float s = Hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * C::One(b[i]);
  return s;
}

template <class C>
KVGATE_AVX2 void AxpyF32(float alpha, const typename C::T* x, float* y, int n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, C::Load(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * C::One(x[i]);
}

KVGATE_AVX2 float DotF32Bf16Avx2(const float* a, const uint16_t* b, int n) {
  return DotF32<Bf16Codec>(a, b, n);
}
KVGATE_AVX2 void AxpyBf16Avx2(float alpha, const uint16_t* x, float* y, int n) {
  AxpyF32<Bf16Codec>(alpha, x, y, n);
}
KVGATE_AVX2 float DotF32I8Avx2(const float* a, const int8_t* b, int n) {
  return DotF32<I8Codec>(a, b, n);
}
KVGATE_AVX2 void AxpyI8Avx2(float alpha, const int8_t* x, float* y, int n) {
  AxpyF32<I8Codec>(alpha, x, y, n);
}
KVGATE_AVX2 float DotF32E4M3Avx2(const float* a, const uint8_t* b, int n) {
  return DotF32<E4M3Div256Codec>(a, b, n) * 256.0f;
}
KVGATE_AVX2 void AxpyE4M3Avx2(float alpha, const uint8_t* x, float* y, int n) {
  AxpyF32<E4M3Div256Codec>(alpha * 256.0f, x, y, n);
}

constexpr VecKernels kAvx2 = {
    Isa::kAvx2,     QuantizeRowQ8AAvx2, DotQ4_1TileAvx2, DotQ8_0TileAvx2,
    F16ToF32Avx2,   F32ToF16Avx2,       DotF32F16Avx2,   AxpyF16Avx2,
    DotF32Bf16Avx2, AxpyBf16Avx2,       DotF32I8Avx2,    AxpyI8Avx2,
    DotF32E4M3Avx2, AxpyE4M3Avx2,
};

}  // namespace

const VecKernels& Avx2Kernels() { return kAvx2; }

}  // namespace kvgate::kernels::cpu

#else  // not x86: the AVX2 table is the scalar one (CpuHasAvx2() is false, so it is never chosen).

namespace kvgate::kernels::cpu {
const VecKernels& Avx2Kernels() { return ScalarKernels(); }
}  // namespace kvgate::kernels::cpu

#endif
