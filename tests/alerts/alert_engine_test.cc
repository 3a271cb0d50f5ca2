// Monitor evaluation with a FakeClock, delivered to a real signed-webhook receiver; persistence
// across a restart; monitor CRUD.
#include "telemetry/alerts/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <sqlite3.h>

#include "telemetry/alerts/monitors.h"
#include "tests/alerts/http_receiver.h"
#include "tests/alerts/test_support.h"

namespace kvgate::telemetry::alerts {
namespace {

using kvgate::testing::CannedResponse;
using kvgate::testing::HttpReceiver;
using kvgate::testing::ReceivedRequest;
using kvgate::testing::TempDir;
using nlohmann::json;

constexpr char kSecret[] = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM=";

class EngineTest : public ::testing::Test {
 protected:
  EngineTest()
      : hook_([this](const ReceivedRequest& r) {
          const int64_t now = clock_.NowUnixMicros() / 1'000'000;
          if (!kvgate::testing::ReceiverVerifies(kSecret, r.headers, r.body, now)) {
            return CannedResponse{401, {}, "bad signature"};
          }
          return CannedResponse{status_.load(), {}, ""};
        }) {
    OpenEngine();
  }

  void OpenEngine() {
    engine_.reset();
    store_.reset();
    auto store = SqliteAlertStore::Open(dir_.File("kvgate.db"));
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    ChannelConfig hook{.name = "hook",
                       .type = ChannelConfig::Type::kWebhook,
                       .url = hook_.Url(),
                       .secret = kSecret};
    engine_ = std::make_unique<AlertEngine>(clock_, *store_, http_, smtp_,
                                            std::vector<ChannelConfig>{hook},
                                            AlertEngineOptions{.jitter_seed = 1});
    ASSERT_TRUE(engine_->Init().has_value());
  }

  AlertRule Rule(const std::string& json_text) {
    auto rule = ParseRule(json::parse(json_text));
    EXPECT_TRUE(rule.has_value()) << rule.error().ToString();
    rule->id = "mon_" + rule->name;
    rule->channels = {"hook"};
    return *rule;
  }

  static RequestRecord Record(const std::string& model = "gpt-4o") {
    RequestRecord r;
    r.model = model;
    r.provider = "openai";
    r.status = "ok";
    r.latency_us = 500'000;
    r.ttft_us = 100'000;
    r.usage.cache_read = 0;
    r.usage.cache_write_5m = 0;
    r.usage.cache_write_1h = 0;
    r.usage.cache_write_no_ttl = 0;
    r.usage.uncached = 1000;
    r.usage.output = 10;
    return r;
  }

  // Alert events received so far, as the webhook's "data" objects.
  std::vector<json> Received() const {
    std::vector<json> out;
    for (const auto& r : hook_.Requests()) out.push_back(json::parse(r.body)["data"]);
    return out;
  }

  TempDir dir_;
  FakeClock clock_{int64_t(::time(nullptr)) * 1'000'000};
  std::atomic<int> status_{200};
  HttpReceiver hook_;
  CurlHttpSender http_;
  CurlSmtpSender smtp_;
  std::unique_ptr<SqliteAlertStore> store_;
  std::unique_ptr<AlertEngine> engine_;
};

TEST_F(EngineTest, CostFiresOncePerIncidentThenResolves) {
  engine_->SetRules({Rule(R"({"name":"spend","metric":"cost","condition":"above",
      "threshold":0.01,"window":"5m","cooldown":"10m"})")});
  RequestRecord r = Record();
  r.cost.priced = true;
  r.cost.total = 6'000'000'000;  // 0.006 USD
  engine_->Submit(r);
  engine_->RunOnce();
  EXPECT_TRUE(Received().empty());  // 0.006 is not above 0.01
  clock_.AdvanceSeconds(10);
  engine_->Submit(r);
  engine_->RunOnce();
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["kind"], "firing");
  EXPECT_NEAR(got[0]["value"].get<double>(), 0.012, 1e-12);
  EXPECT_EQ(got[0]["requests"], 2);
  // Still above: no second alert for the same incident.
  for (int i = 0; i < 3; ++i) {
    clock_.AdvanceSeconds(10);
    engine_->Submit(r);
    engine_->RunOnce();
  }
  EXPECT_EQ(Received().size(), 1u);
  // The window empties: resolved, same incident.
  clock_.AdvanceSeconds(301);
  engine_->RunOnce();
  got = Received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1]["kind"], "resolved");
  EXPECT_EQ(got[1]["incident_id"], got[0]["id"]);
  EXPECT_NE(got[1]["id"], got[0]["id"]);
  // Persisted too, newest first.
  auto events = store_->ListEvents(10).value();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, "resolved");
}

