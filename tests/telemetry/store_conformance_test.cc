// The store contract of store.h, run against every implementation (store_factory.h): SQLite and
// PostgreSQL must give the same answers to the same records.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "telemetry/diagnosis.h"
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

class StoreConformanceTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(factory_.Prepare());
    auto store = factory_.Open(clock_);
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
  }
  void Reopen(StoreOptions options = {}) {
    store_.reset();
    auto store = factory_.Open(clock_, std::move(options));
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
  }

  StoreFactory factory_{GetParam()};
  FakeClock clock_;
  std::unique_ptr<TelemetryStore> store_;
};

// A record with every field set, and text that needs care (quotes, non-ASCII, a NUL-free JSON).
RequestRecord FullRecord() {
  RequestRecord r = MakeRecord("req_full", "th_full", kT0 + 5, "claude-sonnet-4-5",
                               UsageFlavor::kAnthropic,
                               R"({"input_tokens": 20, "cache_read_input_tokens": 900,
                                   "cache_creation_input_tokens": 100, "output_tokens": 7})");
  r.endpoint = "messages";
  r.api_key_id = "key_1";
  r.stream = true;
  r.latency_us = 123'456;
  r.ttft_us = 45'600;
  r.upstream_request_id = "msg_up";
  r.finish_reason = "end_turn";
  r.error = "";
  r.response_id = "resp_42";
  r.target = "sonnet";
  r.key_index = 2;
  r.system_fingerprint = "fp \"quoted\" é";
  r.route = R"({"router":"r1","reason":"cheapest"})";
  r.attempts = json::array({{{"target", "sonnet"}, {"outcome", "ok"}}});
  r.cache_diagnosis = {{"cause", "prompt_changed"}, {"message_index", 3}};
  r.cache_helper = "anthropic_auto_cache";
  r.provider_cache_miss_reason = "none";
  r.usage.cache_read_offload = 100;
  r.usage.cache_read_offload_tier = "host";
  return r;
}

