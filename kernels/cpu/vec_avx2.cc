// AVX2 + FMA + F16C implementations of vec.h. Every function here carries the target attribute
// instead of the file being built with -mavx2, so no AVX2 code can leak into shared inline functions
// and the binary still runs (scalar path) on CPUs without AVX2.
#include "kernels/cpu/vec.h"

#include "kernels/cpu/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// Lane i of the result: the sum of v[i]'s eight int32 lanes.
KVGATE_AVX2 inline __m256i TransposeSum8(const __m256i v[8]) {
  const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                          _mm256_permute2x128_si256(u0, u1, 0x31));
}

// The f16 at byte offset 0 of each of 8 structs `stride` bytes apart, as 8 floats (and, with
// `second`, the f16 right after it as 8 more).
KVGATE_AVX2 inline void Gather8Halves(const void* base, int64_t stride, __m256* first,
                                      __m256* second) {
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32(static_cast<int>(stride)));
  const __m256i g = _mm256_i32gather_epi32(static_cast<const int*>(base), idx, 1);
  const __m256i lo = _mm256_and_si256(g, _mm256_set1_epi32(0xffff));
  const __m256i hi = _mm256_srli_epi32(g, 16);
  // packus: [lo0..3 hi0..3 | lo4..7 hi4..7]; the permute puts all lo, then all hi.
  const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
  *first = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
  if (second) *second = _mm256_cvtph_ps(_mm256_extracti128_si256(p, 1));
}

// How far ahead the matrix kernels fetch: the 8-row group this many rows on (4 groups ahead).
// Decode streams the whole model once per token, and with the hardware prefetcher alone the
// matrix-vector loop waits on memory: on 2.8 GHz Xeon cores, fetching 2 groups ahead made decode
// 1.4x the rate without, and 4 groups ahead another ~1.25x over 2 (2026-12-04, alternated runs of
// bench/engine_cpu: 16 rows ahead 83-102 tok/s, 32 rows 88-130; 48 or more did no better).
constexpr int kPrefetchRowsAhead = 32;

// Slice `b` of `parts` of the `bytes` at `next` (8 rows, contiguous), fetched into L1 while the
// current 8 rows compute. Past the last row it fetches whatever follows (the next chunk's rows,
// or nothing: a prefetch never faults).
KVGATE_AVX2 inline void PrefetchSlice(const void* next, int64_t bytes, int b, int parts) {
  const char* p = static_cast<const char*>(next);
  const int64_t slice = (bytes + parts - 1) / parts;
  for (int64_t off = b * slice; off < (b + 1) * slice; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// 16 bytes of Q4 nibbles -> 32 unsigned bytes in element order: both 16-byte lanes hold the
// packed bytes and the high lane is shifted by 4, so the masked bytes are the low nibbles
// (elements 0-15), then the high ones (16-31). (One broadcast load instead of an insert.)
KVGATE_AVX2 inline __m256i UnpackQ4(const uint8_t* qs) {
  const __m256i packed =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i shifted = _mm256_srlv_epi32(packed, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f));
}

// Integer dots of 32 bytes in 8 int32 lanes: Q4 codes (unsigned) or Q8_0 codes (signed: |x|
// against y with x's sign, since maddubs needs one unsigned operand) against activation codes.
KVGATE_AVX2 inline __m256i DotLanesQ4(__m256i q, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
}
KVGATE_AVX2 inline __m256i DotLanesQ8(__m256i x, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)),
                           _mm256_set1_epi16(1));
}

KVGATE_AVX2 inline float FmaScalar(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// The arithmetic of every (row, token) dot, in a vector lane or alone: per block the exact
// integer dot isum, then acc = fma(d * a.d, isum, acc) and (Q4_1) macc = fma(m, a.s, macc), each
// rounded once; the result is acc + macc. The 8-row kernels and the one-row tail agree bit for
// bit, so neither the batch nor the row split changes a logit.
template <int NT>
KVGATE_AVX2 void Q4_1Rows8(const BlockQ4_1* w8, const BlockQ8A* a, size_t a_stride, int nb,
                           float* out, size_t out_stride) {
  const int64_t row_bytes = static_cast<int64_t>(nb) * sizeof(BlockQ4_1);
  __m256 acc[NT], macc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), macc[t] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    PrefetchSlice(w8 + kPrefetchRowsAhead * nb, 8 * row_bytes, b, nb);
    __m256i q[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) q[r] = UnpackQ4(w8[r * nb + b].qs);
    __m256 d, m;
    Gather8Halves(&w8[b].d, row_bytes, &d, &m);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& ab = a[t * a_stride + b];
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.qs));
      __m256i sums[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) sums[r] = DotLanesQ4(q[r], y);
      const __m256 isum = _mm256_cvtepi32_ps(TransposeSum8(sums));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(ab.d)), isum, acc[t]);
      macc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(ab.s), macc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * out_stride, _mm256_add_ps(acc[t], macc[t]));
}

