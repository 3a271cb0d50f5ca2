// The key limiter with an injected clock: token buckets, budget periods, admission and its
// refusals, reconciliation of reserved tokens, and the counters under concurrent threads.
#include "gateway/virtual_keys.h"

#include "telemetry/store.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <limits>
#include <map>
#include <thread>

namespace kvgate::gateway {
namespace {

constexpr int64_t kDollar = 1'000'000'000'000;  // pico-USD

std::string HeaderOf(const std::vector<http::Header>& headers, std::string_view name) {
  for (const auto& h : headers) {
    if (h.name == name) return h.value;
  }
  return "<absent>";
}

telemetry::RequestRecord Finished(const std::string& key_id, int64_t created_at_us,
                                  int64_t cost_pico, int64_t input_tokens, int64_t output_tokens) {
  telemetry::RequestRecord r;
  r.api_key_id = key_id;
  r.created_at_us = created_at_us;
  r.cost.total = cost_pico;
  r.cost.priced = true;
  r.usage.cache_read = 0;
  r.usage.cache_write_5m = 0;
  r.usage.cache_write_1h = 0;
  r.usage.cache_write_no_ttl = 0;
  r.usage.uncached = input_tokens;
  r.usage.output = output_tokens;
  return r;
}

struct Keys {
  explicit Keys(KeyLimits limits) : keys(clock, nullptr) {
    ApiKeyConfig c{.name = "team-a", .key_hash = HashApiKey("sk-a"), .limits = std::move(limits)};
    EXPECT_TRUE(keys.Load({c}));
    key = keys.Find(HashApiKey("sk-a"));
    EXPECT_NE(key, nullptr);
  }
  FakeClock clock{1'767'225'600'000'000 + 3'600'000'000};  // 2026-01-01T01:00:00Z
  VirtualKeys keys;
  std::shared_ptr<KeyState> key;
};

TEST(TokenBucketTest, RefillsContinuouslyUpToItsCapacity) {
  TokenBucket bucket(60, 0);  // one a second
  EXPECT_DOUBLE_EQ(bucket.Level(0), 60);
  bucket.Add(-60, 0);
  EXPECT_DOUBLE_EQ(bucket.Level(0), 0);
  EXPECT_EQ(bucket.MicrosUntil(1), 1'000'000);
  EXPECT_DOUBLE_EQ(bucket.Level(500'000), 0.5);
  EXPECT_DOUBLE_EQ(bucket.Level(10'000'000), 10);
  EXPECT_DOUBLE_EQ(bucket.Level(600'000'000), 60);  // never above the capacity
  bucket.Add(-100, 600'000'000);                    // a debt: charged after the fact
  EXPECT_DOUBLE_EQ(bucket.Level(600'000'000), -40);
  EXPECT_EQ(bucket.MicrosUntil(1), 41'000'000);
  bucket.Add(1000, 600'000'000);
  EXPECT_DOUBLE_EQ(bucket.Level(600'000'000), 60);
}

TEST(BudgetPeriodTest, PeriodsCountFromTheEpoch) {
  const int64_t day = 86'400'000'000;
  EXPECT_EQ(BudgetPeriodStart(5 * day + 123, 86400), 5 * day);
  EXPECT_EQ(BudgetPeriodStart(5 * day, 86400), 5 * day);
  EXPECT_EQ(BudgetPeriodStart(5 * day - 1, 86400), 4 * day);
  EXPECT_EQ(BudgetPeriodStart(95 * day, 30 * 86400), 90 * day);
  EXPECT_EQ(BudgetPeriodStart(95 * day, 0), 0);  // a lifetime budget
}

TEST(VirtualKeysTest, RpmRefusesTheSixthRequestAndRefills) {
  Keys k(KeyLimits{.rpm = 5});
  std::vector<KeyAdmission> held;
  for (int i = 0; i < 5; ++i) {
    auto admitted = k.keys.Admit(k.key, 0);
    ASSERT_TRUE(admitted) << i;
    auto headers = k.keys.RateLimitHeaders(*k.key);
    EXPECT_EQ(HeaderOf(headers, "x-ratelimit-limit-requests"), "5");
    EXPECT_EQ(HeaderOf(headers, "x-ratelimit-remaining-requests"), std::to_string(4 - i));
    EXPECT_EQ(HeaderOf(headers, "x-ratelimit-limit-tokens"), "unlimited");  // no tpm
    EXPECT_EQ(HeaderOf(headers, "x-ratelimit-remaining-tokens"), "unlimited");
    EXPECT_EQ(HeaderOf(headers, "x-ratelimit-reset-tokens"), "0s");
  }
  auto refused = k.keys.Admit(k.key, 0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().status, 429);
  EXPECT_EQ(refused.error().limit, KeyLimit::kRpm);
  EXPECT_EQ(refused.error().type, "rate_limit_error");
  EXPECT_EQ(refused.error().code, "rate_limit_exceeded");
  EXPECT_EQ(HeaderOf(refused.error().headers, "retry-after"), "12");  // 60 s / 5
  EXPECT_EQ(HeaderOf(refused.error().headers, "x-ratelimit-remaining-requests"), "0");
  EXPECT_EQ(HeaderOf(refused.error().headers, "x-ratelimit-reset-requests"), "1m0s");
  k.clock.AdvanceSeconds(11);
  EXPECT_FALSE(k.keys.Admit(k.key, 0));
  EXPECT_EQ(HeaderOf(k.keys.Admit(k.key, 0).error().headers, "retry-after"), "1");
  k.clock.AdvanceSeconds(1);
  EXPECT_TRUE(k.keys.Admit(k.key, 0));  // one more after 12 s
  EXPECT_FALSE(k.keys.Admit(k.key, 0));
  auto listed = k.keys.Get(k.key->id());
  ASSERT_TRUE(listed);
  EXPECT_EQ((*listed)["rate_limited"]["rpm"], 4);
}

TEST(VirtualKeysTest, TpmReservesMaxTokensAndChargesTheRealUsage) {
  Keys k(KeyLimits{.tpm = 1000});
  const int64_t t0 = k.clock.NowUnixMicros();
  {
    auto admitted = k.keys.Admit(k.key, 400);
    ASSERT_TRUE(admitted);
    EXPECT_EQ(HeaderOf(k.keys.RateLimitHeaders(*k.key), "x-ratelimit-remaining-tokens"), "600");
    // Two more reservations of 400 do not fit in 600 at once.
    auto second = k.keys.Admit(k.key, 400);
    ASSERT_TRUE(second);
    auto third = k.keys.Admit(k.key, 400);
    ASSERT_FALSE(third);
    EXPECT_EQ(third.error().limit, KeyLimit::kTpm);
    // 1000 tokens/min = one per 60 ms; 200 are missing: 12 s.
    EXPECT_EQ(HeaderOf(third.error().headers, "retry-after"), "12");
    // The first finishes having used 100 tokens: its 400 come back, 100 are charged.
    k.keys.OnRecord(Finished(k.key->id(), t0, 0, 60, 40));
  }  // (both holds end here: the second also gives back its 400)
  k.keys.OnRecord(Finished(k.key->id(), t0, 0, 50, 0));
  EXPECT_EQ(HeaderOf(k.keys.RateLimitHeaders(*k.key), "x-ratelimit-remaining-tokens"), "850");
  // A reservation above the whole bucket waits for a full one.
  auto huge = k.keys.Admit(k.key, 1'000'000);
  ASSERT_FALSE(huge);
  EXPECT_EQ(HeaderOf(huge.error().headers, "retry-after"), "9");  // 150 tokens at 1000/min
  k.clock.AdvanceSeconds(9);
  EXPECT_TRUE(k.keys.Admit(k.key, 1'000'000));
  // Usage over what was reserved leaves a debt that refuses even a request reserving nothing.
  k.keys.OnRecord(Finished(k.key->id(), t0, 0, 5000, 0));
  EXPECT_FALSE(k.keys.Admit(k.key, 0));
  EXPECT_EQ(HeaderOf(k.keys.RateLimitHeaders(*k.key), "x-ratelimit-remaining-tokens"), "0");
}

TEST(VirtualKeysTest, MaxParallelCountsHoldsUntilTheyEnd) {
  Keys k(KeyLimits{.max_parallel = 2});
  std::optional<KeyAdmission> a{*k.keys.Admit(k.key, 0)};
  auto b = k.keys.Admit(k.key, 0);
  ASSERT_TRUE(b);
  auto c = k.keys.Admit(k.key, 0);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().limit, KeyLimit::kParallel);
  EXPECT_EQ(HeaderOf(c.error().headers, "retry-after"), "1");
  EXPECT_EQ(HeaderOf(c.error().headers, "x-ratelimit-limit-requests"), "unlimited");
  EXPECT_EQ(c.error().headers.size(), 7u);  // Retry-After and the six, whatever refused it
  a.reset();
  EXPECT_TRUE(k.keys.Admit(k.key, 0));  // (and given back at once)
  KeyAdmission moved = std::move(*b);  // a moved hold is released once, by its new owner
  b->Release();                        // (the moved-from one holds nothing)
  EXPECT_EQ((*k.keys.Get(k.key->id()))["in_flight"], 1);
  {
    auto second = k.keys.Admit(k.key, 0);
    ASSERT_TRUE(second);
    EXPECT_FALSE(k.keys.Admit(k.key, 0));
  }
  moved.Release();
  moved.Release();
  EXPECT_EQ((*k.keys.Get(k.key->id()))["in_flight"], 0);
}

TEST(VirtualKeysTest, BudgetCountsRecordedCostAndResetsEachPeriod) {
  Keys k(KeyLimits{.max_budget_pico = 2 * kDollar, .budget_duration_s = 3600});
  const int64_t now = k.clock.NowUnixMicros();  // 01:00:00, a period start
  EXPECT_TRUE(k.keys.Admit(k.key, 0));
  k.keys.OnRecord(Finished(k.key->id(), now, kDollar, 0, 0));
  EXPECT_EQ(k.keys.BudgetFraction(k.key->id()), 0.5);
  EXPECT_TRUE(k.keys.Admit(k.key, 0));
  k.keys.OnRecord(Finished(k.key->id(), now + 1, kDollar + 1, 0, 0));
  auto refused = k.keys.Admit(k.key, 0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().limit, KeyLimit::kBudget);
  EXPECT_EQ(refused.error().type, "insufficient_quota");
  EXPECT_EQ(refused.error().code, "budget_exceeded");
  EXPECT_EQ(HeaderOf(refused.error().headers, "retry-after"), "3600");  // the period's end
  auto described = *k.keys.Get(k.key->id());
  EXPECT_EQ(described["spend_pico_usd"], 2 * kDollar + 1);
  EXPECT_EQ(described["budget_remaining_usd"], 0.0);
  // A request of the last period that finishes after it ended is not this period's.
  k.clock.AdvanceSeconds(3600);
  k.keys.OnRecord(Finished(k.key->id(), now + 2, kDollar, 0, 0));
  EXPECT_EQ(k.keys.BudgetFraction(k.key->id()), 0.0);
  EXPECT_TRUE(k.keys.Admit(k.key, 0));
  // Other keys' records and records with no key change nothing.
  k.keys.OnRecord(Finished("key_other", k.clock.NowUnixMicros(), kDollar, 0, 0));
  k.keys.OnRecord(Finished("", k.clock.NowUnixMicros(), kDollar, 0, 0));
  EXPECT_EQ(k.keys.BudgetFraction(k.key->id()), 0.0);
}

TEST(VirtualKeysTest, ParallelRequestsCannotOvershootABudgetByMoreThanOneEstimate) {
  // 20 requests at once on a $0.002 budget, each estimated at $0.0012 and costing that much:
  // without holds all 20 passed on the same unspent balance ($0.024 spent, 12x the budget).
  const int64_t budget = 2 * kDollar / 1000, estimate = 12 * kDollar / 10'000;
  Keys k(KeyLimits{.max_budget_pico = budget});
  const int64_t t0 = k.clock.NowUnixMicros();
  std::vector<KeyAdmission> held;
  int refused_in_flight = 0;
  for (int i = 0; i < 20; ++i) {
    auto admitted = k.keys.Admit(k.key, 0, estimate);
    if (admitted) {
      held.push_back(std::move(*admitted));
      continue;
    }
    ++refused_in_flight;
    // Not spent yet: a wait for the requests in flight, not an exhausted quota.
    EXPECT_EQ(admitted.error().limit, KeyLimit::kBudget);
    EXPECT_EQ(admitted.error().code, "budget_in_flight");
    EXPECT_EQ(admitted.error().type, "rate_limit_error");
    EXPECT_EQ(HeaderOf(admitted.error().headers, "retry-after"), "1");
    EXPECT_NE(admitted.error().message.find("in flight may cost 0.002400 USD"), std::string::npos)
        << admitted.error().message;
  }
  ASSERT_EQ(held.size(), 2u);  // 0 + 0.0012 < 0.002 admits the second; 0.0024 refuses the rest
  EXPECT_EQ(refused_in_flight, 18);
  // Each finishes having spent its estimate: recorded first, then the hold is released (the
  // order a request's commit and end give).
  for (KeyAdmission& a : held) {
    k.keys.OnRecord(Finished(k.key->id(), t0, estimate, 100, 10));
    a.Release();
  }
  EXPECT_LE(k.key->SpendPico(t0), budget + estimate);
  auto over = k.keys.Admit(k.key, 0, estimate);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, "budget_exceeded");  // spent now, not merely held
  EXPECT_EQ(over.error().type, "insufficient_quota");
}

TEST(VirtualKeysTest, AHoldThatEndsUnspentGivesItsReservationBack) {
  Keys k(KeyLimits{.max_budget_pico = kDollar});
  {
    auto first = k.keys.Admit(k.key, 0, kDollar);  // may cost the whole budget
    ASSERT_TRUE(first);
    EXPECT_FALSE(k.keys.Admit(k.key, 0, 1));
  }  // ended having spent nothing (a 400 upstream, say)
  EXPECT_TRUE(k.keys.Admit(k.key, 0, 1));
}

TEST(VirtualKeysTest, UnbudgetedKeysHoldNoCost) {
  Keys k(KeyLimits{.rpm = 1000});
  std::vector<KeyAdmission> held;
  for (int i = 0; i < 10; ++i) {
    auto admitted = k.keys.Admit(k.key, 0, 1000 * kDollar);
    ASSERT_TRUE(admitted) << i;
    held.push_back(std::move(*admitted));
  }
}

TEST(EstimateReservationTest, InputFromTheBodyOutputFromItsLimitAtTheDearestRates) {
  // No price: tokens only. A body of 4,001 bytes is 1,001 tokens; no max_tokens: the default.
  KeyReservation r = EstimateReservation(4001, 0, std::nullopt);
  EXPECT_EQ(r.tokens, 1001 + kDefaultReservedOutputTokens);
  EXPECT_EQ(r.pico, 0);
  telemetry::Price price;
  price.base = {.input = 3'000'000, .cached_input = 300'000, .cache_write_5m = 3'750'000,
                .cache_write_1h = 6'000'000, .output = 15'000'000};
  r = EstimateReservation(400, 50, price);
  EXPECT_EQ(r.tokens, 150);
  // Input at the 1h write rate (the dearest input), output at the output rate: pico-USD.
  EXPECT_EQ(r.pico, 100 * 6'000'000 + 50 * 15'000'000);
  // A long-context tier's rates count when they are dearer.
  price.tier_threshold_tokens = 200'000;
  price.above = price.base;
  price.above.output = 22'500'000;
  EXPECT_EQ(EstimateReservation(400, 50, price).pico, 100 * 6'000'000 + 50 * 22'500'000);
  // Absurd inputs stay inside int64.
  r = EstimateReservation(size_t{1} << 62, int64_t{1} << 62, price);
  EXPECT_GT(r.pico, 0);
  EXPECT_GT(r.tokens, 0);
}

TEST(VirtualKeysTest, ALifetimeBudgetNeverResets) {
  Keys k(KeyLimits{.max_budget_pico = kDollar});
  k.keys.OnRecord(Finished(k.key->id(), k.clock.NowUnixMicros(), kDollar, 0, 0));
  auto refused = k.keys.Admit(k.key, 0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(HeaderOf(refused.error().headers, "retry-after"), "3600");
  k.clock.AdvanceSeconds(400 * 86400);
  EXPECT_FALSE(k.keys.Admit(k.key, 0));
  EXPECT_EQ(k.keys.BudgetFraction(k.key->id()), 1.0);
}

TEST(VirtualKeysTest, KeysAndTheirAllowLists) {
  FakeClock clock;
  VirtualKeys keys(clock, nullptr);
  EXPECT_FALSE(keys.required());
  ASSERT_TRUE(keys.Load({{.name = "", .key_hash = HashApiKey("sk-plain")},
                         {.name = "narrow", .key_hash = HashApiKey("sk-n"),
                          .limits = {.models = {"sonnet", "kvgate-router"}}}}));
  EXPECT_TRUE(keys.required());
  auto plain = keys.Find(HashApiKey("sk-plain"));
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->id(), "key_" + HashApiKey("sk-plain").substr(0, 12));  // as before: records match
  EXPECT_TRUE(plain->AllowsModel("anything"));
  EXPECT_TRUE(keys.RateLimitHeaders(*plain).empty());
  {
    auto hold = keys.Admit(plain, 0);  // a key without limits is never refused, still counted
    ASSERT_TRUE(hold);
    EXPECT_EQ((*keys.Get(plain->id()))["in_flight"], 1);
  }
  EXPECT_EQ((*keys.Get(plain->id()))["in_flight"], 0);
  auto narrow = keys.Find(HashApiKey("sk-n"));
  ASSERT_NE(narrow, nullptr);
  EXPECT_TRUE(narrow->AllowsModel("kvgate-router"));
  EXPECT_FALSE(narrow->AllowsModel("opus"));
  EXPECT_EQ(keys.Find(HashApiKey("sk-wrong")), nullptr);
  // Without a store keys cannot be made, and config keys cannot be changed.
  EXPECT_EQ(keys.Create(nlohmann::json{{"name", "x"}}, {}).error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(keys.Revoke(narrow->id()).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(keys.Rotate(narrow->id()).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(keys.Get("key_nope").error().code, ErrorCode::kNotFound);
  std::string metrics;
  keys.ExposeMetrics(metrics);
  EXPECT_NE(metrics.find("kvgate_key_spend_usd{key=\"narrow\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("kvgate_key_rate_limited_total{key=\"narrow\",limit=\"rpm\"} 0\n"),
            std::string::npos);
  EXPECT_EQ(metrics.find("kvgate_key_budget_remaining_usd{"), std::string::npos);  // no budgets
}

// Keys made through the API and spend, on a real database: what a restarted gateway reads back.
TEST(VirtualKeysTest, StoredKeysAndSpendSurviveARestart) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvgate_keys_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kvgate.db").string();
  FakeClock clock(1'767'225'600'000'000 + 10 * 86'400'000'000LL + 5);  // day 10 of 2026, 00:00
  auto store = telemetry::TelemetryStore::Open(path, clock);
  ASSERT_TRUE(store) << store.error().message;
  auto key_store = telemetry::KeyStore::Open(path);
  ASSERT_TRUE(key_store) << key_store.error().message;
  const std::vector<std::string> models = {"sonnet"};
  std::string id, secret;
  {
    VirtualKeys keys(clock, key_store->get());
    ASSERT_TRUE(keys.Load({}));
    EXPECT_FALSE(keys.required());
    auto made = keys.Create(nlohmann::json{{"name", "daily"}, {"max_budget_usd", 1},
                                           {"budget_duration", "1d"}, {"models", {"sonnet"}}},
                            models);
    ASSERT_TRUE(made) << made.error().message;
    EXPECT_TRUE(keys.required());
    id = (*made)["id"];
    secret = (*made)["key"];
    EXPECT_NE(keys.Find(HashApiKey(secret)), nullptr);
    EXPECT_EQ(keys.Create(nlohmann::json{{"name", "daily"}}, models).error().code,
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(keys.Create(nlohmann::json{{"name", "x"}, {"models", {"opus"}}}, models)
                  .error().code,
              ErrorCode::kInvalidArgument);
  }
  // Requests of that key: yesterday's (another period), and two of today's.
  auto request = [&](const std::string& rid, int64_t at_us, int64_t cost) {
    telemetry::RequestRecord r = Finished(id, at_us, cost, 1, 1);
    r.request_id = rid;
    r.endpoint = "chat.completions";
    r.model = "sonnet";
    r.status = "ok";
    r.http_status = 200;
    (*store)->Record(std::move(r));
  };
  request("req_old", clock.NowUnixMicros() - 3'600'000'000LL, 5 * kDollar);
  request("req_a", clock.NowUnixMicros(), kDollar / 4);
  request("req_b", clock.NowUnixMicros() + 1, kDollar / 2);
  ASSERT_TRUE((*store)->Flush());
  VirtualKeys restarted(clock, key_store->get());
  ASSERT_TRUE(restarted.Load({}));
  auto key = restarted.Find(HashApiKey(secret));
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->id(), id);
  EXPECT_TRUE(key->AllowsModel("sonnet"));
  EXPECT_FALSE(key->AllowsModel("mini"));
  EXPECT_EQ((*restarted.Get(id))["spend_pico_usd"], 3 * kDollar / 4);  // today's only
  EXPECT_EQ(restarted.BudgetFraction(id), 0.75);
  // Rotation keeps the id and the spend; the old secret is gone.
  auto rotated = restarted.Rotate(id);
  ASSERT_TRUE(rotated);
  EXPECT_EQ((*rotated)["id"], id);
  EXPECT_EQ((*rotated)["spend_pico_usd"], 3 * kDollar / 4);
  EXPECT_EQ(restarted.Find(HashApiKey(secret)), nullptr);
  const std::string new_secret = (*rotated)["key"];
  EXPECT_NE(restarted.Find(HashApiKey(new_secret)), nullptr);
  // Revocation: not found by its secret, still listed, not revoked twice.
  ASSERT_TRUE(restarted.Revoke(id));
  EXPECT_EQ(restarted.Find(HashApiKey(new_secret)), nullptr);
  EXPECT_EQ(restarted.Revoke(id).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(restarted.Rotate(id).error().code, ErrorCode::kNotFound);
  VirtualKeys again(clock, key_store->get());
  ASSERT_TRUE(again.Load({}));
  EXPECT_TRUE(again.required());  // a revoked last key keeps keys on
  EXPECT_EQ(again.Find(HashApiKey(new_secret)), nullptr);
  EXPECT_EQ((*again.Get(id))["revoked"], true);
  // A config key may not take the name of a stored one.
  auto clash = again.Load({{.name = "daily", .key_hash = HashApiKey("sk-c")}});
  EXPECT_FALSE(clash);
  (*store)->Close();
  std::filesystem::remove_all(dir);
}

// Rows an older kvgate or a hand edit left in api_keys that today's checks refuse: each costs its
// own key (with a warning), never the start, and keys stay required.
TEST(VirtualKeysTest, AStoredKeyThatDoesNotValidateIsDisabledNotFatal) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvgate_bad_keys_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kvgate.db").string();
  FakeClock clock(1'767'225'600'000'000);
  auto store = telemetry::TelemetryStore::Open(path, clock);
  ASSERT_TRUE(store) << store.error().message;
  auto key_store = telemetry::KeyStore::Open(path);
  ASSERT_TRUE(key_store) << key_store.error().message;
  auto insert = [&](const std::string& id, const std::string& name, nlohmann::json limits) {
    ASSERT_TRUE((*key_store)
                    ->Insert({.id = id,
                              .name = name,
                              .key_hash = HashApiKey("sk-" + id),
                              .limits = std::move(limits),
                              .created_at_us = clock.NowUnixMicros()}));
  };
  insert("key_period", "", {{"max_budget_usd", 1}, {"budget_duration", "99999999999d"}});
  insert("key_rpm", "fast", {{"rpm", std::numeric_limits<int64_t>::max()}});
  insert("key_name", "a b", nlohmann::json::object());
  insert("key_fine", "fine", {{"rpm", 5}});
  VirtualKeys keys(clock, key_store->get());
  ASSERT_TRUE(keys.Load({}));
  EXPECT_TRUE(keys.required());
  EXPECT_NE(keys.Find(HashApiKey("sk-key_fine")), nullptr);
  for (const char* id : {"key_period", "key_rpm", "key_name"}) {
    EXPECT_EQ(keys.Find(HashApiKey(std::string("sk-") + id)), nullptr) << id;
    EXPECT_EQ(keys.Get(id).error().code, ErrorCode::kNotFound) << id;
  }
  auto listed = keys.List();
  ASSERT_TRUE(listed);
  ASSERT_EQ((*listed)["keys"].size(), 1u);
  std::map<std::string, std::string> invalid;  // id -> error
  for (const nlohmann::json& k : (*listed)["invalid"]) invalid[k["id"]] = k["error"];
  ASSERT_EQ(invalid.size(), 3u) << (*listed)["invalid"].dump();
  EXPECT_NE(invalid["key_period"].find("api key key_period.budget_duration"), std::string::npos)
      << invalid["key_period"];
  EXPECT_NE(invalid["key_rpm"].find("api key key_rpm.rpm"), std::string::npos)
      << invalid["key_rpm"];
  EXPECT_NE(invalid["key_name"].find("api key key_name.name"), std::string::npos)
      << invalid["key_name"];

  // A gateway whose only stored key is disabled still asks for a key.
  const std::string lone_path = (dir / "lone.db").string();
  auto lone_store = telemetry::TelemetryStore::Open(lone_path, clock);
  ASSERT_TRUE(lone_store) << lone_store.error().message;
  auto lone_keys = telemetry::KeyStore::Open(lone_path);
  ASSERT_TRUE(lone_keys);
  ASSERT_TRUE((*lone_keys)
                  ->Insert({.id = "key_only",
                            .key_hash = HashApiKey("sk-only"),
                            .limits = {{"tpm", -1}},
                            .created_at_us = clock.NowUnixMicros()}));
  VirtualKeys lone(clock, lone_keys->get());
  ASSERT_TRUE(lone.Load({}));
  EXPECT_TRUE(lone.required());
  (*lone_store)->Close();
  (*store)->Close();
  std::filesystem::remove_all(dir);
}

TEST(VirtualKeysTest, SecretsAreLongAndRandom) {
  const std::string a = NewKeySecret(), b = NewKeySecret();
  EXPECT_EQ(a.rfind("sk-kvgate-", 0), 0u);
  EXPECT_EQ(a.size(), 10u + 48u);
  EXPECT_NE(a, b);
}

// Threads admitting, finishing and recording at once: no hold is lost or counted twice, and
// the limits hold exactly (each admission is decided under the key's lock).
TEST(VirtualKeysTest, ConcurrentAdmissionsKeepExactCounts) {
  Keys k(KeyLimits{.max_budget_pico = 1000 * kDollar, .rpm = 400, .max_parallel = 3});
  constexpr int kThreads = 8, kEach = 200;
  std::atomic<int> admitted{0}, in_flight{0}, peak{0};
  std::atomic<int> refused_parallel{0}, refused_rpm{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        auto hold = k.keys.Admit(k.key, 0);
        if (!hold) {
          (hold.error().limit == KeyLimit::kParallel ? refused_parallel : refused_rpm)++;
          continue;
        }
        const int now = ++in_flight;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {}
        ++admitted;
        k.keys.OnRecord(Finished(k.key->id(), k.clock.NowUnixMicros(), kDollar / 1000, 1, 1));
        --in_flight;
        hold->Release();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted + refused_parallel + refused_rpm, kThreads * kEach);
  EXPECT_EQ(admitted.load(), 400);  // the clock does not move: exactly the bucket
  EXPECT_LE(peak.load(), 3);
  auto described = *k.keys.Get(k.key->id());
  EXPECT_EQ(described["in_flight"], 0);
  EXPECT_EQ(described["spend_pico_usd"], int64_t(400) * (kDollar / 1000));
  EXPECT_EQ(described["rate_limited"]["rpm"], refused_rpm.load());
  EXPECT_EQ(described["rate_limited"]["max_parallel"], refused_parallel.load());
}

TEST(VirtualKeysTest, ReplicasOnOneStoreShareKeysAndSpendAtEachRefresh) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvgate_keys_shared_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kvgate.db").string();
  FakeClock clock(1'767'225'600'000'000 + 10 * 86'400'000'000LL + 5);
  auto store = telemetry::TelemetryStore::Open(path, clock);
  ASSERT_TRUE(store) << store.error().message;
  auto a_store = telemetry::KeyStore::Open(path), b_store = telemetry::KeyStore::Open(path);
  ASSERT_TRUE(a_store && b_store);
  VirtualKeys a(clock, a_store->get()), b(clock, b_store->get());
  ASSERT_TRUE(a.Load({}));
  ASSERT_TRUE(b.Load({}));
  auto made = a.Create(nlohmann::json{{"name", "team"}, {"max_budget_usd", 1}}, {});
  ASSERT_TRUE(made) << made.error().message;
  const std::string id = (*made)["id"], secret = (*made)["key"];
  EXPECT_EQ(b.Find(HashApiKey(secret)), nullptr);  // not until b refreshes
  ASSERT_TRUE(b.Refresh());
  ASSERT_NE(b.Find(HashApiKey(secret)), nullptr);
  EXPECT_TRUE(b.required());

  // Each replica records its own requests; the store holds both.
  int n = 0;
  auto serve = [&](VirtualKeys& replica, int64_t cost) {
    telemetry::RequestRecord r = Finished(id, clock.NowUnixMicros() + ++n, cost, 1, 1);
    r.request_id = "req_" + std::to_string(n);
    r.endpoint = "chat.completions";
    r.model = "m";
    r.status = "ok";
    r.http_status = 200;
    replica.OnRecord(r);
    (*store)->Record(std::move(r));
  };
  serve(a, kDollar / 4);
  serve(a, kDollar / 4);
  serve(b, kDollar / 8);
  EXPECT_EQ((*b.Get(id))["spend_pico_usd"], kDollar / 8);  // b knows only its own
  ASSERT_TRUE((*store)->Flush());
  ASSERT_TRUE(b.Refresh());
  ASSERT_TRUE(a.Refresh());
  // Both see all three, and b's own request is not counted twice.
  EXPECT_EQ((*b.Get(id))["spend_pico_usd"], kDollar / 4 + kDollar / 4 + kDollar / 8);
  EXPECT_EQ((*a.Get(id))["spend_pico_usd"], kDollar / 4 + kDollar / 4 + kDollar / 8);

  // A rotation on a and a revoke on b reach the other replica at its refresh.
  auto rotated = a.Rotate(id);
  ASSERT_TRUE(rotated);
  const std::string new_secret = (*rotated)["key"];
  ASSERT_TRUE(b.Refresh());
  EXPECT_EQ(b.Find(HashApiKey(secret)), nullptr);
  EXPECT_NE(b.Find(HashApiKey(new_secret)), nullptr);
  ASSERT_TRUE(b.Revoke(id));
  ASSERT_TRUE(a.Refresh());
  EXPECT_EQ(a.Find(HashApiKey(new_secret)), nullptr);
  EXPECT_EQ((*a.Get(id))["revoked"], true);
  (*store)->Close();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvgate::gateway
