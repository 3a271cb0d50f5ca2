// What the prefill kernels do alike with a tile's scores and results (nvcc only). A thread holds two
// rows of a 16-row slice, a = g and b = g + 8 (g = lane / 4), as the mma / wgmma accumulator
// layout gives them: s[n][c] is 8-key column group n, element c (row a for c < 2, b otherwise,
// key 8n + 2t + (c & 1)); o[j][c] the same for 8-dim output group j. v1 shares the softmax step
// with exp2f (kFastExp false: the arithmetic it ran with on the H200), v2 and v3 use ex2.approx.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace kvgate::cuda {

// One key tile of online softmax in the log2 domain: s holds scaled, masked scores (-inf where
// masked) and leaves as probabilities against the rows' running maxima m; l (the rows' sums of
// this thread's columns) and o are rescaled to the new maxima. A row's 64 scores are spread over
// the 4 lanes of its quad, which exchange their maxima.
template <bool kFastExp = true, int kNT, int kDT>
__device__ __forceinline__ void OnlineSoftmaxStep(float (&s)[kNT][4], float (&o)[kDT][4], float& m_a, float& m_b,
                                                  float& l_a, float& l_b) {
  auto exp2 = [](float x) { return kFastExp ? Exp2Approx(x) : exp2f(x); };
  float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
    mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
  }
  const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
  // A row with no visible key yet keeps m = -inf; 0 as the reference makes exp2 give 0, not NaN.
  const float ref_a = mn_a == -INFINITY ? 0.0f : mn_a, ref_b = mn_b == -INFINITY ? 0.0f : mn_b;
  const float alpha_a = exp2(m_a - ref_a), alpha_b = exp2(m_b - ref_b);
  m_a = mn_a;
  m_b = mn_b;
  l_a *= alpha_a;
  l_b *= alpha_b;
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    s[n][0] = exp2(s[n][0] - ref_a);
    s[n][1] = exp2(s[n][1] - ref_a);
    s[n][2] = exp2(s[n][2] - ref_b);
    s[n][3] = exp2(s[n][3] - ref_b);
    l_a += s[n][0] + s[n][1];
    l_b += s[n][2] + s[n][3];
  }
#pragma unroll
  for (int j = 0; j < kDT; ++j) {
    o[j][0] *= alpha_a;
    o[j][1] *= alpha_a;
    o[j][2] *= alpha_b;
    o[j][3] *= alpha_b;
  }
}

// The rows' results: each quad's sums combined, O normalised and written, rows mapped back to
// (token, head) as the tile packs them (row r = token r / G of head kvh * G + r % G): bf16 into
// p.out, or with splits the f32 partial and its log2-sum-exp into p.workspace.
template <int D>
__device__ __forceinline__ void WritePrefillRows(const PrefillParams& p, const float (&o)[D / 8][4], float l_a,
                                                 float l_b, float m_a, float m_b, int64_t first_token, int kvh,
                                                 int row_a, int rows_valid, int split, int t) {
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  const int G = p.group;
  const int rows[2] = {row_a, row_a + 8};
  const float ls[2] = {l_a, l_b}, ms[2] = {m_a, m_b};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (rows[half] >= rows_valid) continue;
    const float inv = ls[half] > 0.0f ? 1.0f / ls[half] : 0.0f;
    const int64_t tok = first_token + rows[half] / G;
    const int h = kvh * G + rows[half] % G;
    if (p.splits == 1) {
      __nv_bfloat16* dst = p.out + (tok * p.num_q_heads + h) * D + 2 * t;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<uint32_t*>(dst + j * 8) = PackBf16(o[j][2 * half] * inv, o[j][2 * half + 1] * inv);
    } else {
      const int64_t n_rows = static_cast<int64_t>(p.num_q_tokens) * p.num_q_heads * p.splits;
      const int64_t r = (tok * p.num_q_heads + h) * p.splits + split;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        p.workspace[r * D + j * 8 + 2 * t] = o[j][2 * half] * inv;
        p.workspace[r * D + j * 8 + 2 * t + 1] = o[j][2 * half + 1] * inv;
      }
      if (t == 0) p.workspace[n_rows * D + r] = ls[half] > 0.0f ? ms[half] + log2f(ls[half]) : -INFINITY;
    }
  }
}

}  // namespace kvgate::cuda
