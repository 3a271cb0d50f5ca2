// The host-memory KV offload tier: slots of evicted blocks in one Backend::AllocateHost region,
// with its own LRU (TierIndex). On cuda that memory is page-locked, so stores and restores are
// CopyBlocks kernels queued on the backend's stream, in order with the forward passes and without
// a host wait (a restore is ready by the time the prefill that reads it runs, and the engine
// thread goes on scheduling meanwhile). On cpu the same copies are memcpy.
//
//   auto tier = HostTier::Create(backend, runner.KvPlanes(), /*capacity_bytes=*/8 << 30);
//
// Layout: the slots mirror the pool's planes ([layer][K, V]), so one copy moves a block between
// them plane by plane: slot s of plane p is at region + offset(p) + s * block_bytes(p).
//
// No checksum: the bytes never leave the process (a disk tier's slots are checksummed because a
// file can be torn or edited). Nothing survives a restart.
#pragma once

#include <memory>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "local_engine/backend.h"
#include "local_engine/kv_tier.h"

namespace kvgate::engine {

class HostTier final : public KvTier {
 public:
  // kInvalidArgument when capacity_bytes holds no block, kUnavailable when the backend cannot copy
  // blocks, kResourceExhausted when it cannot allocate (pin) the memory.
  static Result<std::unique_ptr<HostTier>> Create(Backend& backend, std::vector<BlockPlane> pool,
                                                  int64_t capacity_bytes);

  std::string_view kind() const override { return "host"; }
  std::string location() const override;
  bool Contains(const TierKey& key) const override;
  bool Pin(const TierKey& key) override;
  void UnpinAll() override;
  void StoreBlocks(std::span<const TierBlock> evicted) override;
  int LoadBlocks(std::span<const TierBlock> blocks) override;
  OffloadTierStats stats() const override;

 private:
  HostTier(Backend& backend, std::vector<BlockPlane> pool, int32_t slots)
      : backend_(backend), pool_(std::move(pool)), index_(slots) {}

  Backend& backend_;
  const std::vector<BlockPlane> pool_;
  std::vector<BlockPlane> slots_;  // the region, as planes like pool_
  DeviceBuffer memory_;
  int64_t block_bytes_ = 0;  // of all planes

  mutable Mutex mu_;  // Contains and stats come from other threads
  TierIndex index_ GUARDED_BY(mu_);
  uint64_t next_stamp_ GUARDED_BY(mu_) = 1;
  OffloadTierStats stats_ GUARDED_BY(mu_);
};

}  // namespace kvgate::engine
