// Store queries at scale: filters, sorting, pagination, and many concurrent writers and readers,
// on each store (store_factory.h).
#include <atomic>
#include <chrono>
#include <set>
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
using testing::TempDir;

constexpr int64_t kT0 = 1'767'225'600'000'000;

// Reads every page of ListRequests for `query`, returning the request ids in order.
std::vector<std::string> AllRequestIds(const TelemetryStore& store, RequestQuery query, int* pages) {
  std::vector<std::string> ids;
  *pages = 0;
  for (;;) {
    Result<json> page = store.ListRequests(query);
    EXPECT_TRUE(page.has_value()) << page.error().ToString();
    if (!page) break;
    ++*pages;
    for (const json& r : (*page)["requests"]) ids.push_back(r["request_id"].get<std::string>());
    if ((*page)["next_cursor"].is_null()) break;
    query.cursor = (*page)["next_cursor"].get<std::string>();
    if (*pages > 100000) break;
  }
  return ids;
}

class TelemetryStoreQueryTest : public ::testing::TestWithParam<testing::StoreKind> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(factory_.Prepare());
    auto store = factory_.Open(clock_);
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
  }
  testing::StoreFactory factory_{GetParam()};
  FakeClock clock_;
  std::unique_ptr<TelemetryStore> store_;
};

TEST_P(TelemetryStoreQueryTest, ListRequestsNewestFirstWithKeysetPagination) {
  // 25 requests; 5 share one timestamp so the insertion order must break ties.
  for (int i = 0; i < 25; ++i) {
    const int64_t at = i < 5 ? kT0 : kT0 + i * 1000;
    RequestRecord r = MakeRecord("req_" + std::to_string(i), i % 2 ? "odd" : "even", at,
                                 i % 3 ? "gpt-4.1" : "gpt-4o", UsageFlavor::kOpenAIChat,
                                 R"({"prompt_tokens": 10, "completion_tokens": 1})");
    if (i == 7) r.status = "error";
    store_->Record(r);
  }
  ASSERT_TRUE(store_->Flush().has_value());

  int pages = 0;
  RequestQuery q;
  q.limit = 10;
  std::vector<std::string> ids = AllRequestIds(*store_, q, &pages);
  EXPECT_EQ(pages, 3);
  std::vector<std::string> expected;
  for (int i = 24; i >= 0; --i) expected.push_back("req_" + std::to_string(i));
  EXPECT_EQ(ids, expected);

  Result<json> first = store_->ListRequests(q);
  ASSERT_TRUE(first.has_value());
  const json& r0 = (*first)["requests"][0];
  for (const char* key : {"thread_id", "endpoint", "upstream_status", "upstream_model", "usage", "cost_usd",
                          "cost_pico_usd", "created_at", "latency_ms", "cache_diagnosis"}) {
    EXPECT_TRUE(r0.contains(key)) << key;
  }
  // Records newer than the cursor do not shift later pages.
  const std::string cursor = (*first)["next_cursor"].get<std::string>();
  store_->Record(MakeRecord("req_new", "even", kT0 + 1'000'000, "gpt-4.1", UsageFlavor::kOpenAIChat, "{}"));
  ASSERT_TRUE(store_->Flush().has_value());
  q.cursor = cursor;
  Result<json> second = store_->ListRequests(q);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ((*second)["requests"][0]["request_id"], "req_14");

  RequestQuery filtered;
  filtered.thread_id = "odd";
  filtered.model = "gpt-4.1";
  std::vector<std::string> odd = AllRequestIds(*store_, filtered, &pages);
  std::vector<std::string> expected_odd;
  for (int i = 24; i >= 0; --i) {
    if (i % 2 == 1 && i % 3 != 0) expected_odd.push_back("req_" + std::to_string(i));
  }
  EXPECT_EQ(odd, expected_odd);

  RequestQuery by_status;
  by_status.status = "error";
  EXPECT_EQ(AllRequestIds(*store_, by_status, &pages), std::vector<std::string>{"req_7"});
  RequestQuery by_provider;
  by_provider.provider = "prov-anthropic";
  EXPECT_TRUE(AllRequestIds(*store_, by_provider, &pages).empty());
  RequestQuery since;
  since.since_us = kT0 + 20'000;
  EXPECT_EQ(AllRequestIds(*store_, since, &pages),
            (std::vector<std::string>{"req_new", "req_24", "req_23", "req_22", "req_21", "req_20"}));

  RequestQuery huge;
  huge.limit = 5000;  // clamped to 1000: everything fits one page
  EXPECT_EQ(AllRequestIds(*store_, huge, &pages).size(), 26u);
  EXPECT_EQ(pages, 1);

  for (const char* bad : {"x", "r", "r1", "r1_", "r_1", "rA_1", "t5"}) {
    RequestQuery b;
    b.cursor = bad;
    Result<json> page = store_->ListRequests(b);
    ASSERT_FALSE(page.has_value()) << bad;
    EXPECT_EQ(page.error().code, ErrorCode::kInvalidArgument);
  }
}

