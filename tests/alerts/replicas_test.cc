// Several alert engines on one store, as replicas on one database run them: a crossing is
// announced once whichever engine sees it first, an engine that dies with its incident open is
// taken over once it is stale, a delivery two engines both loaded is sent once, and a monitor
// added through one replica is evaluated by the other. Each test runs on SQLite (two
// connections to one file) and on a real PostgreSQL server the test starts.
#include <gtest/gtest.h>

#include <memory>

#include "telemetry/alerts/engine.h"
#include "telemetry/alerts/monitors.h"
#include "tests/alerts/http_receiver.h"
#include "tests/alerts/test_support.h"
#include "tests/telemetry/pg_server.h"

namespace kvgate::telemetry::alerts {
namespace {

using kvgate::testing::CannedResponse;
using kvgate::testing::HttpReceiver;
using kvgate::testing::ReceivedRequest;
using kvgate::testing::TempDir;
using nlohmann::json;

enum class Db { kSqlite, kPostgres };

Result<telemetry::testing::PgServer*> SharedPgServer() {
  static Result<std::unique_ptr<telemetry::testing::PgServer>> server =
      telemetry::testing::PgServer::Start();
  if (!server) return std::unexpected(server.error());
  return server->get();
}

class ReplicasTest : public ::testing::TestWithParam<Db> {
 protected:
  ReplicasTest()
      : hook_([this](const ReceivedRequest&) { return CannedResponse{status_.load(), {}, ""}; }) {}

  void SetUp() override {
    if (GetParam() == Db::kSqlite) {
      where_ = dir_.File("kvgate.db");
    } else {
      auto server = SharedPgServer();
      ASSERT_TRUE(server.has_value()) << server.error().ToString();
      auto uri = (*server)->NewDatabase();
      ASSERT_TRUE(uri.has_value()) << uri.error().ToString();
      where_ = *uri;
    }
  }

  // One replica's store connection.
  std::unique_ptr<AlertStore> OpenStore() {
    if (GetParam() == Db::kSqlite) {
      auto store = SqliteAlertStore::Open(where_);
      EXPECT_TRUE(store.has_value()) << store.error().ToString();
      return store ? std::move(*store) : nullptr;
    }
    auto store = PostgresAlertStore::Open(where_);
    EXPECT_TRUE(store.has_value()) << store.error().ToString();
    return store ? std::move(*store) : nullptr;
  }

  struct Replica {
    std::unique_ptr<AlertStore> store;
    std::unique_ptr<AlertEngine> engine;
  };
  Replica Start(AlertEngineOptions options = {}) {
    Replica r;
    r.store = OpenStore();
    options.jitter_seed = 1;
    r.engine = std::make_unique<AlertEngine>(
        clock_, *r.store, http_, smtp_,
        std::vector<ChannelConfig>{{.name = "hook",
                                    .type = ChannelConfig::Type::kWebhook,
                                    .url = hook_.Url(),
                                    .secret = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM="}},
        options);
    EXPECT_TRUE(r.engine->Init().has_value());
    return r;
  }

  static AlertRule SpendRule() {
    auto rule = ParseRule(json::parse(R"({"id":"mon_spend","name":"spend","metric":"cost",
        "condition":"above","threshold":0.01,"window":"5m","cooldown":"10m",
        "channels":["hook"]})"));
    EXPECT_TRUE(rule.has_value());
    return *rule;
  }

  // A request costing 0.02 USD: one crosses the spend monitor's threshold.
  static RequestRecord Expensive() {
    RequestRecord r;
    r.model = "gpt-4o";
    r.provider = "openai";
    r.status = "ok";
    r.cost.priced = true;
    r.cost.total = 20'000'000'000;
    return r;
  }

  std::vector<std::string> Kinds() const {
    std::vector<std::string> out;
    for (const auto& r : hook_.Requests()) out.push_back(json::parse(r.body)["data"]["kind"]);
    return out;
  }

  TempDir dir_;
  std::string where_;
  FakeClock clock_{int64_t(::time(nullptr)) * 1'000'000};
  std::atomic<int> status_{200};
  HttpReceiver hook_;
  CurlHttpSender http_;
  CurlSmtpSender smtp_;
};

TEST_P(ReplicasTest, ACrossingSeenByBothReplicasIsAnnouncedAndResolvedOnce) {
  Replica a = Start(), b = Start();
  a.engine->SetRules({SpendRule()});
  b.engine->SetRules({SpendRule()});
  for (int tick = 0; tick < 6; ++tick) {  // a minute of traffic on both, both over the threshold
    a.engine->Submit(Expensive());
    b.engine->Submit(Expensive());
    a.engine->RunOnce();
    b.engine->RunOnce();
    clock_.AdvanceSeconds(10);
  }
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"firing"}));
  // Both windows empty: the holder resolves; the other replica has nothing to say.
  clock_.AdvanceSeconds(301);
  b.engine->RunOnce();
  a.engine->RunOnce();
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"firing", "resolved"}));
  // After the cooldown the next crossing is a new incident, again announced once, here by
  // whichever replica evaluates first.
  clock_.AdvanceSeconds(600);
  a.engine->Submit(Expensive());
  b.engine->Submit(Expensive());
  b.engine->RunOnce();
  a.engine->RunOnce();
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"firing", "resolved", "firing"}));
  auto events = a.store->ListEvents(10);
  ASSERT_TRUE(events.has_value());
  EXPECT_EQ(events->size(), 3u);
}

