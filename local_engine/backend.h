// The compute backend interface of the built-in engine. ModelRunner is its only caller: it describes
// each step with an explicit BatchMetadata and calls these ops layer by layer. The CPU backend
// (cpu_backend.h) and the CUDA backend (local_engine/cuda_backend.h) implement it; device.h builds
// the one an engine asks for.
//
// Dimension letters: T tokens in the batch, S sequences, D hidden size, K input features, N output
// features, H query heads, Hkv key/value heads, Dh head dim, V vocabulary, P cache slots.
//
// Memory: every `float*` / `uint16_t*` an op takes points into memory from Allocate() (or, for
// weights, from UploadWeights()); host spans in BatchMetadata are small and read during the call.
// Ops run in issue order; results are visible to the host after Synchronize().
//
// Thread safety: a Backend is used by one thread at a time (the engine thread).
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/error.h"
#include "local_engine/block_size.h"
#include "local_engine/gguf.h"
#include "local_engine/kv_dtype.h"

namespace kvgate::engine {

// Where a batch's tokens come from, where their K/V go and what they attend to. Sequence s owns the
// token rows [query_start[s], query_start[s+1]): its newest tokens (a prefill chunk, or one decode
// token), which are the last ones of its context_lens[s] tokens. Token rows are grouped by sequence.
struct BatchMetadata {
  std::span<const int32_t> token_ids;     // [T]
  std::span<const int32_t> positions;     // [T] position of each token within its sequence
  std::span<const int64_t> slot_mapping;  // [T] cache slot = block * block_size + offset (-1: skip)
  std::span<const int32_t> query_start;   // [S + 1], query_start[0] == 0, query_start[S] == T
  std::span<const int32_t> context_lens;  // [S] cached prefix + this chunk
  std::span<const int32_t> block_tables;  // [S, max_blocks_per_seq] physical block ids, -1 padded
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = kBlockSize;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(context_lens.size()); }
};

// Checks the internal consistency of `b` against a cache of `num_blocks` blocks (sizes, ordering,
// positions consistent with context lengths, slots and block ids in range, block tables long enough).
Status ValidateBatch(const BatchMetadata& b, int64_t num_blocks);

// A 2-D quantized weight [N rows = ne1, K cols = ne0] in GGUF block layout, in backend memory.
struct WeightMatrix {
  GgmlType type = GgmlType::kQ4_1;  // kQ4_1 or kQ8_0
  const void* data = nullptr;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K, a multiple of 32
  // The model's output head (the logits' MatMul): a backend that lowers the GEMM precision of the
  // other weights (CudaBackendOptions::fp8_gemm) keeps this one as it is, the way FP8 checkpoints
  // leave the head unquantized (bench/fp8_gemm measured why: it halves the cost).
  bool output_head = false;
};

// One matmul target: out [T, w->rows] = x [T, K] * w^T.
struct MatMulOutput {
  const WeightMatrix* w;
  float* out;
};

// One layer's paged KV cache: num_blocks blocks for K and as many for V. f16 and bf16 blocks are
// [block_size][Hkv][Dh] values; int8 and fp8 blocks are [block_size][Hkv][Dh] codes followed by
// [block_size][Hkv] f16 scales (kernels/cpu/kv_quant.h).
struct KvCacheLayer {
  void* k = nullptr;
  void* v = nullptr;
  int32_t num_blocks = 0;  // the pool size (a device backend's kernel argument: fixed per cache)
  KvDtype dtype = KvDtype::kFp16;
  int32_t kv_heads = 0;  // Hkv (a quantized row is one token's one kv head)
  int32_t head_dim = 0;  // Dh
};

struct AttentionShape {
  int64_t heads = 0;     // H
  int64_t kv_heads = 0;  // Hkv, divides H
  int64_t head_dim = 0;  // Dh
  float scale = 0.0f;    // usually 1 / sqrt(Dh)
};

