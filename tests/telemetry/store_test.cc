#include "telemetry/store.h"

#include <sqlite3.h>

#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "store_test_util.h"
#include "telemetry/diagnosis.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;
using testing::MakeRecord;
using testing::TempDir;

constexpr int64_t kT0 = 1'767'225'600'000'000;  // 2026-01-01T00:00:00Z

std::unique_ptr<TelemetryStore> OpenOrDie(const std::string& path, const Clock& clock,
                                          StoreOptions options = {}) {
  auto store = TelemetryStore::Open(path, clock, std::move(options));
  EXPECT_TRUE(store.has_value()) << (store ? "" : store.error().ToString());
  return store ? std::move(*store) : nullptr;
}

std::shared_ptr<const PromptFingerprint> TwoElementFingerprint(uint64_t salt = 0) {
  PromptFingerprint fp;
  fp.elements.push_back({FingerprintElement::Kind::kSystem, -1, 0x0123456789abcdefULL ^ salt, 70,
                         {0xdeadbeefu, 7u}});
  fp.elements.push_back({FingerprintElement::Kind::kMessage, 0, 0xfedcba9876543210ULL ^ salt, 10,
                         {42u}});
  return std::make_shared<const PromptFingerprint>(std::move(fp));
}

std::set<std::string> Keys(const json& obj) {
  std::set<std::string> keys;
  for (const auto& [k, v] : obj.items()) keys.insert(k);
  return keys;
}

