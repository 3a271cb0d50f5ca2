#include "local_engine/host_tier.h"

#include <string>
#include <unordered_map>

namespace kvgate::engine {

Result<std::unique_ptr<HostTier>> HostTier::Create(Backend& backend, std::vector<BlockPlane> pool,
                                                   int64_t capacity_bytes) {
  int64_t block_bytes = 0;
  for (const BlockPlane& p : pool) block_bytes += p.block_bytes;
  if (pool.empty() || block_bytes <= 0) {
    return MakeError(ErrorCode::kInvalidArgument, "offload host tier: no KV planes");
  }
  if (capacity_bytes < block_bytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "offload.host_bytes " + std::to_string(capacity_bytes) +
                         " holds no KV block: one takes " + std::to_string(block_bytes) +
                         " bytes");
  }
  const int64_t slots = std::min<int64_t>(capacity_bytes / block_bytes, int64_t{1} << 30);
  // Probe: a backend without block copies says so on an empty one.
  if (!backend.CopyBlocks(pool, pool, {})) {
    return MakeError(ErrorCode::kUnavailable, "offload host tier: the " +
                                                  std::string(backend.Name()) +
                                                  " backend cannot copy KV blocks");
  }
  auto memory = backend.AllocateHost(static_cast<size_t>(slots * block_bytes));
  if (!memory) return std::unexpected(memory.error());
  std::unique_ptr<HostTier> t(new HostTier(backend, std::move(pool), static_cast<int32_t>(slots)));
  t->memory_ = std::move(*memory);
  t->block_bytes_ = block_bytes;
  auto* base = static_cast<std::byte*>(t->memory_.data());
  for (const BlockPlane& p : t->pool_) {
    t->slots_.push_back({base, p.block_bytes});
    base += slots * p.block_bytes;
  }
  MutexLock lock(&t->mu_);  // (nothing else sees the tier yet: for the analysis)
  t->stats_.capacity_blocks = slots;
  t->stats_.slot_bytes = block_bytes;
  return t;
}

std::string HostTier::location() const {
  // The CPU backend's names are "cpu-<isa>-<threads>"; a device backend's AllocateHost pins.
  const std::string_view name = backend_.Name();
  return name.starts_with("cpu") ? "host memory"
                                 : "pinned host memory (" + std::string(name) + ")";
}

bool HostTier::Contains(const TierKey& key) const {
  MutexLock lock(&mu_);
  return index_.Find(key) >= 0;
}

bool HostTier::Pin(const TierKey& key) {
  MutexLock lock(&mu_);
  const int32_t s = index_.Find(key);
  if (s >= 0) index_.Pin(s);
  return s >= 0;
}

void HostTier::UnpinAll() {
  MutexLock lock(&mu_);
  index_.UnpinAll();
}

void HostTier::StoreBlocks(std::span<const TierBlock> evicted) {
  std::vector<BlockCopy> copies;
  {
    MutexLock lock(&mu_);
    // A slot taken twice in one call (a tier smaller than the evictions) is copied into once,
    // from its last block: the copies of one call may run concurrently on a device.
    std::unordered_map<int32_t, size_t> copy_of_slot;
    for (const TierBlock& b : evicted) {
      if (const int32_t held = index_.Find(b.key); held >= 0) {
        index_.Touch(held);
        continue;
      }
      bool was_evicted = false;
      const int32_t s = index_.Take(&was_evicted);
      if (s < 0) {
        ++stats_.dropped_blocks;
        continue;
      }
      if (was_evicted) ++stats_.evictions;
      // Indexed now: the copy is queued ahead of any load that could read the slot.
      index_.Commit(s, b.key, next_stamp_++);
      ++stats_.stored_blocks;
      stats_.bytes_written += static_cast<uint64_t>(block_bytes_);
      if (auto [it, fresh] = copy_of_slot.try_emplace(s, copies.size()); !fresh) {
        copies[it->second].src = b.pool_block;
      } else {
        copies.push_back({b.pool_block, s});
      }
    }
  }
  if (!copies.empty()) backend_.CopyBlocks(pool_, slots_, copies);
}

int HostTier::LoadBlocks(std::span<const TierBlock> blocks) {
  std::vector<BlockCopy> copies;
  {
    MutexLock lock(&mu_);
    for (const TierBlock& b : blocks) {
      const int32_t s = index_.Find(b.key);
      if (s < 0) break;
      index_.Touch(s);
      copies.push_back({s, b.pool_block});
    }
    stats_.loaded_blocks += copies.size();
    stats_.bytes_read += copies.size() * static_cast<uint64_t>(block_bytes_);
  }
  if (!copies.empty() && !backend_.CopyBlocks(slots_, pool_, copies)) return 0;
  return static_cast<int>(copies.size());
}

OffloadTierStats HostTier::stats() const {
  MutexLock lock(&mu_);
  OffloadTierStats out = stats_;
  out.used_blocks = index_.used();
  return out;
}

}  // namespace kvgate::engine
