// What only the PostgreSQL store has to show: it answers exactly as the SQLite store does for
// the same records (every read API, compared as JSON), it waits out a server restart without
// losing a record, and it refuses bad connection strings clearly.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "telemetry/store.h"
#include "store_factory.h"
#include "store_test_util.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;
using testing::MakeRecord;
using testing::StoreFactory;
using testing::StoreKind;

constexpr int64_t kT0 = 1'767'225'600'000'000;  // 2026-01-01T00:00:00Z
constexpr int64_t kMinute = 60'000'000;

// A mixed workload: several providers' usage shapes, unknown usage, errors, ties in time,
// threads on several models, responses ids, diagnoses.
std::vector<RequestRecord> Workload() {
  const char* usages[] = {
      R"({"prompt_tokens": 1200, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1024}})",
      R"({"prompt_tokens": 800, "completion_tokens": 12})",
      R"({"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0},
          "completion_tokens_details": {"reasoning_tokens": 3}})",
      "{}",
  };
  const char* anthropic = R"({"input_tokens": 12, "cache_read_input_tokens": 3000,
                              "cache_creation_input_tokens": 400, "output_tokens": 80})";
  std::vector<RequestRecord> records;
  for (int i = 0; i < 240; ++i) {
    const int64_t at = kT0 + (i / 3) * 7 * 1'000'000 + (i % 7 == 0 ? 0 : i);  // some ties
    const std::string thread = i % 11 == 0 ? "" : "th_" + std::to_string(i % 17);
    RequestRecord r;
    if (i % 5 == 0) {
      r = MakeRecord("req_" + std::to_string(i), thread, at, "claude-sonnet-4-5",
                     UsageFlavor::kAnthropic, anthropic);
    } else {
      r = MakeRecord("req_" + std::to_string(i), thread, at, i % 2 ? "gpt-4o" : "gpt-4o-mini",
                     UsageFlavor::kOpenAIChat, usages[i % 4]);
    }
    if (i % 13 == 0) {
      r.status = "error";
      r.error = "upstream said \"no\"";
      r.http_status = 502;
    }
    if (i % 9 == 0) r.provider = "";  // reached no provider
    if (i % 3 == 0) r.latency_us = 1000 + i * 37;
    if (i % 4 == 0) r.response_id = "resp_" + std::to_string(i / 8);  // some reused
    if (i % 6 == 0) r.cache_diagnosis = {{"cause", "expired"}, {"idle_seconds", i}};
    r.cost.missed = i % 6 == 0 ? 1000 + i : 0;
    records.push_back(std::move(r));
  }
  return records;
}