TEST(TelemetryStoreTest, FormatsRfc3339WithMicros) {
  EXPECT_EQ(FormatRfc3339Micros(kT0), "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(FormatRfc3339Micros(kT0 + 86'400'000'000LL + 3'723'000'042LL), "2026-01-02T01:02:03.000042Z");
  EXPECT_EQ(FormatRfc3339Micros(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(FormatRfc3339Micros(-1), "1969-12-31T23:59:59.999999Z");
  EXPECT_EQ(FormatRfc3339Micros(951'782'400'500'000LL), "2000-02-29T00:00:00.500000Z");
}

TEST(TelemetryStoreTest, ParsesThreadSort) {
  EXPECT_EQ(ParseThreadSort("cost"), ThreadQuery::Sort::kCost);
  EXPECT_EQ(ParseThreadSort("hit_ratio"), ThreadQuery::Sort::kHitRatio);
  EXPECT_EQ(ParseThreadSort("last_seen"), ThreadQuery::Sort::kLastSeen);
  EXPECT_EQ(ParseThreadSort("first_seen"), ThreadQuery::Sort::kFirstSeen);
  EXPECT_EQ(ParseThreadSort("turns"), ThreadQuery::Sort::kTurns);
  EXPECT_FALSE(ParseThreadSort("price").has_value());
}

TEST(TelemetryStoreTest, OpenRejectsMemoryAndMissingDirectory) {
  FakeClock clock;
  auto mem = TelemetryStore::Open(":memory:", clock);
  ASSERT_FALSE(mem.has_value());
  EXPECT_EQ(mem.error().code, ErrorCode::kInvalidArgument);
  TempDir dir;
  auto missing = TelemetryStore::Open(dir.File("no/such/dir/t.db"), clock);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kUnavailable);
}

TEST(TelemetryStoreTest, ThreadShapeAndValues) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  ASSERT_NE(store, nullptr);

  RequestRecord first = MakeRecord("req_1", "th_a", kT0 + 1'000'000, "gpt-4o-mini", UsageFlavor::kOpenAIChat,
                                   R"({"prompt_tokens": 2006, "completion_tokens": 300,
                                       "prompt_tokens_details": {"cached_tokens": 1920},
                                       "completion_tokens_details": {"reasoning_tokens": 7}})");
  first.latency_us = 1'234'567;
  first.ttft_us = 250'500;
  first.stream = true;
  RequestRecord second = MakeRecord("req_2", "th_a", kT0 + 2'000'000, "claude-sonnet-4-5", UsageFlavor::kAnthropic,
                                    R"({"input_tokens": 21, "cache_creation_input_tokens": 188086,
                                        "cache_read_input_tokens": 3000, "output_tokens": 393})");
  second.cache_diagnosis = {{"cause", "model_switch"}, {"previous_model", "gpt-4o-mini"}};
  // Same created_at as `second`: insertion order breaks the tie.
  RequestRecord third = MakeRecord("req_3", "th_a", kT0 + 2'000'000, "llama", UsageFlavor::kVllm,
                                   R"({"prompt_tokens": 400, "completion_tokens": 9})");
  third.status = "upstream_error";
  third.http_status = 502;
  third.upstream_status = 500;
  third.error = "upstream said no";
  // Recorded out of order: the thread is ordered by created_at.
  store->Record(second);
  store->Record(third);
  store->Record(first);
  ASSERT_TRUE(store->Flush().has_value());

  Result<json> thread = store->GetThread("th_a");
  ASSERT_TRUE(thread.has_value()) << thread.error().ToString();
  const json& t = *thread;
  EXPECT_EQ(Keys(t), (std::set<std::string>{"thread_id", "turns", "summary", "keep_warm"}));
  EXPECT_EQ(t["keep_warm"]["pings"], 0);
  EXPECT_EQ(t["thread_id"], "th_a");
  ASSERT_EQ(t["turns"].size(), 3u);
  EXPECT_EQ(t["turns"][0]["request_id"], "req_1");
  EXPECT_EQ(t["turns"][1]["request_id"], "req_2");
  EXPECT_EQ(t["turns"][2]["request_id"], "req_3");

  const json& a = t["turns"][0];
  EXPECT_EQ(Keys(a), (std::set<std::string>{"request_id", "created_at", "model", "provider", "status", "stream",
                                            "latency_ms", "ttft_ms", "usage", "cost_usd", "cost_pico_usd",
                                            "cost_complete", "error", "http_status", "cache_diagnosis",
                                            "usage_clamped", "usage_estimated", "response_id", "target",
                                            "route", "attempts",
                                            "cache_read_by_tier", "cache_helper",
                                            "provider_cache_diagnosis", "purpose",
                                            "keep_warm_saved_usd", "thread_source",
                                            "thread_parent"}));
  EXPECT_EQ(a["purpose"], "client");
  // Recorded without a source (a record made directly, as a replayed journal entry may be).
  EXPECT_TRUE(a["thread_source"].is_null());
  EXPECT_TRUE(a["thread_parent"].is_null());
  EXPECT_TRUE(a["cache_helper"].is_null()) << "no helper acted";
  // Without a router: served by the model it named, no decision, no attempts recorded.
  EXPECT_EQ(a["target"], "gpt-4o-mini");
  EXPECT_TRUE(a["route"].is_null());
  EXPECT_EQ(a["attempts"], json::array());
  EXPECT_EQ(a["created_at"], "2026-01-01T00:00:01.000000Z");
  EXPECT_EQ(a["model"], "gpt-4o-mini");
  EXPECT_EQ(a["provider"], "prov-openai");
  EXPECT_EQ(a["status"], "ok");
  EXPECT_EQ(a["stream"], true);
  EXPECT_DOUBLE_EQ(a["latency_ms"].get<double>(), 1234.567);
  EXPECT_DOUBLE_EQ(a["ttft_ms"].get<double>(), 250.5);
  EXPECT_EQ(a["usage"], json::parse(R"({"cache_read": 1920, "cache_write_5m": 0, "cache_write_1h": 0,
                                        "cache_write_no_ttl": 0, "uncached": 86, "output": 300, "reasoning": 7})"));
  EXPECT_EQ(a["cost_pico_usd"], json::parse(R"({"total": 336900000, "cache_read": 144000000,
      "cache_write": 0, "uncached": 12900000, "output": 180000000, "saved": 144000000,
      "missed": 0})"));
  EXPECT_DOUBLE_EQ(a["cost_usd"]["total"].get<double>(), 0.0003369);
  EXPECT_DOUBLE_EQ(a["cost_usd"]["saved"].get<double>(), 0.000144);
  EXPECT_TRUE(a["error"].is_null());
  EXPECT_TRUE(a["cache_diagnosis"].is_null());
  EXPECT_EQ(a["http_status"], 200);
  EXPECT_EQ(a["usage_clamped"], false);
  EXPECT_EQ(a["cost_complete"], true);

  const json& b = t["turns"][1];
  EXPECT_EQ(b["cache_diagnosis"], second.cache_diagnosis);
  EXPECT_EQ(b["cost_pico_usd"]["total"], 712'180'500'000);
  EXPECT_EQ(b["cost_pico_usd"]["saved"], -132'964'500'000);
  EXPECT_TRUE(b["latency_ms"].is_null());
  EXPECT_TRUE(b["ttft_ms"].is_null());
  EXPECT_EQ(b["stream"], false);

  const json& c = t["turns"][2];  // unknown is not zero: null, not 0
  EXPECT_TRUE(c["usage"]["cache_read"].is_null());
  EXPECT_TRUE(c["usage"]["uncached"].is_null());
  EXPECT_TRUE(c["usage"]["reasoning"].is_null());
  EXPECT_EQ(c["usage"]["cache_write_5m"], 0);
  EXPECT_EQ(c["usage"]["output"], 9);
  EXPECT_EQ(c["error"], "upstream said no");
  EXPECT_EQ(c["http_status"], 502);
  EXPECT_EQ(c["status"], "upstream_error");
  EXPECT_EQ(c["cost_complete"], false);

  const json& s = t["summary"];
  EXPECT_EQ(s["turns"], 3);
  EXPECT_EQ(s["first_seen"], "2026-01-01T00:00:01.000000Z");
  EXPECT_EQ(s["last_seen"], "2026-01-01T00:00:02.000000Z");
  EXPECT_EQ(s["models"], json::parse(R"(["gpt-4o-mini", "claude-sonnet-4-5", "llama"])"));
  EXPECT_EQ(s["tokens"]["cache_read"], 1920 + 3000);
  EXPECT_EQ(s["tokens"]["cache_write_5m"], 188086);
  EXPECT_EQ(s["tokens"]["uncached"], 86 + 21);
  EXPECT_EQ(s["tokens"]["output"], 300 + 393 + 9);
  EXPECT_EQ(s["cost_pico_usd"]["total"], 336'900'000 + 712'180'500'000);
  EXPECT_EQ(s["cost_complete"], false);
  // Hit ratio over the two turns with known input: (1920 + 3000) / (2006 + 191107).
  EXPECT_DOUBLE_EQ(s["hit_ratio"].get<double>(), 4920.0 / (2006.0 + 191107.0));

  Result<json> missing = store->GetThread("th_nope");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->GetThread("").error().code, ErrorCode::kNotFound);

  TelemetryStore::Stats stats = store->stats();
  EXPECT_EQ(stats.recorded, 3u);
  EXPECT_EQ(stats.written, 3u);
  EXPECT_EQ(stats.queue_depth, 0u);
  EXPECT_EQ(stats.write_errors, 0u);
  EXPECT_GE(stats.batches, 1u);
}

TEST(TelemetryStoreTest, GetRequestHasEveryField) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  RequestRecord r = MakeRecord("req_full", "", kT0, "deepseek-chat", UsageFlavor::kDeepSeek,
                               R"({"prompt_tokens": 1000, "completion_tokens": 77, "prompt_cache_hit_tokens": 832,
                                   "prompt_cache_miss_tokens": 168})");
  r.api_key_id = "key_1";
  r.upstream_request_id = "up-9";
  r.finish_reason = "stop";
  r.endpoint = "completions";
  r.created_at_us = 0;  // stamped with the clock
  store->Record(r);
  ASSERT_TRUE(store->Flush().has_value());
  Result<json> got = store->GetRequest("req_full");
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  const json& g = *got;
  EXPECT_EQ(g["created_at"], FormatRfc3339Micros(clock.NowUnixMicros()));
  EXPECT_EQ(g["thread_id"], "");
  EXPECT_EQ(g["endpoint"], "completions");
  EXPECT_EQ(g["upstream_status"], 200);
  EXPECT_EQ(g["upstream_model"], "deepseek-chat-upstream");
  EXPECT_EQ(g["provider_type"], "deepseek");
  EXPECT_EQ(g["api_key_id"], "key_1");
  EXPECT_EQ(g["upstream_request_id"], "up-9");
  EXPECT_EQ(g["finish_reason"], "stop");
  EXPECT_EQ(g["usage_raw"], json::parse(r.usage.raw));
  EXPECT_EQ(g["reported_input"], 1000);
  EXPECT_EQ(g["cost_priced"], true);
  EXPECT_EQ(g["cost_pico_usd"]["total"], 102'676'000);
  EXPECT_EQ(store->GetRequest("req_none").error().code, ErrorCode::kNotFound);
  // A request without a thread id makes no thread.
  Result<json> threads = store->ListThreads({});
  ASSERT_TRUE(threads.has_value());
  EXPECT_TRUE((*threads)["threads"].empty());
}

