// The cost planner on a target it has not used yet: where the prompt's token count comes from
// (the ratio_source prior order), what a stay after an expiry and a move cost with their cache
// writes priced at the thread's write rate, and the issue's scenario: a thread pinned to an
// Anthropic-style model whose cache expired moves to a cheaper model it never used, and the
// estimates of both match the bill.
#include <gtest/gtest.h>

#include <map>

#include "router/router.h"

namespace kvgate::router {
namespace {

using nlohmann::json;

constexpr int64_t kT0 = 1'767'225'600'000'000;
// The text's bytes per token on every target of the test: random identifiers, far from the
// default of 4.
constexpr double kRatio = 8.5;

// Per 1M tokens in micro-USD: claude-sonnet-4-5's (3 / 0.30 / 3.75 / 6 for 1h / 15) and a
// cheaper OpenAI-style model's (2 / 0.20 / 8), automatic caching.
telemetry::Price SonnetRates() {
  telemetry::Price p;
  p.base = {.input = 3'000'000,
            .cached_input = 300'000,
            .cache_write_5m = 3'750'000,
            .cache_write_1h = 6'000'000,
            .output = 15'000'000};
  return p;
}

telemetry::Price MiniRates() {
  telemetry::Price p;
  p.base = {.input = 2'000'000,
            .cached_input = 200'000,
            .cache_write_5m = 2'000'000,
            .cache_write_1h = 2'000'000,
            .output = 8'000'000};
  return p;
}

Target Sonnet() {
  Target t;
  t.name = "sonnet";
  t.provider = "claude";
  t.type = telemetry::ProviderType::kAnthropic;
  t.upstream_model = "claude-sonnet-4-5";
  t.price = SonnetRates();
  t.cache_rules = {.min_tokens = 1024,
                   .granularity = 1,
                   .ttl_seconds = 300,
                   .long_ttl_seconds = 3600,
                   .automatic = false};
  return t;
}

Target Mini(std::string name = "mini", std::string model = "gpt-4o-mini") {
  Target t;
  t.name = std::move(name);
  t.provider = "openai";
  t.type = telemetry::ProviderType::kOpenAI;
  t.upstream_model = std::move(model);
  t.price = MiniRates();
  t.cache_rules = {.min_tokens = 1024, .granularity = 128, .ttl_seconds = 300};
  return t;
}

// A system prompt of random-looking identifiers and `turns` question/answer pairs, OpenAI JSON.
std::string Conversation(int turns) {
  std::string system;
  uint64_t x = 7;
  for (int i = 0; i < 9'000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    system += "w" + std::to_string((x >> 33) % 50'000) + " ";
  }
  json messages = json::array({{{"role", "system"}, {"content", system}}});
  for (int i = 0; i < turns; ++i) {
    messages.push_back({{"role", "user"}, {"content", "question " + std::to_string(i)}});
    if (i + 1 < turns) {
      messages.push_back({{"role", "assistant"}, {"content", "answer " + std::to_string(i)}});
    }
  }
  return json{{"model", "r"}, {"messages", messages}}.dump();
}

std::shared_ptr<const telemetry::PromptFingerprint> Fp(const std::string& body) {
  return std::make_shared<const telemetry::PromptFingerprint>(
      telemetry::Fingerprint(raw_json::Object(raw_json::Parse(body).value())));
}

// The prompt of Conversation(turns) in tokens, as the providers of this test count it.
int64_t TokensOf(int turns) {
  return int64_t(double(Fp(Conversation(turns))->TotalBytes()) / kRatio);
}

class ColdStartTest : public ::testing::Test {
 protected:
  void Make(std::vector<Target> targets, int horizon = 4) {
    auto config = ParseRoutingConfig(
        json::parse(R"([{"name":"r","strategy":"cost","targets":["sonnet","mini"],
                         "horizon_turns":)" +
                    std::to_string(horizon) + "}]"),
        json());
    ASSERT_TRUE(config.has_value()) << config.error().message;
    auto r = Router::Create(std::move(targets), *config, clock_);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    router_ = std::move(*r);
  }

