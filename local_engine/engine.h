// The built-in inference engine: continuous batching of requests over one model on the CPU or the
// CUDA backend (device.h).
//
//   auto engine = Engine::Create({.model_path = "...", .threads = 2});
//   auto id = (*engine)->AddRequest({prompt_ids, params, on_token});   // any thread
//   while ((*engine)->HasWork()) (*engine)->Step();                     // the engine thread
//
// Scheduling (scheduler.h): FCFS. Each Step runs one batch holding one decode token for every
// running sequence plus prefill chunks of admitted prompts, up to max_batch_tokens. When the KV
// cache runs out, the most recently admitted sequence is preempted and later recomputed (its
// blocks keep their hashes, so the recomputation mostly hits the prefix cache). A Step reads as
// schedule (admit, plan) -> run (the forward pass) -> sample -> postprocess.
//
// Cancellation: Cancel ends a request at the next Step; when the request is in the step running
// now, that step also stops between two layers (on the CPU backend; a recorded CUDA graph runs to
// its end) and its batch is recomputed without it, so a client that leaves, or a shutdown
// (CancelAll), never waits for a long prefill chunk to finish.
//
// Choices (n > 1): a request's prompt is computed once by its first sequence; in the step that
// completes it, before anything is sampled, n - 1 more sequences are forked off that share its
// blocks, and each samples its first token from the same logits. A fork that cannot get a block
// for the copy of a partial last block (or whose backend cannot copy blocks: cuda) waits as an
// ordinary sequence instead and recomputes that block, its full blocks still shared through the
// prefix cache.
//
// Prefix caching (BlockManager): at admission a prompt's leading full 16-token blocks that are in
// the cache are shared instead of computed; full blocks are registered in the cache once their K/V
// is written; finished sequences return their blocks tail-first, evicted LRU.
//
// Offload tier (KvTier, optional: a bounded file on cpu, OffloadTier; or host memory, pinned on
// cuda, HostTier): a hashed block the pool evicts is copied to the tier first (copy on eviction);
// at admission, after the pool's hits, the prompt's chain of
// block hashes continues in the tier, and the blocks found there are copied into the sequence's
// freshly allocated pool blocks and registered in the prefix cache before its prefill, which then
// computes only the rest.
//
// Thread safety: AddRequest, Cancel and HasWork may be called from any thread (they go through a
// mutex-protected inbox). Step and the accessors must be called from one thread (the engine
// thread); callbacks run on that thread, inside Step, and must not call Step.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "kernels/cpu/thread_pool.h"
#include "local_engine/backend.h"
#include "local_engine/block_manager.h"
#include "local_engine/device.h"
#include "local_engine/gguf.h"
#include "local_engine/kv_tier.h"
#include "local_engine/model.h"
#include "local_engine/sampler.h"
#include "local_engine/step_batch.h"
#include "local_engine/token_trie.h"
#include "local_engine/tokenizer.h"
#include "local_engine/weights.h"

namespace kvgate::engine {

struct Sequence;   // sequence.h
class Scheduler;   // scheduler.h
struct Admission;  // scheduler.h
struct Chunk;      // scheduler.h

enum class FinishReason {
  kNone,       // not finished
  kStop,       // end-of-generation token or a stop string
  kLength,     // max_tokens reached, or the model's context length
  kCancelled,  // Cancel() was called
  kError,      // the forward pass failed (the message is in TokenEvent::error)
};
std::string_view FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

// Of one choice: the prompt fields are the request's (the same in every choice: the prompt is
// computed once), completion_tokens that choice's own.
struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;       // prompt tokens reused from the prefix cache (first admission)
  int32_t completion_tokens = 0;
  int32_t cache_write_tokens = 0;  // prompt tokens this request newly wrote into the cache
  int32_t cached_offload_tokens = 0;  // of cached_tokens, restored from the offload tier
  std::string_view offload_tier;      // that tier's kind ("disk", "host"); empty without one
};

// How a prompt's leading tokens are cached right now, per tier (block aligned; together at most
// size - 1).
struct CachedPrefix {
  int pool_tokens = 0;     // in the KV pool (shared at admission)
  int offload_tokens = 0;  // after those, in the offload tier (copied back at admission)
};

