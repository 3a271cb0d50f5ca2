// affinity prefix: replicas scored by the cached blocks their engines report, less their load.
#include <gtest/gtest.h>

#include "tests/router/strategy_fixture.h"

namespace kvgate::router::internal {
namespace {

using Names = std::vector<std::string>;

StrategyFixture Replicas() {
  StrategyFixture f({"r1", "r2"});
  f.router.affinity = Affinity::kPrefix;
  f.router.prefix_load_weight = 4.0;
  return f;
}

TEST(PrefixStrategyTest, ScoresInTheEnginesOwnBlocks) {
  StrategyFixture f = Replicas();
  // r1: 64 tokens cached = 4 blocks of 16, idle: score 4. r2: 1,600 tokens, load 3.
  f.facts.probes = {
      {.target = 0, .prompt_tokens = 2000, .cached_tokens = 64, .load = 0, .block_tokens = 16},
      {.target = 1, .prompt_tokens = 2000, .cached_tokens = 1600, .load = 3, .block_tokens = 16}};
  Slate slate = f.All();
  Ranking ranking = RankByPrefix(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"r2", "r1"}));  // 100 blocks - 12 beats 4
  EXPECT_EQ(ranking.reason_code, "prefix_hit");
  EXPECT_EQ(ranking.reason, "r2 holds 1,600 of 2,000 prompt tokens in its prefix cache (load 3)");

  // The same tokens in an engine with 256-token blocks are 6 blocks: the load decides.
  f.facts.probes[1].block_tokens = 256;
  slate = f.All();
  ranking = RankByPrefix(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"r1", "r2"}));  // 4 beats 6.25 - 12
  EXPECT_EQ(ranking.reason_code, "prefix_hit");
}

TEST(PrefixStrategyTest, AnEngineThatDoesNotSayItsBlockSizeCountsTokens) {
  StrategyFixture f = Replicas();
  f.facts.probes = {{.target = 0, .prompt_tokens = 2000, .cached_tokens = 0, .load = 0},
                    {.target = 1, .prompt_tokens = 2000, .cached_tokens = 1600, .load = 40}};
  Slate slate = f.All();
  RankByPrefix(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"r2", "r1"}));  // 1,600 - 160 > 0
}

TEST(PrefixStrategyTest, WithoutAHitTheLeastLoadedWinsCountingTheRoutersOwnInFlight) {
  StrategyFixture f = Replicas();
  f.facts.probes = {
      {.target = 0, .prompt_tokens = 2000, .cached_tokens = 0, .load = 1, .block_tokens = 16},
      {.target = 1, .prompt_tokens = 2000, .cached_tokens = 0, .load = 0, .block_tokens = 16}};
  // r2's engine says idle, but the router has three attempts in flight there.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.health[1]->Begin(f.facts.now_us));
  Slate slate = f.All();
  Ranking ranking = RankByPrefix(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"r1", "r2"}));
  EXPECT_EQ(ranking.reason_code, "least_loaded");
  EXPECT_EQ(ranking.reason, "no replica holds this prompt's prefix; r1 is the least loaded");

  f.facts.probes.clear();  // no engine answered in time: the router's own count alone
  slate = f.All();
  ranking = RankByPrefix(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"r1", "r2"}));
  EXPECT_EQ(ranking.reason_code, "least_loaded_no_lookup");
}

TEST(PrefixStrategyTest, PrefixAffinityOverridesTheStrategy) {
  StrategyFixture f = Replicas();
  f.router.strategy = Strategy::kCost;
  f.facts.probes = {
      {.target = 1, .prompt_tokens = 2000, .cached_tokens = 320, .load = 0, .block_tokens = 16}};
  Slate slate = f.All();
  Ranking ranking = RankSlate(f.Context(), nullptr, slate);
  EXPECT_EQ(ranking.reason_code, "prefix_hit");
  EXPECT_EQ(f.Order(slate), (Names{"r2", "r1"}));
}

}  // namespace
}  // namespace kvgate::router::internal
