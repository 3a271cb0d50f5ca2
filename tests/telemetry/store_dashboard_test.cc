// What the dashboard reads from the store: requests found by their response id, writes without a
// TTL end to end, what misses cost, the overview's per-minute sums, the live probe, RFC 3339
// times, the list queries' filters, and that every list query is served by an index.
#include <sqlite3.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "store_test_util.h"
#include "telemetry/sqlite_db.h"
#include "telemetry/store.h"
#include "telemetry/store_sqlite.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;
using testing::MakeRecord;
using testing::TempDir;

constexpr int64_t kT0 = 1'767'225'600'000'000;  // 2026-01-01T00:00:00Z
constexpr int64_t kMinute = 60'000'000;

std::unique_ptr<TelemetryStore> OpenOrDie(const std::string& path, const Clock& clock) {
  auto store = TelemetryStore::Open(path, clock);
  EXPECT_TRUE(store.has_value()) << (store ? "" : store.error().ToString());
  return store ? std::move(*store) : nullptr;
}

RequestRecord Engine(const std::string& id, const std::string& thread, int64_t at, int cached,
                     int written, int prompt) {
  const std::string usage = "{\"prompt_tokens\": " + std::to_string(prompt) +
                            ", \"completion_tokens\": 5, \"prompt_tokens_details\": "
                            "{\"cached_tokens\": " + std::to_string(cached) +
                            ", \"cache_write_tokens\": " + std::to_string(written) + "}}";
  RequestRecord r = MakeRecord(id, thread, at, "smollm2", UsageFlavor::kKvgateEngine, usage.c_str());
  r.provider = "local";
  r.provider_type = "local";
  return r;
}

TEST(StoreDashboardTest, ParsesRfc3339) {
  EXPECT_EQ(ParseRfc3339Micros("2026-01-01T00:00:00Z"), kT0);
  EXPECT_EQ(ParseRfc3339Micros("2026-01-01t00:00:00.5z"), kT0 + 500'000);
  EXPECT_EQ(ParseRfc3339Micros("2026-01-01T01:00:00.000001+01:00"), kT0 + 1);
  EXPECT_EQ(ParseRfc3339Micros("2025-12-31T19:00:00-05:00"), kT0);
  EXPECT_EQ(ParseRfc3339Micros("2026-01-01T00:00:00.123456789Z"), kT0 + 123'456);
  EXPECT_EQ(ParseRfc3339Micros(FormatRfc3339Micros(kT0 + 3'723'000'042LL)), kT0 + 3'723'000'042LL);
  for (const char* bad : {"", "2026-01-01", "2026-01-01T00:00:00", "2026-02-30T00:00:00Z",
                          "2026-01-01T24:00:00Z", "2026-01-01T00:00:00+1:00", "1767225600",
                          "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00Zjunk"}) {
    auto parsed = ParseRfc3339Micros(bad);
    EXPECT_FALSE(parsed.has_value()) << bad;
    if (!parsed) {
      EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    }
  }
}

TEST(StoreDashboardTest, FindsARequestByItsResponseId) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  RequestRecord a = Engine("req_a", "th", kT0, 0, 32, 40);
  a.response_id = "chatcmpl-abc";
  RequestRecord b = Engine("req_b", "th", kT0 + 1, 32, 0, 40);  // no response id
  store->Record(a);
  store->Record(b);
  ASSERT_TRUE(store->Flush());
  auto by_kvgate = store->GetRequest("req_a");
  auto by_body = store->GetRequest("chatcmpl-abc");
  ASSERT_TRUE(by_kvgate && by_body);
  EXPECT_EQ((*by_body)["request_id"], "req_a");
  EXPECT_EQ((*by_body)["response_id"], "chatcmpl-abc");
  EXPECT_EQ(*by_kvgate, *by_body);
  // An empty id never matches the requests that have none.
  auto empty = store->GetRequest("");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->GetRequest("chatcmpl-nope").error().code, ErrorCode::kNotFound);
}

TEST(StoreDashboardTest, EngineCacheReadsBySourceTier) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  RequestRecord tiers = MakeRecord(
      "req_t", "th", kT0, "smollm2", UsageFlavor::kKvgateEngine,
      R"({"prompt_tokens": 12300, "completion_tokens": 5, "prompt_tokens_details":
          {"cached_tokens": 12288, "cache_write_tokens": 0, "cache_read_offload_tokens": 8192}})");
  tiers.provider = tiers.provider_type = "local";
  store->Record(tiers);
  store->Record(Engine("req_plain", "th", kT0 + 1, 32, 0, 40));  // reported no tiers
  RequestRecord host = MakeRecord(
      "req_h", "th", kT0 + 2, "smollm2", UsageFlavor::kKvgateEngine,
      R"({"prompt_tokens": 70, "completion_tokens": 4, "prompt_tokens_details":
          {"cached_tokens": 64, "cache_write_tokens": 0, "cache_read_offload_tokens": 48,
           "cache_read_offload_tier": "host"}})");
  host.provider = host.provider_type = "local";
  store->Record(host);
  ASSERT_TRUE(store->Flush());
  auto thread = store->GetThread("th");
  ASSERT_TRUE(thread) << thread.error().ToString();
  const json& first = (*thread)["turns"][0];
  EXPECT_EQ(first["cache_read_by_tier"], (json{{"pool", 4096}, {"disk", 8192}}));
  EXPECT_EQ(first["usage"]["cache_read"], 12288);
  EXPECT_TRUE((*thread)["turns"][1]["cache_read_by_tier"].is_null());
  // A host-memory tier names itself (a record without the kind is from a disk-only kvgate).
  EXPECT_EQ((*thread)["turns"][2]["cache_read_by_tier"], (json{{"pool", 16}, {"host", 48}}));
  auto request = store->GetRequest("req_t");
  ASSERT_TRUE(request);
  EXPECT_EQ((*request)["cache_read_by_tier"]["disk"], 8192);
}