  // A turn of thread "t" on `target`, its prompt Conversation(turns), billed as `read` cache
  // reads, `write` cache writes (1-hour ones when `long_ttl`), the rest uncached, `output` out.
  // The router learns from it as the gateway's recorder makes it.
  telemetry::RequestRecord Billed(const std::string& target, int turns, int64_t read, int64_t write,
                                  bool long_ttl = false, int64_t output = 20) {
    const auto fp = Fp(Conversation(turns));
    const int64_t input = TokensOf(turns);
    telemetry::RequestRecord rec;
    rec.thread_id = "t";
    rec.model = "r";
    rec.target = target;
    rec.status = "ok";
    rec.created_at_us = clock_.NowUnixMicros();
    rec.usage.cache_read = read;
    rec.usage.cache_write_5m = long_ttl ? 0 : write;
    rec.usage.cache_write_1h = long_ttl ? write : 0;
    rec.usage.cache_write_no_ttl = 0;
    rec.usage.uncached = input - read - write;
    rec.usage.output = output;
    const size_t t = *router_->FindTarget(target);
    tracker_.Diagnose(rec, fp, router_->targets()[t].cache_rules);
    router_->Learn(t, fp->TotalBytes(), rec);
    return rec;
  }

  RouteDecision Route(int turns, bool breakpoints = true) {
    facts_.model = "r";
    facts_.thread_id = "t";
    facts_.now_us = clock_.NowUnixMicros();
    facts_.cache_breakpoints = breakpoints;
    facts_.fingerprint = Fp(Conversation(turns));
    facts_.prompt_bytes = facts_.fingerprint->TotalBytes();
    auto d = router_->Route(facts_, tracker_.View("t"));
    EXPECT_TRUE(d.has_value()) << d.error().message;
    return d.value_or(RouteDecision{});
  }

  const Candidate& On(const RouteDecision& d, const std::string& target) {
    for (const Candidate& c : d.candidates) {
      if (router_->targets()[c.target].name == target) return c;
    }
    ADD_FAILURE() << "no candidate " << target;
    static const Candidate none;
    return none;
  }
  std::string First(const RouteDecision& d) {
    return router_->targets()[d.candidates[0].target].name;
  }

  FakeClock clock_{kT0};
  telemetry::ThreadTracker tracker_;
  std::unique_ptr<Router> router_;
  RequestFacts facts_;
};

// |a - b| / b
double Off(int64_t estimate, int64_t billed) {
  return std::abs(double(estimate - billed)) / double(billed);
}

