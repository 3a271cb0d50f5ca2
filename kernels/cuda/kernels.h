// kvgate's CUDA kernels: the public API of kernels/cuda. Every launcher enqueues work on `stream`,
// checks its arguments and the launch, and returns a CudaStatus (never exits). Launchers do not
// synchronize; a fault inside a kernel surfaces at the caller's next synchronizing call.
// Dimension letters and the KV cache layout are defined in geometry.h. Tensors are row-major,
// activations bf16; "stride" arguments are elements between consecutive tokens, which lets Q, K and V
// be read in place from one fused QKV GEMM output [T][(Hq + 2 Hkv) D].
// Thread safety: launchers are reentrant; GemmBf16 is not (one per stream).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/geometry.h"

namespace kvgate::cuda {

using bf16 = __nv_bfloat16;

// kF16 is the CPU backend's cache type (backend.h KvCacheLayer); both attention kernels read f16
// K/V exactly (prefill through f16 tensor-core mma, q converted to f16 for it). ReshapeAndCache
// writes bf16 and FP8 caches only.
enum class KvDtype { kBf16, kF16, kFp8E4M3 };

// One layer's paged KV cache in device memory.
struct PagedKv {
  void* k = nullptr;              // [NB][B][Hkv][D] bf16, f16 or FP8 E4M3
  void* v = nullptr;              // [NB][B][Hkv][D]
  float* k_scale = nullptr;       // [NB][Hkv], FP8 only
  float* v_scale = nullptr;       // [NB][Hkv], FP8 only
  int num_blocks = 0;             // NB
  int num_kv_heads = 0;           // Hkv
  int head_dim = 0;               // D
  KvDtype dtype = KvDtype::kBf16;
};

// Number of SMs of the current device (cached by the caller; cudaGetDeviceProperties is slow).
CudaStatus DeviceSmCount(int* num_sms);
// Errors with kNoDevice when cudaGetDeviceCount reports none: "no CUDA device found".
CudaStatus RequireDevice();

// ---- attention ---------------------------------------------------------------------------------

struct DecodeAttentionArgs {
  const bf16* q = nullptr;               // [S][Hq][D], token stride q_stride
  int64_t q_stride = 0;                  // elements between sequences' rows (>= Hq * D)
  bf16* out = nullptr;                   // [S][Hq][D] contiguous
  PagedKv kv;
  const int32_t* block_tables = nullptr;  // [S][block_table_stride]; stride 0 = all share row 0
  int block_table_stride = 0;
  const int32_t* context_lens = nullptr;  // [S], new token included, each in [1, max_context]
  int num_q_heads = 0;                    // Hq
  float softmax_scale = 0.0f;             // usually 1 / sqrt(D)
  DecodeGeometry geo;                     // from ChooseDecodeGeometry for this batch
  float* workspace = nullptr;             // geo.workspace_floats floats when geo.splits > 1
};
// out[s][h] = softmax(q[s][h] . K[s, 0..ctx) * scale) V, with K/V of kv head h / G.
CudaStatus DecodeAttention(const DecodeAttentionArgs& a, cudaStream_t stream);

// CTAs of the decode kernel for (cache type, D, G, variant) that fit one SM of the current device
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor): DecodeShape::ctas_per_sm. Callers cache it.
CudaStatus DecodeCtasPerSm(KvDtype dtype, int head_dim, int group, DecodeVariant variant, int* ctas_per_sm);

struct PrefillAttentionArgs {
  const bf16* q = nullptr;               // [T][Hq][D], token stride q_stride
  int64_t q_stride = 0;
  bf16* out = nullptr;                   // [T][Hq][D] contiguous
  PagedKv kv;                            // already holds the new tokens' K/V (ReshapeAndCache)
  const int32_t* block_tables = nullptr;  // [S][block_table_stride]
  int block_table_stride = 0;
  const int32_t* q_start = nullptr;       // [S + 1]: sequence s owns rows [q_start[s], q_start[s+1])
  const int32_t* context_lens = nullptr;  // [S]: cached prefix + new tokens
  const int32_t* tiles = nullptr;         // [geo.num_tiles][2] from BuildPrefillTiles
  int tile_tokens = 0;                    // the tile_tokens those tiles were built with
  int num_q_heads = 0;
  float softmax_scale = 0.0f;
  PrefillGeometry geo;                    // from ChoosePrefillGeometry
  float* workspace = nullptr;             // geo.workspace_floats when geo.splits > 1
};
// Causal: query row i of sequence s is at position ctx - q_len + i and sees keys 0..that position.
// REQUIRES: q_len <= ctx for every sequence; tiles from BuildPrefillTiles(q_lens, tile_tokens) with
// tile_tokens == geo.tile_tokens (checked) and geo.num_tiles their count. q and out 4-byte aligned
// (v1's 32-bit fragment loads and stores; v2 needs 16 bytes), q_stride even.
CudaStatus PrefillAttention(const PrefillAttentionArgs& a, cudaStream_t stream);