TEST(StoreDashboardTest, EngineWritesAreNotFiveMinuteWrites) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  store->Record(Engine("req_1", "th", kT0, 0, 48, 50));
  store->Record(Engine("req_2", "th", kT0 + kMinute, 48, 16, 70));
  ASSERT_TRUE(store->Flush());
  auto thread = store->GetThread("th");
  ASSERT_TRUE(thread) << thread.error().ToString();
  const json& u = (*thread)["turns"][0]["usage"];
  EXPECT_EQ(u["cache_write_5m"], 0);
  EXPECT_EQ(u["cache_write_1h"], 0);
  EXPECT_EQ(u["cache_write_no_ttl"], 48);
  EXPECT_EQ(u["uncached"], 2);
  const json& tokens = (*thread)["summary"]["tokens"];
  EXPECT_EQ(tokens["cache_write_no_ttl"], 64);
  EXPECT_EQ(tokens["cache_write"], 64);
  EXPECT_EQ(tokens["cache_write_5m"], 0);
  // Session hit rate counts the writes: 48 / (50 + 70).
  EXPECT_DOUBLE_EQ((*thread)["summary"]["hit_ratio"].get<double>(), 48.0 / 120.0);

  // The list uses the detail's token names, with the same values.
  auto list = store->ListThreads({});
  ASSERT_TRUE(list);
  const json& listed = (*list)["threads"][0]["tokens"];
  for (const char* key : {"cache_read", "cache_write", "cache_write_5m", "cache_write_1h",
                          "cache_write_no_ttl", "uncached", "output", "reasoning"}) {
    ASSERT_TRUE(listed.contains(key)) << key;
    ASSERT_TRUE(tokens.contains(key)) << key;
    if (!tokens[key].is_null()) {
      EXPECT_EQ(listed[key], tokens[key]) << key;
    }
  }
}

