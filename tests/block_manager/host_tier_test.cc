// The host-memory offload tier's rules on a fake two-plane pool through the CPU backend: a round
// trip moves every plane's bytes, its own LRU when full, pins, a hash collision is a miss, a
// restore stops at the first block the tier lacks, and the sizes it refuses. (In the engine, on
// the real model: tests/local_engine/offload_test.cc, OffloadTierKindTest.)
#include "local_engine/host_tier.h"

#include <gtest/gtest.h>

#include <numeric>

#include "local_engine/cpu_backend.h"

namespace kvgate::engine {
namespace {

// Plane block sizes that differ, so a copy that mixed planes up would show.
constexpr int64_t kPlaneBytes[] = {96, 160};
constexpr int64_t kBlockBytes = 96 + 160;
constexpr int32_t kPoolBlocks = 8;

class HostTierTest : public ::testing::Test {
 protected:
  HostTierTest() {
    for (int p = 0; p < 2; ++p) {
      pool_mem_[p].resize(static_cast<size_t>(kPlaneBytes[p] * kPoolBlocks));
      planes_.push_back({pool_mem_[p].data(), kPlaneBytes[p]});
    }
  }
  std::unique_ptr<HostTier> Make(int64_t slots) {
    auto t = HostTier::Create(*backend_, planes_, slots * kBlockBytes);
    EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().ToString());
    return t ? std::move(*t) : nullptr;
  }
  // Fills pool block `b` of both planes with a pattern of `tag`.
  void Fill(int32_t b, int tag) {
    for (int p = 0; p < 2; ++p)
      for (int64_t k = 0; k < kPlaneBytes[p]; ++k)
        pool_mem_[p][static_cast<size_t>(b * kPlaneBytes[p] + k)] =
            static_cast<std::byte>((k * 3 + tag * 17 + p * 101) & 0xff);
  }
  bool Holds(int32_t b, int tag) const {
    for (int p = 0; p < 2; ++p)
      for (int64_t k = 0; k < kPlaneBytes[p]; ++k)
        if (pool_mem_[p][static_cast<size_t>(b * kPlaneBytes[p] + k)] !=
            static_cast<std::byte>((k * 3 + tag * 17 + p * 101) & 0xff))
          return false;
    return true;
  }
  // Block i: tokens i*100.., hash i+1.
  struct Key {
    std::vector<int32_t> tokens;
    uint64_t hash = 0;
    TierKey key() const { return {hash, 0, tokens}; }
  };
  static Key MakeKey(int i) {
    Key k{std::vector<int32_t>(kBlockSize), static_cast<uint64_t>(i) + 1};
    std::iota(k.tokens.begin(), k.tokens.end(), i * 100);
    return k;
  }
  // Stores key i from pool block i (filled with tag i).
  void Store(HostTier& t, std::initializer_list<int> ids) {
    std::vector<Key> keys;
    std::vector<TierBlock> blocks;
    for (int i : ids) keys.push_back(MakeKey(i));
    for (size_t n = 0; n < keys.size(); ++n) {
      const int i = *(ids.begin() + n);
      Fill(i, i);
      blocks.push_back({i, keys[n].key()});
    }
    t.StoreBlocks(blocks);
  }