TEST(TelemetryStoreTest, TextThatIsNotUtf8IsStoredReadably) {
  // One row with bytes that are not UTF-8 must not make every query that shows it fail.
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  RequestRecord r = MakeRecord("req_bad", "poison\xff", kT0, "m\xc0\xaf", UsageFlavor::kOpenAIChat,
                               R"({"prompt_tokens": 10, "completion_tokens": 2})");
  r.error = std::string("cut in a character: \xe6\x97");
  store->Record(r);
  ASSERT_TRUE(store->Flush().has_value());
  Result<json> requests = store->ListRequests({});
  ASSERT_TRUE(requests.has_value()) << requests.error().ToString();
  ASSERT_EQ((*requests)["requests"].size(), 1u);
  const json& row = (*requests)["requests"][0];
  EXPECT_EQ(row["thread_id"], "poison\xef\xbf\xbd");
  EXPECT_EQ(row["model"], "m\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(row["error"], "cut in a character: \xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_NO_THROW(requests->dump());
  Result<json> threads = store->ListThreads({});
  ASSERT_TRUE(threads.has_value());
  EXPECT_NO_THROW(threads->dump());
  Result<json> thread = store->GetThread("poison\xef\xbf\xbd");
  ASSERT_TRUE(thread.has_value()) << thread.error().ToString();
  EXPECT_NO_THROW(thread->dump());
}

TEST(TelemetryStoreTest, LatestThreadTurnsGivesEachRecentThreadsNewestFingerprintedOkTurn) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  const char* usage = R"({"prompt_tokens": 2000, "completion_tokens": 5,
                          "prompt_tokens_details": {"cached_tokens": 1024}})";
  auto turn = [&](const std::string& id, const std::string& thread, int64_t at_s, uint64_t salt) {
    RequestRecord r = MakeRecord(id, thread, kT0 + at_s * 1'000'000, "gpt-4o-mini",
                                 UsageFlavor::kOpenAIChat, usage);
    r.prompt_fingerprint = TwoElementFingerprint(salt);
    return r;
  };
  store->Record(turn("a_old", "a", 10, 1));
  store->Record(turn("a_new", "a", 20, 2));
  ASSERT_TRUE(store->Flush().has_value());  // the next turns of `a` come in a later batch
  store->Record(turn("a_new2", "a", 30, 3));
  store->Record(turn("a_newest", "a", 35, 8));  // same batch: the last recorded one is kept
  RequestRecord a_plain = turn("a_plain", "a", 40, 4);  // newer, but nothing to compare with
  a_plain.prompt_fingerprint.reset();
  store->Record(a_plain);
  store->Record(turn("b_only", "b", 50, 5));
  store->Record(turn("c_stale", "c", 1, 6));  // last seen before the window
  RequestRecord d_plain = turn("d_plain", "d", 60, 7);  // a thread with no fingerprinted turn
  d_plain.prompt_fingerprint.reset();
  store->Record(d_plain);
  ASSERT_TRUE(store->Flush().has_value());

  int corrupt = -1;
  auto turns = store->LatestThreadTurns(kT0 + 5'000'000, 100, &corrupt);
  ASSERT_TRUE(turns.has_value()) << turns.error().ToString();
  EXPECT_EQ(corrupt, 0);
  ASSERT_EQ(turns->size(), 2u);
  // Most recently seen thread first: b (last seen at 50 s), then a (last seen at 40 s).
  EXPECT_EQ((*turns)[0].request_id, "b_only");
  EXPECT_EQ((*turns)[1].request_id, "a_newest");
  const RequestRecord& a = (*turns)[1];
  EXPECT_EQ(a.thread_id, "a");
  EXPECT_EQ(a.created_at_us, kT0 + 35'000'000);
  EXPECT_EQ(a.model, "gpt-4o-mini");
  EXPECT_EQ(a.provider, "prov-openai");
  EXPECT_EQ(a.usage.cache_read, 1024);
  EXPECT_EQ(a.usage.uncached, 976);
  ASSERT_NE(a.prompt_fingerprint, nullptr);
  EXPECT_EQ(*a.prompt_fingerprint, *TwoElementFingerprint(8));

  auto one = store->LatestThreadTurns(kT0, 1, nullptr);
  ASSERT_TRUE(one.has_value());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].request_id, "b_only");
}