TEST_P(StoreConformanceTest, GetRequestGivesBackEveryField) {
  store_->Record(FullRecord());
  ASSERT_TRUE(store_->Flush().has_value());
  auto got = store_->GetRequest("req_full");
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  const json& r = *got;
  EXPECT_EQ(r["thread_id"], "th_full");
  EXPECT_EQ(r["endpoint"], "messages");
  EXPECT_EQ(r["stream"], true);
  EXPECT_DOUBLE_EQ(r["latency_ms"].get<double>(), 123.456);
  EXPECT_DOUBLE_EQ(r["ttft_ms"].get<double>(), 45.6);
  EXPECT_EQ(r["usage"]["cache_read"], 900);
  EXPECT_EQ(r["usage"]["cache_write_5m"], 100);
  EXPECT_EQ(r["usage"]["uncached"], 20);
  EXPECT_EQ(r["usage"]["reasoning"], nullptr);
  EXPECT_EQ(r["cache_read_by_tier"], json({{"pool", 800}, {"host", 100}}));
  EXPECT_EQ(r["target"], "sonnet");
  EXPECT_EQ(r["key_index"], 2);
  EXPECT_EQ(r["system_fingerprint"], "fp \"quoted\" é");
  EXPECT_EQ(r["route"]["reason"], "cheapest");
  EXPECT_EQ(r["attempts"].size(), 1u);
  EXPECT_EQ(r["cache_diagnosis"]["cause"], "prompt_changed");
  EXPECT_EQ(r["cache_helper"], "anthropic_auto_cache");
  EXPECT_EQ(r["provider_cache_diagnosis"]["cache_miss_reason"], nullptr);
  EXPECT_EQ(r["usage_raw"]["cache_read_input_tokens"], 900);
  EXPECT_EQ(r["api_key_id"], "key_1");
  EXPECT_EQ(r["cost_priced"], true);
  EXPECT_GT(r["cost_pico_usd"]["total"].get<int64_t>(), 0);
  // Found by the response body's id too; an unknown id is kNotFound.
  auto by_response = store_->GetRequest("resp_42");
  ASSERT_TRUE(by_response.has_value());
  EXPECT_EQ((*by_response)["request_id"], "req_full");
  auto missing = store_->GetRequest("req_none");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

// Read-after-write: a record handed to the store is readable at once, by kvgate's id and by the
// response's id, with the JSON it has once committed (the group commit is an hour here, so it
// is still queued when read).
TEST_P(StoreConformanceTest, GetRequestAnswersForAQueuedRecordAsOnceCommitted) {
  StoreOptions options;
  options.commit_interval = std::chrono::hours(1);
  Reopen(std::move(options));
  store_->Record(FullRecord());
  auto queued = store_->GetRequest("req_full");
  ASSERT_TRUE(queued.has_value()) << queued.error().ToString();
  auto queued_by_response = store_->GetRequest("resp_42");
  ASSERT_TRUE(queued_by_response.has_value()) << queued_by_response.error().ToString();
  EXPECT_EQ(store_->stats().queue_depth, 1u);  // not committed when read
  EXPECT_EQ(store_->stats().written, 0u);
  EXPECT_EQ(*queued_by_response, *queued);
  EXPECT_EQ(store_->GetRequest("req_none").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store_->GetRequest("").error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(store_->Flush().has_value());
  auto committed = store_->GetRequest("req_full");
  ASSERT_TRUE(committed.has_value()) << committed.error().ToString();
  EXPECT_EQ(*queued, *committed);
  EXPECT_EQ((*queued)["cache_diagnosis"]["cause"], "prompt_changed");
  EXPECT_EQ((*queued)["usage_raw"]["cache_read_input_tokens"], 900);
}

// A record checkpointed (its answer's last bytes are going out) but not yet handed over: a read
// for it waits for Record() instead of answering 404, and sees the final record.
TEST_P(StoreConformanceTest, GetRequestWaitsForACheckpointedRecord) {
  RequestRecord record = FullRecord();
  const std::optional<TelemetryStore::JournalMark> mark = store_->Checkpoint(record);
  std::thread commit([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    record.status = "client_disconnected";  // the final outcome differs from the checkpoint's
    store_->Record(record, mark);
  });
  auto got = store_->GetRequest("resp_42");
  commit.join();
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_EQ((*got)["request_id"], "req_full");
  EXPECT_EQ((*got)["status"], "client_disconnected");
}

TEST_P(StoreConformanceTest, ThreadAggregatesKeepUnknownApartFromZero) {
  // Two turns with known usage, one whose usage the provider did not report.
  store_->Record(MakeRecord("a1", "th", kT0, "gpt-4o", UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 100, "completion_tokens": 5,
                                "prompt_tokens_details": {"cached_tokens": 60}})"));
  store_->Record(MakeRecord("a2", "th", kT0 + 10, "gpt-4o-mini", UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 50, "completion_tokens": 3})"));
  RequestRecord unknown = MakeRecord("a3", "th", kT0 + 20, "gpt-4o", UsageFlavor::kOpenAIChat, "{}");
  unknown.status = "error";
  store_->Record(unknown);
  ASSERT_TRUE(store_->Flush().has_value());

  auto thread = store_->GetThread("th");
  ASSERT_TRUE(thread.has_value()) << thread.error().ToString();
  const json& summary = (*thread)["summary"];
  EXPECT_EQ((*thread)["turns"].size(), 3u);
  EXPECT_EQ(summary["models"], json({"gpt-4o", "gpt-4o-mini"}));
  EXPECT_EQ(summary["tokens"]["cache_read"], 60);
  EXPECT_EQ(summary["tokens"]["reasoning"], nullptr);
  // The second turn's cached share is unknown (no prompt_tokens_details): not in the ratio.
  EXPECT_DOUBLE_EQ(summary["hit_ratio"].get<double>(), 60.0 / 100.0);
  EXPECT_EQ(summary["tokens"]["uncached"], 40);
  EXPECT_EQ((*thread)["turns"][2]["usage"]["cache_read"], nullptr);

  auto list = store_->ListThreads({});
  ASSERT_TRUE(list.has_value()) << list.error().ToString();
  ASSERT_EQ((*list)["threads"].size(), 1u);
  const json& t = (*list)["threads"][0];
  EXPECT_EQ(t["turns"], 3);
  EXPECT_EQ(t["models"], json({"gpt-4o", "gpt-4o-mini"}));
  EXPECT_EQ(t["tokens"]["cache_read"], 60);
  EXPECT_DOUBLE_EQ(t["hit_ratio"].get<double>(), 60.0 / 100.0);
  EXPECT_EQ(store_->GetThread("th_none").error().code, ErrorCode::kNotFound);
}

TEST_P(StoreConformanceTest, DuplicateRequestIdIsRejectedAloneAndNotCountedTwice) {
  store_->Record(MakeRecord("dup", "th", kT0, "gpt-4o", UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}})"));
  ASSERT_TRUE(store_->Flush().has_value());
  store_->Record(MakeRecord("dup", "th", kT0 + 1, "gpt-4o", UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 99, "completion_tokens": 1})"));
  store_->Record(MakeRecord("other", "th", kT0 + 2, "gpt-4o", UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}})"));
  EXPECT_FALSE(store_->Flush().has_value()) << "the duplicate is reported as not written";
  EXPECT_EQ(store_->stats().write_errors, 1u);
  EXPECT_EQ(store_->stats().written, 2u);
  auto list = store_->ListThreads({});
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ((*list)["threads"][0]["turns"], 2);
  EXPECT_EQ((*list)["threads"][0]["tokens"]["uncached"], 20);
}

