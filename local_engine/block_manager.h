// The KV block pool: which 16-token blocks hold which tokens, shared by prefix, evicted LRU.
// Integers only — no tensors. The design follows vLLM v1's block pool:
//  - a fixed pool of blocks; only full blocks are hashed, as xxHash64(parent hash, token ids,
//    salt), and registered in a hash -> block map once their K/V has been computed;
//  - a hit is confirmed by comparing token ids (a hash collision is a miss, never wrong output);
//  - refcounts let concurrent sequences share blocks;
//  - free blocks sit in an intrusive doubly-linked LRU queue (head = evicted first); a free block
//    keeps its hash until it is reused (lazy eviction), so a later request can still hit it;
//  - a finished sequence returns its blocks tail-first, so its tail is evicted before its head;
//  - hits are capped so at least one prompt token is always computed (the model needs a query).
// Thread safety: none. The scheduler owns the BlockManager and calls it from the engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "local_engine/block_size.h"

namespace kvgate::engine {

// The blocks of one sequence. Owned by the sequence; changed only through BlockManager.
struct SequenceBlocks {
  std::vector<int32_t> block_ids;   // block table: token i lives in block_ids[i / 16]
  std::vector<uint64_t> hashes;     // hashes of the leading full blocks computed so far
  int num_cached_tokens = 0;        // prompt tokens reused from the cache at allocation
  int num_registered_blocks = 0;    // full blocks whose hash is registered (owned or hit)
  uint64_t salt = 0;                // cache salt (0 = none): separates tenants' caches
};

struct BlockManagerStats {
  int64_t num_blocks = 0;
  int64_t used_blocks = 0;          // refcount > 0
  int64_t cached_free_blocks = 0;   // refcount 0 but still holding a hash (reusable on a hit)
  uint64_t queries_tokens = 0;      // prompt tokens looked up at allocation (vLLM's queries)
  uint64_t hit_tokens = 0;          // of those, found in the cache (vLLM's hits)
  uint64_t evictions = 0;           // hashed blocks whose content was dropped for reuse
  uint64_t written_blocks = 0;      // full blocks newly registered in the cache
  uint64_t forks = 0;               // sequences forked from another's blocks (n > 1)
  uint64_t fork_copies = 0;         // of those, partial last blocks copied on write
};

// Told about every hashed block the pool evicts, before the block is handed to its new owner:
// its K/V is still intact then (the new owner writes it in a later forward pass), which is when
// the offload tier copies it out.
class EvictionListener {
 public:
  virtual ~EvictionListener() = default;
  virtual void OnEvict(int32_t block_id, uint64_t hash, uint64_t salt,
                       std::span<const int32_t> tokens) = 0;
};

class BlockManager {
 public:
  explicit BlockManager(int32_t num_blocks);

  // `listener` (may be null) must outlive the BlockManager or be replaced first.
  void set_eviction_listener(EvictionListener* listener) { listener_ = listener; }

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t num_free_blocks() const { return num_free_; }

  // Hash of one full block given its parent's hash (0 for the first block).
  static uint64_t HashBlock(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt);

  // The chained hashes of the leading full blocks of `tokens` that a prefix hit may cover
  // ((size - 1) / kBlockSize of them: the last token is always computed).
  static std::vector<uint64_t> HashChain(std::span<const int32_t> tokens, uint64_t salt);

  // How many leading tokens of `tokens` are cached right now (block aligned, capped at
  // size - 1). Changes nothing: no LRU order, no refcount, no counters.
  int LookupCachedTokens(std::span<const int32_t> tokens, uint64_t salt = 0) const;

  // Whether Allocate(tokens) would succeed now: the blocks it needs beyond its cache hits, plus
  // the hit blocks that are currently free (taking them removes them from the free queue).
  bool CanAllocate(std::span<const int32_t> tokens, uint64_t salt = 0) const;

  // Gives `seq` (which must hold no blocks) blocks for every token of `tokens`: cached full blocks
  // are shared (refcount + 1, removed from the free queue), the rest come from the head of the
  // free queue, evicting whatever hash they held. Sets seq.num_cached_tokens.
  // REQUIRES: CanAllocate(tokens, seq.salt).
  void Allocate(std::span<const int32_t> tokens, SequenceBlocks& seq);

  // Whether `seq` can grow to hold `num_tokens` tokens.
  bool CanGrow(const SequenceBlocks& seq, int num_tokens) const;
  // Adds blocks so that `seq` holds `num_tokens` tokens. REQUIRES: CanGrow(seq, num_tokens).
  void Grow(SequenceBlocks& seq, int num_tokens);

  // Registers the full blocks among the first `num_computed` tokens (their K/V is now written) in
  // the prefix cache. `tokens` is the sequence's whole token list so far. Returns the number of
  // tokens newly written into the cache (blocks registered by this call x 16; a block whose hash is
  // already held by another block is not registered twice and is not counted).
  int CommitComputed(std::span<const int32_t> tokens, int num_computed, SequenceBlocks& seq);

  // Registers the sequence's blocks up to `num_tokens` (block aligned) whose K/V was copied in
  // from the offload tier rather than computed: like CommitComputed, but not counted as written.
  void CommitRestored(std::span<const int32_t> tokens, int num_tokens, SequenceBlocks& seq);

  // Forks (n > 1 choices of one prompt): whether a new sequence can share `parent`'s blocks for
  // its first `num_tokens` tokens now (a free block, when the last of them is partial).
  bool CanFork(const SequenceBlocks& parent, int num_tokens) const;
  // Gives `child` (which must hold no blocks) the blocks of `parent`'s first `num_tokens` tokens:
  // the full ones are shared (refcount + 1, hashes and registration as the parent's), and a
  // partial last one is copied on write: both sequences will write their next tokens into it, so
  // the child gets a fresh block from the free queue, whose K/V the caller copies from the
  // parent's (the returned pair; none when the last block is full). REQUIRES: CanFork.
  BlockCopy Fork(const SequenceBlocks& parent, int num_tokens, SequenceBlocks& child);

  // Releases the sequence's blocks, tail first. Blocks keep their hashes (lazy eviction).
  void Free(SequenceBlocks& seq);

  BlockManagerStats stats() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    bool hashed = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // the 16 token ids, for confirming hits (only when hashed)
    uint64_t salt = 0;
    int32_t prev = -1;  // free-queue links; -1 = none
    int32_t next = -1;
    bool in_free_queue = false;
  };

  // Walks the chain of full blocks of `tokens`, returning the cached block ids (capped).
  std::vector<int32_t> FindHits(std::span<const int32_t> tokens, uint64_t salt) const;
  // Registers the full blocks [seq.num_registered_blocks, full); returns how many were new.
  int Register(std::span<const int32_t> tokens, int full, SequenceBlocks& seq);
  int32_t PopFree();             // from the head; evicts its hash
  void PushFreeTail(int32_t id);
  void Unlink(int32_t id);

  std::vector<Block> blocks_;
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block id
  int32_t head_ = -1;  // least recently used free block
  int32_t tail_ = -1;
  int32_t num_free_ = 0;
  BlockManagerStats stats_;
  EvictionListener* listener_ = nullptr;
};

}  // namespace kvgate::engine