// The KV cache as the scheduler sees it; for /api/engine and metrics (vLLM's meanings).
struct CacheStats {
  BlockManagerStats blocks;  // queries_tokens / hit_tokens = vLLM's prefix_cache_queries / _hits
  int64_t running = 0;
  int64_t waiting = 0;
  uint64_t preemptions = 0;
  uint64_t aborted_steps = 0;  // forward passes a cancel stopped between layers
  // The offload tier; all zero when there is none.
  bool offload = false;
  std::string offload_kind;  // "disk" or "host" (KvTier::kind)
  std::string offload_path;  // the file, or which host memory (KvTier::location)
  OffloadTierStats tier;
  uint64_t offload_hit_tokens = 0;   // prompt tokens restored from the tier at admission
  uint64_t offload_restores = 0;     // admissions that restored at least one block
  uint64_t offload_restore_ns = 0;   // time spent reading and copying them back
  uint64_t offload_store_ns = 0;     // time spent copying evicted blocks out
};

// One callback per generated token, plus a final one when the request ends without a token of its
// own (cancel, stop string, error): then token_id is -1. `text` is the newly complete UTF-8 text,
// with stop strings and end-of-generation tokens removed (possibly empty: bytes held back).
struct TokenEvent {
  uint64_t request_id = 0;
  int32_t choice = 0;  // 0 to n - 1 (EngineRequest::n); the request ends with n final events
  int32_t token_id = -1;
  std::string_view text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  Usage usage;        // so far; final when finished
  std::string error;  // when finish_reason == kError
  // The stop string that ended the output (finish_reason kStop); "" when another stop did.
  std::string_view stop_string;
  // With SamplingParams::logprobs >= 0: token_id's log probability and the likeliest tokens at
  // its step (sampler.h); null otherwise, and for end-of-generation tokens (not part of the text).
  const TokenLogprobs* logprobs = nullptr;
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids (nothing is added)
  SamplingParams sampling;
  std::function<void(const TokenEvent&)> on_token;
  // Choices (OpenAI's n), 1 to kMaxChoices and at most max_running: the prompt is computed once,
  // then forked into n sequences that share its KV blocks (the partial last block copied on
  // write) and are sampled independently. Each choice reports its own events (TokenEvent::choice)
  // and its own final one.
  int32_t n = 1;
  // The prefix cache's salt (0 = none): a prompt shares cached blocks only with requests of the
  // same salt, in the pool and in the offload tier, so that one tenant cannot learn from its
  // cache hits what another tenant's prompts were.
  uint64_t cache_salt = 0;
};

inline constexpr int32_t kMaxChoices = 128;  // OpenAI's bound on n

struct EngineOptions {
  std::string model_path;
  Device device = Device::kCpu;
  int threads = 2;                 // cpu: threads, the engine thread included
  // KV pool in 16-token blocks. 0: on cpu the memory of 512 f16 blocks (8192 tokens, 180 MiB for
  // SmolLM2-135M), so 992 blocks of int8 or fp8; on cuda gpu_memory_fraction of the device memory
  // still free once the weights and the activations of a max_batch_tokens step are allocated
  // (Create runs that step once to measure them).
  int32_t num_kv_blocks = 0;
  // The KV cache's element type (kv_dtype.h): f16, bf16, int8 or fp8 on cpu; f16 only on cuda
  // (Create refuses the others there).
  KvDtype kv_cache_dtype = KvDtype::kFp16;
  double gpu_memory_fraction = 0.9;  // (0, 1]
  int32_t max_batch_tokens = 512;  // tokens per Step (prefill chunk budget)
  int32_t max_running = 16;        // sequences in a batch
  bool force_scalar = false;       // portable kernels even on AVX2 CPUs (tests)
  bool enable_prefix_caching = true;
  // Record decode steps as CUDA graphs and replay them (device cuda): decode batches are padded
  // to power-of-two sizes and one KV block is kept aside for the padding (step_batch.h); on cpu
  // only the padding happens (tests use that). Off by default: built and tested without a GPU,
  // never run on one yet (kernels/NOTES.md, "CUDA graphs for decode").
  bool cuda_graphs = false;
  // MatMul in FP8 (E4M3, per-tensor scales) on device cuda (kernels/cuda/fp8_linear.h): the
  // GEMMs at about twice the bf16 rate, at the accuracy bench/fp8_gemm measures (docs/engine.md).
  // Off by default: built, never run on a GPU. kInvalidArgument on cpu.
  bool fp8_gemm = false;
  // The KV offload tier, which keeps the blocks the pool evicts; at most one, and it needs prefix
  // caching. Either a file at `disk_path` of at most `bytes` bytes (offload_tier.h; device cpu),
  // or `host_bytes` of host memory, page-locked on cuda (host_tier.h; any device). Neither: none.
  struct Offload {
    std::string disk_path;
    int64_t bytes = 0;
    int64_t host_bytes = 0;
  } offload;
};