// The issue's scenario. Turn 1 is pinned to sonnet (breakpoints on the system prompt and the
// newest message: everything but the primer is written). Turn 2 is warm: staying reads it all,
// and mini, never used, would pay its list price for the whole prompt. After the expiry staying
// re-writes the prompt at the 5-minute rate and mini is cheaper over the horizon.
TEST_F(ColdStartTest, AfterTheExpiryTheThreadMovesToTheCheaperTargetItNeverUsed) {
  Make({Sonnet(), Mini()});
  const int64_t p1 = TokensOf(1);
  Billed("sonnet", 1, 0, p1 - 1);
  clock_.AdvanceSeconds(10);

  RouteDecision warm = Route(2);
  ASSERT_EQ(warm.eligible, 2u);
  EXPECT_EQ(First(warm), "sonnet") << warm.reason;
  EXPECT_EQ(warm.reason_code, "stayed_warm");
  EXPECT_EQ(On(warm, "sonnet").ratio_source, "learned");
  EXPECT_EQ(On(warm, "sonnet").turn, "warm");
  // mini borrows the ratio the thread's text showed on sonnet, not 4 bytes per token.
  EXPECT_EQ(On(warm, "mini").ratio_source, "thread");
  EXPECT_EQ(On(warm, "mini").turn, "first_use");
  const int64_t p2 = TokensOf(2);
  EXPECT_LT(Off(*On(warm, "mini").prompt_tokens, p2), 0.01)
      << *On(warm, "mini").prompt_tokens << " vs " << p2;
  // The warm stay as billed: reads what turn 1 wrote, writes the new message, the primer uncached.
  Billed("sonnet", 2, p1 - 1, p2 - p1);
  const telemetry::Price sonnet = SonnetRates();
  const int64_t warm_bill = (p1 - 1) * sonnet.base.cached_input +
                            (p2 - p1) * sonnet.base.cache_write_5m + sonnet.base.input +
                            20 * sonnet.base.output;
  EXPECT_LT(Off(*On(warm, "sonnet").cost_pico, warm_bill), 0.05);

  clock_.AdvanceSeconds(301);  // past the 5-minute TTL
  RouteDecision cold = Route(3);
  ASSERT_EQ(cold.eligible, 2u);
  EXPECT_EQ(First(cold), "mini") << cold.reason;
  EXPECT_EQ(cold.reason_code, "switched");
  EXPECT_TRUE(cold.moved);
  EXPECT_EQ(On(cold, "sonnet").turn, "after_expiry");
  EXPECT_EQ(On(cold, "sonnet").cached_tokens, 0);
  EXPECT_EQ(On(cold, "mini").turn, "first_use");
  EXPECT_EQ(On(cold, "mini").ratio_source, "thread");
  // Staying re-writes the whole marked prefix at the 5-minute rate, not the input rate.
  const int64_t p3 = TokensOf(3);
  const int64_t stay_bill =
      (p3 - 1) * sonnet.base.cache_write_5m + sonnet.base.input + 20 * sonnet.base.output;
  EXPECT_LT(Off(*On(cold, "sonnet").cost_pico, stay_bill), 0.01)
      << *On(cold, "sonnet").cost_pico << " vs " << stay_bill;
  // Moving pays mini's input rate for all of it (automatic caching has no write premium).
  const telemetry::Price mini = MiniRates();
  const int64_t move_bill = p3 * mini.base.input + 20 * mini.base.output;
  EXPECT_LT(Off(*On(cold, "mini").cost_pico, move_bill), 0.01)
      << *On(cold, "mini").cost_pico << " vs " << move_bill;

  // The decision as stored names both.
  const json text = json::parse(router_->DecisionText(cold));
  EXPECT_EQ(text["candidates"][0]["ratio_source"], "thread");
  EXPECT_EQ(text["candidates"][0]["turn"], "first_use");
  EXPECT_EQ(text["candidates"][1]["turn"], "after_expiry");
  EXPECT_EQ(router_->Facts(cold, "mini").turn, "first_use");
}

// A client that marks only its system prompt: a warm turn writes nothing new and reads the
// system prompt; after the expiry the system prompt is written again at the write rate, and the
// conversation after its breakpoint is input. A thread that writes 1-hour entries re-writes at
// the 1-hour rate.
TEST_F(ColdStartTest, TheReWriteAfterAnExpiryIsPricedAtTheThreadsWriteRate) {
  Make({Sonnet(), Mini()});
  const int64_t system = TokensOf(1) - 5;  // the system prompt; the rest follows its breakpoint
  Billed("sonnet", 1, 0, system);
  clock_.AdvanceSeconds(10);
  Billed("sonnet", 2, system, 0);
  clock_.AdvanceSeconds(301);
  RouteDecision d = Route(3);
  const Candidate& stay = On(d, "sonnet");
  EXPECT_EQ(stay.turn, "after_expiry");
  const telemetry::Price sonnet = SonnetRates();
  const int64_t p3 = TokensOf(3);
  const int64_t bill = system * sonnet.base.cache_write_5m + (p3 - system) * sonnet.base.input +
                       20 * sonnet.base.output;
  EXPECT_LT(Off(*stay.cost_pico, bill), 0.01) << *stay.cost_pico << " vs " << bill;

  Make({Sonnet(), Mini()});
  tracker_.Forget("t");
  Billed("sonnet", 1, 0, system, /*long_ttl=*/true);
  clock_.AdvanceSeconds(1800);  // past 5 minutes, within the hour: still warm
  EXPECT_EQ(On(Route(2), "sonnet").turn, "warm");
  clock_.AdvanceSeconds(1801);
  d = Route(2);
  const int64_t p2 = TokensOf(2);
  const int64_t bill_1h = system * sonnet.base.cache_write_1h + (p2 - system) * sonnet.base.input +
                          20 * sonnet.base.output;
  EXPECT_EQ(On(d, "sonnet").turn, "after_expiry");
  EXPECT_LT(Off(*On(d, "sonnet").cost_pico, bill_1h), 0.01)
      << *On(d, "sonnet").cost_pico << " vs " << bill_1h;
}

