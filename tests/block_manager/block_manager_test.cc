#include "local_engine/block_manager.h"

#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>


#include <numeric>
#include <random>
#include <vector>

namespace kvgate::engine {
namespace {

std::vector<int32_t> Tokens(int n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Runs one request to completion: allocate, compute everything, free.
void RunToCompletion(BlockManager& bm, const std::vector<int32_t>& tokens) {
  SequenceBlocks seq;
  ASSERT_TRUE(bm.CanAllocate(tokens));
  bm.Allocate(tokens, seq);
  bm.CommitComputed(tokens, static_cast<int>(tokens.size()), seq);
  bm.Free(seq);
}

// A block's hash is XXH64 of parent, tokens and salt (when set) as one byte sequence, whatever
// the length: computed here with the streaming API, piece by piece.
TEST(BlockManagerTest, HashBlockIsXxh64OfParentTokensAndSalt) {
  std::mt19937 rng(3);
  for (size_t n : {size_t{0}, size_t{1}, size_t{16}, size_t{61}, size_t{62}, size_t{63}, size_t{200}}) {
    std::vector<int32_t> tokens(n);
    for (auto& t : tokens) t = static_cast<int32_t>(rng());
    for (uint64_t salt : {uint64_t{0}, uint64_t{0x9e3779b97f4a7c15}}) {
      const uint64_t parent = rng();
      XXH64_state_t state;
      XXH64_reset(&state, 0);
      XXH64_update(&state, &parent, sizeof parent);
      XXH64_update(&state, tokens.data(), tokens.size() * sizeof(int32_t));
      if (salt != 0) XXH64_update(&state, &salt, sizeof salt);
      const uint64_t expected = XXH64_digest(&state);
      EXPECT_EQ(BlockManager::HashBlock(parent, tokens, salt), expected) << n << " tokens, salt " << salt;
    }
  }
}

TEST(BlockManagerTest, AllocatesEnoughBlocksAndFreesThem) {
  BlockManager bm(10);
  auto tokens = Tokens(33, 0);  // 3 blocks: 16 + 16 + 1
  SequenceBlocks seq;
  bm.Allocate(tokens, seq);
  EXPECT_EQ(seq.block_ids.size(), 3u);
  EXPECT_EQ(seq.num_cached_tokens, 0);
  EXPECT_EQ(bm.num_free_blocks(), 7);
  bm.Free(seq);
  EXPECT_EQ(bm.num_free_blocks(), 10);
  EXPECT_TRUE(seq.block_ids.empty());
}

TEST(BlockManagerTest, PrefixHitSharesBlocksAndCapsAtOneComputedToken) {
  BlockManager bm(20);
  auto prompt = Tokens(48, 100);  // exactly 3 full blocks
  SequenceBlocks a;
  bm.Allocate(prompt, a);
  EXPECT_EQ(bm.CommitComputed(prompt, 48, a), 48);
  // Same prompt again while `a` still runs: 2 blocks shared, the last token recomputed, so the
  // third block cannot be a hit (at least one token must be computed).
  SequenceBlocks b;
  bm.Allocate(prompt, b);
  EXPECT_EQ(b.num_cached_tokens, 32);
  EXPECT_EQ(b.block_ids[0], a.block_ids[0]);
  EXPECT_EQ(b.block_ids[1], a.block_ids[1]);
  EXPECT_NE(b.block_ids[2], a.block_ids[2]);
  // A longer prompt with the same start hits all three.
  auto longer = prompt;
  longer.push_back(7);
  EXPECT_EQ(bm.LookupCachedTokens(longer), 48);
  bm.Free(a);
  bm.Free(b);
  EXPECT_EQ(bm.num_free_blocks(), 20);
  auto stats = bm.stats();
  EXPECT_EQ(stats.queries_tokens, 96u);
  EXPECT_EQ(stats.hit_tokens, 32u);
}

TEST(BlockManagerTest, OnlyComputedFullBlocksAreRegistered) {
  BlockManager bm(8);
  auto prompt = Tokens(40, 0);
  SequenceBlocks seq;
  bm.Allocate(prompt, seq);
  auto probe = Tokens(41, 0);
  EXPECT_EQ(bm.LookupCachedTokens(probe), 0);  // allocated but not computed: no hit
  EXPECT_EQ(bm.CommitComputed(prompt, 20, seq), 16);  // chunked prefill: 20 tokens done
  EXPECT_EQ(bm.LookupCachedTokens(probe), 16);
  EXPECT_EQ(bm.CommitComputed(prompt, 40, seq), 16);  // the partial third block is not hashed
  EXPECT_EQ(bm.LookupCachedTokens(probe), 32);
  EXPECT_EQ(bm.CommitComputed(prompt, 40, seq), 0);   // idempotent
}

TEST(BlockManagerTest, DecodeGrowthRegistersNewlyFullBlocks) {
  BlockManager bm(8);
  auto tokens = Tokens(15, 0);
  SequenceBlocks seq;
  bm.Allocate(tokens, seq);
  bm.CommitComputed(tokens, 15, seq);
  tokens.push_back(99);  // a generated token fills block 0
  ASSERT_TRUE(bm.CanGrow(seq, 16));
  bm.Grow(seq, 16);
  EXPECT_EQ(seq.block_ids.size(), 1u);
  EXPECT_EQ(bm.CommitComputed(tokens, 16, seq), 16);
  tokens.push_back(5);
  bm.Grow(seq, 17);
  EXPECT_EQ(seq.block_ids.size(), 2u);
  bm.Free(seq);
  tokens.push_back(6);
  EXPECT_EQ(bm.LookupCachedTokens(tokens), 16);
}

TEST(BlockManagerTest, LookupHasNoSideEffects) {
  BlockManager bm(4);
  auto prompt = Tokens(33, 0);
  RunToCompletion(bm, prompt);
  auto before = bm.stats();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(bm.LookupCachedTokens(prompt), 32);
  auto after = bm.stats();
  EXPECT_EQ(before.queries_tokens, after.queries_tokens);
  EXPECT_EQ(before.hit_tokens, after.hit_tokens);
  EXPECT_EQ(before.cached_free_blocks, after.cached_free_blocks);
  // LRU order unchanged: allocating 2 fresh blocks evicts exactly as it would have before.
  EXPECT_EQ(bm.num_free_blocks(), 4);
}

TEST(BlockManagerTest, CanAllocateCountsFreeHitsAgainstCapacity) {
  BlockManager bm(4);
  auto prompt = Tokens(49, 0);  // 4 blocks; 3 full blocks can hit
  RunToCompletion(bm, prompt);
  EXPECT_EQ(bm.stats().cached_free_blocks, 3);
  // Re-running needs 1 new block plus taking its 3 free hit blocks: exactly the pool.
  EXPECT_TRUE(bm.CanAllocate(prompt));
  SequenceBlocks seq;
  bm.Allocate(prompt, seq);
  EXPECT_EQ(seq.num_cached_tokens, 48);
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_FALSE(bm.CanAllocate(Tokens(1, 1000)));
  EXPECT_FALSE(bm.CanGrow(seq, 65));
  bm.Free(seq);
}

TEST(BlockManagerTest, EvictionIsLazyAndLeastRecentlyUsedFirst) {
  BlockManager bm(4);
  auto a = Tokens(33, 0);    // 2 full blocks + 1 partial
  RunToCompletion(bm, a);
  EXPECT_EQ(bm.LookupCachedTokens(a), 32);  // freed, but still cached (lazy eviction)
  // Free queue now: [never-used, a's partial block, a's 2nd block, a's 1st block].
  auto b = Tokens(17, 500);  // 2 blocks: the never-used one and a's (unhashed) partial block
  RunToCompletion(bm, b);
  EXPECT_EQ(bm.LookupCachedTokens(a), 32);
  EXPECT_EQ(bm.stats().evictions, 0u);
  // Free queue now: [a's 2nd block, a's 1st block, b's partial, b's full block]: a is older.
  auto c = Tokens(5, 900);  // 1 block: the least recently used, a's tail block
  RunToCompletion(bm, c);
  EXPECT_EQ(bm.LookupCachedTokens(a), 16);  // a kept its beginning, lost its end
  EXPECT_EQ(bm.LookupCachedTokens(b), 16);  // b untouched
  EXPECT_EQ(bm.stats().evictions, 1u);
}

TEST(BlockManagerTest, SaltSeparatesCaches) {
  BlockManager bm(8);
  auto prompt = Tokens(33, 0);
  SequenceBlocks seq;
  seq.salt = 42;
  bm.Allocate(prompt, seq);
  bm.CommitComputed(prompt, 33, seq);
  bm.Free(seq);
  EXPECT_EQ(bm.LookupCachedTokens(prompt, 42), 32);
  EXPECT_EQ(bm.LookupCachedTokens(prompt, 0), 0);
}

TEST(BlockManagerTest, DuplicateComputationRegistersOnce) {
  BlockManager bm(8);
  auto prompt = Tokens(17, 0);
  SequenceBlocks a, b;
  bm.Allocate(prompt, a);
  bm.Allocate(prompt, b);  // same step: neither is computed yet, no hit
  EXPECT_EQ(b.num_cached_tokens, 0);
  EXPECT_EQ(bm.CommitComputed(prompt, 17, a), 16);
  EXPECT_EQ(bm.CommitComputed(prompt, 17, b), 0);  // already cached by a's block
  bm.Free(a);
  bm.Free(b);
  EXPECT_EQ(bm.stats().written_blocks, 1u);
  EXPECT_EQ(bm.LookupCachedTokens(Tokens(20, 0)), 16);
}

// n > 1: a fork shares the full blocks and gets its own copy of the partial last one; the pool
// takes every block back once both are freed, and the shared blocks stay cached.
TEST(BlockManagerTest, ForkSharesFullBlocksAndCopiesThePartialOne) {
  BlockManager bm(6);
  auto prompt = Tokens(40, 0);  // blocks 0, 1 full; block 2 holds 8 tokens
  SequenceBlocks first, fork;
  bm.Allocate(prompt, first);
  bm.CommitComputed(prompt, 40, first);
  ASSERT_TRUE(bm.CanFork(first, 40));
  const BlockCopy copy = bm.Fork(first, 40, fork);
  ASSERT_EQ(fork.block_ids.size(), 3u);
  EXPECT_EQ(fork.block_ids[0], first.block_ids[0]);
  EXPECT_EQ(fork.block_ids[1], first.block_ids[1]);
  EXPECT_NE(fork.block_ids[2], first.block_ids[2]);
  EXPECT_EQ(copy.src, first.block_ids[2]);
  EXPECT_EQ(copy.dst, fork.block_ids[2]);
  EXPECT_EQ(fork.num_registered_blocks, 2);
  EXPECT_EQ(fork.hashes, first.hashes);
  EXPECT_EQ(bm.num_free_blocks(), 2);  // 3 + 1 of 6
  // The fork's next full block registers on its own chain.
  auto longer = prompt;
  for (int32_t t = 0; t < 8; ++t) longer.push_back(900 + t);
  bm.Grow(fork, 48);
  EXPECT_EQ(bm.CommitComputed(longer, 48, fork), 16);
  bm.Free(first);
  EXPECT_EQ(bm.num_free_blocks(), 3);  // the shared blocks are still the fork's
  bm.Free(fork);
  EXPECT_EQ(bm.num_free_blocks(), 6);
  EXPECT_EQ(bm.LookupCachedTokens(Tokens(41, 0)), 32);
  EXPECT_EQ(bm.stats().forks, 1u);
  EXPECT_EQ(bm.stats().fork_copies, 1u);
}

TEST(BlockManagerTest, ForkAtABlockBoundaryCopiesNothingAndAFullPoolRefusesACopy) {
  BlockManager bm(3);
  auto aligned = Tokens(32, 0);
  SequenceBlocks first, fork;
  bm.Allocate(aligned, first);
  bm.CommitComputed(aligned, 32, first);
  ASSERT_TRUE(bm.CanFork(first, 32));
  const BlockCopy copy = bm.Fork(first, 32, fork);
  EXPECT_EQ(copy.dst, -1);
  EXPECT_EQ(fork.block_ids, first.block_ids);
  bm.Free(fork);
  bm.Free(first);

  auto partial = Tokens(40, 100);  // all 3 blocks: no free block for a copy
  SequenceBlocks whole;
  bm.Allocate(partial, whole);
  EXPECT_FALSE(bm.CanFork(whole, 40));
  EXPECT_TRUE(bm.CanFork(whole, 32));  // its full blocks alone can be shared
  bm.Free(whole);
}

// The seed's eviction experiment on the block manager alone: a pool of ~4.4 sessions' worth of
// tokens, eight ~1,024-token sessions opened one after another. Afterwards the four newest are
// fully cached, the three oldest are gone, and the one in between kept its beginning, lost its end.
TEST(BlockManagerTest, SeedEvictionExperiment) {
  constexpr int kSessionTokens = 1024 + 8;  // 64 full blocks + a partial one
  constexpr int kBlocksPerSession = (kSessionTokens + kBlockSize - 1) / kBlockSize;  // 65
  BlockManager bm(static_cast<int32_t>(4.4 * kBlocksPerSession));
  std::vector<std::vector<int32_t>> sessions;
  for (int s = 0; s < 8; ++s) {
    sessions.push_back(Tokens(kSessionTokens, 100'000 * (s + 1)));
    RunToCompletion(bm, sessions.back());
  }
  const int full = (kSessionTokens - 1) / kBlockSize * kBlockSize;  // 1024
  std::vector<int> cached;
  for (const auto& s : sessions) cached.push_back(bm.LookupCachedTokens(s));
  for (int s = 0; s < 3; ++s) EXPECT_EQ(cached[s], 0) << "session " << s;
  EXPECT_GT(cached[3], 0);
  EXPECT_LT(cached[3], full);
  for (int s = 4; s < 8; ++s) EXPECT_EQ(cached[s], full) << "session " << s;
  // Session 3 kept a prefix: its first block must be among the cached ones.
  EXPECT_EQ(bm.LookupCachedTokens(std::vector<int32_t>(sessions[3].begin(),
                                                       sessions[3].begin() + 17)),
            16);
}

TEST(BlockManagerTest, RandomizedInvariants) {
  std::mt19937 rng(7);
  BlockManager bm(64);
  std::vector<std::pair<std::vector<int32_t>, SequenceBlocks>> live;
  for (int step = 0; step < 5000; ++step) {
    if (!live.empty() && (rng() % 3 == 0 || bm.num_free_blocks() < 8)) {
      size_t i = rng() % live.size();
      bm.Free(live[i].second);
      live.erase(live.begin() + static_cast<long>(i));
    } else {
      // Prompts from a small family of prefixes so hits happen.
      std::vector<int32_t> tokens = Tokens(16 * static_cast<int>(rng() % 4), 1000 * (rng() % 3));
      int extra = 1 + static_cast<int>(rng() % 40);
      for (int k = 0; k < extra; ++k) tokens.push_back(static_cast<int32_t>(rng() % 50));
      if (!bm.CanAllocate(tokens)) continue;
      SequenceBlocks seq;
      bm.Allocate(tokens, seq);
      ASSERT_LT(seq.num_cached_tokens, static_cast<int>(tokens.size()));
      bm.CommitComputed(tokens, static_cast<int>(tokens.size()), seq);
      live.emplace_back(std::move(tokens), std::move(seq));
    }
    int64_t held = 0;
    for (auto& [t, s] : live) held += static_cast<int64_t>(s.block_ids.size());
    auto stats = bm.stats();
    ASSERT_EQ(stats.used_blocks + bm.num_free_blocks(), 64);
    ASSERT_LE(stats.used_blocks, held);  // shared blocks count once
  }
  for (auto& [t, s] : live) bm.Free(s);
  EXPECT_EQ(bm.num_free_blocks(), 64);
}

}  // namespace
}  // namespace kvgate::engine