TEST(TelemetryStoreTest, LatestThreadTurnsSkipsAnUnreadableFingerprint) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  {
    auto store = OpenOrDie(path, clock);
    RequestRecord r = MakeRecord("r1", "th", kT0, "gpt-4o-mini", UsageFlavor::kOpenAIChat,
                                 R"({"prompt_tokens": 10, "completion_tokens": 1})");
    r.prompt_fingerprint = TwoElementFingerprint();
    store->Record(r);
    store->Close();
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE thread_last_prompt SET fingerprint = '[{\"k\":\"banana\"}]'",
                         nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = OpenOrDie(path, clock);
  int corrupt = 0;
  auto turns = store->LatestThreadTurns(0, 10, &corrupt);
  ASSERT_TRUE(turns.has_value()) << turns.error().ToString();
  EXPECT_TRUE(turns->empty());
  EXPECT_EQ(corrupt, 1);
}

TEST(TelemetryStoreTest, UpgradesAVersion1DatabaseKeepingItsRows) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("v1.db");
  // A database as a kvgate with only migration 1 left it, with one request in it.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const Migration& v1 = CoreMigrations()[0];
  ASSERT_EQ(v1.version, 1);
  const std::string setup =
      std::string(v1.sql) +
      "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
      "applied_at_us INTEGER NOT NULL);"
      "INSERT INTO schema_migrations VALUES (1, 'requests_and_threads', 0);"
      "INSERT INTO requests (request_id, thread_id, created_at_us, endpoint, model, provider, "
      "provider_type, upstream_model, api_key_id, stream, status, http_status, upstream_status, "
      "uncached, usage_clamped, cost_cache_read, cost_cache_write, cost_uncached, cost_output, "
      "cost_total, cost_saved, cost_complete, cost_priced, error, upstream_request_id, "
      "finish_reason, prompt_fingerprint) VALUES ('req_old', 'th', 1767225600000000, "
      "'chat.completions', 'gpt-4o', 'openai', 'openai', 'gpt-4o', '', 0, 'ok', 200, 200, 42, 0, "
      "0, 0, 0, 0, 0, 0, 1, 1, '', '', 'stop', '');";
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_close(db);

  auto store = OpenOrDie(path, clock);
  ASSERT_NE(store, nullptr);
  Result<json> old = store->GetRequest("req_old");
  ASSERT_TRUE(old.has_value()) << old.error().ToString();
  EXPECT_EQ((*old)["usage"]["uncached"], 42);
  EXPECT_EQ((*old)["finish_reason"], "stop");
  RequestRecord r = MakeRecord("req_new", "th", kT0 + 1, "gpt-4o", UsageFlavor::kOpenAIChat,
                               R"({"prompt_tokens": 10, "completion_tokens": 1})");
  r.prompt_fingerprint = TwoElementFingerprint();
  store->Record(r);
  ASSERT_TRUE(store->Flush().has_value());
  auto turns = store->LatestThreadTurns(0, 10, nullptr);
  ASSERT_TRUE(turns.has_value()) << turns.error().ToString();
  ASSERT_EQ(turns->size(), 1u);
  EXPECT_EQ((*turns)[0].request_id, "req_new");
}