TEST_P(TelemetryStoreQueryTest, ListThreadsSortsFiltersAndPages) {
  const char* hit = R"({"prompt_tokens": 1000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 900}})";
  const char* miss = R"({"prompt_tokens": 1000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}})";
  const char* unknown = R"({"prompt_tokens": 1000, "completion_tokens": 10})";
  // a: 3 turns, hit ratio 0.6, first at 0 s, last at 50 s.
  store_->Record(MakeRecord("a1", "a", kT0, "gpt-4.1", UsageFlavor::kOpenAIChat, miss));
  store_->Record(MakeRecord("a2", "a", kT0 + 40'000'000, "gpt-4.1", UsageFlavor::kOpenAIChat, hit));
  store_->Record(MakeRecord("a3", "a", kT0 + 50'000'000, "gpt-4o", UsageFlavor::kOpenAIChat, hit));
  // b: 1 turn on the expensive model, hit ratio 0.9, at 10 s.
  store_->Record(MakeRecord("b1", "b", kT0 + 10'000'000, "claude-opus-4-1", UsageFlavor::kOpenAIChat, hit));
  // c: 2 turns with unknown cache reads: hit ratio null; at 20 s and 30 s.
  store_->Record(MakeRecord("c1", "c", kT0 + 20'000'000, "gpt-4.1", UsageFlavor::kVllm, unknown));
  store_->Record(MakeRecord("c2", "c", kT0 + 30'000'000, "gpt-4.1", UsageFlavor::kVllm, unknown));
  ASSERT_TRUE(store_->Flush().has_value());

  auto order = [&](ThreadQuery q) {
    std::vector<std::string> ids;
    Result<json> page = store_->ListThreads(q);
    EXPECT_TRUE(page.has_value()) << page.error().ToString();
    if (page) {
      for (const json& t : (*page)["threads"]) ids.push_back(t["thread_id"].get<std::string>());
    }
    return ids;
  };
  using V = std::vector<std::string>;
  ThreadQuery q;
  EXPECT_EQ(order(q), (V{"a", "c", "b"}));  // default: last_seen desc
  q.descending = false;
  EXPECT_EQ(order(q), (V{"b", "c", "a"}));
  q.sort = ThreadQuery::Sort::kFirstSeen;
  EXPECT_EQ(order(q), (V{"a", "b", "c"}));
  q.sort = ThreadQuery::Sort::kTurns;
  q.descending = true;
  EXPECT_EQ(order(q), (V{"a", "c", "b"}));
  q.sort = ThreadQuery::Sort::kCost;  // a 4.285e9 pico-USD, b 3.6e9, c 1.6e8 (output only known)
  EXPECT_EQ(order(q), (V{"a", "b", "c"}));
  q.sort = ThreadQuery::Sort::kHitRatio;
  EXPECT_EQ(order(q), (V{"b", "a", "c"}));  // unknown ratio last either way
  q.descending = false;
  EXPECT_EQ(order(q), (V{"a", "b", "c"}));

  ThreadQuery by_model;
  by_model.model = "gpt-4o";
  EXPECT_EQ(order(by_model), (V{"a"}));
  ThreadQuery since;
  since.since_us = kT0 + 25'000'000;
  EXPECT_EQ(order(since), (V{"a", "c"}));

  Result<json> all = store_->ListThreads({});
  ASSERT_TRUE(all.has_value());
  const json& a = (*all)["threads"][0];
  EXPECT_EQ(a["thread_id"], "a");
  EXPECT_EQ(a["turns"], 3);
  EXPECT_EQ(a["first_seen"], "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(a["last_seen"], "2026-01-01T00:00:50.000000Z");
  EXPECT_EQ(a["models"], json::parse(R"(["gpt-4.1", "gpt-4o"])"));
  EXPECT_EQ(a["tokens"], json::parse(R"({"cache_read": 1800, "cache_write": 0, "cache_write_5m": 0,
      "cache_write_1h": 0, "cache_write_no_ttl": 0, "uncached": 1200, "output": 30,
      "reasoning": 0})"));
  EXPECT_DOUBLE_EQ(a["hit_ratio"].get<double>(), 0.6);
  // gpt-4.1: 1000 x 2'000'000 + 10 x 8'000'000, then 100 x 2'000'000 + 900 x 500'000 + 10 x 8'000'000;
  // gpt-4o: 100 x 2'500'000 + 900 x 1'250'000 + 10 x 10'000'000.
  const int64_t a_cost = int64_t{2'080'000'000} + 730'000'000 + 1'475'000'000;
  EXPECT_EQ(a["cost_pico_usd"], a_cost);
  EXPECT_DOUBLE_EQ(a["cost_usd"].get<double>(), 0.004285);
  const json& c = (*all)["threads"][1];
  EXPECT_TRUE(c["hit_ratio"].is_null());
  EXPECT_EQ(c["tokens"]["cache_read"], 0);
  EXPECT_TRUE((*all)["next_cursor"].is_null());

  // Pages of one.
  ThreadQuery paged;
  paged.limit = 1;
  std::vector<std::string> seen;
  for (int i = 0; i < 10; ++i) {
    Result<json> page = store_->ListThreads(paged);
    ASSERT_TRUE(page.has_value());
    for (const json& t : (*page)["threads"]) seen.push_back(t["thread_id"].get<std::string>());
    if ((*page)["next_cursor"].is_null()) break;
    paged.cursor = (*page)["next_cursor"].get<std::string>();
  }
  EXPECT_EQ(seen, (V{"a", "c", "b"}));
  ThreadQuery offset;
  offset.offset = 2;
  EXPECT_EQ(order(offset), (V{"b"}));
  ThreadQuery bad;
  bad.cursor = "r1_2";
  EXPECT_EQ(store_->ListThreads(bad).error().code, ErrorCode::kInvalidArgument);
}

// Every sort, both directions, pages of 2 over threads with ties and unknown hit ratios: each
// thread exactly once, in the one-page order; and threads that start or gain a turn between pages
// repeat nothing (an offset cursor repeated the rows pushed down by them).
TEST_P(TelemetryStoreQueryTest, ThreadCursorsAreKeysetsStableUnderNewTurns) {
  const char* hit = R"({"prompt_tokens": 1000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 500}})";
  const char* unknown = R"({"prompt_tokens": 1000, "completion_tokens": 10})";
  for (int i = 0; i < 9; ++i) {
    const std::string id = "t" + std::to_string(i);
    // Ties: threads 0-2 share a timestamp, costs repeat, three have an unknown hit ratio.
    const int64_t at = kT0 + (i < 3 ? 0 : i) * 1'000'000;
    store_->Record(MakeRecord(id + "a", id, at, "gpt-4.1", i % 3 == 0 ? UsageFlavor::kVllm
                                                                     : UsageFlavor::kOpenAIChat,
                              i % 3 == 0 ? unknown : hit));
  }
  ASSERT_TRUE(store_->Flush().has_value());
  auto page_ids = [&](const Result<json>& page) {
    std::vector<std::string> ids;
    EXPECT_TRUE(page.has_value()) << page.error().ToString();
    if (page) {
      for (const json& t : (*page)["threads"]) ids.push_back(t["thread_id"].get<std::string>());
    }
    return ids;
  };
  // Every thread from `query` on, following next_cursor to the end.
  auto page_through = [&](ThreadQuery query) {
    std::vector<std::string> ids;
    for (int pages = 0; pages < 20; ++pages) {
      Result<json> page = store_->ListThreads(query);
      for (const std::string& id : page_ids(page)) ids.push_back(id);
      if (!page || (*page)["next_cursor"].is_null()) break;
      query.cursor = (*page)["next_cursor"].get<std::string>();
    }
    return ids;
  };
  for (auto sort : {ThreadQuery::Sort::kLastSeen, ThreadQuery::Sort::kFirstSeen,
                    ThreadQuery::Sort::kCost, ThreadQuery::Sort::kTurns,
                    ThreadQuery::Sort::kHitRatio}) {
    for (bool descending : {true, false}) {
      ThreadQuery whole;
      whole.sort = sort;
      whole.descending = descending;
      const std::vector<std::string> expected = page_ids(store_->ListThreads(whole));
      ASSERT_EQ(expected.size(), 9u);
      ThreadQuery paged = whole;
      paged.limit = 2;
      EXPECT_EQ(page_through(paged), expected)
          << "sort " << static_cast<int>(sort) << " desc " << descending;
    }
  }

  // Newest first, pages of 3; between pages two threads start and an already listed one moves up.
  ThreadQuery paged;
  paged.limit = 3;
  Result<json> first = store_->ListThreads(paged);
  const std::vector<std::string> page1 = page_ids(first);
  ASSERT_EQ(page1, (std::vector<std::string>{"t8", "t7", "t6"}));
  store_->Record(MakeRecord("new1", "new1", kT0 + 100'000'000, "gpt-4.1", UsageFlavor::kOpenAIChat, hit));
  store_->Record(MakeRecord("new2", "new2", kT0 + 101'000'000, "gpt-4.1", UsageFlavor::kOpenAIChat, hit));
  store_->Record(MakeRecord("t7b", "t7", kT0 + 102'000'000, "gpt-4.1", UsageFlavor::kOpenAIChat, hit));
  ASSERT_TRUE(store_->Flush().has_value());
  paged.cursor = (*first)["next_cursor"].get<std::string>();
  // The rest of the original list, in order; the three moved or new threads sort before the
  // cursor and are for the next first page, not repeated here.
  EXPECT_EQ(page_through(paged), (std::vector<std::string>{"t5", "t4", "t3", "t2", "t1", "t0"}));

  for (const char* bad : {"t3", "k", "kzz", "k5b5d", "k" /* odd */ "5b31"}) {
    ThreadQuery q;
    q.cursor = bad;
    EXPECT_EQ(store_->ListThreads(q).error().code, ErrorCode::kInvalidArgument) << bad;
  }
}

TEST_P(TelemetryStoreQueryTest, ConcurrentRecordLosesNothing) {
  constexpr int kWriters = 8;
  constexpr int kPerWriter = 1250;
  const PriceCatalog catalog = PriceCatalog::BuiltIn();
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::atomic<int> read_errors{0};
  // A reader runs queries the whole time: WAL readers never block the writer or fail.
  std::thread reader([&] {
    while (!done.load()) {
      RequestQuery q;
      q.limit = 50;
      if (!store_->ListRequests(q).has_value()) ++read_errors;
      if (!store_->ListThreads({}).has_value()) ++read_errors;
      ++reads;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kPerWriter; ++i) {
        store_->Record(MakeRecord("w" + std::to_string(w) + "_" + std::to_string(i), "thread_" + std::to_string(w),
                                  kT0 + i, "gpt-4o-mini", UsageFlavor::kOpenAIChat,
                                  R"({"prompt_tokens": 2048, "completion_tokens": 5,
                                      "prompt_tokens_details": {"cached_tokens": 1024}})",
                                  catalog));
      }
    });
  }
  for (std::thread& t : writers) t.join();
  ASSERT_TRUE(store_->Flush().has_value());
  done = true;
  reader.join();
  EXPECT_EQ(read_errors.load(), 0);
  EXPECT_GT(reads.load(), 0);

  TelemetryStore::Stats stats = store_->stats();
  EXPECT_EQ(stats.recorded, uint64_t{kWriters * kPerWriter});
  EXPECT_EQ(stats.written, uint64_t{kWriters * kPerWriter});
  EXPECT_EQ(stats.write_errors, 0u);
  EXPECT_EQ(stats.queue_depth, 0u);
  EXPECT_GE(stats.batches, 1u);
  EXPECT_LE(stats.batches, stats.written);

  RequestQuery q;
  q.limit = 1000;
  int pages = 0;
  std::vector<std::string> ids = AllRequestIds(*store_, q, &pages);
  EXPECT_EQ(ids.size(), size_t{kWriters * kPerWriter});
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), size_t{kWriters * kPerWriter});
  EXPECT_EQ(pages, 10);

  ThreadQuery tq;
  tq.sort = ThreadQuery::Sort::kTurns;
  Result<json> threads = store_->ListThreads(tq);
  ASSERT_TRUE(threads.has_value());
  ASSERT_EQ((*threads)["threads"].size(), size_t{kWriters});
  for (const json& t : (*threads)["threads"]) {
    EXPECT_EQ(t["turns"], kPerWriter);
    EXPECT_EQ(t["tokens"]["cache_read"], 1024 * kPerWriter);
    EXPECT_DOUBLE_EQ(t["hit_ratio"].get<double>(), 0.5);
  }
  Result<json> one = store_->GetThread("thread_3");
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ((*one)["turns"].size(), size_t{kPerWriter});
  EXPECT_EQ((*one)["turns"][0]["request_id"], "w3_0");
  EXPECT_EQ((*one)["turns"][kPerWriter - 1]["request_id"], "w3_" + std::to_string(kPerWriter - 1));
}

INSTANTIATE_TEST_SUITE_P(Stores, TelemetryStoreQueryTest,
                         ::testing::Values(testing::StoreKind::kSqlite,
                                           testing::StoreKind::kPostgres),
                         testing::StoreKindName);

}  // namespace
}  // namespace kvgate::telemetry
