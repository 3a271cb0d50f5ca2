// strategy latency: the lowest EWMA latency (TTFT for a stream once measured), unmeasured first.
#include <gtest/gtest.h>

#include "router/router.h"
#include "tests/router/strategy_fixture.h"

namespace kvgate::router::internal {
namespace {

using Names = std::vector<std::string>;

StrategyFixture Three() {
  StrategyFixture f({"a", "b", "c"});
  f.router.strategy = Strategy::kLatency;
  f.router.affinity = Affinity::kNone;
  return f;
}

TEST(LatencyStrategyTest, TheFastestGoesFirstTheRestByLatency) {
  StrategyFixture f = Three();
  f.Answered(0, 300);
  f.Answered(1, 80);
  f.Answered(2, 150);
  Slate slate = f.All();
  Ranking ranking = RankByLatency(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"b", "c", "a"}));
  EXPECT_EQ(ranking.reason_code, "fastest");
  EXPECT_EQ(ranking.reason, "fastest: b (latency EWMA 80 ms)");
}

TEST(LatencyStrategyTest, AnUnmeasuredTargetGoesFirstToBeMeasured) {
  StrategyFixture f = Three();
  f.Answered(0, 50);
  f.Answered(2, 20);
  Slate slate = f.All();
  Ranking ranking = RankByLatency(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"b", "c", "a"}));
  EXPECT_EQ(ranking.reason, "fastest: b has no latency measured yet");
}

TEST(LatencyStrategyTest, AStreamRanksByTimeToFirstTokenWhereMeasured) {
  StrategyFixture f = Three();
  f.Answered(0, 100, 90);  // quick to finish, slow to start
  f.Answered(1, 400, 30);  // slow to finish, quick to start
  f.Answered(2, 200);      // no TTFT yet: its latency stands in
  Slate slate = f.All();
  RankByLatency(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"a", "c", "b"}));
  f.facts.stream = true;
  slate = f.All();
  Ranking ranking = RankByLatency(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"b", "a", "c"}));
  EXPECT_EQ(ranking.reason, "fastest: b (TTFT EWMA 30 ms)");
}

TEST(LatencyStrategyTest, TheEwmaMovesWithNewSamples) {
  StrategyFixture f = Three();
  f.Answered(0, 100);
  f.Answered(1, 200);
  f.Answered(2, 300);
  for (int i = 0; i < 20; ++i) f.Answered(0, 1000);  // a slows down
  Slate slate = f.All();
  RankByLatency(f.Context(), slate);
  EXPECT_EQ(f.Order(slate), (Names{"b", "c", "a"}));
}

// Through the Router: attempts reported back decide the next turn's order.
TEST(LatencyStrategyTest, TheRouterRanksByReportedAttempts) {
  FakeClock clock(kT0);
  std::vector<Target> targets;
  for (const char* name : {"a", "b"}) {
    Target t;
    t.name = name;
    t.provider = "p";
    t.type = telemetry::ProviderType::kOpenAI;
    t.upstream_model = name;
    targets.push_back(t);
  }
  RoutingConfig config;
  RouterConfig r;
  r.name = "r";
  r.strategy = Strategy::kLatency;
  r.affinity = Affinity::kNone;
  r.targets = {{.model = "a"}, {.model = "b"}};
  config.routers.push_back(r);
  auto router = Router::Create(targets, config, clock);
  ASSERT_TRUE(router.has_value()) << router.error().message;
  for (size_t t : {0u, 1u}) {
    ASSERT_TRUE((*router)->BeginAttempt(t));
    (*router)->ReportAttempt({.target = t, .latency_us = t == 0 ? 900'000 : 120'000});
  }
  RequestFacts facts;
  facts.model = "r";
  facts.now_us = clock.NowUnixMicros();
  auto d = (*router)->Route(facts, {});
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "b");
  EXPECT_EQ(d->reason_code, "fastest");
  EXPECT_EQ(d->eligible, 2u);
}

}  // namespace
}  // namespace kvgate::router::internal
