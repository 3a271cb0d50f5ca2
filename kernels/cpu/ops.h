// CPU implementations of the model ops, multithreaded through a ThreadPool, on top of the vec.h
// dispatch table. Dimension letters: T tokens in the batch, K input features, N output features,
// D hidden size, H query heads, Hkv key/value heads, Dh head dim, S sequences, P cache slots
// (num_blocks * block_size). All activations are f32, row-major; the KV cache is f16, bf16, int8
// or FP8 (kv_quant.h has its layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec.h"

namespace kvgate::kernels::cpu {

enum class WeightType { kQ4_1, kQ8_0 };

// A quantized weight matrix [N rows, K cols], row-major blocks (K / 32 blocks per row).
struct QMatrix {
  WeightType type = WeightType::kQ4_1;
  const void* data = nullptr;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K, a multiple of 32
};

struct CpuContext {
  const VecKernels* kernels;
  ThreadPool* pool;
  std::vector<BlockQ8A>* q8_scratch;  // grows to T * K / 32 blocks; reused across calls
};

// outs[i] [T, ws[i]->rows] = x [T, K] * ws[i]^T, for matrices sharing K (one quantization of x and
// one pool dispatch for e.g. Q, K and V together). The activation rows are quantized to Q8A blocks.
// REQUIRES: every ws[i]->cols == K, K % 32 == 0, outs[i] do not alias x.
void MatMul(const CpuContext& ctx, const float* x, int64_t t, int64_t k,
            std::span<const QMatrix* const> ws, std::span<float* const> outs);

// out [T, K] = rows `ids` [T] of a Q8_0 table [N, K], dequantized. REQUIRES: 0 <= ids[i] < N.
void EmbedRows(const QMatrix& table, std::span<const int32_t> ids, float* out);

// out [T, D] = x / sqrt(mean(x^2) + eps) * w [D]. out may alias x.
void RmsNorm(const CpuContext& ctx, const float* x, const float* w, int64_t t, int64_t d, float eps,
             float* out);

// In place on x [T, H, Dh]: rotates each interleaved pair (2i, 2i+1) of every head by the angle
// positions[t] * theta^(-2i / Dh) (GGUF "llama" / ggml rope mode 0), computed in float the way
// ggml does.
void RopeInterleaved(float* x, int64_t t, int64_t h, int64_t dh, std::span<const int32_t> positions,
                     float theta);

// out [n] = silu(gate) * up. out may alias gate or up.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// x [n] += y [n].
void AddInPlace(float* x, const float* y, int64_t n);

// Writes k, v [T, Hkv * Dh] into one layer's caches (each num_blocks blocks of `layout`) at slots
// slots[T] (slot = block * block_size + offset), converting or quantizing each (token, kv head)
// row to the layout's format; a negative slot skips the token. REQUIRES: slots[i] < P.
void WriteKv(const CpuContext& ctx, const float* k, const float* v, int64_t t,
             std::span<const int64_t> slots, const KvLayout& layout, void* k_cache, void* v_cache);

// Causal grouped-query attention over a paged cache. Sequence s owns query rows
// [query_start[s], query_start[s+1]) of q, which are its last (query_start[s+1] - query_start[s])
// tokens out of context_lens[s]; query i of s sees cache positions 0 .. context_lens[s] - qlen + i,
// found through block_tables[s * max_blocks + pos / block_size]. The chunk's own K/V must already
// be written. Queries are rounded to f16 before Q.K (as llama.cpp does with its f16 cache; kept for
// every format, so that a format's effect is the cache's alone). out [T, H, Dh].
// The format picks one of the kernel table's attend_block steps, once per call.
struct PagedAttentionArgs {
  const float* q;        // [T, H, Dh]
  const void* k_cache;   // num_blocks blocks of KvLayout{format, block_size, kv_heads, head_dim}
  const void* v_cache;
  int64_t num_tokens;       // T
  int64_t heads, kv_heads, head_dim;
  int64_t block_size;
  std::span<const int32_t> query_start;   // [S + 1]
  std::span<const int32_t> context_lens;  // [S]
  std::span<const int32_t> block_tables;  // [S, max_blocks]
  int64_t max_blocks;
  float scale;  // usually 1 / sqrt(Dh)
  float* out;   // [T, H, Dh]
  KvFormat format = KvFormat::kF16;
};
// REQUIRES: Dh <= 256, block_size <= 64, heads % kv_heads == 0.
void PagedAttention(const CpuContext& ctx, const PagedAttentionArgs& a);

}  // namespace kvgate::kernels::cpu