KVGATE_AVX2 void Q4_1Row1(const BlockQ4_1* w, const BlockQ8A* a, size_t a_stride, int ntok, int nb,
                          float* out, size_t out_stride) {
  for (int t = 0; t < ntok; ++t) {
    float acc = 0.0f, macc = 0.0f;
    for (int b = 0; b < nb; ++b) {
      const BlockQ8A& ab = a[t * a_stride + b];
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.qs));
      const int isum = HsumI32(DotLanesQ4(UnpackQ4(w[b].qs), y));
      acc = FmaScalar(Half(w[b].d) * ab.d, static_cast<float>(isum), acc);
      macc = FmaScalar(Half(w[b].m), ab.s, macc);
    }
    out[t * out_stride] = acc + macc;
  }
}

template <int NT>
KVGATE_AVX2 void Q8_0Rows8(const BlockQ8_0* w8, const BlockQ8A* a, size_t a_stride, int nb,
                           float* out, size_t out_stride) {
  const int64_t row_bytes = static_cast<int64_t>(nb) * sizeof(BlockQ8_0);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    PrefetchSlice(w8 + kPrefetchRowsAhead * nb, 8 * row_bytes, b, nb);
    __m256 d;
    Gather8Halves(&w8[b].d, row_bytes, &d, nullptr);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& ab = a[t * a_stride + b];
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.qs));
      __m256i sums[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        sums[r] = DotLanesQ8(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w8[r * nb + b].qs)), y);
      }
      const __m256 isum = _mm256_cvtepi32_ps(TransposeSum8(sums));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(ab.d)), isum, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * out_stride, acc[t]);
}

KVGATE_AVX2 void Q8_0Row1(const BlockQ8_0* w, const BlockQ8A* a, size_t a_stride, int ntok, int nb,
                          float* out, size_t out_stride) {
  for (int t = 0; t < ntok; ++t) {
    float acc = 0.0f;
    for (int b = 0; b < nb; ++b) {
      const BlockQ8A& ab = a[t * a_stride + b];
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.qs));
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
      acc = FmaScalar(Half(w[b].d) * ab.d, static_cast<float>(HsumI32(DotLanesQ8(x, y))), acc);
    }
    out[t * out_stride] = acc;
  }
}

KVGATE_AVX2 void DotQ4_1RowsAvx2(const BlockQ4_1* w, int64_t rows, const BlockQ8A* a,
                                 size_t a_stride, int ntok, int nb, float* out, size_t out_stride) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const BlockQ4_1* w8 = w + r * nb;
    switch (ntok) {
      case 1: Q4_1Rows8<1>(w8, a, a_stride, nb, out + r, out_stride); break;
      case 2: Q4_1Rows8<2>(w8, a, a_stride, nb, out + r, out_stride); break;
      case 3: Q4_1Rows8<3>(w8, a, a_stride, nb, out + r, out_stride); break;
      default: Q4_1Rows8<4>(w8, a, a_stride, nb, out + r, out_stride); break;
    }
  }
  for (; r < rows; ++r) Q4_1Row1(w + r * nb, a, a_stride, ntok, nb, out + r, out_stride);
}

KVGATE_AVX2 void DotQ8_0RowsAvx2(const BlockQ8_0* w, int64_t rows, const BlockQ8A* a,
                                 size_t a_stride, int ntok, int nb, float* out, size_t out_stride) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const BlockQ8_0* w8 = w + r * nb;
    switch (ntok) {
      case 1: Q8_0Rows8<1>(w8, a, a_stride, nb, out + r, out_stride); break;
      case 2: Q8_0Rows8<2>(w8, a, a_stride, nb, out + r, out_stride); break;
      case 3: Q8_0Rows8<3>(w8, a, a_stride, nb, out + r, out_stride); break;
      default: Q8_0Rows8<4>(w8, a, a_stride, nb, out + r, out_stride); break;
    }
  }
  for (; r < rows; ++r) Q8_0Row1(w + r * nb, a, a_stride, ntok, nb, out + r, out_stride);
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