TEST_P(StoreConformanceTest, ListsFilterSortAndPage) {
  // 12 threads with 1..12 turns; three models; distinct costs.
  int n = 0;
  for (int t = 1; t <= 12; ++t) {
    for (int turn = 0; turn < t; ++turn) {
      const std::string model = t % 3 == 0 ? "gpt-4o" : t % 3 == 1 ? "gpt-4o-mini" : "gpt-4.1";
      RequestRecord r = MakeRecord("r" + std::to_string(n++), "th_" + std::to_string(100 + t),
                                   kT0 + t * kMinute + turn, model, UsageFlavor::kOpenAIChat,
                                   R"({"prompt_tokens": 1000, "completion_tokens": 10,
                                       "prompt_tokens_details": {"cached_tokens": 500}})");
      if (turn == 0 && t % 4 == 0) r.status = "error";
      store_->Record(std::move(r));
    }
  }
  ASSERT_TRUE(store_->Flush().has_value());

  for (ThreadQuery::Sort sort : {ThreadQuery::Sort::kTurns, ThreadQuery::Sort::kLastSeen,
                                 ThreadQuery::Sort::kCost, ThreadQuery::Sort::kHitRatio}) {
    for (bool descending : {true, false}) {
      ThreadQuery q;
      q.sort = sort;
      q.descending = descending;
      q.limit = 5;
      std::vector<std::string> ids;
      for (int page = 0; page < 10; ++page) {
        auto got = store_->ListThreads(q);
        ASSERT_TRUE(got.has_value()) << got.error().ToString();
        for (const json& t : (*got)["threads"]) ids.push_back(t["thread_id"]);
        if ((*got)["next_cursor"].is_null()) break;
        q.cursor = (*got)["next_cursor"];
      }
      EXPECT_EQ(ids.size(), 12u);
      std::vector<std::string> sorted = ids;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "no thread twice";
      if (sort == ThreadQuery::Sort::kTurns) {
        EXPECT_EQ(ids.front(), descending ? "th_112" : "th_101");
      }
    }
  }
  ThreadQuery by_model;
  by_model.model = "gpt-4o";
  auto models = store_->ListThreads(by_model);
  ASSERT_TRUE(models.has_value());
  EXPECT_EQ((*models)["threads"].size(), 4u);
  ThreadQuery by_prefix;
  by_prefix.id_prefix = "th_11";
  auto prefixed = store_->ListThreads(by_prefix);
  ASSERT_TRUE(prefixed.has_value()) << prefixed.error().ToString();
  EXPECT_EQ((*prefixed)["threads"].size(), 3u);  // th_110, th_111, th_112
  ThreadQuery window;
  window.since_us = kT0 + 10 * kMinute;
  window.sort = ThreadQuery::Sort::kCost;
  auto recent = store_->ListThreads(window);
  ASSERT_TRUE(recent.has_value());
  EXPECT_EQ((*recent)["threads"].size(), 3u);

  RequestQuery errors;
  errors.status = "error";
  auto failed = store_->ListRequests(errors);
  ASSERT_TRUE(failed.has_value()) << failed.error().ToString();
  EXPECT_EQ((*failed)["requests"].size(), 3u);
  RequestQuery paged;
  paged.limit = 7;
  paged.thread_id = "th_112";
  std::vector<std::string> ids;
  for (int page = 0; page < 5; ++page) {
    auto got = store_->ListRequests(paged);
    ASSERT_TRUE(got.has_value()) << got.error().ToString();
    for (const json& r : (*got)["requests"]) ids.push_back(r["request_id"]);
    if ((*got)["next_cursor"].is_null()) break;
    paged.cursor = (*got)["next_cursor"];
  }
  ASSERT_EQ(ids.size(), 12u);
  EXPECT_EQ(ids.front(), "r77") << "newest first";
  EXPECT_EQ(ids.back(), "r66");
  RequestQuery bad;
  bad.cursor = "nonsense";
  EXPECT_EQ(store_->ListRequests(bad).error().code, ErrorCode::kInvalidArgument);
  ThreadQuery bad_thread;
  bad_thread.cursor = "k00";
  EXPECT_EQ(store_->ListThreads(bad_thread).error().code, ErrorCode::kInvalidArgument);
}