TEST_F(EngineTest, CooldownSuppressesRefiringThenAllowsIt) {
  engine_->SetRules({Rule(R"({"name":"errors","metric":"error_rate","condition":"above",
      "threshold":0.5,"window":"1m","cooldown":"10m","min_requests":1})")});
  RequestRecord bad = Record();
  bad.status = "upstream_error";
  auto burst = [&](const RequestRecord& r) {
    engine_->Submit(r);
    engine_->RunOnce();
  };
  burst(bad);
  ASSERT_EQ(Received().size(), 1u);  // firing
  clock_.AdvanceSeconds(61);
  burst(Record());  // only an ok request in the window: resolved
  ASSERT_EQ(Received().size(), 2u);
  clock_.AdvanceSeconds(61);
  burst(bad);  // fires again 2 minutes after the first: within cooldown
  EXPECT_EQ(Received().size(), 2u);
  clock_.AdvanceSeconds(8 * 60);  // 10 minutes after the first alert, still failing
  burst(bad);
  auto got = Received();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2]["kind"], "firing");
}

// A hit-rate monitor fired and resolved 4 times in 4 minutes around its threshold: with a
// pending period the condition must hold on every evaluation for that long before it fires.
TEST_F(EngineTest, APendingPeriodMustPassWithTheConditionHoldingBeforeItFires) {
  engine_->SetRules({Rule(R"({"name":"errors","metric":"error_rate","condition":"above",
      "threshold":0.5,"window":"10m","for":"2m","min_requests":1})")});
  RequestRecord bad = Record();
  bad.status = "upstream_error";
  auto tick = [&](const RequestRecord& r, int seconds) {
    clock_.AdvanceSeconds(seconds);
    engine_->Submit(r);
    engine_->RunOnce();
  };
  tick(bad, 0);
  tick(bad, 60);
  EXPECT_TRUE(Received().empty());  // held for 60 s of 120
  // It stops holding (2 errors of 4), so the pending period starts over.
  tick(Record(), 30);
  tick(Record(), 1);
  tick(bad, 1);
  tick(bad, 1);  // 4 of 6: holds again, from now
  tick(bad, 100);
  EXPECT_TRUE(Received().empty());  // 100 s since it held again: not yet
  tick(bad, 21);
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["kind"], "firing");
  EXPECT_NE(got[0]["summary"].get<std::string>().find("held for 120 s"), std::string::npos)
      << got[0]["summary"];
}

TEST_F(EngineTest, AResolveThresholdKeepsAnIncidentOpenWhileTheValueHovers) {
  engine_->SetRules({Rule(R"({"name":"errors","metric":"error_rate","condition":"above",
      "threshold":0.5,"resolve_threshold":0.3,"window":"10m","min_requests":1})")});
  RequestRecord bad = Record();
  bad.status = "upstream_error";
  auto add = [&](const RequestRecord& r) {
    clock_.AdvanceSeconds(1);
    engine_->Submit(r);
    engine_->RunOnce();
  };
  add(bad);
  add(bad);
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0]["summary"].get<std::string>().find("above 0.5 (resolves at or below 0.3)"),
            std::string::npos)
      << got[0]["summary"];
  // 2/3, 2/4 (no longer above 0.5: a plain threshold would resolve here), 2/5, 2/6: all above
  // the resolve threshold, so the incident stays open.
  for (int i = 0; i < 4; ++i) add(Record());
  EXPECT_EQ(Received().size(), 1u);
  add(Record());  // 2/7 = 0.29
  got = Received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1]["kind"], "resolved");
  EXPECT_NE(got[1]["summary"].get<std::string>().find("back at or below 0.3 (it fires above 0.5)"),
            std::string::npos)
      << got[1]["summary"];
}

