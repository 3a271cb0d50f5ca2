// Innermost CPU kernels behind a dispatch table: one scalar (portable) and one AVX2+FMA+F16C set,
// picked at run time. Tables are immutable; a caller (the CPU backend, a test) holds a reference to
// the one it wants, so both paths stay testable on an AVX2 machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/quant.h"

namespace kvgate::kernels::cpu {

enum class Isa { kScalar, kAvx2 };
std::string_view IsaName(Isa isa);

// True when this CPU (and OS) supports AVX2, FMA and F16C.
bool CpuHasAvx2();
// The fastest Isa this CPU runs.
Isa BestIsa();

// Tile kernels compute up to kMaxTileTokens dot products of one weight row against `ntok` activation
// rows, so each weight block is loaded and unpacked once per tile.
inline constexpr int kMaxTileTokens = 4;

// One online-softmax step of attention: one query row against the first n keys and values of one
// paged-cache block, for one kv head. Key j's Dh values start at k + j * stride elements of the
// cache format (V likewise). Scores are q . k_j times k_scale[j] when k_scale is set (int8 and FP8
// rows: their scale already times the softmax scale), else times `scale`; a value row is weighted
// by v_scale[j] when set. The state m (running maximum), l (running sum of exponentials) and
// acc [Dh] (running weighted sum of values) is updated in place; it starts at -inf, 0, 0.
struct AttendBlockArgs {
  const float* q;  // [Dh]
  int head_dim;    // Dh
  const void* k;
  const void* v;
  int64_t stride;
  int n;  // 1..64
  float scale;
  const float* k_scale;
  const float* v_scale;
  float* m;
  float* l;
  float* acc;
};

struct VecKernels {
  Isa isa;
  // x [k] -> k / 32 activation blocks.
  void (*quantize_row_q8a)(const float* x, size_t k, BlockQ8A* out);
  // `rows` consecutive weight rows (nb blocks each) from w, against ntok (1..4) activation rows
  // (row t at a + t * a_stride blocks): out[t * out_stride + r] = dot(weight row r, a_t).
  // The vector kernels take 8 weight rows per pass, one row per lane, so the per-block scale
  // work and the horizontal sums are shared by 8 rows and each unpacked weight block by the
  // tokens. Each (row, token) dot is computed the same way whatever `rows` and `ntok` are, so a
  // token's output does not depend on the batch it is in.
  void (*dot_q4_1_rows)(const BlockQ4_1* w, int64_t rows, const BlockQ8A* a, size_t a_stride,
                        int ntok, int nb, float* out, size_t out_stride);
  void (*dot_q8_0_rows)(const BlockQ8_0* w, int64_t rows, const BlockQ8A* a, size_t a_stride,
                        int ntok, int nb, float* out, size_t out_stride);
  // Conversions of n values.
  void (*f16_to_f32)(const uint16_t* x, float* y, size_t n);
  void (*f32_to_f16)(const float* x, uint16_t* y, size_t n);
  // Attention inner loops: dot(a [n] f32, b [n] f16) and y [n] += alpha * x [n] (x f16).
  float (*dot_f32_f16)(const float* a, const uint16_t* b, int n);
  void (*axpy_f16)(float alpha, const uint16_t* x, float* y, int n);
  // The same for the other KV cache formats (kv_quant.h): bf16 values, int8 codes, FP8 E4M3 codes
  // (decoded exactly, as DecodeE4M3). A quantized row's scale is the caller's to apply.
  float (*dot_f32_bf16)(const float* a, const uint16_t* b, int n);
  void (*axpy_bf16)(float alpha, const uint16_t* x, float* y, int n);
  float (*dot_f32_i8)(const float* a, const int8_t* b, int n);
  void (*axpy_i8)(float alpha, const int8_t* x, float* y, int n);
  float (*dot_f32_e4m3)(const float* a, const uint8_t* b, int n);
  void (*axpy_e4m3)(float alpha, const uint8_t* x, float* y, int n);
  // AttendBlockArgs' step, one per KvFormat (indexed by its value): the attention kernels' inner
  // loop over a block, with the scores, their exponentials and the value sums each in one pass.
  void (*attend_block[4])(const AttendBlockArgs& a);
};

const VecKernels& ScalarKernels();
// REQUIRES: CpuHasAvx2() (calling the table's functions otherwise faults with SIGILL).
const VecKernels& Avx2Kernels();
const VecKernels& KernelsFor(Isa isa);

}  // namespace kvgate::kernels::cpu