TEST(TelemetryStoreTest, ReopenKeepsDataAndMigrationsAreIdempotent) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  constexpr Migration kAlerts{100, "alerts_test_table", "CREATE TABLE alerts_test (id INTEGER PRIMARY KEY)"};
  {
    auto store = OpenOrDie(path, clock, StoreOptions{.extra_migrations = {kAlerts}});
    ASSERT_NE(store, nullptr);
    store->Record(MakeRecord("req_1", "th", kT0, "gpt-4.1", UsageFlavor::kOpenAIChat,
                             R"({"prompt_tokens": 10, "completion_tokens": 1,
                                 "prompt_tokens_details": {"cached_tokens": 0}})"));
    // No Flush: Close (via the destructor) must persist it.
  }
  for (int i = 0; i < 2; ++i) {
    auto store = OpenOrDie(path, clock, StoreOptions{.extra_migrations = {kAlerts}});
    ASSERT_NE(store, nullptr);
    Result<json> got = store->GetRequest("req_1");
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ((*got)["usage"]["uncached"], 10);
    Result<json> thread = store->GetThread("th");
    ASSERT_TRUE(thread.has_value());
    EXPECT_EQ((*thread)["turns"].size(), 1u);
    store->Close();
    store->Close();  // idempotent
  }
  // Exactly one row per migration.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT version, name FROM schema_migrations ORDER BY version", -1, &stmt,
                               nullptr),
            SQLITE_OK);
  std::vector<std::pair<int, std::string>> rows;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    rows.emplace_back(sqlite3_column_int(stmt, 0), reinterpret_cast<const char*>(sqlite3_column_text(stmt, 1)));
  }
  sqlite3_finalize(stmt);
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  std::vector<std::pair<int, std::string>> expected;
  for (const Migration& m : CoreMigrations()) expected.emplace_back(m.version, std::string(m.name));
  expected.emplace_back(100, "alerts_test_table");
  EXPECT_EQ(rows, expected);

  // Another module claiming version 100 under another name is refused.
  constexpr Migration kClash{100, "something_else", "CREATE TABLE clash (id INTEGER)"};
  auto clash = TelemetryStore::Open(path, clock, StoreOptions{.extra_migrations = {kClash}});
  ASSERT_FALSE(clash.has_value());
  EXPECT_EQ(clash.error().code, ErrorCode::kCorruptData);
  // Two migrations with one version are refused.
  constexpr Migration kDup{1, "dup", "SELECT 1"};
  EXPECT_FALSE(TelemetryStore::Open(path, clock, StoreOptions{.extra_migrations = {kDup}}).has_value());
  // A failing migration is rolled back and reported; the database stays usable.
  constexpr Migration kBroken{101, "broken", "CREATE TABLE ok_part (id INTEGER); THIS IS NOT SQL"};
  auto broken = TelemetryStore::Open(path, clock, StoreOptions{.extra_migrations = {kAlerts, kBroken}});
  ASSERT_FALSE(broken.has_value());
  EXPECT_EQ(broken.error().code, ErrorCode::kInternal);
  auto again = OpenOrDie(path, clock, StoreOptions{.extra_migrations = {kAlerts}});
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->GetRequest("req_1").has_value());
}