TEST_F(EngineTest, ErrorRateNeedsMinRequests) {
  engine_->SetRules({Rule(R"({"name":"errors","metric":"error_rate","condition":"above",
      "threshold":0.2,"min_requests":10})")});
  RequestRecord bad = Record();
  bad.status = "timeout";
  for (int i = 0; i < 5; ++i) engine_->Submit(bad);
  engine_->RunOnce();
  EXPECT_TRUE(Received().empty());  // 100% errors but only 5 requests
  RequestRecord disconnected = Record();
  disconnected.status = "client_disconnected";  // not an error of the gateway's
  for (int i = 0; i < 4; ++i) engine_->Submit(Record());
  for (int i = 0; i < 11; ++i) engine_->Submit(disconnected);
  engine_->RunOnce();
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0]["value"].get<double>(), 0.25, 1e-9);  // 5 of 20
}

TEST_F(EngineTest, LatencyP95IsNearestRank) {
  engine_->SetRules({Rule(R"({"name":"slow","metric":"latency_p95","condition":"above",
      "threshold":2,"min_requests":1})")});
  RequestRecord fast = Record(), slow = Record();
  slow.latency_us = 5'000'000;
  for (int i = 0; i < 19; ++i) engine_->Submit(fast);
  engine_->Submit(slow);  // 1 slow of 20: p95 is the 19th value, fast
  engine_->RunOnce();
  EXPECT_TRUE(Received().empty());
  engine_->Submit(slow);  // 2 slow of 21: the 20th value is slow
  engine_->RunOnce();
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_DOUBLE_EQ(got[0]["value"].get<double>(), 5.0);
}

TEST_F(EngineTest, TtftP95PerModelNamesTheScopeKey) {
  engine_->SetRules({Rule(R"({"name":"ttft","metric":"ttft_p95","scope":"model",
      "condition":"above","threshold":1,"min_requests":1})")});
  RequestRecord quick = Record("gpt-4o"), sluggish = Record("claude-sonnet-4-5"),
                no_ttft = Record("gpt-4o");
  sluggish.ttft_us = 3'000'000;
  no_ttft.ttft_us.reset();
  no_ttft.latency_us = 9'000'000;
  engine_->Submit(quick);
  engine_->Submit(no_ttft);
  engine_->Submit(sluggish);
  engine_->RunOnce();
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["scope"], "model");
  EXPECT_EQ(got[0]["scope_key"], "claude-sonnet-4-5");
}

TEST_F(EngineTest, CacheHitRateBelowPerProviderIgnoresUnknownUsage) {
  engine_->SetRules({Rule(R"({"name":"hits","metric":"cache_hit_rate","scope":"provider",
      "condition":"below","threshold":0.5,"min_requests":2})")});
  RequestRecord good = Record();
  good.usage.cache_read = 900;
  good.usage.uncached = 100;
  RequestRecord unknown = Record();
  unknown.usage.cache_read.reset();  // e.g. vLLM without cache reporting
  engine_->Submit(good);
  engine_->Submit(unknown);
  engine_->RunOnce();
  EXPECT_TRUE(Received().empty());  // 0.9, unknown ignored
  RequestRecord miss = Record();    // 0 of 1000
  for (int i = 0; i < 2; ++i) engine_->Submit(miss);
  engine_->RunOnce();
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0]["value"].get<double>(), 0.3, 1e-9);  // 900 / 3000
  EXPECT_EQ(got[0]["scope_key"], "openai");
}

TEST_F(EngineTest, CacheDropCountsDiagnosedTurnsPerThread) {
  engine_->SetRules({Rule(R"({"name":"drops","metric":"cache_drop","scope":"thread",
      "condition":"above","threshold":1})")});
  RequestRecord dropped = Record();
  dropped.thread_id = "thr_a";
  dropped.cache_diagnosis = {{"cause", "expired"}};
  RequestRecord fine = dropped;
  fine.cache_diagnosis = nullptr;
  RequestRecord anonymous = dropped;
  anonymous.thread_id.clear();  // no thread: not part of a thread-scoped monitor
  engine_->Submit(dropped);
  engine_->Submit(fine);
  for (int i = 0; i < 3; ++i) engine_->Submit(anonymous);
  engine_->RunOnce();
  EXPECT_TRUE(Received().empty());
  engine_->Submit(dropped);
  engine_->RunOnce();
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["scope_key"], "thr_a");
  EXPECT_EQ(got[0]["value"], 2.0);
}

