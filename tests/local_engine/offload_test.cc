// The offload tier in the real engine on the real model: a prompt evicted from a small pool comes
// back from the tier (and only the rest of it is computed), greedy output is the same with the
// tier on and off, and the tier's own LRU when it is full, for both kinds (a file, host memory);
// a corrupt or truncated tier file is a miss with the same output, a restart reuses the file, and
// the engine options it refuses. (The tiers' rules on fake blocks: tests/block_manager/.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "local_engine/engine.h"
#include "local_engine/offload_tier.h"

namespace kvgate::engine {
namespace {

namespace fs = std::filesystem;

const std::string kModel =
    std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Generation {
  std::vector<int32_t> tokens;
  Usage usage;
};

// 12 blocks = 192 tokens of pool. Prompt A (70 tokens) holds 5 blocks, 4 of them full and hashed;
// prompt B (170 tokens) then takes 11 blocks: the 7 never used, A's partial last block and A's
// full blocks 3..1 (A's blocks were freed tail first), which the pool evicts into the tier. A's
// block 0 stays in the pool. So A again: 16 tokens from the pool, 48 from disk.
constexpr int32_t kPoolBlocks = 12;
constexpr int kPromptA = 70, kPromptB = 170;

class OffloadEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
    dir_ = fs::temp_directory_path() /
           ("kvgate_offload_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tier_path_ = (dir_ / "kv.tier").string();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // `tier_blocks` 0: no tier.
  std::unique_ptr<Engine> Make(int64_t tier_blocks) {
    EngineOptions o;
    o.model_path = kModel;
    o.num_kv_blocks = kPoolBlocks;
    if (tier_blocks > 0 && kind_ == "host") {
      o.offload.host_bytes = tier_blocks * kBlockBytes;
    } else if (tier_blocks > 0) {
      o.offload.disk_path = tier_path_;
      o.offload.bytes = tier_blocks * SlotBytes();
    }
    auto e = Engine::Create(o);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.error().ToString());
    return e ? std::move(*e) : nullptr;
  }
  // SmolLM2-135M: 23,040 KV bytes per token.
  static constexpr int64_t kBlockBytes = int64_t{23040} * kBlockSize;
  static int64_t SlotBytes() { return OffloadTier::SlotBytes(static_cast<size_t>(kBlockBytes)); }
  static Generation Generate(Engine& e, std::vector<int32_t> prompt, int max_tokens = 4) {
    Generation run;
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    auto id = e.AddRequest({std::move(prompt), p, [&run](const TokenEvent& ev) {
                              if (ev.token_id >= 0) run.tokens.push_back(ev.token_id);
                              run.usage = ev.usage;
                            }});
    EXPECT_TRUE(id.has_value());
    for (int guard = 0; e.HasWork() && guard < 10000; ++guard) EXPECT_TRUE(e.Step());
    return run;
  }
  static std::vector<int32_t> Prompt(int n, int32_t start) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), start);
    return t;
  }
  // Runs A, then B (evicting most of A into the tier); returns A's first run.
  static Generation RunAThenB(Engine& e) {
    Generation a = Generate(e, Prompt(kPromptA, 1000));
    Generate(e, Prompt(kPromptB, 5000));
    return a;
  }

  fs::path dir_;
  std::string tier_path_;
  std::string kind_ = "disk";  // the tier Make builds: "disk" or "host"
};

// The tests that hold for either kind of tier.
class OffloadTierKindTest : public OffloadEngineTest,
                            public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    OffloadEngineTest::SetUp();
    kind_ = GetParam();
  }
};

INSTANTIATE_TEST_SUITE_P(Kinds, OffloadTierKindTest, ::testing::Values("disk", "host"));

TEST_P(OffloadTierKindTest, AnEvictedPromptComesBackFromTheTier) {
  auto engine = Make(/*tier_blocks=*/64);
  ASSERT_TRUE(engine);
  const Generation first = RunAThenB(*engine);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  CacheStats stats = engine->cache_stats();
  ASSERT_TRUE(stats.offload);
  EXPECT_EQ(stats.offload_kind, kind_);
  EXPECT_EQ(stats.tier.stored_blocks, 3u);  // A's blocks 1..3
  const auto a = Prompt(kPromptA, 1000);
  const CachedPrefix prefix = engine->LookupCachedPrefix(a);
  EXPECT_EQ(prefix.pool_tokens, 16);
  EXPECT_EQ(prefix.offload_tokens, 48);
  EXPECT_EQ(engine->LookupCachedTokens(a), 16);  // the pool alone

  const Generation again = Generate(*engine, a);
  EXPECT_EQ(again.usage.cached_tokens, 64);  // 16 from the pool + 48 from the tier
  EXPECT_EQ(again.usage.cached_offload_tokens, 48);
  EXPECT_EQ(again.usage.cache_write_tokens, 0);  // restored blocks are reads, not writes
  EXPECT_EQ(again.tokens, first.tokens);
  stats = engine->cache_stats();
  EXPECT_EQ(stats.tier.loaded_blocks, 3u);
  EXPECT_EQ(stats.offload_hit_tokens, 48u);
  EXPECT_EQ(stats.offload_restores, 1u);
  EXPECT_GT(stats.offload_restore_ns, 0u);
  // Restored blocks are in the prefix cache again: a third run hits them in the pool.
  const Generation third = Generate(*engine, a);
  EXPECT_EQ(third.usage.cached_tokens, 64);
  EXPECT_EQ(third.usage.cached_offload_tokens, 0);
  EXPECT_EQ(third.tokens, first.tokens);
}