// Backend memory; freed when the last copy of the handle goes.
struct DeviceBuffer {
  std::shared_ptr<void> mem;
  size_t bytes = 0;
  void* data() const { return mem.get(); }
  float* f32() const { return static_cast<float*>(mem.get()); }
};

// One plane of a whole-block copy (Backend::CopyBlocks): block i is the `block_bytes` bytes at
// base + i * block_bytes. A KV pool is 2 planes per layer (K, V); an offload tier's host slots
// mirror them. (BlockCopy, the block pairs, is in block_size.h.)
struct BlockPlane {
  std::byte* base = nullptr;
  int64_t block_bytes = 0;
};

// How a backend runs one whole step (ModelRunner::Forward between BeginStep and EndStep):
//   kEager    the ops run as they are issued (the CPU backend, and any step not captured);
//   kCapture  the ops are recorded, not run; EndStep runs the recording (a CUDA graph);
//   kReplayed the backend already launched the recording of an earlier step with the same key:
//             the caller issues no ops, only EndStep.
enum class StepMode { kEager, kCapture, kReplayed };

// What makes two steps replayable by one recording: every op argument the caller passes that is
// not per-step metadata (BatchMetadata contents and the gather rows, which the backend stages at a
// fixed address in BeginStep) must be a function of the key. The split-K context bound of a
// recorded decode step is table_width * block_size, so the caller keeps table_width to a few
// values (the engine pads it to a power of two).
struct StepKey {
  int64_t tokens = 0;        // T
  int64_t rows_out = 0;      // R (rows of the output head)
  int32_t table_width = 0;   // BatchMetadata::max_blocks_per_seq
  uint64_t activations = 0;  // generation of the caller's activation buffers (bumped on regrowth)
  bool graph = false;        // may be recorded: a decode step (one token per sequence) whose caller
                             // asked for graphs; false: always eager
  friend auto operator<=>(const StepKey&, const StepKey&) = default;
};