TEST_F(EngineTest, BudgetReadsTheKeysSpentFractionPerApiKey) {
  std::map<std::string, double> spent = {{"key_a", 0.5}};  // key_b has no budget
  engine_->SetBudgetSource([&spent](const std::string& id) -> std::optional<double> {
    auto it = spent.find(id);
    if (it == spent.end()) return std::nullopt;
    return it->second;
  });
  engine_->SetRules({Rule(R"({"name":"b80","metric":"budget","scope":"api_key",
      "condition":"above","threshold":0.8})")});
  RequestRecord a = Record();
  a.api_key_id = "key_a";
  RequestRecord b = Record();
  b.api_key_id = "key_b";
  engine_->Submit(a);
  engine_->Submit(b);
  engine_->RunOnce();
  EXPECT_TRUE(Received().empty());  // 50 %, and no value for key_b
  spent["key_a"] = 0.85;
  engine_->Submit(a);
  engine_->RunOnce();
  auto got = Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["metric"], "budget");
  EXPECT_EQ(got[0]["scope_key"], "key_a");
  EXPECT_NEAR(got[0]["value"].get<double>(), 0.85, 1e-12);
  // A budget is per key: any other scope is refused.
  auto global = ParseRule(json::parse(R"({"name":"g","metric":"budget","condition":"above",
      "threshold":0.8})"));
  ASSERT_FALSE(global);
  EXPECT_NE(global.error().message.find("monitor.scope"), std::string::npos);
}

TEST_F(EngineTest, DisabledAndReplacedRules) {
  AlertRule rule = Rule(R"({"name":"spend","metric":"cost","condition":"above","threshold":0})");
  rule.enabled = false;
  engine_->SetRules({rule});
  RequestRecord r = Record();
  r.cost.priced = true;
  r.cost.total = 1;
  engine_->Submit(r);
  engine_->RunOnce();
  EXPECT_TRUE(Received().empty());
  rule.enabled = true;
  engine_->SetRules({rule});
  engine_->Submit(r);
  engine_->RunOnce();
  EXPECT_EQ(Received().size(), 1u);
}

TEST_F(EngineTest, PendingDeliveryIsResumedAfterRestart) {
  engine_->SetRules({Rule(R"({"name":"spend","metric":"cost","condition":"above",
      "threshold":0})")});
  status_ = 503;  // the receiver is down
  RequestRecord r = Record();
  r.cost.priced = true;
  r.cost.total = 1'000;
  engine_->Submit(r);
  engine_->RunOnce();
  ASSERT_EQ(hook_.Count(), 1u);
  ASSERT_EQ(engine_->PendingDeliveries(), 1u);
  const std::string webhook_id = hook_.Requests()[0].headers.at("webhook-id");

  OpenEngine();  // "restart": a new store connection and engine on the same file
  EXPECT_EQ(engine_->PendingDeliveries(), 1u);
  status_ = 200;
  clock_.AdvanceSeconds(3600);
  engine_->RunOnce();
  ASSERT_EQ(hook_.Count(), 2u);
  EXPECT_EQ(hook_.Requests()[1].headers.at("webhook-id"), webhook_id);  // idempotency key kept
  EXPECT_EQ(engine_->PendingDeliveries(), 0u);
  auto attempts = store_->ListAttempts(webhook_id).value();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].outcome, "retry");
  EXPECT_EQ(attempts[0].http_status, 503);
  EXPECT_EQ(attempts[1].outcome, "delivered");
  // And after another restart nothing is sent twice.
  OpenEngine();
  EXPECT_EQ(engine_->PendingDeliveries(), 0u);
  engine_->RunOnce();
  EXPECT_EQ(hook_.Count(), 2u);
}

TEST_F(EngineTest, QueueIsBoundedAndDropsAreCounted) {
  AlertEngine small(clock_, *store_, http_, smtp_, {}, AlertEngineOptions{.queue_capacity = 2});
  EXPECT_TRUE(small.Submit(Record()));
  EXPECT_TRUE(small.Submit(Record()));
  EXPECT_FALSE(small.Submit(Record()));
  EXPECT_EQ(small.dropped_records(), 1u);
}