TEST_P(StoreConformanceTest, ProviderDiagnosedRequestsAreListedAndPagedAlone) {
  // Every third request carries a provider's own cache-miss reason ("none" counts: it said no miss).
  for (int i = 0; i < 9; ++i) {
    RequestRecord r = MakeRecord("pd" + std::to_string(i), "th_pd", kT0 + i * kMinute, "claude",
                                 UsageFlavor::kAnthropic, R"({"input_tokens": 10, "output_tokens": 1})");
    if (i % 3 == 0) r.provider_cache_miss_reason = i == 0 ? "none" : "previous_message_not_found";
    store_->Record(std::move(r));
  }
  ASSERT_TRUE(store_->Flush().has_value());
  RequestQuery q;
  q.provider_diagnosed = true;
  q.limit = 2;
  std::vector<std::string> ids;
  for (int page = 0; page < 5; ++page) {
    auto got = store_->ListRequests(q);
    ASSERT_TRUE(got.has_value()) << got.error().ToString();
    for (const json& r : (*got)["requests"]) {
      ids.push_back(r["request_id"]);
      EXPECT_TRUE(r["provider_cache_diagnosis"].is_object()) << r.dump();
    }
    if ((*got)["next_cursor"].is_null()) break;
    q.cursor = (*got)["next_cursor"];
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"pd6", "pd3", "pd0"}));
}

// The overview's cache losses come from the diagnosed requests of its range: summed by cause, and
// each thread's latest volatile-prefix diagnosis.
TEST_P(StoreConformanceTest, OverviewAddsUpLossesByCauseAndListsVolatilePrefixes) {
  const char* usage = R"({"prompt_tokens": 3000, "prompt_tokens_details": {"cached_tokens": 0}})";
  auto diagnosed = [&](const std::string& id, const std::string& thread, int64_t at,
                       json diagnosis, int64_t missed) {
    RequestRecord r = MakeRecord(id, thread, at, "gpt-4o", UsageFlavor::kOpenAIChat, usage);
    r.cache_diagnosis = std::move(diagnosis);
    r.cost.missed = missed;
    store_->Record(r);
  };
  auto changed = [](int turns, double lost_usd) {
    json d = {{"cause", "prompt_changed"}, {"role", "system"}, {"message_number", 1},
              {"char_offset", 64}, {"detail", "the system prompt (message 1) changes"}};
    if (turns >= 3) {
      d["volatile"] = true;
      d["turns_changed"] = turns;
      d["lost_usd"] = lost_usd;
    }
    return d;
  };
  constexpr int64_t kMilliDollar = 1'000'000'000;  // pico-USD
  diagnosed("v1", "th_v", kT0 + 1, changed(1, 0), kMilliDollar);
  diagnosed("v2", "th_v", kT0 + 2, changed(2, 0), 2 * kMilliDollar);
  diagnosed("v3", "th_v", kT0 + 3, changed(3, 0.006), 3 * kMilliDollar);
  diagnosed("v4", "th_v", kT0 + 4, changed(4, 0.010), 4 * kMilliDollar);
  diagnosed("e1", "th_e", kT0 + 5, {{"cause", "expired"}}, 7 * kMilliDollar);
  diagnosed("b1", "th_b", kT0 + 6, {{"cause", "below_minimum"}}, 0);
  // Outside the range: not counted.
  diagnosed("late", "th_v", kT0 + 10 * kMinute, changed(5, 0.5), 50 * kMilliDollar);
  store_->Record(MakeRecord("plain", "th_p", kT0 + 7, "gpt-4o", UsageFlavor::kOpenAIChat, usage));
  ASSERT_TRUE(store_->Flush().has_value());

  auto overview = store_->Overview(kT0, kT0 + 2 * kMinute, 60);
  ASSERT_TRUE(overview.has_value()) << overview.error().ToString();
  const json& lost = (*overview)["lost_by_cause"];
  ASSERT_EQ(lost.size(), 3u) << lost.dump();
  EXPECT_EQ(lost[0]["cause"], "prompt_changed");  // most dollars first
  EXPECT_EQ(lost[0]["requests"], 4);
  EXPECT_DOUBLE_EQ(lost[0]["cost_missed_usd"].get<double>(), 0.010);
  EXPECT_EQ(lost[1]["cause"], "expired");
  EXPECT_DOUBLE_EQ(lost[1]["cost_missed_usd"].get<double>(), 0.007);
  EXPECT_EQ(lost[2]["cause"], "below_minimum");
  EXPECT_EQ(lost[2]["requests"], 1);

  const json& found = (*overview)["volatile_prefixes"];
  ASSERT_EQ(found.size(), 1u) << found.dump();
  EXPECT_EQ(found[0]["thread_id"], "th_v");
  EXPECT_EQ(found[0]["model"], "gpt-4o");
  EXPECT_EQ(found[0]["role"], "system");
  EXPECT_EQ(found[0]["message_number"], 1);
  EXPECT_EQ(found[0]["char_offset"], 64);
  EXPECT_EQ(found[0]["turns_changed"], 4);  // the thread's latest run in the range
  EXPECT_DOUBLE_EQ(found[0]["cost_missed_usd"].get<double>(), 0.010);

  auto empty = store_->Overview(kT0 + 20 * kMinute, kT0 + 21 * kMinute, 60);
  ASSERT_TRUE(empty.has_value()) << empty.error().ToString();
  EXPECT_EQ((*empty)["lost_by_cause"], json::array());
  EXPECT_EQ((*empty)["volatile_prefixes"], json::array());
}