  kernels::cpu::ThreadPool pool_{1};
  std::unique_ptr<Backend> backend_ = MakeCpuBackend(&pool_, kernels::cpu::Isa::kScalar);
  std::vector<std::byte> pool_mem_[2];
  std::vector<BlockPlane> planes_;
};

TEST_F(HostTierTest, ARoundTripMovesEveryPlane) {
  auto t = Make(4);
  ASSERT_TRUE(t);
  Store(*t, {1, 2});
  EXPECT_EQ(t->stats().stored_blocks, 2u);
  EXPECT_EQ(t->stats().used_blocks, 2);
  Fill(1, 99), Fill(2, 99);  // the pool reuses the blocks
  const Key k1 = MakeKey(1), k2 = MakeKey(2);
  // Restored into other pool blocks (5, 6): the copy goes by slot, not by the old pool block.
  const TierBlock load[] = {{5, k1.key()}, {6, k2.key()}};
  EXPECT_EQ(t->LoadBlocks(load), 2);
  EXPECT_TRUE(Holds(5, 1));
  EXPECT_TRUE(Holds(6, 2));
  EXPECT_EQ(t->stats().loaded_blocks, 2u);
  EXPECT_EQ(t->stats().bytes_read, 2u * kBlockBytes);
  EXPECT_EQ(t->kind(), "host");
}

TEST_F(HostTierTest, ARestoreStopsAtTheFirstMissingBlock) {
  auto t = Make(4);
  ASSERT_TRUE(t);
  Store(*t, {1, 3});
  const Key k1 = MakeKey(1), k2 = MakeKey(2), k3 = MakeKey(3);
  const TierBlock load[] = {{5, k1.key()}, {6, k2.key()}, {7, k3.key()}};
  EXPECT_EQ(t->LoadBlocks(load), 1);  // 2 is absent: 2 and 3 are computed
  EXPECT_TRUE(Holds(5, 1));
  EXPECT_FALSE(Holds(7, 3));
}

TEST_F(HostTierTest, AFullTierEvictsItsLeastRecentlyUsedUnpinnedBlock) {
  auto t = Make(2);
  ASSERT_TRUE(t);
  Store(*t, {1, 2});
  const Key k1 = MakeKey(1), k2 = MakeKey(2), k3 = MakeKey(3), k4 = MakeKey(4);
  ASSERT_TRUE(t->Pin(k1.key()));  // 1 is now the most recent, and pinned
  Store(*t, {3});                 // evicts 2
  EXPECT_TRUE(t->Contains(k1.key()));
  EXPECT_FALSE(t->Contains(k2.key()));
  EXPECT_TRUE(t->Contains(k3.key()));
  EXPECT_EQ(t->stats().evictions, 1u);
  ASSERT_TRUE(t->Pin(k3.key()));
  Store(*t, {4});  // every slot pinned: dropped
  EXPECT_FALSE(t->Contains(k4.key()));
  EXPECT_EQ(t->stats().dropped_blocks, 1u);
  t->UnpinAll();
  Store(*t, {4});  // 1 is the least recently used now
  EXPECT_FALSE(t->Contains(k1.key()));
  EXPECT_TRUE(t->Contains(k4.key()));
  const TierBlock load[] = {{0, k4.key()}};
  EXPECT_EQ(t->LoadBlocks(load), 1);
  EXPECT_TRUE(Holds(0, 4));
}

TEST_F(HostTierTest, MoreEvictionsThanSlotsKeepTheLastBlocks) {
  // One call, 3 blocks, 1 slot: the slot is copied into once, from the last block.
  auto t = Make(1);
  ASSERT_TRUE(t);
  Store(*t, {1, 2, 3});
  const Key k3 = MakeKey(3);
  EXPECT_EQ(t->stats().used_blocks, 1);
  EXPECT_FALSE(t->Contains(MakeKey(1).key()));
  const TierBlock load[] = {{0, k3.key()}};
  EXPECT_EQ(t->LoadBlocks(load), 1);
  EXPECT_TRUE(Holds(0, 3));
}

TEST_F(HostTierTest, AHashCollisionIsAMiss) {
  auto t = Make(2);
  ASSERT_TRUE(t);
  Store(*t, {1});
  Key other = MakeKey(1);
  other.tokens[5] = -7;  // same hash, other tokens
  EXPECT_FALSE(t->Contains(other.key()));
  const TierBlock load[] = {{4, other.key()}};
  EXPECT_EQ(t->LoadBlocks(load), 0);
  const Key k1 = MakeKey(1);
  TierKey salted = k1.key();
  salted.salt = 9;  // another tenant's cache
  EXPECT_FALSE(t->Contains(salted));
}

TEST_F(HostTierTest, RefusesASizeBelowOneBlock) {
  auto small = HostTier::Create(*backend_, planes_, kBlockBytes - 1);
  ASSERT_FALSE(small.has_value());
  EXPECT_EQ(small.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(small.error().message.find("offload.host_bytes"), std::string::npos);
  auto none = HostTier::Create(*backend_, {}, kBlockBytes);
  ASSERT_FALSE(none.has_value());
}

}  // namespace
}  // namespace kvgate::engine