TEST_F(EngineTest, BackgroundThreadDeliversTestFire) {
  SystemClock real;
  AlertEngine engine(real, *store_, http_, smtp_,
                     {ChannelConfig{.name = "hook",
                                    .type = ChannelConfig::Type::kWebhook,
                                    .url = hook_.Url(),
                                    .secret = kSecret}},
                     AlertEngineOptions{.tick_ms = 50});
  ASSERT_TRUE(engine.Init().has_value());
  engine.Start();
  auto id = engine.TestFire("hook");
  ASSERT_TRUE(id.has_value());
  for (int i = 0; i < 200 && hook_.Count() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  engine.Stop();
  ASSERT_EQ(hook_.Count(), 1u);
  EXPECT_EQ(json::parse(hook_.Requests()[0].body)["data"]["id"], *id);
  EXPECT_FALSE(engine.TestFire("nope").has_value());
}

TEST_F(EngineTest, MonitorServiceCrudValidatesAndPersists) {
  MonitorService monitors(*store_, *engine_);
  ASSERT_TRUE(monitors.Init().has_value());
  auto bad = monitors.Create(json::parse(
      R"({"name":"x","metric":"cost","condition":"above","threshold":1,"channels":["pager"]})"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("no alert channel named 'pager' (configured: hook)"),
            std::string::npos)
      << bad.error().message;
  auto created = monitors.Create(json::parse(
      R"({"name":"spend","metric":"cost","condition":"above","threshold":0,"channels":["hook"]})"));
  ASSERT_TRUE(created.has_value()) << created.error().ToString();
  EXPECT_TRUE(created->id.starts_with("mon_"));
  auto dup = monitors.Create(ToJson(*created));
  EXPECT_FALSE(dup.has_value());

  // The engine uses it.
  RequestRecord r = Record();
  r.cost.priced = true;
  r.cost.total = 5;
  engine_->Submit(r);
  engine_->RunOnce();
  ASSERT_EQ(Received().size(), 1u);
  EXPECT_EQ(Received()[0]["rule_id"], created->id);

  json changed = ToJson(*created);
  changed["threshold"] = 100;
  changed.erase("id");
  auto updated = monitors.Update(created->id, changed);
  ASSERT_TRUE(updated.has_value());
  EXPECT_DOUBLE_EQ(monitors.Get(created->id)->threshold, 100);
  EXPECT_EQ(monitors.Update("mon_missing", changed).error().code, ErrorCode::kNotFound);
  changed["id"] = "mon_other";
  EXPECT_EQ(monitors.Update(created->id, changed).error().code, ErrorCode::kInvalidArgument);

  // Persisted: a new service on a reopened store sees it.
  OpenEngine();
  MonitorService reloaded(*store_, *engine_);
  ASSERT_TRUE(reloaded.Init().has_value());
  ASSERT_EQ(reloaded.List().size(), 1u);
  EXPECT_DOUBLE_EQ(reloaded.List()[0].threshold, 100);
  ASSERT_TRUE(reloaded.Delete(created->id).has_value());
  EXPECT_EQ(reloaded.Delete(created->id).error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(reloaded.List().empty());

  // Config monitors need ids; alerts list validates its limit.
  EXPECT_FALSE(reloaded
                   .Upsert({json::parse(R"({"name":"a","metric":"cost",
      "condition":"above","threshold":1})")})
                   .has_value());
  ASSERT_TRUE(reloaded
                  .Upsert({json::parse(R"({"id":"cfg_1","name":"a","metric":"cost",
      "condition":"above","threshold":1})")})
                  .has_value());
  EXPECT_EQ(reloaded.Get("cfg_1")->name, "a");
  EXPECT_FALSE(reloaded.ListAlerts(0).has_value());
  auto alerts = reloaded.ListAlerts(10);
  ASSERT_TRUE(alerts.has_value());
  EXPECT_EQ(alerts->size(), 1u);
  auto fired = reloaded.TestFire("hook");
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(reloaded.TestFire("missing").error().code, ErrorCode::kNotFound);
}

// Rows an older kvgate stored (its parser let a window of 99999999999d through, written back as
// "8639999999913600s") or a hand edit: each costs its own monitor, never the start.
TEST_F(EngineTest, BadStoredMonitorsAreDisabledNotFatal) {
  {
    MonitorService monitors(*store_, *engine_);
    ASSERT_TRUE(monitors.Init().has_value());
    ASSERT_TRUE(monitors
                    .Create(json::parse(R"({"id":"mon_good","name":"spend","metric":"cost",
        "condition":"above","threshold":0,"channels":["hook"]})"))
                    .has_value());
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir_.File("kvgate.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "INSERT INTO monitors (id, rule_json) VALUES "
                           "('mon_huge', '{\"id\":\"mon_huge\",\"name\":\"h\",\"metric\":"
                           "\"cost\",\"condition\":\"above\",\"threshold\":1,"
                           "\"window\":\"8639999999913600s\"}'), "
                           "('mon_junk', 'not json')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  OpenEngine();
  MonitorService monitors(*store_, *engine_);
  ASSERT_TRUE(monitors.Init().has_value());
  ASSERT_EQ(monitors.List().size(), 1u);
  EXPECT_EQ(monitors.List()[0].id, "mon_good");
  auto invalid = monitors.Invalid();
  ASSERT_EQ(invalid.size(), 2u);
  EXPECT_EQ(invalid[0].id, "mon_huge");
  EXPECT_NE(invalid[0].error.find("monitor.window"), std::string::npos) << invalid[0].error;
  EXPECT_EQ(invalid[1].id, "mon_junk");
  EXPECT_EQ(monitors.Get("mon_huge").error().code, ErrorCode::kNotFound);
  // Its id stays taken; PUT repairs it, DELETE removes it.
  EXPECT_FALSE(monitors
                   .Create(json::parse(R"({"id":"mon_huge","name":"h","metric":"cost",
      "condition":"above","threshold":1})"))
                   .has_value());
  auto repaired = monitors.Update("mon_huge", json::parse(R"({"name":"h","metric":"cost",
      "condition":"above","threshold":1,"window":"1d"})"));
  ASSERT_TRUE(repaired.has_value()) << repaired.error().ToString();
  EXPECT_EQ(monitors.Get("mon_huge")->window_seconds, 86400);
  ASSERT_TRUE(monitors.Delete("mon_junk").has_value());
  EXPECT_TRUE(monitors.Invalid().empty());
  EXPECT_EQ(monitors.List().size(), 2u);

  // The good monitor still fires.
  RequestRecord r = Record();
  r.cost.priced = true;
  r.cost.total = 5;
  engine_->Submit(r);
  engine_->RunOnce();
  ASSERT_EQ(Received().size(), 1u);
  EXPECT_EQ(Received()[0]["rule_id"], "mon_good");
}

TEST(AlertStoreTest, AVersionOneDatabaseGainsIncidentsAndLeasesAndKeepsItsRows) {
  TempDir dir;
  const std::string path = dir.File("v1.db");
  {
    auto store = SqliteAlertStore::Open(path);
    ASSERT_TRUE(store.has_value());
    AlertEvent e;
    e.id = "alrt_old";
    e.incident_id = "alrt_old";
    e.kind = "firing";
    e.rule_id = "mon_x";
    e.at_us = 1;
    ASSERT_TRUE((*store)->SaveEvent(e, {{"msg_old", "alrt_old", "hook", "pending", 0, 1, "", 1}})
                    .has_value());
  }
  {  // Back to what version 1 left: no incidents table, no lease column.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "DROP TABLE alert_incidents; "
                           "ALTER TABLE alert_deliveries DROP COLUMN lease_until_us; "
                           "DELETE FROM alerts_schema_version WHERE version = 2",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = SqliteAlertStore::Open(path);
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  auto pending = (*store)->LoadPendingDeliveries();
  ASSERT_TRUE(pending.has_value());
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].id, "msg_old");
  EXPECT_EQ((*store)->LeaseDelivery("msg_old", 10, 20).value(), DeliveryLease::kLeased);
  EXPECT_TRUE((*store)->HoldIncident({"mon_x", "", "alrt_new", 10, 0, 60}).value());
}

TEST(AlertStoreTest, SchemaVersionIsRecordedAndNewerIsRefused) {
  TempDir dir;
  const std::string path = dir.File("k.db");
  ASSERT_TRUE(SqliteAlertStore::Open(path).has_value());
  ASSERT_TRUE(SqliteAlertStore::Open(path).has_value());  // idempotent
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "INSERT INTO alerts_schema_version VALUES (99)", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto newer = SqliteAlertStore::Open(path);
  ASSERT_FALSE(newer.has_value());
  EXPECT_EQ(newer.error().code, ErrorCode::kCorruptData);
}

}  // namespace
}  // namespace kvgate::telemetry::alerts
