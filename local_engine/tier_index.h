// The index of an offload tier's slots (OffloadTier on disk, HostTier in host memory): which block
// each slot holds, the tier's own LRU over them, and the pins that keep an admission's blocks from
// being overwritten before they are copied back. It holds no bytes and no lock: its owner
// serialises calls.
//
//   TierIndex index(slots);
//   bool evicted = false;
//   const int32_t s = index.Take(&evicted);   // a free slot, else the LRU unpinned one
//   ... write the block's bytes into slot s ...
//   index.Commit(s, key, stamp);              // or index.Release(s) when the write failed
//   if (const int32_t hit = index.Find(key); hit >= 0) index.Touch(hit);
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvgate::engine {

// What identifies one block: the chained hash, the salt and the token ids under it.
struct TierKey {
  uint64_t hash = 0;
  uint64_t salt = 0;
  std::span<const int32_t> tokens;  // kBlockSize ids
};

class TierIndex {
 public:
  explicit TierIndex(int32_t slots);

  int32_t slots() const { return static_cast<int32_t>(slots_.size()); }
  int32_t used() const { return slots() - static_cast<int32_t>(free_.size()); }

  // The slot holding `key`; -1 when none does, or when the slot under its hash holds other tokens
  // or another salt (a hash collision is a miss, never someone else's K/V).
  int32_t Find(const TierKey& key) const;
  // The slot indexed under `hash`, whatever its tokens; -1 when none.
  int32_t FindHash(uint64_t hash) const;
  // Marks a held slot most recently used.
  void Touch(int32_t slot);
  // Touch, and keep the slot from being taken until UnpinAll.
  void Pin(int32_t slot);
  void UnpinAll();

  // A slot for a new block: a free one, else the least recently used unpinned one, whose block is
  // dropped (*evicted set). -1 when every slot is pinned. The slot is neither free nor indexed
  // until Commit or Release.
  int32_t Take(bool* evicted);
  // Indexes a taken slot as holding `key`, most recently used. A slot held under the same hash
  // (a collision) is dropped first.
  void Commit(int32_t slot, const TierKey& key, uint64_t stamp);
  // Returns a taken slot to the free list (its write failed).
  void Release(int32_t slot);
  // Forgets the block a slot holds (a corrupt slot); the slot becomes free.
  void Drop(int32_t slot);
  uint64_t stamp(int32_t slot) const { return slots_[static_cast<size_t>(slot)].stamp; }

  // A reopened tier's blocks (one per hash), least recently used first: the index holds exactly
  // these and every other slot is free. Only on a fresh index.
  struct Held {
    int32_t slot = -1;
    uint64_t hash = 0;
    uint64_t salt = 0;
    uint64_t stamp = 0;
    std::vector<int32_t> tokens;
  };
  void Restore(std::span<const Held> held);

 private:
  struct Slot {
    bool used = false;
    bool pinned = false;
    uint64_t hash = 0;
    uint64_t salt = 0;
    uint64_t stamp = 0;
    std::vector<int32_t> tokens;
    int32_t prev = -1;  // LRU links among used slots; -1 = none
    int32_t next = -1;
  };
  void PushTail(int32_t slot);
  void Unlink(int32_t slot);
  Slot& at(int32_t slot) { return slots_[static_cast<size_t>(slot)]; }
  const Slot& at(int32_t slot) const { return slots_[static_cast<size_t>(slot)]; }

  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, int32_t> index_;  // block hash -> slot
  std::vector<int32_t> free_;  // unused slots, the lowest index last (taken first)
  std::vector<int32_t> pinned_;
  int32_t head_ = -1;  // least recently used
  int32_t tail_ = -1;
};

}  // namespace kvgate::engine