TEST(PostgresStoreTest, AnswersEveryQueryAsTheSqliteStoreDoes) {
  FakeClock clock;
  StoreFactory sqlite_factory(StoreKind::kSqlite), pg_factory(StoreKind::kPostgres);
  ASSERT_TRUE(sqlite_factory.Prepare());
  ASSERT_TRUE(pg_factory.Prepare());
  auto sqlite = sqlite_factory.Open(clock);
  auto pg = pg_factory.Open(clock);
  ASSERT_TRUE(sqlite.has_value()) << sqlite.error().ToString();
  ASSERT_TRUE(pg.has_value()) << pg.error().ToString();
  // Written in several batches, as a running gateway would.
  const std::vector<RequestRecord> records = Workload();
  for (size_t i = 0; i < records.size(); ++i) {
    (*sqlite)->Record(records[i]);
    (*pg)->Record(records[i]);
    if (i % 50 == 49) {
      ASSERT_TRUE((*sqlite)->Flush().has_value());
      ASSERT_TRUE((*pg)->Flush().has_value());
    }
  }
  ASSERT_TRUE((*sqlite)->Flush().has_value());
  ASSERT_TRUE((*pg)->Flush().has_value());

  auto same = [&](const char* what, const Result<json>& a, const Result<json>& b) {
    ASSERT_EQ(a.has_value(), b.has_value()) << what;
    if (!a) {
      EXPECT_EQ(a.error().code, b.error().code) << what;
      return;
    }
    EXPECT_EQ(*a, *b) << what << "\nsqlite: " << a->dump().substr(0, 2000)
                      << "\npostgres: " << b->dump().substr(0, 2000);
  };
  // Every order and direction, every page, with and without filters.
  for (ThreadQuery::Sort sort :
       {ThreadQuery::Sort::kLastSeen, ThreadQuery::Sort::kFirstSeen, ThreadQuery::Sort::kCost,
        ThreadQuery::Sort::kTurns, ThreadQuery::Sort::kHitRatio, ThreadQuery::Sort::kMissedCost}) {
    for (bool descending : {true, false}) {
      for (int filter = 0; filter < 4; ++filter) {
        ThreadQuery q;
        q.sort = sort;
        q.descending = descending;
        q.limit = 4;
        if (filter == 1) q.model = "gpt-4o";
        if (filter == 2) q.id_prefix = "th_1";
        if (filter == 3) {
          q.since_us = kT0 + 2 * kMinute;
          q.until_us = kT0 + 3 * kMinute;
        }
        for (int page = 0; page < 10; ++page) {
          auto a = (*sqlite)->ListThreads(q);
          auto b = (*pg)->ListThreads(q);
          same("ListThreads", a, b);
          if (!a || !b || (*a)["next_cursor"].is_null()) break;
          q.cursor = (*a)["next_cursor"];
        }
      }
    }
  }
  for (int t = 0; t < 17; ++t) {
    const std::string id = "th_" + std::to_string(t);
    same("GetThread", (*sqlite)->GetThread(id), (*pg)->GetThread(id));
    same("Live", (*sqlite)->Live(id), (*pg)->Live(id));
  }
  same("GetThread missing", (*sqlite)->GetThread("th_none"), (*pg)->GetThread("th_none"));
  for (int filter = 0; filter < 5; ++filter) {
    RequestQuery q;
    q.limit = 37;
    if (filter == 1) q.thread_id = "th_3";
    if (filter == 2) q.model = "claude-sonnet-4-5";
    if (filter == 3) q.status = "error";
    if (filter == 4) {
      q.since_us = kT0 + kMinute;
      q.until_us = kT0 + 4 * kMinute;
      q.provider = "prov-openai";
    }
    for (int page = 0; page < 20; ++page) {
      auto a = (*sqlite)->ListRequests(q);
      auto b = (*pg)->ListRequests(q);
      same("ListRequests", a, b);
      if (!a || !b || (*a)["next_cursor"].is_null()) break;
      q.cursor = (*a)["next_cursor"];
    }
  }
  for (const RequestRecord& r : records) {
    same("GetRequest", (*sqlite)->GetRequest(r.request_id), (*pg)->GetRequest(r.request_id));
  }
  for (int i = 0; i < 32; ++i) {
    const std::string id = "resp_" + std::to_string(i);
    same("GetRequest by response id", (*sqlite)->GetRequest(id), (*pg)->GetRequest(id));
  }
  for (int64_t bucket : {60, 300, 3600}) {
    same("Overview", (*sqlite)->Overview(kT0 - kMinute, kT0 + 40 * kMinute, bucket),
         (*pg)->Overview(kT0 - kMinute, kT0 + 40 * kMinute, bucket));
  }
  same("Overview mid-minute", (*sqlite)->Overview(kT0 + 30'000'000, kT0 + 10 * kMinute, 120),
       (*pg)->Overview(kT0 + 30'000'000, kT0 + 10 * kMinute, 120));
}

