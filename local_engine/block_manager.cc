#include "local_engine/block_manager.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvgate::engine {

BlockManager::BlockManager(int32_t num_blocks) : blocks_(static_cast<size_t>(num_blocks)) {
  for (int32_t id = 0; id < num_blocks; ++id) PushFreeTail(id);
  stats_.num_blocks = num_blocks;
}

uint64_t BlockManager::HashBlock(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt) {
  // XXH64 of parent, tokens and (when set) salt, in one shot over the concatenated bytes: the same
  // value as streaming the three pieces, and cheaper for a 16-token block.
  const size_t size = sizeof parent + tokens.size_bytes() + (salt != 0 ? sizeof salt : 0);
  std::array<unsigned char, 256> small;
  std::vector<unsigned char> large;
  unsigned char* bytes = small.data();
  if (size > small.size()) {
    large.resize(size);
    bytes = large.data();
  }
  std::memcpy(bytes, &parent, sizeof parent);
  if (!tokens.empty()) std::memcpy(bytes + sizeof parent, tokens.data(), tokens.size_bytes());
  if (salt != 0) std::memcpy(bytes + sizeof parent + tokens.size_bytes(), &salt, sizeof salt);
  return XXH64(bytes, size, 0);
}

std::vector<uint64_t> BlockManager::HashChain(std::span<const int32_t> tokens, uint64_t salt) {
  std::vector<uint64_t> hashes;
  if (tokens.empty()) return hashes;
  const size_t max_blocks = (tokens.size() - 1) / kBlockSize;
  uint64_t parent = 0;
  for (size_t i = 0; i < max_blocks; ++i) {
    parent = HashBlock(parent, tokens.subspan(i * kBlockSize, kBlockSize), salt);
    hashes.push_back(parent);
  }
  return hashes;
}

std::vector<int32_t> BlockManager::FindHits(std::span<const int32_t> tokens, uint64_t salt) const {
  std::vector<int32_t> hits;
  if (tokens.empty()) return hits;
  // At least one token must be computed, so the last token never comes from the cache.
  const size_t max_blocks = (tokens.size() - 1) / kBlockSize;
  uint64_t parent = 0;
  for (size_t i = 0; i < max_blocks; ++i) {
    auto block_tokens = tokens.subspan(i * kBlockSize, kBlockSize);
    uint64_t hash = HashBlock(parent, block_tokens, salt);
    auto it = cached_.find(hash);
    if (it == cached_.end()) break;
    const Block& block = blocks_[static_cast<size_t>(it->second)];
    // A hash collision must be a miss, never someone else's K/V.
    if (block.salt != salt || !std::equal(block.tokens.begin(), block.tokens.end(),
                                          block_tokens.begin(), block_tokens.end())) {
      break;
    }
    hits.push_back(it->second);
    parent = hash;
  }
  return hits;
}

int BlockManager::LookupCachedTokens(std::span<const int32_t> tokens, uint64_t salt) const {
  return static_cast<int>(FindHits(tokens, salt).size()) * kBlockSize;
}

bool BlockManager::CanAllocate(std::span<const int32_t> tokens, uint64_t salt) const {
  std::vector<int32_t> hits = FindHits(tokens, salt);
  int64_t needed = (static_cast<int64_t>(tokens.size()) + kBlockSize - 1) / kBlockSize -
                   static_cast<int64_t>(hits.size());
  int64_t free_hits = std::count_if(hits.begin(), hits.end(), [this](int32_t id) {
    return blocks_[static_cast<size_t>(id)].ref_count == 0;
  });
  return num_free_ - free_hits >= needed;
}

void BlockManager::Allocate(std::span<const int32_t> tokens, SequenceBlocks& seq) {
  assert(seq.block_ids.empty());
  std::vector<int32_t> hits = FindHits(tokens, seq.salt);
  uint64_t parent = 0;
  for (size_t i = 0; i < hits.size(); ++i) {
    Block& block = blocks_[static_cast<size_t>(hits[i])];
    if (block.ref_count == 0) Unlink(hits[i]);
    ++block.ref_count;
    seq.block_ids.push_back(hits[i]);
    parent = block.hash;
    seq.hashes.push_back(parent);
  }
  seq.num_registered_blocks = static_cast<int>(hits.size());
  seq.num_cached_tokens = static_cast<int>(hits.size()) * kBlockSize;
  stats_.queries_tokens += tokens.size();
  stats_.hit_tokens += static_cast<uint64_t>(seq.num_cached_tokens);
  Grow(seq, static_cast<int>(tokens.size()));
}

bool BlockManager::CanGrow(const SequenceBlocks& seq, int num_tokens) const {
  int64_t needed = (num_tokens + kBlockSize - 1) / kBlockSize -
                   static_cast<int64_t>(seq.block_ids.size());
  return needed <= num_free_;
}

void BlockManager::Grow(SequenceBlocks& seq, int num_tokens) {
  while (static_cast<int64_t>(seq.block_ids.size()) * kBlockSize < num_tokens) {
    int32_t id = PopFree();
    assert(id >= 0);
    blocks_[static_cast<size_t>(id)].ref_count = 1;
    seq.block_ids.push_back(id);
  }
}

int BlockManager::CommitComputed(std::span<const int32_t> tokens, int num_computed,
                                 SequenceBlocks& seq) {
  const int full = std::min<int>(num_computed, static_cast<int>(tokens.size())) / kBlockSize;
  const int written = Register(tokens, full, seq);
  stats_.written_blocks += static_cast<uint64_t>(written);
  return written * kBlockSize;
}