TEST_P(StoreConformanceTest, OverviewAndLive) {
  store_->Record(MakeRecord("o1", "th1", kT0 + 5, "gpt-4o", UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}})"));
  RequestRecord failed = MakeRecord("o2", "th1", kT0 + kMinute + 5, "gpt-4o",
                                    UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 0}})");
  failed.status = "error";
  failed.latency_us = 2000;
  store_->Record(failed);
  store_->Record(MakeRecord("o3", "th2", kT0 + 3 * kMinute, "gpt-4o-mini",
                            UsageFlavor::kOpenAIChat, R"({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}})"));
  ASSERT_TRUE(store_->Flush().has_value());
  auto overview = store_->Overview(kT0, kT0 + 4 * kMinute, 120);
  ASSERT_TRUE(overview.has_value()) << overview.error().ToString();
  const json& o = *overview;
  ASSERT_EQ(o["series"].size(), 2u);
  EXPECT_EQ(o["series"][0]["requests"], 2);
  EXPECT_EQ(o["series"][0]["errors"], 1);
  EXPECT_EQ(o["series"][1]["requests"], 1);
  EXPECT_EQ(o["totals"]["tokens"]["uncached"], 160);
  EXPECT_DOUBLE_EQ(o["totals"]["latency_ms_avg"].get<double>(), 2.0);
  ASSERT_EQ(o["by_model"].size(), 2u);
  EXPECT_EQ(o["by_model"][0]["model"], "gpt-4o");
  EXPECT_EQ(store_->Overview(kT0, kT0 + kMinute, 61).error().code, ErrorCode::kInvalidArgument);

  auto live = store_->Live("th1");
  ASSERT_TRUE(live.has_value()) << live.error().ToString();
  EXPECT_EQ((*live)["thread"]["turns"], 2);
  const int64_t before = (*live)["last_seq"];
  store_->Record(MakeRecord("o4", "th1", kT0 + 4 * kMinute, "gpt-4o", UsageFlavor::kOpenAIChat,
                            R"({"prompt_tokens": 10})"));
  ASSERT_TRUE(store_->Flush().has_value());
  auto after = store_->Live("th1");
  ASSERT_TRUE(after.has_value());
  EXPECT_GT((*after)["last_seq"].get<int64_t>(), before);
  EXPECT_EQ((*after)["thread"]["turns"], 3);
  EXPECT_EQ((*after)["thread"]["last_seq"], (*after)["last_seq"]);
}