// Polls until `done` or about a minute has passed; the tests assert on the state, not the time.
template <class F>
bool Eventually(F done) {
  for (int i = 0; i < 6000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(PostgresStoreTest, ARestartedServerIsWaitedOutAndNothingIsLost) {
  SystemClock clock;
  StoreFactory factory(StoreKind::kPostgres);
  ASSERT_TRUE(factory.Prepare());
  auto opened = factory.Open(clock);
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  TelemetryStore& store = **opened;
  auto record = [&](int i) {
    store.Record(MakeRecord("req_" + std::to_string(i), "th_restart", kT0 + i, "gpt-4o",
                            UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 10, "completion_tokens": 1,
                                "prompt_tokens_details": {"cached_tokens": 0}})"));
  };
  for (int i = 0; i < 10; ++i) record(i);
  ASSERT_TRUE(store.Flush().has_value());
  ASSERT_TRUE(store.GetThread("th_restart").has_value());

  ASSERT_TRUE(factory.server()->Stop().has_value());
  // Recording never waits for the database; the writer finds it gone and says so.
  for (int i = 10; i < 60; ++i) record(i);
  ASSERT_TRUE(Eventually([&] { return store.stats().failing; }))
      << "the store does not report the outage";
  EXPECT_EQ(store.stats().write_errors, 0u) << "nothing is given up while the server is away";
  EXPECT_GE(store.stats().queue_depth, 50u);
  EXPECT_FALSE(store.GetThread("th_restart").has_value()) << "reads fail clearly meanwhile";

  ASSERT_TRUE(factory.server()->Run().has_value());
  for (int i = 60; i < 70; ++i) record(i);
  ASSERT_TRUE(store.Flush().has_value());
  const TelemetryStore::Stats stats = store.stats();
  EXPECT_FALSE(stats.failing);
  EXPECT_EQ(stats.written, 70u);
  EXPECT_EQ(stats.write_errors, 0u);
  auto thread = store.GetThread("th_restart");
  ASSERT_TRUE(thread.has_value()) << thread.error().ToString();
  EXPECT_EQ((*thread)["turns"].size(), 70u);
  EXPECT_EQ((*thread)["summary"]["tokens"]["uncached"], 700);
}

TEST(PostgresStoreTest, ABoundedQueueDiscardsOnlyPastItsBound) {
  SystemClock clock;
  StoreFactory factory(StoreKind::kPostgres);
  ASSERT_TRUE(factory.Prepare());
  StoreOptions options;
  options.max_queued_records = 20;
  auto opened = factory.Open(clock, options);
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  TelemetryStore& store = **opened;
  ASSERT_TRUE(factory.server()->Stop().has_value());
  for (int i = 0; i < 30; ++i) {
    store.Record(MakeRecord("q" + std::to_string(i), "th_q", kT0 + i, "gpt-4o",
                            UsageFlavor::kOpenAIChat, "{}"));
  }
  const TelemetryStore::Stats during = store.stats();
  EXPECT_EQ(during.recorded, 30u);
  EXPECT_EQ(during.write_errors, 10u);
  EXPECT_NE(during.last_error.find("queue is full"), std::string::npos) << during.last_error;
  ASSERT_TRUE(factory.server()->Run().has_value());
  (void)store.Flush();
  EXPECT_EQ(store.stats().written, 20u);
  auto thread = store.GetThread("th_q");
  ASSERT_TRUE(thread.has_value()) << thread.error().ToString();
  EXPECT_EQ((*thread)["turns"].size(), 20u);
}

TEST(PostgresStoreTest, AShutdownDuringAnOutageLeavesTheRecordsToTheNextStart) {
  SystemClock clock;
  StoreFactory factory(StoreKind::kPostgres);
  ASSERT_TRUE(factory.Prepare());
  {
    auto opened = factory.Open(clock);
    ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
    ASSERT_TRUE(factory.server()->Stop().has_value());
    for (int i = 0; i < 5; ++i) {
      (*opened)->Record(MakeRecord("s" + std::to_string(i), "th_s", kT0 + i, "gpt-4o",
                                   UsageFlavor::kOpenAIChat, "{}"));
    }
    ASSERT_TRUE(Eventually([&] { return (*opened)->stats().failing; }));
    (*opened)->Close();
    EXPECT_EQ((*opened)->stats().write_errors, 5u) << "not written by this process";
  }
  ASSERT_TRUE(factory.server()->Run().has_value());
  auto reopened = factory.Open(clock);
  ASSERT_TRUE(reopened.has_value()) << reopened.error().ToString();
  auto thread = (*reopened)->GetThread("th_s");
  ASSERT_TRUE(thread.has_value()) << "the journal's records were not written at the next start";
  EXPECT_EQ((*thread)["turns"].size(), 5u);
}

TEST(PostgresStoreTest, ARecordTheServerRefusesCostsOnlyItself) {
  FakeClock clock;
  StoreFactory factory(StoreKind::kPostgres);
  ASSERT_TRUE(factory.Prepare());
  auto opened = factory.Open(clock);
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  // A constraint the store does not know about stands in for any row the server refuses.
  const std::string database = factory.location().substr(factory.location().rfind('/') + 1);
  ASSERT_TRUE(factory.server()
                  ->Psql(database, "ALTER TABLE requests ADD CONSTRAINT refuse CHECK "
                                   "(model <> $$refused-model$$)")
                  .has_value());
  for (const char* model : {"gpt-4o", "refused-model", "gpt-4o-mini"}) {
    (*opened)->Record(MakeRecord(std::string("x-") + model, "th_x", kT0, model,
                                 UsageFlavor::kOpenAIChat, "{}"));
  }
  auto flushed = (*opened)->Flush();
  ASSERT_FALSE(flushed.has_value()) << "the refused record is reported";
  EXPECT_NE(flushed.error().message.find("refuse"), std::string::npos) << flushed.error().message;
  EXPECT_EQ((*opened)->stats().written, 2u);
  EXPECT_EQ((*opened)->stats().write_errors, 1u);
  auto thread = (*opened)->GetThread("th_x");
  ASSERT_TRUE(thread.has_value());
  EXPECT_EQ((*thread)["turns"].size(), 2u);
  EXPECT_EQ((*thread)["summary"]["models"], json({"gpt-4o", "gpt-4o-mini"}));
}

TEST(PostgresStoreTest, BadConnectionStringsAndDeadServersAreClearErrors) {
  FakeClock clock;
  StoreOptions options;
  options.journal = false;
  auto bad = TelemetryStore::OpenPostgres("postgresql://u@h/db?nonsense=1", clock, options);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("connection string"), std::string::npos)
      << bad.error().message;
  // Port 1 on loopback: nothing listens; the password is not repeated in the error.
  auto dead = TelemetryStore::OpenPostgres("postgresql://kv:secret@127.0.0.1:1/db", clock, options);
  ASSERT_FALSE(dead.has_value());
  EXPECT_EQ(dead.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(dead.error().message.find("secret"), std::string::npos) << dead.error().message;
  StoreOptions journaled;  // a journal needs a local path
  auto no_path = TelemetryStore::OpenPostgres("postgresql://kv@127.0.0.1:1/db", clock, journaled);
  ASSERT_FALSE(no_path.has_value());
  EXPECT_EQ(no_path.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvgate::telemetry