TEST_P(ReplicasTest, AnIncidentWhoseHolderDiedIsTakenOverOnceItsHoldIsStale) {
  Replica a = Start(), b = Start();
  a.engine->SetRules({SpendRule()});
  b.engine->SetRules({SpendRule()});
  a.engine->Submit(Expensive());
  a.engine->RunOnce();
  ASSERT_EQ(Kinds(), (std::vector<std::string>{"firing"}));
  a.engine.reset();  // replica A is gone with its incident open; B keeps seeing the crossing
  for (int tick = 0; tick < 5; ++tick) {  // 50 s: A's hold is not stale yet
    b.engine->Submit(Expensive());
    b.engine->RunOnce();
    clock_.AdvanceSeconds(10);
  }
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"firing"}));
  for (int tick = 0; tick < 3; ++tick) {  // past 60 s without a heartbeat: B takes it over
    b.engine->Submit(Expensive());
    b.engine->RunOnce();
    clock_.AdvanceSeconds(10);
  }
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"firing", "firing"}));
  clock_.AdvanceSeconds(301);
  b.engine->RunOnce();
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"firing", "firing", "resolved"}));
}

TEST_P(ReplicasTest, APendingDeliveryLoadedByTwoReplicasIsSentOnce) {
  {
    status_ = 503;  // the receiver is down: the delivery stays pending
    Replica first = Start();
    first.engine->SetRules({SpendRule()});
    first.engine->Submit(Expensive());
    first.engine->RunOnce();
    ASSERT_EQ(hook_.Requests().size(), 1u);
    ASSERT_EQ(first.engine->PendingDeliveries(), 1u);
  }
  // Both replicas restart and load it.
  status_ = 200;
  Replica a = Start(), b = Start();
  EXPECT_EQ(a.engine->PendingDeliveries(), 1u);
  EXPECT_EQ(b.engine->PendingDeliveries(), 1u);
  clock_.AdvanceSeconds(3600);
  a.engine->RunOnce();
  b.engine->RunOnce();
  EXPECT_EQ(hook_.Requests().size(), 2u);  // the failed attempt and one retry, not two
  EXPECT_EQ(a.engine->PendingDeliveries(), 0u);
  EXPECT_EQ(b.engine->PendingDeliveries(), 0u);
}

TEST_P(ReplicasTest, ALeaseHoldsADeliveryUntilItEndsOrAnAttemptIsRecorded) {
  auto a = OpenStore(), b = OpenStore();
  const int64_t now = clock_.NowUnixMicros();
  AlertEvent event;
  event.id = "alrt_1";
  event.incident_id = "alrt_1";
  event.kind = "firing";
  event.rule_id = "mon_spend";
  event.at_us = now;
  DeliveryRecord d{"msg_1", "alrt_1", "hook", "pending", 0, now, "", now};
  ASSERT_TRUE(a->SaveEvent(event, {d}).has_value());
  EXPECT_EQ(a->LeaseDelivery("msg_1", now, now + 120'000'000).value(), DeliveryLease::kLeased);
  EXPECT_EQ(b->LeaseDelivery("msg_1", now + 1, now + 120'000'001).value(), DeliveryLease::kBusy);
  // A lease not ended by an attempt (its holder died mid-send) runs out.
  EXPECT_EQ(b->LeaseDelivery("msg_1", now + 120'000'000, now + 240'000'000).value(),
            DeliveryLease::kLeased);
  // Recording an attempt ends the lease: a retry is anyone's.
  d.attempts = 1;
  d.next_attempt_us = now + 130'000'000;
  ASSERT_TRUE(b->RecordAttempt({"msg_1", 1, now + 120'000'000, "retry", 503, "HTTP 503"}, d)
                  .has_value());
  EXPECT_EQ(a->LeaseDelivery("msg_1", now + 130'000'000, now + 250'000'000).value(),
            DeliveryLease::kLeased);
  d.attempts = 2;
  d.status = "delivered";
  ASSERT_TRUE(a->RecordAttempt({"msg_1", 2, now + 130'000'000, "delivered", 200, ""}, d)
                  .has_value());
  EXPECT_EQ(b->LeaseDelivery("msg_1", now + 131'000'000, now + 251'000'000).value(),
            DeliveryLease::kSettled);
  EXPECT_EQ(b->LeaseDelivery("msg_unknown", now, now + 1).value(), DeliveryLease::kUnknown);
}

TEST_P(ReplicasTest, AMonitorCreatedThroughOneReplicaIsEvaluatedByTheOther) {
  Replica a = Start(), b = Start({.reload_monitors_ms = 5'000});
  MonitorService a_monitors(*a.store, *a.engine), b_monitors(*b.store, *b.engine);
  ASSERT_TRUE(a_monitors.Init().has_value());
  ASSERT_TRUE(b_monitors.Init().has_value());
  auto created = a_monitors.Create(ToJson(SpendRule()));
  ASSERT_TRUE(created.has_value()) << created.error().ToString();
  // B's admin API reads the shared store...
  ASSERT_EQ(b_monitors.List().size(), 1u);
  EXPECT_EQ(b_monitors.List()[0].id, "mon_spend");
  // ...and B's engine evaluates the monitor within its reload period.
  clock_.AdvanceSeconds(6);
  b.engine->Submit(Expensive());
  b.engine->RunOnce();
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"firing"}));
  ASSERT_TRUE(a_monitors.Delete("mon_spend").has_value());
  EXPECT_TRUE(b_monitors.List().empty());
}

INSTANTIATE_TEST_SUITE_P(Stores, ReplicasTest, ::testing::Values(Db::kSqlite, Db::kPostgres),
                         [](const ::testing::TestParamInfo<Db>& info) {
                           return info.param == Db::kSqlite ? "Sqlite" : "Postgres";
                         });

}  // namespace
}  // namespace kvgate::telemetry::alerts