class Engine {
 public:
  // Builds the device's backend, loads and checks the model and its tokenizer. Errors:
  // CheckDevice's (kUnavailable "device cuda: ..." without CUDA or a GPU), the GGUF reader's,
  // LoadWeights', Tokenizer's, or kResourceExhausted for the cache.
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();

  // Queues a request; its id is unique within this engine. kInvalidArgument for an empty prompt,
  // token ids outside the vocabulary, bad sampling parameters, or a prompt that cannot fit the
  // context length or the KV cache.
  Result<uint64_t> AddRequest(EngineRequest request);
  // Ends the request at the next Step (a final event with kCancelled); a step running it now
  // stops between layers. Unknown ids are ignored. Any thread.
  void Cancel(uint64_t request_id);
  // Cancel for every request added so far (shutdown). Any thread.
  void CancelAll();
  bool HasWork() const;

  // Runs one batch. Errors only for broken internal invariants; per-request failures finish that
  // request with kError instead.
  Status Step();

  // How many leading tokens of `prompt` the prefix cache holds right now for requests of
  // `cache_salt` (EngineRequest::cache_salt; block aligned, at most size - 1). Changes nothing (no
  // LRU order, no refcount, no counter). Any thread.
  int LookupCachedTokens(std::span<const int32_t> prompt, uint64_t cache_salt = 0) const;
  // The same split by tier: the pool's hits, then how far the chain continues in the offload
  // tier (an index lookup: a block found there may still turn out corrupt at admission). Changes
  // nothing. Any thread.
  CachedPrefix LookupCachedPrefix(std::span<const int32_t> prompt, uint64_t cache_salt = 0) const;
  // Any thread.
  CacheStats cache_stats() const;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const LlamaDims& dims() const { return weights_.dims; }
  const GgufFile& gguf() const { return *file_; }
  std::string_view backend_name() const { return backend_->Name(); }
  KvDtype kv_cache_dtype() const { return options_.kv_cache_dtype; }
  // The largest EngineRequest::n this engine takes: kMaxChoices, or max_running when lower.
  int32_t max_choices() const { return std::min(kMaxChoices, options_.max_running); }
  // Bytes of KV cache per token (values and scales): what `kvgate kv-size` prints for this model.
  int64_t kv_bytes_per_token() const { return runner_->KvBytesPerToken(); }

  struct TierWriter;  // engine_offload.cc

 private:
  Engine();  // engine_offload.cc, with the destructor
  // New requests into the scheduler's queue; cancellations finish theirs.
  void DrainInbox() REQUIRES(blocks_mu_);
  bool InFlight(uint64_t request_id) const REQUIRES(inbox_mu_);
  // The scheduler's admissions, with the offload tier's blocks restored into them.
  void Admit() REQUIRES(blocks_mu_);
  // The forward pass of the plan's chunks into logits_, with blocks_mu_ released meanwhile (held
  // on entry and on return). kCancelled when a cancel of one of the chunks'
  // requests stopped it between layers: nothing of the step is committed then.
  Status RunForward(std::span<const Chunk> chunks) REQUIRES(blocks_mu_);
  // After a forward pass: the chunks' tokens count as computed, their full blocks go into the
  // prefix cache, and each sequence whose last token was computed samples its next one.
  void Postprocess(std::span<const Chunk> chunks) REQUIRES(blocks_mu_);
  // The first choice's prompt is computed and `row` is the masked logits it samples from: forks
  // its other choices, each sampling its first token from a copy of `row`. blocks_mu_ as
  // RunTierIo's (a copied block's previous content goes to the tier first).
  void ForkChoices(Sequence& first, std::span<const float> row) REQUIRES(blocks_mu_);
  void Finish(Sequence& s, FinishReason reason, std::string error = {}) REQUIRES(blocks_mu_);