TEST_P(StoreConformanceTest, LatestThreadTurnsComeBackWithTheirFingerprints) {
  for (int i = 0; i < 3; ++i) {
    RequestRecord r = MakeRecord("l" + std::to_string(i), i < 2 ? "th_a" : "th_b", kT0 + i,
                                 "gpt-4o", UsageFlavor::kOpenAIChat,
                                 R"({"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}})");
    PromptFingerprint fp;
    fp.elements.push_back({FingerprintElement::Kind::kMessage, 0, 0xfedcba9876543210ULL ^ i, 10,
                           {42u}});
    r.prompt_fingerprint = std::make_shared<const PromptFingerprint>(std::move(fp));
    store_->Record(std::move(r));
  }
  ASSERT_TRUE(store_->Flush().has_value());
  int skipped = -1;
  auto turns = store_->LatestThreadTurns(kT0, 10, &skipped);
  ASSERT_TRUE(turns.has_value()) << turns.error().ToString();
  EXPECT_EQ(skipped, 0);
  ASSERT_EQ(turns->size(), 2u);
  EXPECT_EQ((*turns)[0].request_id, "l2") << "most recently seen first";
  EXPECT_EQ((*turns)[1].request_id, "l1") << "each thread's latest turn";
  ASSERT_NE((*turns)[1].prompt_fingerprint, nullptr);
  EXPECT_EQ((*turns)[1].prompt_fingerprint->elements.at(0).prefix_hash, 0xfedcba9876543210ULL ^ 1);
  EXPECT_EQ((*turns)[1].usage.uncached, 100);

  // One thread's, as a replica reads it before diagnosing that thread's next turn.
  auto one = store_->LatestThreadTurn("th_a");
  ASSERT_TRUE(one.has_value()) << one.error().ToString();
  ASSERT_TRUE(one->has_value());
  EXPECT_EQ((*one)->request_id, "l1");
  EXPECT_EQ((*one)->created_at_us, kT0 + 1);
  ASSERT_NE((*one)->prompt_fingerprint, nullptr);
  EXPECT_EQ((*one)->prompt_fingerprint->elements.at(0).prefix_hash, 0xfedcba9876543210ULL ^ 1);
  auto none = store_->LatestThreadTurn("th_nobody");
  ASSERT_TRUE(none.has_value()) << none.error().ToString();
  EXPECT_FALSE(none->has_value());
}

TEST_P(StoreConformanceTest, AnAnsweredRecordOfAKilledProcessIsWrittenAtTheNextOpen) {
  RequestRecord answered = MakeRecord("killed", "th_k", kT0, "gpt-4o", UsageFlavor::kOpenAIChat,
                                      R"({"prompt_tokens": 10, "completion_tokens": 1})");
  // Journaled before its answer's last bytes; the process "dies" before Record().
  ASSERT_TRUE(store_->Checkpoint(answered).has_value());
  Reopen();
  auto got = store_->GetRequest("killed");
  ASSERT_TRUE(got.has_value()) << "the journal was not replayed: " << got.error().ToString();
  auto thread = store_->GetThread("th_k");
  ASSERT_TRUE(thread.has_value());
  EXPECT_EQ((*thread)["turns"].size(), 1u);
  // Replayed once: a third open finds it committed and adds nothing.
  Reopen();
  auto list = store_->ListThreads({});
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ((*list)["threads"][0]["turns"], 1);
}

TEST_P(StoreConformanceTest, MigrationsAreRecordedOnceAndANewerSchemaIsRefused) {
  Reopen();  // applies nothing twice
  store_->Record(MakeRecord("m1", "th", kT0, "gpt-4o", UsageFlavor::kOpenAIChat, "{}"));
  ASSERT_TRUE(store_->Flush().has_value());
  StoreOptions newer;
  newer.extra_migrations.push_back({99, "from_the_future", "SELECT 1", {}});
  Reopen(newer);
  store_.reset();
  auto refused = factory_.Open(clock_);  // 99 is a core version this build does not know
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCorruptData);
  EXPECT_NE(refused.error().message.find("newer kvgate"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreConformanceTest,
                         ::testing::Values(StoreKind::kSqlite, StoreKind::kPostgres),
                         testing::StoreKindName);

}  // namespace
}  // namespace kvgate::telemetry