TEST(StoreDashboardTest, MissedCostIsSummedPerThreadAndSortable) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  for (int i = 0; i < 3; ++i) {
    RequestRecord r = Engine("req_" + std::to_string(i), "th_" + std::to_string(i), kT0 + i, 0, 0, 10);
    r.cost.missed = 1000 * i;
    r.cost.saved = 7;
    if (i > 0) r.cache_diagnosis = {{"cause", "expired"}, {"ttl_seconds", 300}};
    store->Record(r);
  }
  ASSERT_TRUE(store->Flush());
  ThreadQuery q;
  q.sort = ThreadQuery::Sort::kMissedCost;
  auto list = store->ListThreads(q);
  ASSERT_TRUE(list);
  ASSERT_EQ((*list)["threads"].size(), 3u);
  EXPECT_EQ((*list)["threads"][0]["thread_id"], "th_2");
  EXPECT_EQ((*list)["threads"][0]["missed_pico_usd"], 2000);
  EXPECT_EQ((*list)["threads"][0]["saved_pico_usd"], 7);
  auto thread = store->GetThread("th_1");
  ASSERT_TRUE(thread);
  EXPECT_EQ((*thread)["summary"]["cost_pico_usd"]["missed"], 1000);
  EXPECT_EQ((*thread)["turns"][0]["cost_pico_usd"]["missed"], 1000);
}

TEST(StoreDashboardTest, ThreadListFiltersByPrefixAndTime) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  store->Record(Engine("r1", "support-1", kT0, 0, 0, 10));
  store->Record(Engine("r2", "support-2", kT0 + 10 * kMinute, 0, 0, 10));
  store->Record(Engine("r3", "sales-1", kT0 + 20 * kMinute, 0, 0, 10));
  store->Record(Engine("r4", "supportive", kT0 + 30 * kMinute, 0, 0, 10));
  ASSERT_TRUE(store->Flush());
  auto ids = [&](ThreadQuery q) {
    std::vector<std::string> out;
    auto list = store->ListThreads(q);
    EXPECT_TRUE(list) << list.error().ToString();
    if (list) {
      for (const auto& t : (*list)["threads"]) out.push_back(t["thread_id"]);
    }
    return out;
  };
  ThreadQuery q;
  q.id_prefix = "support-";
  EXPECT_EQ(ids(q), (std::vector<std::string>{"support-2", "support-1"}));
  q.id_prefix = "support";
  q.limit = 2;  // paging within a prefix
  auto first = store->ListThreads(q);
  ASSERT_TRUE(first);
  ASSERT_TRUE((*first)["next_cursor"].is_string());
  q.cursor = (*first)["next_cursor"];
  EXPECT_EQ(ids(q), (std::vector<std::string>{"support-1"}));
  ThreadQuery window;
  window.since_us = kT0 + 5 * kMinute;
  window.until_us = kT0 + 25 * kMinute;
  EXPECT_EQ(ids(window), (std::vector<std::string>{"sales-1", "support-2"}));
  window.descending = false;
  window.sort = ThreadQuery::Sort::kHitRatio;  // all unknown -> by id, ascending
  EXPECT_EQ(ids(window), (std::vector<std::string>{"sales-1", "support-2"}));

  // A small `since` window in another order is read and sorted (ListThreads' count): it pages
  // through the same cursor.
  ThreadQuery paged;
  paged.since_us = kT0 + 5 * kMinute;
  paged.sort = ThreadQuery::Sort::kFirstSeen;
  paged.descending = false;
  paged.limit = 1;
  std::vector<std::string> order;
  for (int page = 0; page < 5; ++page) {
    auto list = store->ListThreads(paged);
    ASSERT_TRUE(list) << list.error().ToString();
    for (const auto& t : (*list)["threads"]) order.push_back(t["thread_id"]);
    if ((*list)["next_cursor"].is_null()) break;
    paged.cursor = (*list)["next_cursor"];
  }
  EXPECT_EQ(order, (std::vector<std::string>{"support-2", "sales-1", "supportive"}));

  RequestQuery rq;
  rq.since_us = kT0 + 10 * kMinute;
  rq.until_us = kT0 + 20 * kMinute;
  auto requests = store->ListRequests(rq);
  ASSERT_TRUE(requests);
  ASSERT_EQ((*requests)["requests"].size(), 2u);
  EXPECT_EQ((*requests)["requests"][0]["request_id"], "r3");
  EXPECT_EQ((*requests)["requests"][1]["request_id"], "r2");
}

