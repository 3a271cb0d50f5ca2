// GET /api/requests?provider_diagnosis=agrees|disagrees: the provider's diagnosis against
// kvgate's, decided as rows are read, paged over the provider-diagnosed requests.
#include "telemetry/request_filters.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/clock.h"
#include "store_test_util.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;
using testing::MakeRecord;
using testing::TempDir;

constexpr int64_t kT0 = 1'767'225'600'000'000;

class RequestFiltersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = TelemetryStore::Open(dir_.File("f.db"), clock_);
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
  }
  // Request i at kT0 + i ms: its provider's reason and kvgate's cause ("" for none).
  void Add(int i, const std::string& provider_reason, const std::string& kvgate_cause,
           const std::string& element = "") {
    RequestRecord r = MakeRecord("req_" + std::to_string(i), "t", kT0 + i * 1000, "claude",
                                 UsageFlavor::kOpenAIChat,
                                 R"({"prompt_tokens": 10, "completion_tokens": 1})");
    r.provider_cache_miss_reason = provider_reason;
    if (!kvgate_cause.empty()) {
      r.cache_diagnosis = {{"cause", kvgate_cause}, {"detail", "d"}};
      if (!element.empty()) r.cache_diagnosis["element"] = element;
    }
    store_->Record(r);
  }
  std::vector<std::string> Ids(const json& page) {
    std::vector<std::string> ids;
    for (const json& r : page["requests"]) ids.push_back(r["request_id"].get<std::string>());
    return ids;
  }
  // Every page of a listing, with `limit` per page.
  std::vector<std::string> All(bool agrees, int limit, int* pages) {
    RequestQuery q;
    q.limit = limit;
    std::vector<std::string> ids;
    for (*pages = 0; *pages < 1000; ++*pages) {
      Result<json> page = ListRequestsByAgreement(*store_, q, agrees);
      EXPECT_TRUE(page.has_value());
      if (!page) break;
      EXPECT_LE(static_cast<int>((*page)["requests"].size()), limit);
      for (const std::string& id : Ids(*page)) ids.push_back(id);
      if (!(*page)["next_cursor"].is_string()) break;
      q.cursor = (*page)["next_cursor"].get<std::string>();
    }
    return ids;
  }
  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<TelemetryStore> store_;
};

TEST_F(RequestFiltersTest, ReportedAgreesAndDisagreesPartitionTheDiagnosedRequests) {
  Add(0, "", "expired");                               // the provider said nothing
  Add(1, "none", "");                                  // agrees: no miss on either side
  Add(2, "system_changed", "prompt_changed", "system");  // agrees
  Add(3, "system_changed", "");                        // disagrees: kvgate saw no miss
  Add(4, "none", "prompt_changed", "message");         // disagrees
  Add(5, "unavailable", "expired");                    // not comparable
  Add(6, "tools_changed", "prompt_changed", "message");  // disagrees
  ASSERT_TRUE(store_->Flush().has_value());

  RequestQuery reported;
  reported.provider_diagnosed = true;
  Result<json> all = store_->ListRequests(reported);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(Ids(*all), (std::vector<std::string>{"req_6", "req_5", "req_4", "req_3", "req_2",
                                                   "req_1"}));
  int pages = 0;
  EXPECT_EQ(All(false, 100, &pages), (std::vector<std::string>{"req_6", "req_4", "req_3"}));
  EXPECT_EQ(All(true, 100, &pages), (std::vector<std::string>{"req_2", "req_1"}));
  // One per page: the same requests in the same order, none skipped at a page boundary.
  EXPECT_EQ(All(false, 1, &pages), (std::vector<std::string>{"req_6", "req_4", "req_3"}));
  // The store's own filters still apply.
  RequestQuery later;
  later.since_us = kT0 + 4000;
  Result<json> page = ListRequestsByAgreement(*store_, later, false);
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(Ids(*page), (std::vector<std::string>{"req_6", "req_4"}));
}

// Rare matches far back: a page stops after kMaxScannedPages scans of the log and hands over a
// cursor, so one request never walks the whole table; following the cursors finds them all.
TEST_F(RequestFiltersTest, APageScansABoundedPartOfTheLog) {
  const int n = 3 * kMaxScannedPages + 1;
  for (int i = 0; i < n; ++i) Add(i, "none", "", "");  // all agree
  Add(n, "system_changed", "");                        // newest: a disagreement
  ASSERT_TRUE(store_->Flush().has_value());
  Add(-1, "messages_changed", "");  // oldest: another (kT0 - 1 ms)
  ASSERT_TRUE(store_->Flush().has_value());
  RequestQuery q;
  q.limit = 1;
  Result<json> first = ListRequestsByAgreement(*store_, q, false);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Ids(*first), (std::vector<std::string>{"req_" + std::to_string(n)}));
  q.cursor = (*first)["next_cursor"].get<std::string>();
  Result<json> second = ListRequestsByAgreement(*store_, q, false);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(Ids(*second).empty());  // 16 rows scanned, none matched
  EXPECT_TRUE((*second)["next_cursor"].is_string());
  int pages = 0;
  EXPECT_EQ(All(false, 1, &pages),
            (std::vector<std::string>{"req_" + std::to_string(n), "req_-1"}));
  EXPECT_GE(pages, 3);
}

}  // namespace
}  // namespace kvgate::telemetry