// ---- KV cache writes and copies ------------------------------------------------------------------

// Writes k [T][Hkv][D] (stride k_stride) and v (stride v_stride) to kv at slots [T] (negative =
// skip). bf16 cache: a plain copy. FP8 cache: `segments` (BuildCacheSegments of the same slots,
// device copy) are REQUIRED; each (segment, kv head) CTA computes amax of the new values, raises
// the block's scale to max(old, amax / 448) (old = none when the segment starts at offset 0) and
// re-encodes the block's earlier tokens when the scale grew.
struct CacheWriteArgs {
  const bf16* k = nullptr;
  int64_t k_stride = 0;
  const bf16* v = nullptr;
  int64_t v_stride = 0;
  const int32_t* slots = nullptr;         // [T]
  int num_tokens = 0;                     // T
  const CacheSegment* segments = nullptr;  // FP8 only
  int num_segments = 0;
  PagedKv kv;
};
CudaStatus ReshapeAndCache(const CacheWriteArgs& a, cudaStream_t stream);

// Copies whole blocks between two pools for each of `num_planes` planes (layers x {K, V} x
// {data, scales}): dst_planes[p] + pairs[i].y * bytes_per_block[p] <- src_planes[p] + pairs[i].x *
// bytes_per_block[p]. Either side may be pinned host memory (cudaHostAlloc; UVA makes it device
// addressable) — this is the offload / restore path. All arrays are device-readable (device or
// pinned memory). bytes_per_block[p] must be a multiple of 16 and planes 16-byte aligned.
struct BlockCopyArgs {
  const void* const* src_planes = nullptr;  // [num_planes]
  void* const* dst_planes = nullptr;        // [num_planes]
  const int64_t* bytes_per_block = nullptr;  // [num_planes]
  int num_planes = 0;
  const int2* pairs = nullptr;               // [num_pairs] {src block, dst block}
  int num_pairs = 0;
};
CudaStatus CopyBlocks(const BlockCopyArgs& a, cudaStream_t stream);

// ---- elementwise -------------------------------------------------------------------------------

// out [R][C] = x / sqrt(mean(x^2) + eps) * w [C]; rows strided. out may alias x.
CudaStatus RmsNorm(const bf16* x, int64_t x_stride, const bf16* w, bf16* out, int64_t out_stride,
                   int rows, int cols, float eps, cudaStream_t stream);

// In place on q [T][Hq][D] and k [T][Hkv][D] (token strides given): rotates each pair (2i, 2i+1)
// by positions[t] * theta^(-2i / D) (GGUF llama interleaved pairs). k may be null.
CudaStatus RopeInterleaved(bf16* q, int64_t q_stride, int num_q_heads, bf16* k, int64_t k_stride,
                           int num_kv_heads, int head_dim, const int32_t* positions, int num_tokens,
                           float theta, cudaStream_t stream);

// out [T][F] = silu(gate_up[t][0..F)) * gate_up[t][F..2F); gate_up [T][2F].
CudaStatus SiluMul(const bf16* gate_up, bf16* out, int num_tokens, int ffn, cudaStream_t stream);

// out [n] bf16 from n / 32 GGUF blocks (quant_format.h). REQUIRES: n % 32 == 0.
CudaStatus DequantQ4_1(const uint8_t* blocks, int64_t n, bf16* out, cudaStream_t stream);
CudaStatus DequantQ8_0(const uint8_t* blocks, int64_t n, bf16* out, cudaStream_t stream);

// out [n] = EncodeE4M3(x / scale) through the hardware conversion (cvt.rn.satfinite); checks only.
CudaStatus EncodeFp8(const float* x, int64_t n, float scale, uint8_t* out, cudaStream_t stream);

// Deterministic uniform fill in [-scale, scale) from (seed, index); for random weights and tests.
CudaStatus FillUniformBf16(bf16* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace kvgate::cuda