// A move to a breakpoint cache the thread never used pays that target's write premium for the
// prefix it writes, at the TTL the thread writes with elsewhere.
TEST_F(ColdStartTest, AMoveToABreakpointCachePaysItsWritePremium) {
  Target other = Sonnet();
  other.name = "mini";  // the router's second target, Anthropic-style this time
  Make({Sonnet(), other});
  Billed("sonnet", 1, 0, TokensOf(1) - 1, /*long_ttl=*/true);
  clock_.AdvanceSeconds(10);
  RouteDecision d = Route(2);
  const Candidate& move = On(d, "mini");
  EXPECT_EQ(move.turn, "first_use");
  EXPECT_EQ(move.ratio_source, "thread");
  const int64_t p2 = TokensOf(2);
  const telemetry::Price rates = SonnetRates();
  const int64_t bill = p2 * rates.base.cache_write_1h + 20 * rates.base.output;
  EXPECT_LT(Off(*move.cost_pico, bill), 0.01) << *move.cost_pico << " vs " << bill;
}

// The prior order for a target with no ratio of its own: the thread's, else the targets of its
// tokenizer family, else any target's, else the default; a learned ratio of its own beats them.
TEST_F(ColdStartTest, ThePriorsComeInOrder) {
  auto source_of = [&](const std::string& target) {
    RequestFacts facts;
    facts.model = "r";
    facts.now_us = clock_.NowUnixMicros();
    facts.prompt_bytes = 85'000;
    facts.fingerprint = Fp(Conversation(1));
    auto d = router_->Route(facts, {});  // no thread
    EXPECT_TRUE(d.has_value());
    for (const Candidate& c : d->candidates) {
      if (router_->targets()[c.target].name == target) {
        return std::make_pair(std::string(c.ratio_source), *c.prompt_tokens);
      }
    }
    return std::make_pair(std::string("missing"), int64_t{0});
  };
  // A router over four targets: two of the o200k family, one claude, one gemini.
  auto config = ParseRoutingConfig(
      json::parse(
          R"([{"name":"r","strategy":"cost","targets":["sonnet","mini","mini-2","flash"]}])"),
      json());
  ASSERT_TRUE(config.has_value());
  auto r = Router::Create(
      {Sonnet(), Mini(), Mini("mini-2", "gpt-4o"), Mini("flash", "gemini-2.5-flash")}, *config,
      clock_);
  ASSERT_TRUE(r.has_value());
  router_ = std::move(*r);
  EXPECT_EQ(source_of("mini").first, "default");
  EXPECT_EQ(source_of("mini").second, 85'000 / 4);

  auto learn = [&](const std::string& target, double ratio) {
    telemetry::RequestRecord rec;
    rec.status = "ok";
    rec.usage.uncached = int64_t(100'000 / ratio);
    rec.usage.cache_read = rec.usage.cache_write_5m = rec.usage.cache_write_1h = 0;
    rec.usage.cache_write_no_ttl = 0;
    rec.usage.output = 10;
    router_->Learn(*router_->FindTarget(target), 100'000, rec);
  };
  learn("sonnet", 5.0);  // another family: the only ratio there is
  EXPECT_EQ(source_of("mini").first, "other_targets");
  EXPECT_NEAR(double(source_of("mini").second), 85'000 / 5.0, 2);
  learn("mini-2", 2.5);  // mini's family (o200k): preferred
  EXPECT_EQ(source_of("mini").first, "other_targets");
  EXPECT_NEAR(double(source_of("mini").second), 85'000 / 2.5, 2);
  EXPECT_NEAR(double(source_of("flash").second), 85'000 / 3.75, 2);  // no family member: all
  learn("mini", 3.4);                                                // its own
  EXPECT_EQ(source_of("mini").first, "learned");
  EXPECT_NEAR(double(source_of("mini").second), 85'000 / 3.4, 2);
}

}  // namespace
}  // namespace kvgate::router