// Runs SQL on the file from outside the store (another process, an operator, damage).
void ExecOutside(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

TEST(TelemetryStoreTest, ADatabaseFromANewerKvgateIsRefused) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  OpenOrDie(path, clock)->Close();
  ExecOutside(path, "INSERT INTO schema_migrations VALUES (98, 'from_the_future', 0)");
  auto store = TelemetryStore::Open(path, clock);
  ASSERT_FALSE(store.has_value());
  EXPECT_EQ(store.error().code, ErrorCode::kCorruptData);
  EXPECT_NE(store.error().message.find("newer kvgate"), std::string::npos) << store.error().message;
  EXPECT_NE(store.error().message.find("98"), std::string::npos);
  // Versions of 100 and up belong to other modules (alerts): not this check's business.
  ExecOutside(path, "DELETE FROM schema_migrations WHERE version = 98; "
                    "INSERT INTO schema_migrations VALUES (150, 'some_module', 0)");
  EXPECT_NE(OpenOrDie(path, clock), nullptr);
}

TEST(TelemetryStoreTest, FailingWritesShowInStats) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  auto store = OpenOrDie(path, clock);
  ASSERT_NE(store, nullptr);
  store->Record(MakeRecord("ok1", "th", kT0, "gpt-4.1", UsageFlavor::kOpenAIChat, "{}"));
  ASSERT_TRUE(store->Flush().has_value());
  EXPECT_FALSE(store->stats().failing);
  // The table goes away under the store: every later write fails (after its retries).
  ExecOutside(path, "DROP TABLE requests");
  store->Record(MakeRecord("lost1", "th", kT0 + 1, "gpt-4.1", UsageFlavor::kOpenAIChat, "{}"));
  store->Record(MakeRecord("lost2", "th", kT0 + 2, "gpt-4.1", UsageFlavor::kOpenAIChat, "{}"));
  EXPECT_FALSE(store->Flush().has_value());
  TelemetryStore::Stats stats = store->stats();
  EXPECT_TRUE(stats.failing);
  EXPECT_EQ(stats.written, 1u);
  EXPECT_EQ(stats.write_errors, 2u);
  EXPECT_NE(stats.last_error.find("requests"), std::string::npos) << stats.last_error;
}