TEST(StoreDashboardTest, HitRatioOrderKeepsUnknownLastBothWays) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  store->Record(Engine("r1", "half", kT0, 50, 0, 100));
  store->Record(Engine("r2", "most", kT0 + 1, 90, 0, 100));
  RequestRecord unknown = MakeRecord("r3", "unknown", kT0 + 2, "llama", UsageFlavor::kVllm,
                                     R"({"prompt_tokens": 400, "completion_tokens": 9})");
  store->Record(unknown);
  ASSERT_TRUE(store->Flush());
  for (bool descending : {true, false}) {
    ThreadQuery q;
    q.sort = ThreadQuery::Sort::kHitRatio;
    q.descending = descending;
    q.limit = 1;
    std::vector<std::string> order;
    for (int page = 0; page < 4; ++page) {
      auto list = store->ListThreads(q);
      ASSERT_TRUE(list) << list.error().ToString();
      for (const auto& t : (*list)["threads"]) order.push_back(t["thread_id"]);
      if ((*list)["next_cursor"].is_null()) break;
      q.cursor = (*list)["next_cursor"];
    }
    const std::vector<std::string> want =
        descending ? std::vector<std::string>{"most", "half", "unknown"}
                   : std::vector<std::string>{"half", "most", "unknown"};
    EXPECT_EQ(order, want);
  }
}

TEST(StoreDashboardTest, OverviewSumsByMinuteModelAndBucket) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  store->Record(Engine("r1", "a", kT0 + 10'000'000, 0, 40, 50));
  store->Record(Engine("r2", "a", kT0 + 20'000'000, 40, 0, 60));
  RequestRecord failed = Engine("r3", "b", kT0 + 2 * kMinute, 0, 0, 10);
  failed.status = "upstream_error";
  failed.cost.missed = 5'000;
  store->Record(failed);
  RequestRecord rejected;  // reached no provider: summed under model ""
  rejected.request_id = "r4";
  rejected.created_at_us = kT0 + 3 * kMinute;
  rejected.model = "made-up-by-a-client";
  rejected.status = "error";
  store->Record(rejected);
  store->Record(Engine("r5", "c", kT0 + 90 * kMinute, 0, 0, 10));  // outside the range
  ASSERT_TRUE(store->Flush());

  auto ov = store->Overview(kT0, kT0 + 60 * kMinute, 300);
  ASSERT_TRUE(ov) << ov.error().ToString();
  ASSERT_EQ((*ov)["series"].size(), 12u);
  const json& first = (*ov)["series"][0];
  EXPECT_EQ(first["start"], "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(first["requests"], 4);
  EXPECT_EQ(first["errors"], 2);
  EXPECT_EQ(first["tokens"]["cache_read"], 40);
  EXPECT_EQ(first["tokens"]["cache_write"], 40);
  EXPECT_DOUBLE_EQ(first["missed_usd"].get<double>(), 5e-9);
  EXPECT_DOUBLE_EQ(first["hit_ratio"].get<double>(), 40.0 / 120.0);
  EXPECT_EQ((*ov)["series"][1]["requests"], 0);
  EXPECT_TRUE((*ov)["series"][1]["hit_ratio"].is_null());
  EXPECT_EQ((*ov)["totals"]["requests"], 4);
  ASSERT_EQ((*ov)["by_model"].size(), 2u);
  EXPECT_EQ((*ov)["by_model"][0]["model"], "smollm2");
  EXPECT_EQ((*ov)["by_model"][0]["requests"], 3);
  EXPECT_EQ((*ov)["by_model"][0]["series"].size(), 12u);
  EXPECT_EQ((*ov)["by_model"][1]["model"], "");

  EXPECT_EQ(store->Overview(kT0, kT0 + kMinute, 45).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->Overview(kT0, kT0 + 3000 * kMinute, 60).error().code,
            ErrorCode::kInvalidArgument);
}

TEST(StoreDashboardTest, LiveProbeMovesWithNewRequests) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  auto empty = store->Live("th");
  ASSERT_TRUE(empty);
  EXPECT_EQ((*empty)["last_seq"], 0);
  EXPECT_EQ((*empty)["thread"]["turns"], 0);
  store->Record(Engine("r1", "th", kT0, 0, 0, 10));
  store->Record(Engine("r2", "other", kT0 + 1, 0, 0, 10));
  ASSERT_TRUE(store->Flush());
  auto live = store->Live("th");
  ASSERT_TRUE(live);
  EXPECT_EQ((*live)["last_seq"], 2);
  EXPECT_EQ((*live)["thread"]["turns"], 1);
  EXPECT_EQ((*live)["thread"]["last_seq"], 1);
  EXPECT_FALSE(store->Live("")->contains("thread"));
}

