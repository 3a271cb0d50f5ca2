// What the engine asks of a KV offload tier (engine_offload.cc), whichever kind it is:
//   disk  OffloadTier, a file of checksummed slots (offload_tier.h), device cpu;
//   host  HostTier, slots in host memory, page-locked on cuda (host_tier.h).
// The engine hands a tier the pool blocks it evicted (StoreBlocks, before anything overwrites
// them) and, at admission, the pool blocks a prefix hit continues into (LoadBlocks); the tier moves
// the bytes itself, so the host tier can queue device copies where the disk tier reads a file.
//
// Thread safety: Contains and stats from any thread; the rest from the engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "local_engine/tier_index.h"

namespace kvgate::engine {

struct OffloadTierStats {
  int64_t capacity_blocks = 0;  // slots
  int64_t used_blocks = 0;      // slots holding a block
  int64_t slot_bytes = 0;       // tier bytes per slot (disk: header + block bytes, 4 KiB pages)
  int64_t reused_blocks = 0;    // blocks found in the file when it was opened (restart)
  uint64_t stored_blocks = 0;   // stores that wrote a slot
  uint64_t loaded_blocks = 0;   // loads that returned bytes (hits)
  uint64_t corrupt_blocks = 0;  // loads that found a bad checksum, header or short read (misses)
  uint64_t evictions = 0;       // blocks overwritten because the tier was full
  uint64_t write_errors = 0;    // stores the file refused (disk full, I/O error): dropped
  uint64_t dropped_blocks = 0;  // stores dropped because every slot was pinned
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
};

// One pool block and the block it holds (or is to hold).
struct TierBlock {
  int32_t pool_block = -1;
  TierKey key;
};

class KvTier {
 public:
  virtual ~KvTier() = default;
  virtual std::string_view kind() const = 0;  // "disk" or "host": the usage and lookup label
  virtual std::string location() const = 0;   // the file, or which host memory
  // Whether the tier holds `key` (index only: a load may still miss, e.g. a corrupt disk slot).
  virtual bool Contains(const TierKey& key) const = 0;
  // Marks `key` most recently used and keeps it from being overwritten until UnpinAll. False when
  // not held.
  virtual bool Pin(const TierKey& key) = 0;
  virtual void UnpinAll() = 0;
  // Copies each evicted pool block's K/V into the tier; a block it already holds is only touched.
  // Never fails its caller: what cannot be stored is dropped and counted.
  virtual void StoreBlocks(std::span<const TierBlock> evicted) = 0;
  // Copies the tier's bytes of blocks[0..n) into their pool blocks and returns n: the blocks up to
  // the first the tier does not hold (or cannot read), which with the rest is computed instead.
  virtual int LoadBlocks(std::span<const TierBlock> blocks) = 0;
  virtual OffloadTierStats stats() const = 0;
};

}  // namespace kvgate::engine