void BlockManager::CommitRestored(std::span<const int32_t> tokens, int num_tokens,
                                  SequenceBlocks& seq) {
  Register(tokens, std::min<int>(num_tokens, static_cast<int>(tokens.size())) / kBlockSize, seq);
}

int BlockManager::Register(std::span<const int32_t> tokens, int full, SequenceBlocks& seq) {
  int registered = 0;
  for (int i = seq.num_registered_blocks; i < full; ++i) {
    uint64_t parent = i == 0 ? 0 : seq.hashes[static_cast<size_t>(i - 1)];
    auto block_tokens = tokens.subspan(static_cast<size_t>(i) * kBlockSize, kBlockSize);
    uint64_t hash = HashBlock(parent, block_tokens, seq.salt);
    seq.hashes.push_back(hash);
    int32_t id = seq.block_ids[static_cast<size_t>(i)];
    Block& block = blocks_[static_cast<size_t>(id)];
    // Another sequence computed the same block first (both prefilled it in the same step):
    // keep that one registered; this copy stays private and is recycled when freed.
    if (cached_.contains(hash)) continue;
    block.hashed = true;
    block.hash = hash;
    block.salt = seq.salt;
    block.tokens.assign(block_tokens.begin(), block_tokens.end());
    cached_.emplace(hash, id);
    ++registered;
  }
  seq.num_registered_blocks = std::max(seq.num_registered_blocks, full);
  return registered;
}

bool BlockManager::CanFork(const SequenceBlocks& parent, int num_tokens) const {
  const bool partial = num_tokens % kBlockSize != 0;
  return static_cast<int64_t>(parent.block_ids.size()) * kBlockSize >= num_tokens &&
         (!partial || num_free_ > 0);
}

BlockCopy BlockManager::Fork(const SequenceBlocks& parent, int num_tokens, SequenceBlocks& child) {
  assert(child.block_ids.empty() && CanFork(parent, num_tokens));
  const int full = num_tokens / kBlockSize;
  child.salt = parent.salt;
  for (int i = 0; i < full; ++i) {
    const int32_t id = parent.block_ids[static_cast<size_t>(i)];
    ++blocks_[static_cast<size_t>(id)].ref_count;
    child.block_ids.push_back(id);
  }
  // hashes holds one entry per registered block (Register's invariant).
  const int registered = std::min(parent.num_registered_blocks, full);
  child.hashes.assign(parent.hashes.begin(), parent.hashes.begin() + registered);
  child.num_registered_blocks = registered;
  child.num_cached_tokens = parent.num_cached_tokens;
  ++stats_.forks;
  if (num_tokens % kBlockSize == 0) return {};
  const int32_t copy = PopFree();
  blocks_[static_cast<size_t>(copy)].ref_count = 1;
  child.block_ids.push_back(copy);
  ++stats_.fork_copies;
  return {parent.block_ids[static_cast<size_t>(full)], copy};
}

void BlockManager::Free(SequenceBlocks& seq) {
  // Tail first: the sequence's last blocks reach the free queue first, so they are evicted
  // before its beginning, which other requests are likelier to share.
  for (auto it = seq.block_ids.rbegin(); it != seq.block_ids.rend(); ++it) {
    Block& block = blocks_[static_cast<size_t>(*it)];
    assert(block.ref_count > 0);
    if (--block.ref_count == 0) PushFreeTail(*it);
  }
  seq.block_ids.clear();
  seq.hashes.clear();
  seq.num_registered_blocks = 0;
}

int32_t BlockManager::PopFree() {
  int32_t id = head_;
  if (id < 0) return -1;
  Unlink(id);
  Block& block = blocks_[static_cast<size_t>(id)];
  if (block.hashed) {
    if (listener_) listener_->OnEvict(id, block.hash, block.salt, block.tokens);
    auto it = cached_.find(block.hash);
    if (it != cached_.end() && it->second == id) cached_.erase(it);
    block.hashed = false;
    block.tokens.clear();
    ++stats_.evictions;
  }
  return id;
}

void BlockManager::PushFreeTail(int32_t id) {
  Block& block = blocks_[static_cast<size_t>(id)];
  block.prev = tail_;
  block.next = -1;
  if (tail_ >= 0) {
    blocks_[static_cast<size_t>(tail_)].next = id;
  } else {
    head_ = id;
  }
  tail_ = id;
  block.in_free_queue = true;
  ++num_free_;
}

void BlockManager::Unlink(int32_t id) {
  Block& block = blocks_[static_cast<size_t>(id)];
  assert(block.in_free_queue);
  if (block.prev >= 0) {
    blocks_[static_cast<size_t>(block.prev)].next = block.next;
  } else {
    head_ = block.next;
  }
  if (block.next >= 0) {
    blocks_[static_cast<size_t>(block.next)].prev = block.prev;
  } else {
    tail_ = block.prev;
  }
  block.prev = block.next = -1;
  block.in_free_queue = false;
  --num_free_;
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats out = stats_;
  out.used_blocks = num_blocks() - num_free_;
  out.cached_free_blocks = 0;
  for (const Block& block : blocks_) {
    if (block.ref_count == 0 && block.hashed) ++out.cached_free_blocks;
  }
  return out;
}

}  // namespace kvgate::engine