// The key of a step of `batch` with `rows_out` output rows; graph only when `graphs` and every
// sequence has exactly one query token.
StepKey MakeStepKey(const BatchMetadata& batch, int64_t rows_out, uint64_t activations, bool graphs);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view Name() const = 0;

  // Zero-initialised memory of `bytes`, 64-byte aligned. kResourceExhausted when it cannot.
  virtual Result<DeviceBuffer> Allocate(size_t bytes) = 0;
  // The most memory this backend's allocations could ever get (the machine's RAM for the CPU),
  // so that a KV pool that cannot fit is refused before zeroing it gets the process killed;
  // 0 when unknown.
  virtual size_t MemoryCapacity() const { return 0; }
  // Makes host bytes (an mmap'd GGUF tensor that outlives the backend's use of it) usable by ops
  // and returns their backend address. The CPU backend returns `host` itself (no copy).
  virtual Result<const void*> UploadWeights(const void* host, size_t bytes) = 0;
  virtual void CopyToHost(const void* src, void* dst, size_t bytes) = 0;
  // Copies host bytes into memory from Allocate() (the KV offload tier's restores). False when
  // this backend cannot (the default); the CPU backend can.
  virtual bool CopyFromHost(const void* src, void* dst, size_t bytes) {
    (void)src, (void)dst, (void)bytes;
    return false;
  }
  // Host memory for the offload tier's host slots, zeroed: page-locked on a device backend, so
  // that CopyBlocks to and from it is DMA queued with the ops; plain memory on the CPU (the
  // default: Allocate, which is host memory there).
  virtual Result<DeviceBuffer> AllocateHost(size_t bytes) { return Allocate(bytes); }
  // For every plane p and copy c: block c.dst of dst[p] <- block c.src of src[p] (src.size() ==
  // dst.size(), equal block_bytes per plane). Either side may be Allocate() or AllocateHost()
  // memory. In issue order with the ops: a device backend queues the copy on its stream and does
  // not wait for it (the host sees dst after Synchronize()), so a restore overlaps whatever the
  // device is still computing. False when this backend cannot (the default); errors go to
  // status().
  virtual bool CopyBlocks(std::span<const BlockPlane> src, std::span<const BlockPlane> dst,
                          std::span<const BlockCopy> copies) {
    (void)src, (void)dst, (void)copies;
    return false;
  }
  virtual void Synchronize() = 0;
  // Whether WriteKv and Attention serve a KvCacheLayer of `dtype`. ModelRunner::Create refuses a
  // cache of any other (so a backend never silently reads one format as another). Default: f16.
  virtual bool SupportsKvDtype(KvDtype dtype) const { return dtype == KvDtype::kFp16; }
  // The first error an op met, or ok. Ops return void because the CPU ones cannot fail; a device
  // backend keeps its first failure here (later ops then do nothing) and the caller checks it
  // after Synchronize().
  virtual Status status() const { return {}; }

  // Brackets the ops of one step. `batch` and `gather_rows` (GatherRows' rows) are the spans the
  // step's ops will receive; a device backend copies them to fixed device addresses here (one copy
  // per step) and may return kCapture or kReplayed for a key.graph step; the default (CPU) is
  // kEager and changes nothing. EndStep returns false when the backend abandoned the capture (it
  // needed an allocation it cannot record): the caller issues the step's ops again, which then run
  // eagerly, and calls EndStep once more (true then). Errors go to status(), as for ops.
  virtual StepMode BeginStep(const BatchMetadata& batch, std::span<const int32_t> gather_rows,
                             const StepKey& key) {
    (void)batch, (void)gather_rows, (void)key;
    return StepMode::kEager;
  }
  virtual bool EndStep() { return true; }

  // out [T, D] = rows batch.token_ids of table [V, D] (Q8_0 or Q4_1), dequantized.
  // REQUIRES: every token id < table.rows (ModelRunner checks).
  virtual void Embed(const WeightMatrix& table, const BatchMetadata& batch, float* out) = 0;
  // out [T, D] = x / sqrt(mean(x^2) + eps) * weight [D]; out may alias x.
  virtual void RmsNorm(const float* x, const float* weight, int64_t t, int64_t d, float eps,
                       float* out) = 0;
  // Quantized matmul of one activation x [T, K] against each target's weight (all with K columns).
  // Grouping Q/K/V or gate/up in one call lets the backend quantize x once and dispatch once.
  virtual void MatMul(const float* x, int64_t t, int64_t k, std::span<const MatMulOutput> outs) = 0;
  // In place on x [T, heads, Dh]: interleaved-pair RoPE (pairs 2i, 2i+1; GGUF llama layout) at
  // batch.positions with frequency base `theta`.
  virtual void Rope(float* x, int64_t heads, int64_t head_dim, float theta,
                    const BatchMetadata& batch) = 0;
  // Stores k, v [T, Hkv * Dh] at batch.slot_mapping in the layer's cache.
  virtual void WriteKv(const float* k, const float* v, int64_t kv_dim, const BatchMetadata& batch,
                       const KvCacheLayer& cache) = 0;
  // out [T, H, Dh] = causal GQA of q [T, H, Dh] over each sequence's cached prefix and itself, read
  // through batch.block_tables. The batch's own K/V must already be written (WriteKv).
  virtual void Attention(const float* q, const KvCacheLayer& cache, const AttentionShape& shape,
                         const BatchMetadata& batch, float* out) = 0;
  // out [n] = silu(gate) * up; out may alias either input.
  virtual void SwiGlu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // x [n] += y [n].
  virtual void Add(float* x, const float* y, int64_t n) = 0;
  // out [R, D] = x [rows[r], :] for x [*, D] (picks each sequence's last token before the output
  // head). out must not alias x.
  virtual void GatherRows(const float* x, int64_t d, std::span<const int32_t> rows, float* out) = 0;
  // The (tied) output head is MatMul against token_embd [V, D] (Q8_0): logits [S, V].
};

}  // namespace kvgate::engine
