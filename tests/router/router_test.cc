// The router alone: its config, eligibility, strategies, and the cost planner's stay-or-switch
// decisions on a thread whose memory comes from the real thread tracker.
#include "router/router.h"

#include <gtest/gtest.h>

#include <map>

namespace kvgate::router {
namespace {

using nlohmann::json;

constexpr int64_t kT0 = 1'767'225'600'000'000;

telemetry::Price Rates(int64_t input, int64_t cached, int64_t output, int64_t write_5m = 0) {
  telemetry::Price p;
  p.base = {.input = input, .cached_input = cached,
            .cache_write_5m = write_5m ? write_5m : input, .cache_write_1h = write_5m ? 2 * input : input,
            .output = output};
  return p;
}

telemetry::CacheRules Automatic() {
  return {.min_tokens = 1024, .granularity = 128, .ttl_seconds = 300};
}

Target MakeTarget(std::string name, telemetry::Price price, telemetry::CacheRules rules = Automatic(),
                  int64_t window = 0) {
  Target t;
  t.name = name;
  t.provider = "p-" + name;
  t.type = telemetry::ProviderType::kOpenAI;
  t.upstream_model = name;
  t.price = price;
  t.cache_rules = rules;
  t.context_window = window;
  return t;
}

RoutingConfig Config(const std::string& yaml_like_json) {
  auto parsed = ParseRoutingConfig(json::parse(yaml_like_json), json());
  EXPECT_TRUE(parsed.has_value()) << parsed.error().message;
  return parsed.value_or(RoutingConfig{});
}

// A conversation: a long system prompt and `turns` question/answer pairs, as OpenAI JSON.
std::string Conversation(int turns, const std::string& system = std::string(40'000, 's')) {
  json messages = json::array({{{"role", "system"}, {"content", system}}});
  for (int i = 0; i < turns; ++i) {
    messages.push_back({{"role", "user"}, {"content", "question " + std::to_string(i)}});
    if (i + 1 < turns) messages.push_back({{"role", "assistant"}, {"content", "answer " + std::to_string(i)}});
  }
  return json{{"model", "r"}, {"messages", messages}}.dump();
}

std::shared_ptr<const telemetry::PromptFingerprint> Fp(const std::string& body) {
  return std::make_shared<const telemetry::PromptFingerprint>(
      telemetry::Fingerprint(raw_json::Object(raw_json::Parse(body).value())));
}

class PlannerTest : public ::testing::Test {
 protected:
  // a: the incumbent (cheap cache reads); b: cheaper at list price, dearer per cached token.
  void Make(const std::string& router_json, std::vector<Target> targets) {
    auto r = Router::Create(std::move(targets), Config(router_json), clock_);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    router_ = std::move(*r);
  }
  // Records a turn of thread "t" on `target` with all of its input read or written as usual.
  void Served(const std::string& target, int turns, int64_t input, int64_t cached) {
    telemetry::RequestRecord rec;
    rec.thread_id = "t";
    rec.model = "r";
    rec.target = target;
    rec.provider = "p-" + target;
    rec.status = "ok";
    rec.created_at_us = clock_.NowUnixMicros();
    rec.usage.cache_read = cached;
    rec.usage.uncached = input - cached;
    rec.usage.cache_write_5m = 0;
    rec.usage.cache_write_1h = 0;
    rec.usage.cache_write_no_ttl = 0;
    rec.usage.output = 100;
    tracker_.Diagnose(rec, Fp(Conversation(turns)), Automatic());
  }
  RouteDecision Route(int turns) {
    const std::string body = Conversation(turns);
    RequestFacts facts;
    facts.model = "r";
    facts.thread_id = "t";
    facts.now_us = clock_.NowUnixMicros();
    facts.fingerprint = Fp(body);
    facts.prompt_bytes = facts.fingerprint->TotalBytes();
    auto d = router_->Route(facts, tracker_.View("t"));
    EXPECT_TRUE(d.has_value()) << d.error().message;
    return d.value_or(RouteDecision{});
  }
  std::string First(const RouteDecision& d) { return router_->targets()[d.candidates[0].target].name; }

  FakeClock clock_{kT0};
  telemetry::ThreadTracker tracker_;
  std::unique_ptr<Router> router_;
};

const char* kCostRouter(int horizon) {
  static std::map<int, std::string> texts;
  texts[horizon] = R"([{"name":"r","strategy":"cost","targets":[{"model":"a"},{"model":"b"}],"horizon_turns":)" +
                   std::to_string(horizon) + "}]";
  return texts[horizon].c_str();
}

// A 10,000-token conversation warm on a. Moving to b costs its list price now (b has no cache of
// it) and saves per turn after: the planner moves only when the horizon repays the switch.
TEST_F(PlannerTest, StaysWhileTheSwitchDoesNotPayThenSwitchesWhenItDoes) {
  // Per 1M tokens: a reads at 0.10 (input 1.00), b reads at 0.05 (input 0.30). Moving costs
  // about $0.002 now (b has nothing cached) and saves about $0.00065 per turn after.
  std::vector<Target> targets = {MakeTarget("a", Rates(1'000'000, 100'000, 1'000'000)),
                                 MakeTarget("b", Rates(300'000, 50'000, 1'000'000))};
  Make(kCostRouter(2), targets);
  Served("a", 1, 10'000, 0);
  clock_.AdvanceSeconds(10);
  RouteDecision stay = Route(2);
  ASSERT_GE(stay.eligible, 2u);
  EXPECT_EQ(First(stay), "a");
  EXPECT_EQ(stay.reason_code, "stayed_warm");
  EXPECT_NE(stay.reason.find("stayed on a: moving to b would lose"), std::string::npos) << stay.reason;
  EXPECT_FALSE(stay.moved);
  // The estimate: a reads what it cached (10,000 tokens in 128-token steps).
  EXPECT_EQ(stay.candidates[0].cached_tokens, 9984);

  // The same thread with a longer horizon: the per-turn saving repays the lost reads.
  Make(kCostRouter(8), targets);
  RouteDecision move = Route(2);
  EXPECT_EQ(First(move), "b");
  EXPECT_EQ(move.reason_code, "switched");
  EXPECT_TRUE(move.moved);
  EXPECT_NE(move.reason.find("leaving a gives up"), std::string::npos) << move.reason;
}

TEST_F(PlannerTest, ReturnsToAWarmTargetAndNotToAnExpiredOne) {
  std::vector<Target> targets = {MakeTarget("a", Rates(1'000'000, 100'000, 1'000'000)),
                                 MakeTarget("b", Rates(1'000'000, 500'000, 1'000'000))};
  Make(kCostRouter(4), targets);
  Served("a", 1, 10'000, 0);
  clock_.AdvanceSeconds(20);
  Served("b", 2, 10'100, 0);  // e.g. a failover to b
  clock_.AdvanceSeconds(20);
  RouteDecision back = Route(3);
  EXPECT_EQ(First(back), "a") << back.reason;
  EXPECT_EQ(back.reason_code, "returned_warm");
  EXPECT_GT(*back.candidates[0].cached_tokens, 9000);
  // Past a's TTL its cache is gone: a move to it is a cold switch (it still pays here, a reads
  // five times cheaper), and the estimate says so.
  clock_.AdvanceSeconds(290);
  Served("b", 3, 10'200, 9984);
  clock_.AdvanceSeconds(5);
  RouteDecision cold = Route(4);
  EXPECT_EQ(First(cold), "a") << cold.reason;
  EXPECT_EQ(cold.reason_code, "switched");
  EXPECT_EQ(cold.candidates[0].cached_tokens, 0);
  EXPECT_GT(*cold.candidates[1].cached_tokens, 9000);  // b holds it
}

TEST_F(PlannerTest, CacheBlindPicksTheListPriceAndIgnoresTheCache) {
  std::vector<Target> targets = {MakeTarget("a", Rates(1'000'000, 100'000, 1'000'000)),
                                 MakeTarget("b", Rates(200'000, 20'000, 1'000'000))};
  Make(R"([{"name":"r","strategy":"cost","cache_aware":false,"targets":["a","b"],"horizon_turns":2}])",
       targets);
  Served("a", 1, 10'000, 0);
  RouteDecision d = Route(2);
  EXPECT_EQ(First(d), "b");
  EXPECT_EQ(d.reason_code, "cheapest_list_price");
}

TEST_F(PlannerTest, AFirstTurnGoesToTheCheapestOverTheHorizon) {
  std::vector<Target> targets = {MakeTarget("a", Rates(1'000'000, 100'000, 1'000'000)),
                                 MakeTarget("b", Rates(200'000, 20'000, 1'000'000))};
  Make(kCostRouter(4), targets);
  RouteDecision d = Route(1);
  EXPECT_EQ(First(d), "b");
  EXPECT_EQ(d.reason_code, "cheapest");
  ASSERT_TRUE(d.candidates[0].cost_pico.has_value());
  EXPECT_GT(*d.candidates[0].cost_pico, 0);
}

// An Anthropic-style target caches only marked prefixes. A client that marks none gets nothing
// cached there, unless the provider's anthropic_auto_cache marks them: then each turn writes its
// new input (at the helper's TTL) and the next reads it, and the planner must price it so.
TEST_F(PlannerTest, AnthropicAutoCacheIsPricedAsTheBreakpointsItAdds) {
  telemetry::CacheRules breakpoint_rules = {.min_tokens = 1024, .granularity = 1, .ttl_seconds = 300,
                                            .automatic = false};
  // Per 1M tokens: input 1.00, cached 0.10, 5m writes 1.25, 1h writes 2.00.
  auto anthropic = [&](std::string ttl) {
    Target t = MakeTarget("a", Rates(1'000'000, 100'000, 1'000'000, 1'250'000), breakpoint_rules);
    t.type = telemetry::ProviderType::kAnthropic;
    t.auto_cache_ttl = ttl;
    return t;
  };
  // a: Anthropic's rules; b caches by itself but reads at half price.
  const Target b = MakeTarget("b", Rates(1'000'000, 500'000, 1'000'000));
  std::map<std::string, int64_t> first_turn;
  std::map<std::string, std::string> chosen;
  for (std::string ttl : {"", "5m", "1h"}) {
    Make(kCostRouter(8), {anthropic(ttl), b});
    RouteDecision d = Route(1);
    ASSERT_GE(d.eligible, 2u);
    chosen[ttl] = First(d);
    for (const auto& c : d.candidates) {
      if (router_->targets()[c.target].name != "a") continue;
      ASSERT_TRUE(c.cost_pico.has_value());
      first_turn[ttl] = *c.cost_pico;
      EXPECT_EQ(c.cached_tokens.value_or(0), 0);
    }
  }
  // This turn: nothing marked is read at input price; the helper writes it all, 1.25x or 2x.
  const int64_t d5 = first_turn["5m"] - first_turn[""], d1 = first_turn["1h"] - first_turn[""];
  EXPECT_GT(d5, 0);
  EXPECT_EQ(d1, 4 * d5);  // (2.00 - 1.00) / (1.25 - 1.00)
  // Over eight turns: unmarked, a never caches and b's half-price reads win; with the helper,
  // a's reads at a tenth win.
  EXPECT_EQ(chosen[""], "b");
  EXPECT_EQ(chosen["5m"], "a");
}

TEST(RouterTest, EligibilityByContextWindowToolsAndWhenRules) {
  FakeClock clock(kT0);
  Target small = MakeTarget("small", Rates(100, 10, 100), Automatic(), 1000);
  Target engine = MakeTarget("engine", Rates(0, 0, 0));
  engine.capabilities.tools = false;
  Target premium = MakeTarget("premium", Rates(3'000'000, 300'000, 15'000'000));
  auto router = Router::Create(
      {small, engine, premium},
      Config(R"([{"name":"r","strategy":"fallback","targets":["small","engine","premium"],
                  "when":[{"match":{"metadata.tier":"gold"},"targets":["premium"]}]}])"),
      clock);
  ASSERT_TRUE(router.has_value()) << router.error().message;
  RequestFacts facts;
  facts.model = "r";
  facts.now_us = kT0;
  facts.prompt_bytes = 40'000;  // about 10,000 tokens at the default ratio: too long for `small`
  facts.tools = true;
  auto d = (*router)->Route(facts, {});
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->eligible, 1u);
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "premium");
  std::map<std::string, std::string> why;
  for (const Candidate& c : d->candidates) why[(*router)->targets()[c.target].name] = c.why_not;
  EXPECT_NE(why["small"].find("context window"), std::string::npos) << why["small"];
  EXPECT_EQ(why["engine"], "does not support tools");
  // A when rule restricts the turn to its targets.
  facts.tools = false;
  facts.prompt_bytes = 100;
  facts.metadata = {{"tier", "gold"}};
  d = (*router)->Route(facts, {});
  ASSERT_EQ(d->eligible, 1u);
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "premium");
  facts.metadata = {{"tier", "bronze"}};
  d = (*router)->Route(facts, {});
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "small");
  EXPECT_EQ(d->reason_code, "fallback_order");
}

TEST(RouterTest, WeightedSharesFollowTheWeights) {
  FakeClock clock(kT0);
  auto router = Router::Create(
      {MakeTarget("a", Rates(1, 1, 1)), MakeTarget("b", Rates(1, 1, 1))},
      Config(R"([{"name":"r","strategy":"weighted","affinity":"none",
                  "targets":[{"model":"a","weight":1},{"model":"b","weight":3}]}])"),
      clock);
  ASSERT_TRUE(router.has_value());
  RequestFacts facts;
  facts.model = "r";
  facts.now_us = kT0;
  int b = 0;
  constexpr int kN = 4000;
  for (int i = 0; i < kN; ++i) {
    auto d = (*router)->Route(facts, {});
    b += (*router)->targets()[d->candidates[0].target].name == "b";
  }
  EXPECT_NEAR(double(b) / kN, 0.75, 0.03);
}

TEST(RouterTest, ThreadAffinityKeepsTheTargetAndKeyWithinItsTtl) {
  FakeClock clock(kT0);
  Target a = MakeTarget("a", Rates(1, 1, 1));
  Target b = MakeTarget("b", Rates(1, 1, 1));
  b.keys = 3;
  auto router = Router::Create({a, b},
                               Config(R"([{"name":"r","strategy":"fallback","targets":["a","b"],
                                           "affinity_ttl_seconds":600}])"),
                               clock);
  ASSERT_TRUE(router.has_value());
  telemetry::ThreadView view;
  telemetry::TurnSummary last;
  last.target = "b";
  last.key = 2;
  last.created_at_us = kT0;
  last.fingerprint = Fp(Conversation(1, "x"));
  view.latest = last;
  view.by_target = {last};
  RequestFacts facts;
  facts.model = "r";
  facts.thread_id = "t";
  facts.now_us = kT0 + 60'000'000;
  auto d = (*router)->Route(facts, view);
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "b");
  EXPECT_EQ(d->candidates[0].key, 2);
  EXPECT_EQ(d->reason_code, "affinity");
  facts.now_us = kT0 + 601'000'000;  // the binding expired: back to the configured order
  d = (*router)->Route(facts, view);
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "a");
}

TEST(RouterTest, PrefixAffinityPicksTheReplicaHoldingThePrefixUnlessItIsLoaded) {
  FakeClock clock(kT0);
  auto router = Router::Create({MakeTarget("r1", Rates(0, 0, 0)), MakeTarget("r2", Rates(0, 0, 0))},
                               Config(R"([{"name":"r","affinity":"prefix","targets":["r1","r2"],
                                           "prefix_load_weight":4}])"),
                               clock);
  ASSERT_TRUE(router.has_value());
  RequestFacts facts;
  facts.model = "r";
  facts.now_us = kT0;
  // The engines say their block size, as the gateway's probes do (engine::kBlockSize).
  facts.probes = {{.target = 0, .prompt_tokens = 2000, .cached_tokens = 0, .load = 0, .block_tokens = 16},
                  {.target = 1, .prompt_tokens = 2000, .cached_tokens = 1600, .load = 3, .block_tokens = 16}};
  auto d = (*router)->Route(facts, {});
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "r2");  // 100 blocks - 12
  EXPECT_EQ(d->reason_code, "prefix_hit");
  facts.probes[1].load = 40;  // 100 blocks - 160: the idle replica wins
  d = (*router)->Route(facts, {});
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "r1");
  facts.probes.clear();  // no lookup answered in time: the least loaded
  d = (*router)->Route(facts, {});
  EXPECT_EQ(d->reason_code, "least_loaded_no_lookup");
}

TEST(RouterConfigTest, ErrorsNameTheField) {
  struct Case {
    const char* json;
    const char* error;
  };
  for (const Case& c : {
           Case{R"([{"strategy":"cost","targets":["a"]}])", "routers[0].name is required"},
           Case{R"([{"name":"r","strategy":"cheapest","targets":["a"]}])", "routers[0].strategy"},
           Case{R"([{"name":"r","targets":[]}])", "routers[0].targets"},
           Case{R"([{"name":"r","targets":["a"],"fallback_on":["sometimes"]}])", "routers[0].fallback_on[0]"},
           Case{R"([{"name":"r","targets":["a"],"affinity":"sticky"}])", "routers[0].affinity"},
           Case{R"([{"name":"r","targets":["a"],"retries":-1}])", "routers[0].retries"},
           Case{R"([{"name":"r","targets":["a"],"colour":"red"}])", "unknown key \"colour\""},
           Case{R"([{"name":"r","targets":["a","a"]}])", "listed twice"},
       }) {
    auto parsed = ParseRoutingConfig(json::parse(c.json), json());
    ASSERT_FALSE(parsed.has_value()) << c.json;
    EXPECT_NE(parsed.error().message.find(c.error), std::string::npos)
        << c.json << ": " << parsed.error().message;
  }
  auto unknown = CheckTargets(Config(R"([{"name":"r","targets":["a",{"model":"nope"}]}])"), {"a"});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().message.find("routers[0].targets[1].model: unknown model \"nope\""),
            std::string::npos)
      << unknown.error().message;
  auto clash = CheckTargets(Config(R"([{"name":"a","targets":["a"]}])"), {"a"});
  ASSERT_FALSE(clash.has_value());
  EXPECT_NE(clash.error().message.find("already a model name"), std::string::npos);
}

TEST(RouterConfigTest, TheIssuesShapeParses) {
  RoutingConfig c = Config(R"([{"name":"kvgate-router","strategy":"cost","cache_aware":true,
      "targets":[{"model":"sonnet"},{"model":"gpt-4o-mini"},{"model":"deepseek-chat","weight":2}],
      "fallback_on":[429,500,502,503,504,529,"timeout","connect"],"retries":1,"affinity":"thread",
      "horizon_turns":4}])");
  ASSERT_EQ(c.routers.size(), 1u);
  const RouterConfig& r = c.routers[0];
  EXPECT_EQ(r.strategy, Strategy::kCost);
  EXPECT_EQ(r.targets[2].weight, 2);
  EXPECT_EQ(r.fallback_statuses, (std::vector<int>{429, 500, 502, 503, 504, 529}));
  EXPECT_TRUE(r.fallback_on_timeout && r.fallback_on_connect);
  EXPECT_EQ(r.horizon_turns, 4);
  EXPECT_TRUE(CheckTargets(c, {"sonnet", "gpt-4o-mini", "deepseek-chat"}).has_value());
}

TEST(HealthTest, RetryAfterCoolsATargetAndRetryDelaysHonourIt) {
  FakeClock clock(kT0);
  auto router = Router::Create({MakeTarget("a", Rates(1, 1, 1)), MakeTarget("b", Rates(1, 1, 1))},
                               Config(R"([{"name":"r","targets":["a","b"],"affinity":"none"}])"), clock);
  ASSERT_TRUE(router.has_value());
  ASSERT_TRUE((*router)->BeginAttempt(0));
  (*router)->ReportAttempt({.target = 0, .failure = Failure::kStatus, .status = 429,
                            .retry_after_ms = 30'000});
  RequestFacts facts;
  facts.model = "r";
  facts.now_us = clock.NowUnixMicros();
  auto d = (*router)->Route(facts, {});
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "b");
  EXPECT_NE(d->candidates[1].why_not.find("Retry-After"), std::string::npos) << d->candidates[1].why_not;
  clock.AdvanceSeconds(31);
  facts.now_us = clock.NowUnixMicros();
  d = (*router)->Route(facts, {});
  EXPECT_EQ((*router)->targets()[d->candidates[0].target].name, "a");
  EXPECT_EQ((*router)->RetryDelay(1, 500), std::chrono::milliseconds(500));
  EXPECT_FALSE((*router)->RetryDelay(1, 60'000).has_value());  // too long to wait: fall back
  auto backoff = (*router)->RetryDelay(2, std::nullopt);
  ASSERT_TRUE(backoff.has_value());
  EXPECT_GE(backoff->count(), 200);  // 200 ms base, doubled, +-50%
  EXPECT_LE(backoff->count(), 600);
}

}  // namespace
}  // namespace kvgate::router
