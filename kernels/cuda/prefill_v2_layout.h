// Which shared-memory element each lane addresses in prefill v2's ldmatrix loads (attention_prefill_v2.cu).
// Plain C++ usable on host and device: tests/cuda/prefill_v2_layout_test.cc replays the kernel's
// fragment loads and mma.m16n8k16 calls through a CPU emulation of both instructions (written from
// the PTX ISA text, see mma_sm80.cuh) and checks S = Q K^T and O = P V element by element. That
// check is the only one these layouts have had before a GPU runs them.
//
// Each function returns the (row, column) of the first of the 8 consecutive bf16 elements (16
// bytes) lane `lane` points ldmatrix.x4 at. Matrix m of the x4 is addressed by lanes 8m .. 8m+7.
#pragma once

#if defined(__CUDACC__)
#define KVGATE_PREFILL_V2_HD __host__ __device__
#else
#define KVGATE_PREFILL_V2_HD
#endif

namespace kvgate::cuda::prefill_v2 {

struct RowCol {
  int row, col;
};

// Q tile [128 rows][D], k-step kk of warp w (no .trans): matrices (rows 0-7 | 8-15) x (dims 0-7 |
// 8-15) in the order 0-7/0-7, 8-15/0-7, 0-7/8-15, 8-15/8-15 = the mma A registers a[0..3].
KVGATE_PREFILL_V2_HD constexpr RowCol QAddr(int lane, int warp, int kk) {
  return {warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8};
}

// K tile [64 keys][D], keys np*16.., k-step kk (no .trans): matrices keys 0-7/dims 0-7, keys
// 0-7/dims 8-15, keys 8-15/dims 0-7, keys 8-15/dims 8-15 = b[0], b[1] of key tile 2 np, then b[0],
// b[1] of key tile 2 np + 1.
KVGATE_PREFILL_V2_HD constexpr RowCol KAddr(int lane, int np, int kk) {
  return {np * 16 + (lane >> 4) * 8 + (lane & 7), kk * 16 + ((lane >> 3) & 1) * 8};
}

// V tile [64 keys][D], keys k2*16.., dims dp*16.. (.trans): matrices keys 0-7/dims 0-7, keys
// 8-15/dims 0-7, keys 0-7/dims 8-15, keys 8-15/dims 8-15 = b[0], b[1] of dim tile 2 dp, then b[0],
// b[1] of dim tile 2 dp + 1.
KVGATE_PREFILL_V2_HD constexpr RowCol VAddr(int lane, int k2, int dp) {
  return {k2 * 16 + (lane & 15), dp * 16 + (lane >> 4) * 8};
}

}  // namespace kvgate::cuda::prefill_v2

#undef KVGATE_PREFILL_V2_HD