TEST_P(OffloadTierKindTest, GreedyOutputIsTheSameWithTheTierOnAndOff) {
  auto with = Make(64);
  auto without = Make(0);
  ASSERT_TRUE(with && without);
  RunAThenB(*with);
  RunAThenB(*without);
  // A longer prompt that extends A: its prefix comes from the tier on one engine, is recomputed
  // on the other.
  auto longer = Prompt(kPromptA, 1000);
  const auto tail = Prompt(40, 9000);
  longer.insert(longer.end(), tail.begin(), tail.end());
  const Generation restored = Generate(*with, longer, 12);
  const Generation recomputed = Generate(*without, longer, 12);
  EXPECT_EQ(restored.usage.cached_offload_tokens, 48);
  EXPECT_EQ(recomputed.usage.cached_offload_tokens, 0);
  EXPECT_EQ(recomputed.usage.cached_tokens, 16);
  EXPECT_EQ(restored.tokens, recomputed.tokens);
  EXPECT_FALSE(without->cache_stats().offload);
}

TEST_F(OffloadEngineTest, ACorruptTierFileIsAMissWithTheSameOutput) {
  auto engine = Make(64);
  ASSERT_TRUE(engine);
  const Generation first = RunAThenB(*engine);
  {
    // Flip one byte in the middle of every slot.
    std::fstream f(tier_path_, std::ios::in | std::ios::out | std::ios::binary);
    for (int64_t slot = 0; slot < 64; ++slot) {
      const int64_t at = 4096 + slot * SlotBytes() + SlotBytes() / 2;
      f.seekg(at);
      char c = 0;
      f.read(&c, 1);
      if (!f) break;
      c ^= 0x20;
      f.seekp(at);
      f.write(&c, 1);
    }
  }
  const Generation again = Generate(*engine, Prompt(kPromptA, 1000));
  EXPECT_EQ(again.usage.cached_offload_tokens, 0);
  EXPECT_EQ(again.usage.cached_tokens, 16);  // the pool's block only
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(engine->cache_stats().tier.corrupt_blocks, 1u);  // the first one ends the restore
}

TEST_F(OffloadEngineTest, ATruncatedTierFileIsAMissWithTheSameOutput) {
  auto engine = Make(64);
  ASSERT_TRUE(engine);
  const Generation first = RunAThenB(*engine);
  fs::resize_file(tier_path_, 4096);  // the header only
  const Generation again = Generate(*engine, Prompt(kPromptA, 1000));
  EXPECT_EQ(again.usage.cached_offload_tokens, 0);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_GE(engine->cache_stats().tier.corrupt_blocks, 1u);
}

TEST_P(OffloadTierKindTest, AFullTierKeepsItsMostRecentBlocks) {
  // 2 slots for A's 3 evicted blocks: evicted in order 3, 2, 1, so the tier keeps 2 and 1, the
  // head of A's prompt, which is what a later prefix lookup needs. A again pins them while its
  // own allocation evicts B's blocks (dropped: the tier is full of pinned blocks).
  auto engine = Make(/*tier_blocks=*/2);
  ASSERT_TRUE(engine);
  const Generation first = RunAThenB(*engine);
  CacheStats stats = engine->cache_stats();
  EXPECT_EQ(stats.tier.stored_blocks, 3u);
  EXPECT_EQ(stats.tier.evictions, 1u);
  EXPECT_EQ(stats.tier.used_blocks, 2);
  const Generation again = Generate(*engine, Prompt(kPromptA, 1000));
  EXPECT_EQ(again.usage.cached_tokens, 16 + 32);
  EXPECT_EQ(again.usage.cached_offload_tokens, 32);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_GT(engine->cache_stats().tier.dropped_blocks, 0u);
}

TEST_F(OffloadEngineTest, ARestartReusesTheTierFile) {
  Generation first;
  {
    auto engine = Make(64);
    ASSERT_TRUE(engine);
    first = RunAThenB(*engine);
    // A third prompt evicts A's block 0 too (and most of B): all of A is on disk now.
    Generate(*engine, Prompt(kPromptB, 20000));
    EXPECT_EQ(engine->cache_stats().tier.stored_blocks, 3u + 1u + 9u);
  }
  auto engine = Make(64);
  ASSERT_TRUE(engine);
  EXPECT_EQ(engine->cache_stats().tier.reused_blocks, 13);
  const Generation warm = Generate(*engine, Prompt(kPromptA, 1000));
  EXPECT_EQ(warm.usage.cached_tokens, 64);
  EXPECT_EQ(warm.usage.cached_offload_tokens, 64);
  EXPECT_EQ(warm.tokens, first.tokens);
}

TEST_F(OffloadEngineTest, RefusesBadOptions) {
  EngineOptions o;
  o.model_path = kModel;
  o.num_kv_blocks = kPoolBlocks;
  o.offload.disk_path = tier_path_;
  o.offload.bytes = SlotBytes() - 1;
  auto small = Engine::Create(o);
  ASSERT_FALSE(small.has_value());
  EXPECT_NE(small.error().message.find("offload.bytes"), std::string::npos);
  o.offload.bytes = SlotBytes();
  o.enable_prefix_caching = false;
  auto uncached = Engine::Create(o);
  ASSERT_FALSE(uncached.has_value());
  EXPECT_NE(uncached.error().message.find("prefix caching"), std::string::npos);
  o.enable_prefix_caching = true;
  o.offload.host_bytes = kBlockBytes;
  auto both = Engine::Create(o);
  ASSERT_FALSE(both.has_value());
  EXPECT_NE(both.error().message.find("not both"), std::string::npos);
  o.offload.disk_path.clear();
  o.offload.host_bytes = kBlockBytes - 1;
  auto tiny = Engine::Create(o);
  ASSERT_FALSE(tiny.has_value());
  EXPECT_NE(tiny.error().message.find("offload.host_bytes"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::engine