// Loaders of 8 cache values as floats, one per KV format (kv_quant.h), and the scalar tail. A
// loader's values are the format's times kUnit (the caller divides: a power of two, exact).
struct F16Codec {
  using T = uint16_t;
  static constexpr float kUnit = 1.0f;
  KVGATE_AVX2 static __m256 Load(const T* x) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  }
  static float One(T x) { return F16ToF32(x); }
};
struct Bf16Codec {  // a bf16 is the top half of a float
  using T = uint16_t;
  static constexpr float kUnit = 1.0f;
  KVGATE_AVX2 static __m256 Load(const T* x) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static float One(T x) { return Bf16ToF32(x); }
};
struct I8Codec {
  using T = int8_t;
  static constexpr float kUnit = 1.0f;
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
  static constexpr float kUnit = 1.0f / 256.0f;
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

// acc [NC * 8] += sum over j < n of w[j] * v row j; the accumulators stay in registers across
// the keys (NC <= 8 of them), so each value row costs NC loads and NC FMAs.
template <class C, int NC>
KVGATE_AVX2 void AccumulateValues(const float* w, const typename C::T* v, int64_t stride, int n,
                                  float* acc) {
  __m256 a[NC];
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) a[c] = _mm256_loadu_ps(acc + 8 * c);
  for (int j = 0; j < n; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const typename C::T* row = v + j * stride;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) a[c] = _mm256_fmadd_ps(wj, C::Load(row + 8 * c), a[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

template <class C>
KVGATE_AVX2 void AccumulateValuesChunks(int chunks, const float* w, const typename C::T* v,
                                        int64_t stride, int n, float* acc) {
  switch (chunks) {
    case 1: return AccumulateValues<C, 1>(w, v, stride, n, acc);
    case 2: return AccumulateValues<C, 2>(w, v, stride, n, acc);
    case 3: return AccumulateValues<C, 3>(w, v, stride, n, acc);
    case 4: return AccumulateValues<C, 4>(w, v, stride, n, acc);
    case 5: return AccumulateValues<C, 5>(w, v, stride, n, acc);
    case 6: return AccumulateValues<C, 6>(w, v, stride, n, acc);
    case 7: return AccumulateValues<C, 7>(w, v, stride, n, acc);
    default: return AccumulateValues<C, 8>(w, v, stride, n, acc);
  }
}

// The same step as the scalar reference (vec_scalar.cc), in passes: all n scores, their maximum,
// all exponentials, then the value sum with the accumulator in registers. Head dims that are not
// a multiple of 8 take the per-key axpy.
template <class C>
KVGATE_AVX2 void AttendBlockAvx2(const AttendBlockArgs& a) {
  const auto* k = static_cast<const typename C::T*>(a.k);
  const auto* v = static_cast<const typename C::T*>(a.v);
  const int n = a.n, dh = a.head_dim;
  float s[64];
  // Scores key by key in DotF32's order, and below std::exp and a sequential sum, so this step
  // gives the same bits as the per-key dot and axpy calls it replaced. The logits are chaotic in
  // the rounding of these sums (the next layer quantizes its activations): an 8-key transposed
  // dot with a polynomial exp flipped a greedy choice against llama.cpp at a 0.35 logit margin.
  // What this step saves is the loop: no call per key, and the value sums held in registers.
  for (int j = 0; j < n; ++j) s[j] = DotF32<C>(a.q, k + j * a.stride, dh);
  float bm = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; ++j) {
    s[j] *= (a.k_scale ? a.k_scale[j] : a.scale) / C::kUnit;
    bm = std::max(bm, s[j]);
  }
  const float nm = std::max(*a.m, bm);
  const float corr = std::exp(*a.m - nm);
  if (corr != 1.0f) {
    *a.l *= corr;
    for (int d = 0; d < dh; ++d) a.acc[d] *= corr;
  }
  for (int j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - nm);
    *a.l += s[j];
  }
  // Value weights: e_j (times the row's scale), in the loader's unit.
  for (int j = 0; j < n; ++j) s[j] *= (a.v_scale ? a.v_scale[j] : 1.0f) / C::kUnit;
  if (dh % 8 == 0) {
    for (int d0 = 0; d0 < dh; d0 += 64) {
      AccumulateValuesChunks<C>(std::min(8, (dh - d0) / 8), s, v + d0, a.stride, n, a.acc + d0);
    }
  } else {
    for (int j = 0; j < n; ++j) AxpyF32<C>(s[j], v + j * a.stride, a.acc, dh);
  }
  *a.m = nm;
}

constexpr VecKernels kAvx2 = {
    Isa::kAvx2,     QuantizeRowQ8AAvx2, DotQ4_1RowsAvx2, DotQ8_0RowsAvx2,
    F16ToF32Avx2,   F32ToF16Avx2,       DotF32F16Avx2,   AxpyF16Avx2,
    DotF32Bf16Avx2, AxpyBf16Avx2,       DotF32I8Avx2,    AxpyI8Avx2,
    DotF32E4M3Avx2, AxpyE4M3Avx2,
    {
        // Indexed by KvFormat: f16, bf16, int8, FP8.
        &AttendBlockAvx2<F16Codec>,
        &AttendBlockAvx2<Bf16Codec>,
        &AttendBlockAvx2<I8Codec>,
        &AttendBlockAvx2<E4M3Div256Codec>,
    },
};

}  // namespace

const VecKernels& Avx2Kernels() { return kAvx2; }

}  // namespace kvgate::kernels::cpu

#else  // not x86: the AVX2 table is the scalar one (CpuHasAvx2() is false, so it is never chosen).

namespace kvgate::kernels::cpu {
const VecKernels& Avx2Kernels() { return ScalarKernels(); }
}  // namespace kvgate::kernels::cpu

#endif