  // The offload tier (engine_offload.cc).
  Status OpenTier() REQUIRES(blocks_mu_);  // from options_.offload, at Create
  // Before s's allocation: how many blocks after the pool's hits the tier holds (pinned, so the
  // allocation's own evictions, stored in the tier, do not push them out).
  int TierBlocksFor(const Sequence& s) REQUIRES(blocks_mu_);
  // The tier's disk I/O, with blocks_mu_ released meanwhile (held on entry and on return; the
  // blocks written are owned by the engine thread's sequences alone, as in the forward pass):
  // stores the blocks the pool evicted since the last call, then copies each restore's blocks into
  // its sequence's fresh blocks (a block that fails its checksum ends that restore), registers
  // them, unpins them and calls NoteAdmitted. No-op without a tier.
  void RunTierIo(std::span<const Admission> restores) REQUIRES(blocks_mu_);
  // Constrained decoding: masks `logits` [V] to the tokens that keep s's output valid, and to
  // end-of-generation only once the value is complete.
  void ConstrainLogits(Sequence& s, std::span<float> logits);
  void OnSampled(Sequence& s, int32_t token) REQUIRES(blocks_mu_);
  void Emit(Sequence& s, int32_t token, std::string_view text, FinishReason reason,
            const TokenLogprobs* logprobs = nullptr);

  // Constant after Create. options_.num_kv_blocks is the pool's actual size; with cuda_graphs its
  // last block is the padding's scratch block (scratch_block_), outside the BlockManager's pool.
  EngineOptions options_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<kernels::cpu::ThreadPool> pool_;  // cpu only
  std::unique_ptr<Backend> backend_;
  ModelWeights weights_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> eog_tokens_;  // end-of-generation ids, sorted
  std::unique_ptr<TokenTrie> trie_;  // the vocabulary, for constrained decoding
  int32_t scratch_block_ = -1;       // cuda_graphs only
  int32_t pool_blocks_ = 0;          // the BlockManager's size (read by AddRequest, unlocked)

  mutable Mutex inbox_mu_;
  uint64_t next_id_ GUARDED_BY(inbox_mu_) = 1;
  std::vector<std::unique_ptr<Sequence>> inbox_ GUARDED_BY(inbox_mu_);
  std::vector<uint64_t> cancels_ GUARDED_BY(inbox_mu_);
  bool cancel_all_ GUARDED_BY(inbox_mu_) = false;
  int64_t live_requests_ GUARDED_BY(inbox_mu_) = 0;  // added and not yet finished
  // The requests of the forward pass running now.
  std::vector<uint64_t> in_flight_ GUARDED_BY(inbox_mu_);
  // Set (under inbox_mu_) when a request in in_flight_ is cancelled; the forward pass reads it
  // between layers.
  std::atomic<bool> abort_step_{false};

  // The block pool. Changed only on the engine thread, under blocks_mu_ (held by Step except
  // during the forward pass) so that LookupCachedTokens and cache_stats may read it from others.
  mutable Mutex blocks_mu_;
  std::unique_ptr<BlockManager> blocks_ GUARDED_BY(blocks_mu_);
  // The queues and the policy over blocks_; its queues change only while Step holds blocks_mu_.
  std::unique_ptr<Scheduler> scheduler_ GUARDED_BY(blocks_mu_);
  uint64_t aborted_steps_ GUARDED_BY(blocks_mu_) = 0;
  // The offload tier (null without one; the pointer is constant after Create, the tier locks its
  // own index) and its writer, the pool's eviction listener, whose list of evicted blocks the
  // engine thread alone touches.
  std::unique_ptr<KvTier> tier_;
  std::unique_ptr<TierWriter> tier_writer_;
  uint64_t offload_hit_tokens_ GUARDED_BY(blocks_mu_) = 0;
  uint64_t offload_restores_ GUARDED_BY(blocks_mu_) = 0;
  uint64_t offload_restore_ns_ GUARDED_BY(blocks_mu_) = 0;
  uint64_t offload_store_ns_ GUARDED_BY(blocks_mu_) = 0;

  // Engine thread only.
  std::vector<float> logits_;
  StepBatch batch_;  // the step's host arrays, reused
};

}  // namespace kvgate::engine