// The upgrade path: a version-2 database with engine rows whose writes were filed as 5-minute
// writes gets them moved to the no-TTL bucket, its thread aggregates and per-minute sums filled.
TEST(StoreDashboardTest, MigrationFourBackfills) {
  TempDir dir;
  const std::string path = dir.File("old.db");
  {
    auto db = internal::Db::Open(path, /*read_only=*/false);
    ASSERT_TRUE(db);
    FakeClock clock;
    std::vector<Migration> core(CoreMigrations().begin(), CoreMigrations().end());
    // As a kvgate without the dashboard left the file: the migrations before version 4.
    std::erase_if(core, [](const Migration& m) { return m.version >= 4; });
    ASSERT_EQ(core.back().version, 3);
    // ApplyMigrations applies core migrations too; a lone version-2 schema is built by hand.
    ASSERT_TRUE((*db)->Exec("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT "
                            "NOT NULL, applied_at_us INTEGER NOT NULL)"));
    for (const Migration& m : core) {
      ASSERT_TRUE((*db)->Exec(m.sql)) << m.name;
      ASSERT_TRUE((*db)->Exec("INSERT INTO schema_migrations VALUES (" + std::to_string(m.version) +
                              ", '" + std::string(m.name) + "', 0)"));
    }
    const std::string columns =
        "request_id, thread_id, created_at_us, endpoint, model, provider, provider_type, "
        "upstream_model, api_key_id, stream, status, http_status, upstream_status, cache_read, "
        "cache_write_5m, cache_write_1h, uncached, output_tokens, usage_clamped, cost_cache_read, "
        "cost_cache_write, cost_uncached, cost_output, cost_total, cost_saved, cost_complete, "
        "cost_priced, error, upstream_request_id, finish_reason";
    ASSERT_TRUE((*db)->Exec(
        "INSERT INTO requests (" + columns + ") VALUES "
        "('r1', 'th', " + std::to_string(kT0) + ", 'chat.completions', 'smollm2', 'local', "
        "'local', 'smollm2', '', 0, 'ok', 200, 200, 16, 32, 0, 2, 5, 0, 0, 0, 0, 0, 0, 0, 1, 1, "
        "'', '', 'stop'), "
        "('r2', 'th', " + std::to_string(kT0 + 1) + ", 'chat.completions', 'claude', 'anth', "
        "'anthropic', 'claude', '', 0, 'ok', 200, 200, 0, 100, 0, 3, 5, 0, 0, 0, 0, 0, 0, 0, 1, "
        "1, '', '', 'stop')"));
    ASSERT_TRUE((*db)->Exec(
        "INSERT INTO threads VALUES ('th', 2, " + std::to_string(kT0) + ", " +
        std::to_string(kT0 + 1) + ", 16, 132, 5, 10, 0, 16, 153)"));
  }
  FakeClock clock;
  auto store = OpenOrDie(path, clock);
  ASSERT_NE(store, nullptr);
  auto thread = store->GetThread("th");
  ASSERT_TRUE(thread) << thread.error().ToString();
  EXPECT_EQ((*thread)["turns"][0]["usage"]["cache_write_5m"], 0);
  EXPECT_EQ((*thread)["turns"][0]["usage"]["cache_write_no_ttl"], 32);
  EXPECT_EQ((*thread)["turns"][1]["usage"]["cache_write_5m"], 100);
  EXPECT_EQ((*thread)["turns"][1]["usage"]["cache_write_no_ttl"], 0);
  auto list = store->ListThreads({});
  ASSERT_TRUE(list);
  EXPECT_EQ((*list)["threads"][0]["tokens"]["cache_write_5m"], 100);
  EXPECT_EQ((*list)["threads"][0]["tokens"]["cache_write_no_ttl"], 32);
  auto ov = store->Overview(kT0, kT0 + kMinute, 60);
  ASSERT_TRUE(ov);
  EXPECT_EQ((*ov)["totals"]["requests"], 2);
  EXPECT_EQ((*ov)["totals"]["tokens"]["cache_write"], 132);
}

