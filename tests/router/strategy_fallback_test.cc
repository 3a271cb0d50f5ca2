// strategy fallback: the configured order as eligibility leaves it, and what makes the gateway
// try the next target (ShouldFallBack).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "router/router.h"
#include "tests/router/strategy_fixture.h"

namespace kvgate::router::internal {
namespace {

using Names = std::vector<std::string>;

TEST(FallbackStrategyTest, KeepsTheOrderAndNamesTheFirst) {
  StrategyFixture f({"a", "b", "c"});
  Slate slate = f.All();
  slate.eligible.erase(slate.eligible.begin());  // a is down
  slate.estimates.erase(slate.estimates.begin());
  Ranking ranking = RankSlate(f.Context(), nullptr, slate);
  EXPECT_EQ(f.Order(slate), (Names{"b", "c"}));
  EXPECT_EQ(ranking.reason_code, "fallback_order");
  EXPECT_EQ(ranking.reason, "first healthy target in order: b");
  EXPECT_EQ(RankInOrder(f.Context(), slate).reason, ranking.reason);
}

TEST(FallbackStrategyTest, ThreadAffinityKeepsABoundThreadOffTheFirstTarget) {
  StrategyFixture f({"a", "b", "c"});
  telemetry::TurnSummary bound;
  bound.target = "c";
  Slate slate = f.All();
  Ranking ranking = RankSlate(f.Context(), &bound, slate);
  EXPECT_EQ(f.Order(slate), (Names{"c", "a", "b"}));
  EXPECT_EQ(ranking.reason_code, "affinity");
  f.router.affinity = Affinity::kNone;  // without affinity the binding is ignored
  slate = f.All();
  EXPECT_EQ(RankSlate(f.Context(), &bound, slate).reason_code, "fallback_order");
  EXPECT_EQ(f.Order(slate), (Names{"a", "b", "c"}));
}

class FallbackRouterTest : public ::testing::Test {
 protected:
  void Make(const std::string& router_json) {
    auto config = ParseRoutingConfig(nlohmann::json::parse(router_json), nlohmann::json());
    ASSERT_TRUE(config.has_value()) << config.error().message;
    std::vector<Target> targets;
    for (const char* name : {"a", "b"}) {
      Target t;
      t.name = name;
      t.provider = "p";
      t.type = telemetry::ProviderType::kOpenAI;
      t.upstream_model = name;
      targets.push_back(t);
    }
    auto router = Router::Create(targets, *config, clock_);
    ASSERT_TRUE(router.has_value()) << router.error().message;
    router_ = std::move(*router);
  }
  RouteDecision Route() {
    RequestFacts facts;
    facts.model = "r";
    facts.now_us = clock_.NowUnixMicros();
    auto d = router_->Route(facts, {});
    EXPECT_TRUE(d.has_value());
    return d.value_or(RouteDecision{});
  }
  void Failed(size_t t, int status) {
    ASSERT_TRUE(router_->BeginAttempt(t));
    router_->ReportAttempt({.target = t, .failure = Failure::kStatus, .status = status});
  }

  FakeClock clock_{kT0};
  std::unique_ptr<Router> router_;
};

TEST_F(FallbackRouterTest, AnOpenCircuitMovesTheTurnToTheNextTargetAndSaysWhy) {
  Make(R"([{"name":"r","strategy":"fallback","affinity":"none","targets":["a","b"]}])");
  EXPECT_EQ(Route().reason, "first healthy target in order: a");
  for (int i = 0; i < HealthOptions{}.failures_to_open; ++i) Failed(0, 503);
  RouteDecision d = Route();
  ASSERT_EQ(d.eligible, 1u);
  EXPECT_EQ(router_->targets()[d.candidates[0].target].name, "b");
  EXPECT_EQ(d.reason_code, "fallback_order");
  EXPECT_EQ(d.reason.rfind("first healthy target in order: b; skipped a: ", 0), 0u) << d.reason;
  ASSERT_EQ(d.candidates.size(), 2u);
  EXPECT_FALSE(d.candidates[1].eligible);  // a stays in the record, after the eligible ones
  clock_.AdvanceSeconds(31);               // past the cool-down: half-open, a gets its probe
  EXPECT_EQ(router_->targets()[Route().candidates[0].target].name, "a");
}

TEST_F(FallbackRouterTest, FallsBackOnlyOnWhatFallbackOnNames) {
  Make(R"([{"name":"r","targets":["a","b"],"fallback_on":[503,"timeout"]}])");
  const RouterConfig* r = router_->FindRouter("r");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(router_->ShouldFallBack(r, {.failure = Failure::kStatus, .status = 503}));
  EXPECT_FALSE(router_->ShouldFallBack(r, {.failure = Failure::kStatus, .status = 429}));
  EXPECT_TRUE(router_->ShouldFallBack(r, {.failure = Failure::kTimeout}));
  EXPECT_FALSE(router_->ShouldFallBack(r, {.failure = Failure::kConnect}));
  EXPECT_FALSE(router_->ShouldFallBack(r, {.failure = Failure::kOther}));
  EXPECT_FALSE(router_->ShouldFallBack(nullptr, {.failure = Failure::kStatus, .status = 503}));
  Make(R"([{"name":"r","targets":["a","b"]}])");  // the default list
  r = router_->FindRouter("r");
  for (int status : {429, 500, 502, 503, 504, 529}) {
    EXPECT_TRUE(router_->ShouldFallBack(r, {.failure = Failure::kStatus, .status = status}))
        << status;
  }
  EXPECT_FALSE(router_->ShouldFallBack(r, {.failure = Failure::kStatus, .status = 400}));
  EXPECT_TRUE(router_->ShouldFallBack(r, {.failure = Failure::kConnect}));
}

}  // namespace
}  // namespace kvgate::router::internal
