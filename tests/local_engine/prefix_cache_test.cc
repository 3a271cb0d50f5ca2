// Prefix caching in the real engine on the real model: what a second turn reuses, that reuse never
// changes the output, and that blocks come back. (The block pool's own rules are unit-tested in
// tests/block_manager.)
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "local_engine/engine.h"

namespace kvgate::engine {
namespace {

const std::string kModel =
    std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Generation {
  std::vector<int32_t> tokens;
  Usage usage;
  FinishReason reason = FinishReason::kNone;
};

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
  }
  static std::unique_ptr<Engine> Make(bool caching, int32_t blocks = 64) {
    EngineOptions o;
    o.model_path = kModel;
    o.num_kv_blocks = blocks;
    o.enable_prefix_caching = caching;
    auto e = Engine::Create(o);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.error().ToString());
    return e ? std::move(*e) : nullptr;
  }
  static Generation Generate(Engine& e, std::vector<int32_t> prompt, int max_tokens,
                             uint64_t cache_salt = 0, int32_t n = 1) {
    Generation run;
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    auto id = e.AddRequest({.prompt = std::move(prompt),
                            .sampling = p,
                            .on_token =
                                [&run](const TokenEvent& ev) {
                                  if (ev.choice != 0) return;
                                  if (ev.token_id >= 0) run.tokens.push_back(ev.token_id);
                                  run.usage = ev.usage;
                                  if (ev.finished) run.reason = ev.finish_reason;
                                },
                            .n = n,
                            .cache_salt = cache_salt});
    EXPECT_TRUE(id.has_value());
    for (int guard = 0; e.HasWork() && guard < 10000; ++guard) EXPECT_TRUE(e.Step());
    return run;
  }
  // A deterministic prompt of ordinary token ids.
  static std::vector<int32_t> Prompt(int n, int32_t start) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), start);
    return t;
  }
};

TEST_F(PrefixCacheTest, SecondTurnReadsTheBlockAlignedPrefixAndWritesNewBlocks) {
  auto engine = Make(true);
  ASSERT_TRUE(engine);
  auto turn1 = Prompt(70, 1000);
  Generation first = Generate(*engine, turn1, 8);
  EXPECT_EQ(first.usage.prompt_tokens, 70);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  EXPECT_EQ(first.usage.cache_write_tokens, 64);  // 4 full blocks of the prompt
  // Turn 2 = turn 1 + its answer + a new message. Computed so far: 70 + 8 - 1 tokens (the last
  // sampled token never went through the model), so 4 full blocks = 64 tokens are cached.
  auto turn2 = turn1;
  turn2.insert(turn2.end(), first.tokens.begin(), first.tokens.end());
  auto more = Prompt(10, 3000);
  turn2.insert(turn2.end(), more.begin(), more.end());
  EXPECT_EQ(engine->LookupCachedTokens(turn2), 64);
  Generation second = Generate(*engine, turn2, 8);
  EXPECT_EQ(second.usage.prompt_tokens, 88);
  EXPECT_EQ(second.usage.cached_tokens, 64);
  EXPECT_EQ(second.usage.cache_write_tokens, 16);  // block 4 (tokens 64..79) is new
  auto stats = engine->cache_stats();
  EXPECT_EQ(stats.blocks.hit_tokens, 64u);
  EXPECT_EQ(stats.blocks.queries_tokens, 70u + 88u);
  EXPECT_EQ(stats.blocks.used_blocks, 0);  // everything finished: all blocks back in the pool

  // The same turn on an engine without prefix caching produces the same greedy tokens.
  auto plain = Make(false);
  ASSERT_TRUE(plain);
  Generation uncached = Generate(*plain, turn2, 8);
  EXPECT_EQ(uncached.usage.cached_tokens, 0);
  EXPECT_EQ(uncached.usage.cache_write_tokens, 0);
  EXPECT_EQ(uncached.tokens, second.tokens);
}

TEST_F(PrefixCacheTest, LookupChangesNothing) {
  auto engine = Make(true);
  ASSERT_TRUE(engine);
  auto prompt = Prompt(50, 500);
  Generate(*engine, prompt, 2);
  auto before = engine->cache_stats();
  prompt.push_back(7);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(engine->LookupCachedTokens(prompt), 48);
  auto after = engine->cache_stats();
  EXPECT_EQ(before.blocks.queries_tokens, after.blocks.queries_tokens);
  EXPECT_EQ(before.blocks.hit_tokens, after.blocks.hit_tokens);
  EXPECT_EQ(before.blocks.cached_free_blocks, after.blocks.cached_free_blocks);
}

TEST_F(PrefixCacheTest, CancelReturnsEveryBlock) {
  auto engine = Make(true);
  ASSERT_TRUE(engine);
  Generation run;
  SamplingParams p;
  p.max_tokens = 500;
  p.ignore_eos = true;
  auto id = engine->AddRequest({Prompt(40, 200), p, [&run](const TokenEvent& ev) {
                                  run.usage = ev.usage;
                                  if (ev.finished) run.reason = ev.finish_reason;
                                }});
  ASSERT_TRUE(id.has_value());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine->Step());
  EXPECT_GT(engine->cache_stats().blocks.used_blocks, 0);
  engine->Cancel(*id);
  for (int guard = 0; engine->HasWork() && guard < 100; ++guard) ASSERT_TRUE(engine->Step());
  EXPECT_EQ(run.reason, FinishReason::kCancelled);
  EXPECT_EQ(engine->cache_stats().blocks.used_blocks, 0);
  EXPECT_EQ(engine->cache_stats().running, 0);
}

// Tenants (the gateway salts by gateway key): a prompt shares blocks only with its own salt, both
// at admission and in the lookup that the router and /api/engine/lookup ask.
TEST_F(PrefixCacheTest, SaltedPromptsShareBlocksOnlyWithTheirOwnSalt) {
  auto engine = Make(true);
  ASSERT_TRUE(engine);
  const auto prompt = Prompt(70, 1000);
  constexpr uint64_t kA = 0x1111, kB = 0x2222;
  EXPECT_EQ(Generate(*engine, prompt, 4, kA).usage.cached_tokens, 0);
  EXPECT_EQ(engine->LookupCachedTokens(prompt, kA), 64);
  EXPECT_EQ(engine->LookupCachedPrefix(prompt, kA).pool_tokens, 64);
  EXPECT_EQ(engine->LookupCachedTokens(prompt, kB), 0);
  EXPECT_EQ(engine->LookupCachedTokens(prompt), 0);  // unsalted is a tenant of its own
  EXPECT_EQ(engine->LookupCachedPrefix(prompt, kB).pool_tokens, 0);
  // Choices of a salted request (n = 2) compute under its salt, forks included.
  Generation other = Generate(*engine, prompt, 4, kB, 2);
  EXPECT_EQ(other.usage.cached_tokens, 0);
  EXPECT_EQ(other.usage.cache_write_tokens, 64);
  EXPECT_EQ(Generate(*engine, prompt, 4, kB).usage.cached_tokens, 64);
  EXPECT_EQ(Generate(*engine, prompt, 4, kA).usage.cached_tokens, 64);
  EXPECT_EQ(Generate(*engine, prompt, 4).usage.cached_tokens, 0);
}

}  // namespace
}  // namespace kvgate::engine