TEST(TelemetryStoreTest, AfterCloseRecordsAreCountedAndQueriesFail) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  store->Close();
  store->Record(MakeRecord("late", "th", kT0, "gpt-4.1", UsageFlavor::kOpenAIChat, "{}"));
  TelemetryStore::Stats stats = store->stats();
  EXPECT_EQ(stats.recorded, 1u);
  EXPECT_EQ(stats.write_errors, 1u);
  EXPECT_EQ(stats.written, 0u);
  EXPECT_EQ(store->GetRequest("late").error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(store->ListRequests({}).error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(store->Flush().has_value());  // nothing pending
}

TEST(TelemetryStoreTest, DuplicateRequestIdIsRejectedAlone) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenOrDie(dir.File("t.db"), clock);
  const char* usage = R"({"prompt_tokens": 100, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 50}})";
  store->Record(MakeRecord("dup", "th", kT0, "gpt-4.1", UsageFlavor::kOpenAIChat, usage));
  store->Record(MakeRecord("dup", "th", kT0 + 1, "gpt-4.1", UsageFlavor::kOpenAIChat, usage));
  store->Record(MakeRecord("other", "th", kT0 + 2, "gpt-4.1", UsageFlavor::kOpenAIChat, usage));
  Status flushed = store->Flush();
  ASSERT_FALSE(flushed.has_value());
  EXPECT_EQ(flushed.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(store->Flush().has_value());  // reported once
  TelemetryStore::Stats stats = store->stats();
  EXPECT_EQ(stats.written, 2u);
  EXPECT_EQ(stats.write_errors, 1u);
  Result<json> threads = store->ListThreads({});
  ASSERT_TRUE(threads.has_value());
  ASSERT_EQ((*threads)["threads"].size(), 1u);
  const json& t = (*threads)["threads"][0];
  EXPECT_EQ(t["turns"], 2);  // the rejected record left no trace in the aggregates
  EXPECT_EQ(t["tokens"]["cache_read"], 100);
  EXPECT_DOUBLE_EQ(t["hit_ratio"].get<double>(), 0.5);
}

// Group commit: records wait for the commit interval (here an hour) unless Flush() or Close()
// cuts it short; one batch then carries turns of several threads, folded per thread.
TEST(TelemetryStoreTest, GroupCommitWaitsForTheIntervalFlushAndCloseDoNot) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  auto store = OpenOrDie(path, clock, StoreOptions{.commit_interval = std::chrono::hours(1)});
  ASSERT_NE(store, nullptr);
  const char* usage = R"({"prompt_tokens": 100, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 50}})";
  store->Record(MakeRecord("a1", "th_a", kT0 + 3, "gpt-4.1", UsageFlavor::kOpenAIChat, usage));
  store->Record(MakeRecord("b1", "th_b", kT0 + 1, "gpt-4.1", UsageFlavor::kOpenAIChat, usage));
  store->Record(MakeRecord("a2", "th_a", kT0 + 1, "gpt-4o-mini", UsageFlavor::kOpenAIChat, usage));
  store->Record(MakeRecord("a3", "th_a", kT0 + 2, "gpt-4.1", UsageFlavor::kOpenAIChat, usage));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(store->stats().batches, 0u);  // still gathering
  EXPECT_EQ(store->stats().queue_depth, 4u);
  ASSERT_TRUE(store->Flush().has_value());
  EXPECT_EQ(store->stats().batches, 1u);
  Result<json> threads = store->ListThreads({});
  ASSERT_TRUE(threads.has_value());
  ASSERT_EQ((*threads)["threads"].size(), 2u);
  for (const json& t : (*threads)["threads"]) {
    const bool a = t["thread_id"] == "th_a";
    EXPECT_EQ(t["turns"], a ? 3 : 1);
    EXPECT_EQ(t["tokens"]["cache_read"], a ? 150 : 50);
    EXPECT_EQ(t["first_seen"], "2026-01-01T00:00:00.000001Z");
    EXPECT_EQ(t["last_seen"], a ? "2026-01-01T00:00:00.000003Z" : "2026-01-01T00:00:00.000001Z");
    EXPECT_EQ(t["models"].size(), a ? 2u : 1u) << t.dump();
  }
  // Close() drains the queue at once too.
  store->Record(MakeRecord("a4", "th_a", kT0 + 4, "gpt-4.1", UsageFlavor::kOpenAIChat, usage));
  const auto start = std::chrono::steady_clock::now();
  store.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  auto reopened = OpenOrDie(path, clock);
  ASSERT_NE(reopened, nullptr);
  Result<json> a = reopened->GetThread("th_a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ((*a)["turns"].size(), 4u);
}

// Record() returns while the database is locked by someone else: nothing on the caller's path waits
// on disk. The writer commits once the lock is gone, and nothing is lost.
TEST(TelemetryStoreTest, RecordDoesNotWaitForTheDatabase) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  auto store = OpenOrDie(path, clock);
  ASSERT_NE(store, nullptr);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  for (int i = 0; i < 100; ++i) {
    store->Record(MakeRecord("req_" + std::to_string(i), "th", kT0 + i, "gpt-4.1", UsageFlavor::kOpenAIChat,
                             R"({"prompt_tokens": 10, "completion_tokens": 1})"));
  }
  TelemetryStore::Stats held = store->stats();
  EXPECT_EQ(held.recorded, 100u);
  EXPECT_EQ(held.written, 0u);
  EXPECT_EQ(held.queue_depth, 100u);
  // Readers are not blocked by a writer either (WAL).
  EXPECT_TRUE(store->ListRequests({}).has_value());
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  ASSERT_TRUE(store->Flush().has_value());
  TelemetryStore::Stats after = store->stats();
  EXPECT_EQ(after.written, 100u);
  EXPECT_EQ(after.queue_depth, 0u);
  EXPECT_EQ(after.write_errors, 0u);
  Result<json> thread = store->GetThread("th");
  ASSERT_TRUE(thread.has_value());
  EXPECT_EQ((*thread)["turns"].size(), 100u);
}

}  // namespace
}  // namespace kvgate::telemetry
