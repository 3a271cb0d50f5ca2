// Keep-warm: the decision rule and its survival estimate (keep_warm_policy.h), the config, the
// ping body, and the service's bookkeeping (keep_warm.h) over a real router and a sender that
// only counts.
#include "gateway/keep_warm.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/clock.h"
#include "gateway/config.h"
#include "gateway/keep_warm_policy.h"
#include "gateway/targets.h"
#include "telemetry/pricing.h"

namespace kvgate::gateway {
namespace {

using keep_warm::Decide;
using keep_warm::Decision;
using keep_warm::DecisionInput;
using keep_warm::GapSample;
using keep_warm::kNeverEnded;
using keep_warm::PingEconomics;
using keep_warm::SurvivalCounts;

Result<GatewayConfig> Parse(const std::string& yaml) {
  return ParseConfig(yaml, [](const std::string&) { return std::nullopt; });
}

TEST(KeepWarmSurvival, CountsOnlyGapsLongerThanTheIdleTime) {
  GapSample s(10);
  for (double g : {10.0, 50.0, 200.0, 320.0, 700.0, kNeverEnded}) s.Add(g);
  // Idle 100 s, window 300 s: at risk 200, 320, 700, never; ended within 400 s: 200 and 320.
  SurvivalCounts c = s.Conditional(100, 300);
  EXPECT_EQ(c.at_risk, 4);
  EXPECT_EQ(c.ended, 2);
  // Past every finite gap only the silent thread is at risk, and it never ends.
  c = s.Conditional(1000, 300);
  EXPECT_EQ(c.at_risk, 1);
  EXPECT_EQ(c.ended, 0);
}

TEST(KeepWarmSurvival, SampleIsBoundedAndResolvesSilentGaps) {
  GapSample s(3);
  for (double g : {1.0, 2.0, 3.0, 4.0}) s.Add(g);
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.Conditional(0, 10).at_risk, 3);  // 1.0 was dropped
  EXPECT_FALSE(s.Resolve(5));
  s.Add(kNeverEnded);
  EXPECT_EQ(s.Conditional(100, 10).at_risk, 1);
  EXPECT_TRUE(s.Resolve(105));  // the thread came back after 105 s
  EXPECT_EQ(s.Conditional(100, 10).ended, 1);
}

TEST(KeepWarmSurvival, ThreadEvidenceBlendsWithTenantThenGatewayPrior) {
  const SurvivalCounts none{};
  // No evidence anywhere: no reason to ping.
  EXPECT_DOUBLE_EQ(keep_warm::NextTurnProbability(none, none, none), 0.0);
  // Thin evidence is shrunk toward that: one gap that ended reads as an even chance.
  EXPECT_DOUBLE_EQ(keep_warm::NextTurnProbability(none, none, {.at_risk = 1, .ended = 1}), 0.5);
  // The gateway's share when the tenant has too little.
  const SurvivalCounts gateway{.at_risk = 10, .ended = 9};
  const SurvivalCounts thin_tenant{.at_risk = 2, .ended = 0};
  EXPECT_DOUBLE_EQ(keep_warm::NextTurnProbability(none, thin_tenant, gateway), 0.9);
  // The tenant's share once it has enough, whatever the gateway says.
  const SurvivalCounts tenant{.at_risk = 5, .ended = 1};
  EXPECT_DOUBLE_EQ(keep_warm::NextTurnProbability(none, tenant, gateway), 0.2);
  // The thread's own gaps pull away from the prior as they accumulate.
  const SurvivalCounts thread{.at_risk = 12, .ended = 12};
  const double p = keep_warm::NextTurnProbability(thread, tenant, gateway);
  EXPECT_DOUBLE_EQ(p, (12 + keep_warm::kPriorWeight * 0.2) / (12 + keep_warm::kPriorWeight));
  EXPECT_GE(p, 0.8);
}

// Anthropic-like rates (micro-USD per 1M): input 3, read 0.3, 5m write 3.75, output 15.
PingEconomics Anthropic(int64_t prefix, int64_t tail) {
  PingEconomics e;
  e.prefix_tokens = prefix;
  e.tail_tokens = tail;
  e.rates = {.input = 3'000'000,
             .cached_input = 300'000,
             .cache_write_5m = 3'750'000,
             .cache_write_1h = 6'000'000,
             .output = 15'000'000};
  e.automatic = false;
  return e;
}

TEST(KeepWarmEconomics, CostsInPicoUsd) {
  const PingEconomics e = Anthropic(10'000, 50);
  EXPECT_EQ(e.Cost(), int64_t{10'000} * 300'000 + int64_t{50} * 3'000'000 + 15'000'000);
  EXPECT_EQ(e.WorstCost(), int64_t{10'000} * 3'750'000 + int64_t{50} * 3'000'000 + 15'000'000);
  EXPECT_EQ(e.Saving(), int64_t{10'000} * (3'750'000 - 300'000));
  EXPECT_EQ(e.SavingFor(4'000), int64_t{4'000} * (3'750'000 - 300'000));
  EXPECT_EQ(e.SavingFor(99'000), e.Saving());  // never more than the prefix kept
  PingEconomics automatic = e;
  automatic.automatic = true;  // a re-write costs the input rate
  EXPECT_EQ(automatic.Saving(), int64_t{10'000} * (3'000'000 - 300'000));
}

// Sonnet's rates (micro-USD per 1M tokens): read 0.30, 5-minute write 3.75, 1-hour write 6.
keep_warm::WriteTtlInput Writes(double p_short, double p_long) {
  return {.p_short = p_short,
          .p_long = p_long,
          .prefix_tokens = 10'000,
          .new_tokens = 1'000,
          .rates = Anthropic(0, 0).rates};
}

TEST(KeepWarmWriteTtl, LongWritesWhenGapsOutliveTheShortTtlButNotTheLong) {
  // Half the next turns come after 5 minutes, nearly all within the hour.
  const keep_warm::WriteTtlCosts mixed = keep_warm::ExpectedWriteCosts(Writes(0.5, 0.95));
  EXPECT_DOUBLE_EQ(mixed.short_ttl,
                   1'000.0 * 3'750'000 + 10'000.0 * (0.5 * 300'000 + 0.5 * 3'750'000));
  EXPECT_DOUBLE_EQ(mixed.long_ttl,
                   1'000.0 * 6'000'000 + 10'000.0 * (0.95 * 300'000 + 0.05 * 6'000'000));
  EXPECT_TRUE(mixed.PreferLong());
  // Every turn within 5 minutes: the dearer write buys nothing.
  EXPECT_FALSE(keep_warm::ExpectedWriteCosts(Writes(1.0, 1.0)).PreferLong());
  // No evidence (both near 0): both re-write, the short write is cheaper.
  EXPECT_FALSE(keep_warm::ExpectedWriteCosts(Writes(0.0, 0.0)).PreferLong());
  // Gaps past the hour too: long writes would not be read either.
  EXPECT_FALSE(keep_warm::ExpectedWriteCosts(Writes(0.1, 0.2)).PreferLong());
}

DecisionInput Input(double p) {
  return DecisionInput{.probability = p,
                       .economics = Anthropic(10'000, 50),
                       .pings_since_turn = 0,
                       .max_pings_per_thread = 3,
                       .day_committed = 0,
                       .day_cap = keep_warm::UsdToPico(10)};
}

TEST(KeepWarmDecision, PingsExactlyWhenExpectedSavingBeatsTheCost) {
  const PingEconomics e = Anthropic(10'000, 50);
  const double breakeven = double(e.Cost()) / double(e.Saving());  // about 0.092
  EXPECT_EQ(Decide(Input(breakeven * 1.05)), Decision::kPing);
  EXPECT_EQ(Decide(Input(breakeven * 0.95)), Decision::kUnlikely);
  EXPECT_EQ(Decide(Input(0)), Decision::kUnlikely);
  DecisionInput empty = Input(1);
  empty.economics.prefix_tokens = 0;
  EXPECT_EQ(Decide(empty), Decision::kNotCached);
}

TEST(KeepWarmDecision, StopsAfterMaxPingsWithoutATurn) {
  DecisionInput in = Input(0.99);
  in.pings_since_turn = 2;
  EXPECT_EQ(Decide(in), Decision::kPing);
  in.pings_since_turn = 3;
  EXPECT_EQ(Decide(in), Decision::kThreadCap);
}

TEST(KeepWarmDecision, NeverGoesOverTheDailyCapAtWorst) {
  DecisionInput in = Input(0.99);
  const int64_t worst = in.economics.WorstCost();
  in.day_cap = 10 * worst;
  in.day_committed = 9 * worst;  // exactly room for one more at its worst
  EXPECT_EQ(Decide(in), Decision::kPing);
  in.day_committed = 9 * worst + 1;
  EXPECT_EQ(Decide(in), Decision::kDailyCap);
  EXPECT_EQ(keep_warm::ReasonName(Decision::kDailyCap), "daily_cap");
}

TEST(KeepWarmPingBody, KeepsThePromptBytesAndAsksForOneToken) {
  const std::string body =
      R"({"model":"m","messages":[{"role":"user","content":"hi  there"}],"stream":true,)"
      R"("stream_options":{"include_usage":true},"max_tokens":500,"n":2,"temperature":0.5})";
  auto parsed = raw_json::Parse(body);
  ASSERT_TRUE(parsed.has_value());
  auto ping = PingBody(raw_json::Object(*parsed));
  ASSERT_TRUE(ping.has_value());
  EXPECT_EQ(*ping, R"({"model":"m","messages":[{"role":"user","content":"hi  there"}],)"
                   R"("temperature":0.5,"max_tokens":1,"stream":false})");
  auto reasoning = raw_json::Parse(R"({"model":"o","max_completion_tokens":99,"messages":[]})");
  ASSERT_TRUE(reasoning.has_value());
  EXPECT_EQ(*PingBody(raw_json::Object(*reasoning)),
            R"({"model":"o","messages":[],"max_completion_tokens":1,"stream":false})");
}

TEST(KeepWarmConfigTest, ParsesModelsAndRoutersWithDefaults) {
  auto config = Parse(R"(
providers: [{name: a, type: anthropic, base_url: http://127.0.0.1:1}]
models:
  - {name: m1, provider: a, keep_warm: {enabled: true}}
  - {name: m2, provider: a, keep_warm: {enabled: true, max_usd_per_day: 2.5, max_pings_per_thread: 7}}
  - {name: m3, provider: a}
routers:
  - {name: r, strategy: fallback, targets: [m1, m2], keep_warm: {enabled: true, max_usd_per_day: "0.5"}}
)");
  ASSERT_TRUE(config.has_value()) << config.error().message;
  ASSERT_EQ(config->keep_warm.size(), 3u);
  EXPECT_TRUE(config->keep_warm.at("m1").enabled);
  EXPECT_DOUBLE_EQ(config->keep_warm.at("m1").max_usd_per_day, KeepWarmConfig{}.max_usd_per_day);
  EXPECT_EQ(config->keep_warm.at("m1").max_pings_per_thread, KeepWarmConfig{}.max_pings_per_thread);
  EXPECT_DOUBLE_EQ(config->keep_warm.at("m2").max_usd_per_day, 2.5);
  EXPECT_EQ(config->keep_warm.at("m2").max_pings_per_thread, 7);
  EXPECT_DOUBLE_EQ(config->keep_warm.at("r").max_usd_per_day, 0.5);
  EXPECT_FALSE(config->keep_warm.contains("m3"));
}

TEST(KeepWarmConfigTest, RejectsBadValuesWithTheirPath) {
  const std::string head =
      "providers: [{name: a, type: anthropic, base_url: http://127.0.0.1:1}]\nmodels:\n";
  struct Case {
    std::string keep_warm;
    std::string message;
  } cases[] = {
      {"{enabled: yes-please}", "models[0].keep_warm.enabled must be true or false"},
      {"{enabled: true, max_usd_per_day: 0}", "models[0].keep_warm.max_usd_per_day must be"},
      {"{enabled: true, max_usd_per_day: -1}", "models[0].keep_warm.max_usd_per_day must be"},
      {"{enabled: true, max_usd_per_day: lots}", "models[0].keep_warm.max_usd_per_day must be"},
      {"{enabled: true, max_pings_per_thread: 0}",
       "models[0].keep_warm.max_pings_per_thread must be"},
      {"{enabled: true, max_pings_per_thread: 2.5}",
       "models[0].keep_warm.max_pings_per_thread must be"},
      {"{enabled: true, ttl: 5}", "ttl"},
      {"true", "models[0].keep_warm must be a mapping"},
  };
  for (const Case& c : cases) {
    auto config = Parse(head + "  - {name: m, provider: a, keep_warm: " + c.keep_warm + "}\n");
    ASSERT_FALSE(config.has_value()) << c.keep_warm;
    EXPECT_NE(config.error().message.find(c.message), std::string::npos)
        << c.keep_warm << ": " << config.error().message;
  }
  auto router = Parse(head +
                      "  - {name: m, provider: a}\nrouters:\n  - {name: r, strategy: "
                      "fallback, targets: [m], keep_warm: {enabled: true, "
                      "max_pings_per_thread: -3}}\n");
  ASSERT_FALSE(router.has_value());
  EXPECT_NE(router.error().message.find("routers[0].keep_warm.max_pings_per_thread"),
            std::string::npos)
      << router.error().message;
}

// The service over a real router (an Anthropic target priced by the catalog, TTL 300 s).
class KeepWarmServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& keep_warm) {
    auto config = Parse(
        "providers: [{name: a, type: anthropic, base_url: http://127.0.0.1:1}]\n"
        "models:\n  - {name: sonnet, provider: a, upstream_model: claude-sonnet-4-5, "
        "keep_warm: " +
        keep_warm + "}\n  - {name: cold, provider: a, upstream_model: claude-sonnet-4-5}\n");
    ASSERT_TRUE(config.has_value()) << config.error().message;
    auto targets = BuildTargets(*config, telemetry::PriceCatalog::BuiltIn(), nullptr);
    ASSERT_TRUE(targets.has_value()) << targets.error().message;
    auto router = router::Router::Create(std::move(*targets), config->routing, clock_);
    ASSERT_TRUE(router.has_value()) << router.error().message;
    router_ = std::move(*router);
    ASSERT_TRUE(router_->targets()[0].price.has_value());
    service_ = std::make_unique<KeepWarm>(
        *router_, config->keep_warm,
        [this](std::shared_ptr<const PingTemplate> ping, std::string thread_id) {
          sent_.push_back(thread_id);
          last_ping_ = std::move(ping);
        });
  }

  // A finished client turn of `thread` at `at_s`, its prompt staged as the attempt loop does.
  telemetry::RequestRecord Turn(const std::string& thread, double at_s, int64_t read,
                                int64_t written, const std::string& model = "sonnet") {
    telemetry::RequestRecord r;
    r.request_id = "req-" + std::to_string(++requests_);
    r.thread_id = thread;
    r.model = model;
    r.target = model;
    r.status = "ok";
    r.created_at_us = static_cast<int64_t>(at_s * 1e6);
    r.usage.cache_read = read;
    r.usage.cache_write_5m = written;
    r.usage.cache_write_1h = 0;
    r.usage.cache_write_no_ttl = 0;
    r.usage.uncached = 20;
    r.usage.output = 10;
    if (service_->Wants(model, router_->targets()[*router_->FindTarget(model)],
                        providers::Endpoint::kMessages)) {
      service_->Stage(r.request_id, PingTemplate{.endpoint = providers::Endpoint::kMessages,
                                                 .body = R"({"max_tokens":1})",
                                                 .target = *router_->FindTarget(model),
                                                 .model = model});
    }
    service_->Observe(r);
    return r;
  }
  // The ping's record as the gateway would commit it: it read the prefix.
  void PingAnswered(const std::string& thread, double at_s, int64_t cost_pico, bool ok = true) {
    telemetry::RequestRecord r;
    r.request_id = "ping-" + std::to_string(++requests_);
    r.purpose = std::string(telemetry::kPurposeKeepWarm);
    r.thread_id = thread;
    r.model = "sonnet";
    r.target = "sonnet";
    r.status = ok ? "ok" : "upstream_error";
    r.created_at_us = static_cast<int64_t>(at_s * 1e6);
    r.cost.total = cost_pico;
    service_->Observe(r);
  }
  std::string Metrics() const {
    std::string out;
    service_->ExposeMetrics(out);
    return out;
  }

  FakeClock clock_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<KeepWarm> service_;
  std::vector<std::string> sent_;
  std::shared_ptr<const PingTemplate> last_ping_;
  int requests_ = 0;
};

constexpr double kTtl = 300;
constexpr double kLead = 30;  // a tenth of the TTL

TEST_F(KeepWarmServiceTest, PingsShortlyBeforeExpiryWhenTheThreadKeepsComing) {
  Start("{enabled: true, max_pings_per_thread: 2}");
  // A thread whose turns come about every 5 minutes plus a bit: each gap would outlive the TTL.
  double t = 0;
  Turn("th", t, 0, 10'000);
  for (int i = 0; i < 6; ++i) {
    t += 320;
    Turn("th", t, 0, 10'000);
  }
  // Nothing is due before TTL - lead.
  EXPECT_EQ(service_->RunDue(static_cast<int64_t>((t + kTtl - kLead - 1) * 1e6)),
            std::optional<int64_t>(static_cast<int64_t>((t + kTtl - kLead) * 1e6)));
  EXPECT_TRUE(sent_.empty());
  service_->RunDue(static_cast<int64_t>((t + kTtl - kLead) * 1e6));
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0], "th");
  ASSERT_TRUE(last_ping_);
  EXPECT_EQ(last_ping_->model, "sonnet");
  PingAnswered("th", t + kTtl - kLead, 3'000'000);
  // The next turn reads what the ping kept: it saved a re-write.
  auto next = Turn("th", t + 320, 10'000, 0);
  EXPECT_EQ(next.keep_warm_saved, int64_t{10'000} * (3'750'000 - 300'000));
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("kvgate_keep_warm_pings_total{model=\"sonnet\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvgate_keep_warm_cost_usd_total{model=\"sonnet\"} 3e-06\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvgate_keep_warm_saved_usd_total{model=\"sonnet\"} 0.0345\n"),
            std::string::npos)
      << metrics;
}

TEST_F(KeepWarmServiceTest, StopsAfterMaxPingsWithNoTurn) {
  Start("{enabled: true, max_pings_per_thread: 2}");
  // Gaps that end after one, two and three TTLs: worth a first and a second ping.
  double t = 0;
  Turn("th", t, 0, 10'000);
  for (double gap : {320.0, 560.0, 800.0, 320.0, 560.0, 800.0}) Turn("th", t += gap, 0, 10'000);
  double due = t + kTtl - kLead;
  for (int ping = 0; ping < 4; ++ping) {
    service_->RunDue(static_cast<int64_t>(due * 1e6));
    if (sent_.size() == static_cast<size_t>(ping + 1)) {
      PingAnswered("th", due, 1'000'000);
      due += kTtl - kLead;
    }
  }
  EXPECT_EQ(sent_.size(), 2u);
  EXPECT_NE(
      Metrics().find("kvgate_keep_warm_skipped_total{model=\"sonnet\",reason=\"thread_cap\"} 1"),
      std::string::npos)
      << Metrics();
}

TEST_F(KeepWarmServiceTest, LetsExpireWhenThreadsUsuallyGoSilent) {
  Start("{enabled: true, max_pings_per_thread: 1}");
  // No evidence yet: a thread's cache is let go.
  Turn("first", 0, 0, 10'000);
  service_->RunDue(static_cast<int64_t>((kTtl - kLead) * 1e6));
  EXPECT_TRUE(sent_.empty());
  // One thread whose turns come back after about 5 minutes: evidence that gaps end in time.
  double t = 1000;
  Turn("seed", t, 0, 10'000);
  for (int i = 0; i < 6; ++i) Turn("seed", t += 320, 0, 10'000);
  // A hundred threads of one turn each are now judged on it, and pinged once each.
  for (int i = 0; i < 100; ++i) Turn("gone-" + std::to_string(i), t, 0, 10'000);
  auto count = [this](std::string_view prefix) {
    return std::count_if(sent_.begin(), sent_.end(),
                         [&](const std::string& s) { return s.starts_with(prefix); });
  };
  service_->RunDue(static_cast<int64_t>((t + kTtl - kLead) * 1e6));
  EXPECT_EQ(count("gone-"), 100);
  for (int i = 0; i < 100; ++i) PingAnswered("gone-" + std::to_string(i), t + kTtl - kLead, 1);
  // None came back: at their cap they end, each a gap that never ended.
  service_->RunDue(static_cast<int64_t>((t + 2 * (kTtl - kLead)) * 1e6));
  EXPECT_EQ(count("gone-"), 100);
  // A new thread is judged on that: almost nobody came back, so its cache is let go.
  Turn("new", t + 2000, 0, 10'000);
  service_->RunDue(static_cast<int64_t>((t + 2000 + kTtl - kLead) * 1e6));
  EXPECT_EQ(count("new"), 0);
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("{model=\"sonnet\",reason=\"thread_cap\"} 100\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("{model=\"sonnet\",reason=\"unlikely\"} 2\n"), std::string::npos)
      << metrics;
}

TEST_F(KeepWarmServiceTest, DailyCapHoldsPingsInFlightAtTheirWorst) {
  // One worst-case ping (10,020 tokens written at 3.75 USD/M plus an output token) costs about
  // 0.0376 USD: a cap of 0.05 USD holds one in flight, never two.
  Start("{enabled: true, max_usd_per_day: 0.05}");
  for (const char* th : {"a", "b", "c"}) {
    double t = 0;
    Turn(th, t, 0, 10'000);
    for (int i = 0; i < 4; ++i) Turn(th, t += 320, 0, 10'000);
  }
  service_->RunDue(static_cast<int64_t>((4 * 320 + kTtl - kLead) * 1e6));
  EXPECT_EQ(sent_.size(), 1u);
  EXPECT_NE(Metrics().find("reason=\"daily_cap\"} 2"), std::string::npos) << Metrics();
}

TEST_F(KeepWarmServiceTest, ModelsWithoutKeepWarmAreLeftAlone) {
  Start("{enabled: false}");
  Turn("th", 0, 0, 10'000);
  Turn("th", 100, 0, 10'000, "cold");
  service_->RunDue(static_cast<int64_t>(10'000 * 1e6));
  EXPECT_TRUE(sent_.empty());
  EXPECT_FALSE(service_->any_enabled());
}

// 1-hour writes for a thread whose turns come every 20 minutes (past the 5-minute TTL, well
// within the hour); none for a thread that keeps coming within a minute, none for a model
// without keep_warm, none when choose_write_ttl is off.
TEST_F(KeepWarmServiceTest, ChoosesOneHourWritesFromTheThreadsGaps) {
  Start("{enabled: true}");
  const router::Target& sonnet = router_->targets()[*router_->FindTarget("sonnet")];
  // (The quick thread first: its gaps are the gateway's prior while it has no others.)
  double u = 0;
  Turn("quick", u, 0, 10'000);
  EXPECT_EQ(service_->WriteTtl("quick", "sonnet", sonnet), "") << "no gap seen yet";
  for (int i = 0; i < 6; ++i) Turn("quick", u += 40, 10'000, 1'000);
  EXPECT_EQ(service_->WriteTtl("quick", "sonnet", sonnet), "");

  double t = 0;
  Turn("slow", t, 0, 10'000);
  for (int i = 0; i < 6; ++i) Turn("slow", t += 1'200, 10'000, 1'000);
  EXPECT_EQ(service_->WriteTtl("slow", "sonnet", sonnet), "1h");
  EXPECT_NE(Metrics().find("kvgate_keep_warm_long_writes_total{model=\"sonnet\"} 1\n"),
            std::string::npos)
      << Metrics();
  EXPECT_EQ(service_->WriteTtl("unknown", "sonnet", sonnet), "");
  const router::Target& cold = router_->targets()[*router_->FindTarget("cold")];
  EXPECT_EQ(service_->WriteTtl("slow", "cold", cold), "");
}

TEST_F(KeepWarmServiceTest, OneHourWritesCanBeTurnedOff) {
  Start("{enabled: true, choose_write_ttl: false}");
  const router::Target& sonnet = router_->targets()[*router_->FindTarget("sonnet")];
  double t = 0;
  Turn("slow", t, 0, 10'000);
  for (int i = 0; i < 6; ++i) Turn("slow", t += 1'200, 10'000, 1'000);
  EXPECT_EQ(service_->WriteTtl("slow", "sonnet", sonnet), "");
}

}  // namespace
}  // namespace kvgate::gateway
