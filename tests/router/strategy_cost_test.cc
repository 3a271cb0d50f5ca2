// strategy cost, on estimates built by hand: cache-blind list price, the cheapest over the
// horizon, the incumbent's tie, and the words of each reason. (The planner's stay-or-switch
// decisions on a real thread's memory are in router_test.cc.)
#include <gtest/gtest.h>

#include "tests/router/strategy_fixture.h"

namespace kvgate::router::internal {
namespace {

using Names = std::vector<std::string>;

// a: dear at list price, cheap to read from its cache; b: cheap at list price; c: no price.
StrategyFixture Priced() {
  StrategyFixture f({"a", "b", "c"});
  f.router.strategy = Strategy::kCost;
  f.router.horizon_turns = 4;
  f.targets[0].price = Rates(1'000'000, 10'000, 1'000'000);
  f.targets[1].price = Rates(300'000, 150'000, 1'000'000);
  return f;
}

TEST(CostStrategyTest, CacheBlindRanksByListPriceWithUnpricedTargetsLast) {
  StrategyFixture f = Priced();
  f.router.cache_aware = false;
  Slate slate = f.All(10'000, {9'984, 0, 0});  // a holds the prompt: cache-blind ignores it
  Ranking ranking = RankByCost(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"b", "a", "c"}));
  EXPECT_EQ(ranking.reason_code, "cheapest_list_price");
  EXPECT_EQ(ranking.reason, "cheapest eligible target at list price (cache-blind): b");
  // The estimates moved with their candidates.
  EXPECT_EQ(slate.estimates[1].cached, 9'984);
}

TEST(CostStrategyTest, CacheAwareTakesTheCacheIntoTheHorizon) {
  StrategyFixture f = Priced();
  Slate slate = f.All(10'000, {9'984, 0, 0});
  Ranking ranking = RankByCost(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"a", "b", "c"}));  // a's reads beat b's list price
  EXPECT_EQ(ranking.reason_code, "cheapest");
  EXPECT_EQ(ranking.reason.rfind("cheapest over the next 4 turns: a (about $", 0), 0u)
      << ranking.reason;
  slate = f.All(10'000);  // nothing cached anywhere: b is cheaper every turn
  EXPECT_EQ(RankByCost(f.Context(), slate).reason_code, "cheapest");
  EXPECT_EQ(f.Order(slate), (Names{"b", "a", "c"}));
}

TEST(CostStrategyTest, TiesGoToTheIncumbent) {
  StrategyFixture f({"a", "b"});
  f.router.strategy = Strategy::kCost;
  f.targets[0].price = f.targets[1].price = Rates(1'000'000, 100'000, 1'000'000);
  f.thread.latest = telemetry::TurnSummary{};
  f.thread.latest->target = "b";
  f.thread.turns = 1;
  Slate slate = f.All(5'000);
  Ranking ranking = RankByCost(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"b", "a"}));
  EXPECT_EQ(ranking.reason_code, "stayed_warm");
  EXPECT_EQ(ranking.reason.rfind("stayed on b: the cheapest over the next 4 turns", 0), 0u)
      << ranking.reason;
}

TEST(CostStrategyTest, NamesTheTargetItLeavesAndTheOneThatCannotServe) {
  StrategyFixture f = Priced();
  f.thread.latest = telemetry::TurnSummary{};
  f.thread.latest->target = "b";
  f.thread.turns = 1;
  Slate slate = f.All(10'000, {9'984, 0, 0});  // a still holds the thread: moving back pays
  Ranking ranking = RankByCost(f.Context(), slate);
  EXPECT_EQ(f.Order(slate)[0], "a");
  EXPECT_EQ(ranking.reason_code, "returned_warm");
  EXPECT_NE(ranking.reason.find("moved back to a, whose cache still holds 9,984 tokens"),
            std::string::npos)
      << ranking.reason;
  EXPECT_NE(ranking.reason.find(": leaving b gives up 0 cached tokens but saves $"),
            std::string::npos)
      << ranking.reason;

  f.thread.latest->target = "gone";  // the incumbent is not eligible this turn
  slate = f.All(10'000);
  ranking = RankByCost(f.Context(), slate);
  EXPECT_EQ(ranking.reason_code, "cheapest");
  EXPECT_NE(ranking.reason.find("; gone cannot serve this turn"), std::string::npos)
      << ranking.reason;
}

TEST(CostStrategyTest, AutoHorizonFollowsTheThreadsLength) {
  StrategyFixture f = Priced();
  f.router.horizon_auto = true;
  f.thread.turns = 10;
  Slate slate = f.All(10'000);
  EXPECT_NE(RankByCost(f.Context(), slate).reason.find("over the next 10 turns"),
            std::string::npos);
  f.thread.turns = 1;  // young threads: at least 4
  slate = f.All(10'000);
  EXPECT_NE(RankByCost(f.Context(), slate).reason.find("over the next 4 turns"), std::string::npos);
  f.thread.turns = 100;  // at most 32
  slate = f.All(10'000);
  EXPECT_NE(RankByCost(f.Context(), slate).reason.find("over the next 32 turns"),
            std::string::npos);
}

TEST(CostStrategyTest, TheCostStrategyIgnoresThreadAffinity) {
  StrategyFixture f = Priced();
  telemetry::TurnSummary bound;
  bound.target = "a";
  Slate slate = f.All(10'000);
  Ranking ranking = RankSlate(f.Context(), &bound, slate);
  EXPECT_EQ(ranking.reason_code, "cheapest");  // the planner weighs the binding itself
  EXPECT_EQ(f.Order(slate)[0], "b");
}

}  // namespace
}  // namespace kvgate::router::internal
