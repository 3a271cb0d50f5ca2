// ModelRunner: the only engine code that touches tensors. It owns the paged KV cache and the
// activation buffers and runs a Llama forward pass for a batch described by BatchMetadata through
// a Backend. Which blocks belong to which sequence is the caller's business (block tables in the
// batch); the runner only checks that they are in range.
//
// Letters: T tokens, S sequences, D hidden, F FFN, H heads, Hkv KV heads, Dh head dim, V vocab.
// Thread safety: single-threaded (the engine thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"
#include "local_engine/backend.h"
#include "local_engine/weights.h"

namespace kvgate::engine {

struct KvCacheConfig {
  int32_t num_blocks = 256;  // 16-token blocks shared by all sequences
  int32_t block_size = kBlockSize;
  KvDtype dtype = KvDtype::kFp16;  // one of f16, bf16, int8, fp8 (the backend must serve it)
};

// KV bytes per token across all layers (K and V, values and scales) for a model of `dims` and a
// cache of `dtype`: kv_dtype.h's KvBytesPerTokenMha, the same figure `kvgate kv-size` prints.
int64_t KvBytesPerToken(const LlamaDims& dims, KvDtype dtype);
// Blocks of `block_size` tokens that fit in `bytes` (rounded down).
int64_t KvBlocksForBytes(const LlamaDims& dims, KvDtype dtype, int32_t block_size, uint64_t bytes);

struct RunnerOptions {
  // Mark decode steps (one token per sequence) as recordable (StepKey::graph): a device backend
  // may then capture and replay them (CUDA graphs). The caller keeps such steps shape-stable
  // (EngineOptions::cuda_graphs pads them). Off: every step is eager.
  bool decode_graphs = false;
};

enum class LogitsMode {
  kLastPerSequence,  // logits [S, V] for each sequence's last token in the batch
  kAllTokens,        // logits [T, V] (tests)
};

class ModelRunner {
 public:
  // `weights` and `backend` must outlive the runner. Allocates the KV cache: per layer K and V of
  // num_blocks blocks of config.dtype (backend.h KvCacheLayer). kInvalidArgument when the backend
  // cannot serve that dtype.
  static Result<std::unique_ptr<ModelRunner>> Create(const ModelWeights& weights, Backend& backend,
                                                     KvCacheConfig config,
                                                     RunnerOptions options = {});

  // Runs one step, bracketed by Backend::BeginStep/EndStep (the ops are not issued when the
  // backend replays a recording; issued twice when it abandons a capture). Errors
  // (kInvalidArgument) for inconsistent metadata or token ids >= V; the cache is left untouched
  // then. A device backend's failure (Backend::status()) is returned too; the cache's contents are
  // undefined after one. `abort`, when given, is read before each layer of an eager step (not of
  // a recorded one, which runs whole): once it is set the step issues nothing more and Forward
  // returns kCancelled, with the cache's slots of this batch holding garbage and the rest intact.
  Status Forward(const BatchMetadata& batch, LogitsMode mode, std::vector<float>& logits,
                 const std::atomic<bool>* abort = nullptr);

  const LlamaDims& dims() const { return weights_.dims; }
  const KvCacheConfig& kv_config() const { return config_; }
  // KV bytes per token across all layers (K and V, values and scales): the free function above.
  int64_t KvBytesPerToken() const { return engine::KvBytesPerToken(weights_.dims, config_.dtype); }
  // KV bytes of one block across all layers: what the offload tier keeps per block.
  int64_t KvBytesPerBlock() const { return KvBytesPerToken() * config_.block_size; }
  // Copies block `block`'s K and V of every layer to `out`, laid out [layer][K, V][one block as
  // KvCacheLayer lays it out: values, then scales for int8 / fp8] (KvBytesPerBlock() bytes,
  // contiguous so that one tier slot is one transfer), and
  // back. kInvalidArgument for a block out of range or a wrong size; WriteBlock: kUnavailable when
  // the backend cannot copy into its memory (Backend::CopyFromHost).
  Status ReadBlock(int32_t block, std::span<std::byte> out);
  Status WriteBlock(int32_t block, std::span<const std::byte> in);
  // Copies block `src`'s K and V of every layer into block `dst` (a fork's copy on write): one
  // Backend::CopyBlocks where the backend has it, else through host memory (WriteBlock's errors).
  Status CopyBlock(int32_t src, int32_t dst);
  // The pool as Backend::CopyBlocks planes: [layer][K, V], each block's bytes as ReadBlock lays
  // one layer's K or V out (KvBytesPerBlock() / (2 * layers) per plane). An offload tier's host
  // slots are planes of the same block_bytes.
  std::vector<BlockPlane> KvPlanes() const;

 private:
  ModelRunner(const ModelWeights& weights, Backend& backend, KvCacheConfig config,
              RunnerOptions options)
      : weights_(weights), backend_(backend), config_(config), options_(options) {}
  Status EnsureActivations(int64_t t, int64_t rows_out);
  // Every op of one forward pass (the layers, the gather and the output head). False when `abort`
  // stopped it before a layer.
  bool IssueOps(const BatchMetadata& batch, int64_t rows_out, const std::atomic<bool>* abort);

  // Constant after construction.
  const ModelWeights& weights_;
  Backend& backend_;
  const KvCacheConfig config_;
  const RunnerOptions options_;
  std::vector<DeviceBuffer> k_cache_, v_cache_;  // per layer

  // Activations, grown to the largest batch seen; the generation counts regrowths (StepKey).
  int64_t capacity_tokens_ = 0, capacity_rows_ = 0;
  uint64_t activation_generation_ = 0;
  DeviceBuffer x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_;  // [T, *]
  DeviceBuffer last_, logits_;                                // [R, D], [R, V]
  std::vector<int32_t> rows_;
};

}  // namespace kvgate::engine
