// strategy weighted: one pick in proportion to the eligible targets' weights, the rest in order.
#include <gtest/gtest.h>

#include <map>

#include "tests/router/strategy_fixture.h"

namespace kvgate::router::internal {
namespace {

using Names = std::vector<std::string>;

StrategyFixture Weighted(std::vector<int> weights) {
  std::vector<std::string> names;
  for (size_t i = 0; i < weights.size(); ++i) names.push_back(std::string(1, char('a' + i)));
  StrategyFixture f(names);
  f.router.strategy = Strategy::kWeighted;
  f.router.affinity = Affinity::kNone;
  for (size_t i = 0; i < weights.size(); ++i) f.router.targets[i].weight = weights[i];
  return f;
}

TEST(WeightedStrategyTest, PicksInProportionToTheWeights) {
  StrategyFixture f = Weighted({1, 2, 5});
  std::map<std::string, int> firsts;
  constexpr int kN = 8000;
  for (int i = 0; i < kN; ++i) {
    Slate slate = f.All();
    Ranking ranking = RankByWeight(f.Context(), slate);
    ASSERT_EQ(ranking.reason_code, "weighted");
    ++firsts[f.Order(slate)[0]];
  }
  EXPECT_EQ(f.counter.load(), uint64_t(kN));  // one draw per pick
  EXPECT_NEAR(double(firsts["a"]) / kN, 1.0 / 8, 0.02);
  EXPECT_NEAR(double(firsts["b"]) / kN, 2.0 / 8, 0.02);
  EXPECT_NEAR(double(firsts["c"]) / kN, 5.0 / 8, 0.02);
}

TEST(WeightedStrategyTest, ThePickGoesFirstAndTheRestKeepTheirOrder) {
  StrategyFixture f = Weighted({0, 0, 1, 0});
  Slate slate = f.All();
  Ranking ranking = RankByWeight(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"c", "a", "b", "d"}));
  EXPECT_EQ(ranking.reason, "weighted pick: c (weight 1 of 1)");
}

TEST(WeightedStrategyTest, OnlyEligibleTargetsShareTheWeight) {
  StrategyFixture f = Weighted({1, 100, 3});
  for (int i = 0; i < 200; ++i) {
    Slate slate = f.All();
    // b cannot serve this turn: eligibility left it out.
    slate.eligible.erase(slate.eligible.begin() + 1);
    slate.estimates.erase(slate.estimates.begin() + 1);
    Ranking ranking = RankByWeight(f.Context(), slate);
    ASSERT_NE(ranking.reason.find(" of 4)"), std::string::npos) << ranking.reason;
    ASSERT_EQ(slate.eligible.size(), 2u);
  }
}

TEST(WeightedStrategyTest, ThreadAffinityComesBeforeTheDraw) {
  StrategyFixture f = Weighted({1, 1});
  f.router.affinity = Affinity::kThread;
  telemetry::TurnSummary bound;
  bound.target = "b";
  Slate slate = f.All();
  Ranking ranking = RankSlate(f.Context(), &bound, slate);
  EXPECT_EQ(ranking.reason_code, "affinity");
  EXPECT_EQ(ranking.reason, "kept on b (thread affinity)");
  EXPECT_EQ(f.Order(slate), (Names{"b", "a"}));
  EXPECT_EQ(f.counter.load(), 0u);  // no draw was made
  bound.target = "gone";            // bound to a target that cannot serve: the draw decides
  slate = f.All();
  EXPECT_EQ(RankSlate(f.Context(), &bound, slate).reason_code, "weighted");
}

}  // namespace
}  // namespace kvgate::router::internal
