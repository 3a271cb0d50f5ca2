// The KV offload tier: a bounded file of fixed-size slots that keeps the K/V of hashed blocks the
// primary pool (BlockManager) evicted, so that a later prefix hit copies them back instead of
// recomputing them.
//
//   auto tier = OffloadTier::Open({.path = "kv.tier", .capacity_bytes = 1 << 30,
//                                  .block_bytes = runner.KvBytesPerBlock(), .layout_key = key});
//   (*tier)->Store(block_key, bytes);          // when the pool evicts the block
//   if ((*tier)->Load(block_key, bytes)) ...   // at admission, continuing the pool's hit chain
//
// Keys are the pool's: the chained block hash (BlockManager::HashBlock) plus the block's token ids
// and cache salt, which a Load compares so that a hash collision is a miss, never someone else's
// K/V.
//
// File format (little-endian, the host's; docs/engine.md has the table): a 4 KiB file header
// {magic "KVGTIER1", format version, layout key, block bytes, slot bytes, slot count, block size}
// and then `slot count` slots of `slot bytes` each (a multiple of 4 KiB). A slot is a header
// {magic "KVGSLOT1", layout key, block hash, salt, store stamp, token ids[kBlockSize], XXH3-64
// checksum} followed by the block's bytes. The checksum covers the slot header before it and the
// bytes, so a torn write, a flipped byte or a truncated file is detected at Load and is a miss.
//
// Restart: Open reuses a file whose header has the same layout key, block bytes and slot count
// (the index is rebuilt from the slot headers, LRU order = store order); any other tier file is
// reinitialised empty. The layout key identifies the model's weights and the KV layout (dtype,
// layers, heads, head dim, block size; Engine builds it), and every slot repeats it under its
// checksum, so a slot is never served for another model or geometry. A file that exists and is
// not a tier file is refused, never overwritten. The file is locked (flock) while open: two
// processes never share one.
//
// Eviction: the tier has its own LRU over its slots; a Store into a full tier overwrites the least
// recently used slot that is not pinned. Loads touch a slot; an admission pins the slots it is
// about to load (its own pool evictions, stored meanwhile, must not push them out) and unpins
// them once loaded. A Store into a tier whose every slot is pinned is dropped.
//
// Durability: none is promised. Writes go to the page cache (no fsync): the tier is a cache, and
// a write lost in a crash is a miss, which the checksum guarantees.
//
// Thread safety: Contains and stats may be called from any thread. Touch, Pin, UnpinAll, Store and
// Load must be called from one thread (the engine thread); the disk I/O of Store and Load runs
// outside the index's mutex, so a Contains from another thread never waits for the disk.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "local_engine/block_manager.h"
#include "local_engine/kv_tier.h"
#include "local_engine/tier_index.h"

namespace kvgate::engine {

struct OffloadTierOptions {
  std::string path;            // created when absent
  int64_t capacity_bytes = 0;  // slots = capacity_bytes / slot bytes, at least 1
  size_t block_bytes = 0;      // K/V bytes of one block (ModelRunner::KvBytesPerBlock)
  uint64_t layout_key = 0;     // the model and KV layout the bytes belong to
};

class OffloadTier {
 public:
  // Opens or creates the file. Errors (kInvalidArgument, kUnavailable) name the path: a capacity
  // below one slot, a file that is not a tier file, a file locked by another process, I/O.
  static Result<std::unique_ptr<OffloadTier>> Open(const OffloadTierOptions& options);
  ~OffloadTier();
  OffloadTier(const OffloadTier&) = delete;
  OffloadTier& operator=(const OffloadTier&) = delete;

  // The file bytes one slot takes for blocks of `block_bytes` (what capacity_bytes is divided by).
  static int64_t SlotBytes(size_t block_bytes);

  // Whether the tier holds `key` (index only: no I/O, no checksum; Load may still miss).
  bool Contains(const TierKey& key) const;
  // Marks `key` most recently used, if held.
  void Touch(const TierKey& key);
  // Touch, and keep `key` from being evicted until UnpinAll. False when not held.
  bool Pin(const TierKey& key);
  void UnpinAll();
  // Writes `bytes` (block_bytes of them) under `key`, overwriting the LRU slot when full. A key
  // already held is only touched (the same chain of tokens has the same K/V). I/O errors drop the
  // block and are counted: the tier is a cache and never fails its caller.
  void Store(const TierKey& key, std::span<const std::byte> bytes);
  // Reads the block of `key` into `out` (block_bytes). False on a miss: absent, or a slot whose
  // header, checksum or length is wrong (that slot is then dropped and counted as corrupt).
  bool Load(const TierKey& key, std::span<std::byte> out);

  OffloadTierStats stats() const;
  const std::string& path() const { return path_; }
  size_t block_bytes() const { return block_bytes_; }

 private:
  OffloadTier() = default;
  Status Initialize() REQUIRES(mu_);  // writes a fresh header and sizes the file
  void RebuildIndex() REQUIRES(mu_);  // from the slot headers of a reused file
  int64_t SlotOffset(int32_t slot) const;

  // Constant after Open.
  std::string path_;
  int fd_ = -1;
  size_t block_bytes_ = 0;
  int64_t slot_bytes_ = 0;
  uint64_t layout_key_ = 0;

  // (Open fills these before anyone else can see the tier.)
  mutable Mutex mu_;
  std::unique_ptr<TierIndex> index_ GUARDED_BY(mu_);
  uint64_t next_stamp_ GUARDED_BY(mu_) = 1;
  OffloadTierStats stats_ GUARDED_BY(mu_);
  // When write errors were last logged, and how many had been counted then.
  std::optional<std::chrono::steady_clock::time_point> last_write_error_report_ GUARDED_BY(mu_);
  uint64_t write_errors_reported_ GUARDED_BY(mu_) = 0;
  std::vector<std::byte> buffer_;  // one slot, reused by Store and Load: their thread only
};

}  // namespace kvgate::engine