// Every list query the API can run, with each filter and sort, is read from an index: no plan
// step scans the requests or threads table, and an unfiltered page is not sorted afterwards.
TEST(StoreDashboardTest, EveryListQueryUsesAnIndex) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("plan.db");
  ASSERT_NE(OpenOrDie(path, clock), nullptr);  // creates the schema
  auto plan_of = [&](const std::string& sql) {
    std::string plan;
    sqlite3* raw = nullptr;
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &stmt, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(raw) << "\n" << sql;
    while (stmt != nullptr && sqlite3_step(stmt) == SQLITE_ROW) {
      plan += reinterpret_cast<const char*>(sqlite3_column_text(stmt, 3));
      plan += "\n";
    }
    sqlite3_finalize(stmt);
    sqlite3_close(raw);
    return plan;
  };
  auto expect_indexed = [&](const std::string& sql, bool sorted_by_index) {
    const std::string plan = plan_of(sql);
    for (const char* full_scan : {"SCAN requests\n", "SCAN t\n", "SCAN threads\n"}) {
      EXPECT_EQ(plan.find(full_scan), std::string::npos) << plan << sql;
    }
    // "SCAN x USING INDEX" without a bound would walk a whole index: only allowed as the order
    // of a page, which stops after `limit` rows.
    if (sorted_by_index) {
      EXPECT_EQ(plan.find("TEMP B-TREE FOR ORDER BY"), std::string::npos) << plan << sql;
    }
    return plan;
  };
  int checked = 0;
  for (auto sort : {ThreadQuery::Sort::kLastSeen, ThreadQuery::Sort::kFirstSeen,
                    ThreadQuery::Sort::kCost, ThreadQuery::Sort::kTurns,
                    ThreadQuery::Sort::kHitRatio, ThreadQuery::Sort::kMissedCost}) {
    for (bool descending : {true, false}) {
      for (int filters = 0; filters < 8; ++filters) {
        for (bool cursor : {false, true}) {
          ThreadQuery q;
          q.sort = sort;
          q.descending = descending;
          if (filters & 1) q.model = "m";
          if (filters & 2) q.since_us = 1;
          if (filters & 4) q.id_prefix = "p";
          const bool plain = (filters & 5) == 0;  // no model, no prefix: a walk of the sort index
          expect_indexed(internal::ThreadListSql(q, cursor), plain);
          ++checked;
          if (q.since_us && plain) {  // the window read through threads_by_last_seen, then sorted
            const std::string plan = expect_indexed(internal::ThreadListSql(q, cursor, true), false);
            EXPECT_NE(plan.find("threads_by_last_seen (last_seen_us>?)"), std::string::npos) << plan;
          }
        }
      }
    }
  }
  for (int filters = 0; filters < 32; ++filters) {
    for (bool cursor : {false, true}) {
      RequestQuery q;
      if (filters & 1) q.thread_id = "t";
      if (filters & 2) q.model = "m";
      if (filters & 4) q.provider = "p";
      if (filters & 8) q.status = "ok";
      if (filters & 16) q.since_us = 1;
      const std::string plan = expect_indexed(internal::RequestListSql(q, cursor), true);
      EXPECT_NE(plan.find("USING INDEX requests_by_"), std::string::npos) << plan;
      ++checked;
    }
  }
  const std::string overview = expect_indexed(std::string(internal::OverviewSql()), false);
  EXPECT_NE(overview.find("SEARCH usage_by_minute USING PRIMARY KEY (minute_us>? AND minute_us<?)"),
            std::string::npos)
      << overview;
  const std::string by_response = plan_of(
      "SELECT * FROM requests WHERE response_id = ?1 AND response_id != '' ORDER BY seq DESC LIMIT 1");
  EXPECT_NE(by_response.find("requests_by_response_id"), std::string::npos) << by_response;
  EXPECT_EQ(checked, 6 * 2 * 8 * 2 + 32 * 2);
}

}  // namespace
}  // namespace kvgate::telemetry
