// The SQLite store waits out a database it cannot write for now (a full disk, a lock another
// process holds) instead of losing the records, bounds what waits by dropping the oldest, and
// says in its Stats (and so in /healthz) how long the oldest record has waited.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "telemetry/metrics.h"
#include "telemetry/store.h"
#include "tests/telemetry/store_test_util.h"

namespace kvgate::telemetry {
namespace {

using testing::MakeRecord;
using testing::TempDir;

constexpr int64_t kT0 = 1'767'225'600'000'000;
constexpr const char* kUsage = R"({"prompt_tokens": 10, "completion_tokens": 1})";

template <class F>
bool Eventually(F done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// A record with ~2 KB of text, so that a few hundred of them outgrow what SQLite's files already
// hold on a full file system.
RequestRecord BigRecord(const std::string& id, int64_t t) {
  RequestRecord r = MakeRecord(id, "th_" + std::to_string(t % 7), kT0 + t, "gpt-4.1",
                               UsageFlavor::kOpenAIChat, kUsage);
  r.error = std::string(2048, static_cast<char>('a' + t % 26));
  return r;
}

// Flush() with a limit, so that a store that never writes fails the test instead of hanging it.
Status FlushWithin(TelemetryStore& store, std::chrono::seconds limit) {
  auto flushed = std::async(std::launch::async, [&] { return store.Flush(); });
  if (flushed.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << "Flush() did not return within " << limit.count() << " s";
    flushed.wait();
  }
  return flushed.get();
}

// A tmpfs of `bytes` mounted for the test's life (root only; the test is skipped elsewhere).
class SmallFs {
 public:
  explicit SmallFs(const std::string& dir, size_t bytes) : dir_(dir) {
    ::mkdir(dir.c_str(), 0755);
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = errno;
    }
  }
  ~SmallFs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  std::string error() const { return std::strerror(error_); }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }

  // Writes `name` until the file system refuses: nothing is left for anyone else.
  void Fill(const std::string& name) {
    std::ofstream out(File(name), std::ios::binary);
    const std::string chunk(4096, 'x');
    while (out.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && out.flush()) {
    }
  }

 private:
  std::string dir_;
  bool mounted_ = false;
  int error_ = 0;
};

// Issue 36: on a full disk, SQLite's errors were counted as failed batches and their records
// dropped (81,663 of 91,672 answered requests were never written). Now the batch is kept, retried,
// and written once space is back: every recorded request is stored.
TEST(StoreOutageTest, AFullDiskIsWaitedOutAndNoRecordIsLost) {
  TempDir dir;
  SmallFs fs(dir.File("fs"), 4 << 20);
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (" << fs.error() << "); needs root";
  FakeClock clock;
  auto opened = TelemetryStore::Open(fs.File("t.db"), clock,
                                     StoreOptions{.commit_interval = std::chrono::milliseconds(5),
                                                  .journal_segment_bytes = 64 << 10});
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  TelemetryStore& store = **opened;
  std::vector<std::string> ids;
  auto record = [&] {
    const int64_t n = static_cast<int64_t>(ids.size());
    ids.push_back("req_" + std::to_string(n));
    store.Record(BigRecord(ids.back(), n));
  };
  for (int i = 0; i < 20; ++i) record();
  ASSERT_TRUE(store.Flush().has_value());

  fs.Fill("filler");
  // Under load until the writer hits the full disk.
  bool full = false;
  for (int i = 0; i < 20'000 && !full; ++i) {
    record();
    if (i % 50 == 49) {
      full = Eventually([&] { return store.stats().failing || store.stats().queue_depth == 0; },
                        std::chrono::seconds(10)) &&
             store.stats().failing;
    }
  }
  ASSERT_TRUE(full) << "the writer never found the disk full";
  // And on while it is full.
  for (int i = 0; i < 300; ++i) record();
  TelemetryStore::Stats during = store.stats();
  EXPECT_TRUE(during.failing);
  EXPECT_GT(during.queue_depth, 300u);
  EXPECT_EQ(during.write_errors, 0u) << during.last_error;
  EXPECT_NE(during.last_error.find("full"), std::string::npos) << during.last_error;

  std::filesystem::remove(fs.File("filler"));
  ASSERT_TRUE(FlushWithin(store, std::chrono::seconds(60)).has_value());
  TelemetryStore::Stats after = store.stats();
  EXPECT_FALSE(after.failing);
  EXPECT_EQ(after.write_errors, 0u);
  EXPECT_EQ(after.written, ids.size());
  size_t lost = 0;
  for (const std::string& id : ids) lost += store.GetRequest(id).has_value() ? 0 : 1;
  EXPECT_EQ(lost, 0u) << "of " << ids.size() << " recorded";
}

// Issue 36: a database write-locked by another process for longer than the sink's own retries
// (here 3 x 100 ms busy timeout) lost the batch; now it is kept until the lock is gone.
TEST(StoreOutageTest, AWriteLockHeldElsewhereIsWaitedOut) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  auto opened = TelemetryStore::Open(path, clock,
                                     StoreOptions{.busy_timeout = std::chrono::milliseconds(100)});
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  TelemetryStore& store = **opened;
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  sqlite3_busy_timeout(other, 5000);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  const auto locked_at = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    store.Record(MakeRecord("req_" + std::to_string(i), "th", kT0 + i, "gpt-4.1",
                            UsageFlavor::kOpenAIChat, kUsage));
    std::this_thread::sleep_for(std::chrono::milliseconds(25));  // arriving over 2.5 s
  }
  ASSERT_TRUE(Eventually([&] { return store.stats().failing; }));
  std::this_thread::sleep_until(locked_at + std::chrono::seconds(3));
  TelemetryStore::Stats held = store.stats();
  EXPECT_EQ(held.written, 0u);
  EXPECT_EQ(held.queue_depth, 100u);
  EXPECT_EQ(held.write_errors, 0u) << held.last_error;
  EXPECT_NE(held.last_error.find("locked"), std::string::npos) << held.last_error;
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);

  ASSERT_TRUE(FlushWithin(store, std::chrono::seconds(30)).has_value());
  TelemetryStore::Stats after = store.stats();
  EXPECT_EQ(after.written, 100u);
  EXPECT_EQ(after.write_errors, 0u);
  EXPECT_FALSE(after.failing);
  auto listed = store.ListRequests({.limit = 1000});
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ((*listed)["requests"].size(), 100u);
}

size_t JournalFiles(const TempDir& dir) {
  size_t n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(dir.File("x")).parent_path())) {
    n += e.path().filename().string().find("-journal.") != std::string::npos;
  }
  return n;
}

// Beyond max_queued_records the OLDEST waiting records go (counted, with their journal entries),
// the newest are kept and written once the database is back; the Stats say how long the oldest
// kept one has waited, by the store's clock.
TEST(StoreOutageTest, BeyondTheBoundTheOldestAreDroppedWithTheirJournalEntries) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  {
    auto opened = TelemetryStore::Open(
        path, clock,
        StoreOptions{.max_queued_records = 10, .busy_timeout = std::chrono::milliseconds(20)});
    ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
    TelemetryStore& store = **opened;
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
    for (int i = 0; i < 25; ++i) {
      store.Record(MakeRecord("req_" + std::to_string(i), "th", kT0 + i, "gpt-4.1",
                              UsageFlavor::kOpenAIChat, kUsage));
      clock.AdvanceSeconds(1);
    }
    // Once the writer has handed its batch back, the queue is at its bound.
    ASSERT_TRUE(Eventually([&] { return store.stats().dropped == 15; })) << store.stats().dropped;
    TelemetryStore::Stats held = store.stats();
    EXPECT_EQ(held.queue_depth, 10u);
    EXPECT_EQ(held.write_errors, 15u);
    // The oldest kept, req_15, was queued at +15 s; the clock reads +25 s.
    EXPECT_EQ(held.oldest_queued_age_us, 10'000'000);
    nlohmann::json health = StoreHealth(held);
    EXPECT_EQ(health["status"], "degraded") << health.dump();
    EXPECT_EQ(health["telemetry_queue"]["records"], 10) << health.dump();
    EXPECT_EQ(health["telemetry_queue"]["dropped"], 15) << health.dump();
    EXPECT_DOUBLE_EQ(health["telemetry_queue"]["oldest_age_s"].get<double>(), 10.0);

    ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(other);
    Status flushed = FlushWithin(store, std::chrono::seconds(30));
    ASSERT_FALSE(flushed.has_value()) << "the drops are reported";
    EXPECT_TRUE(store.Flush().has_value());  // once
    for (int i = 0; i < 25; ++i) {
      EXPECT_EQ(store.GetRequest("req_" + std::to_string(i)).has_value(), i >= 15) << i;
    }
    TelemetryStore::Stats after = store.stats();
    EXPECT_EQ(after.written, 10u);
    EXPECT_EQ(after.oldest_queued_age_us, 0);
    // The loss stays visible once the store is healthy again.
    health = StoreHealth(after);
    EXPECT_EQ(health["status"], "ok") << health.dump();
    EXPECT_EQ(health["telemetry_queue"]["dropped"], 15) << health.dump();
  }
  // The dropped records' journal entries were released with them: nothing is left for a next
  // process to write.
  EXPECT_EQ(JournalFiles(dir), 0u);
  auto reopened = TelemetryStore::Open(path, clock);
  ASSERT_TRUE(reopened.has_value());
  auto listed = (*reopened)->ListRequests({});
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ((*listed)["requests"].size(), 10u);
}

// A writer that does not commit (here: a group-commit interval of an hour) shows in the oldest
// record's age, and /healthz's body says "degraded" from kStalledQueueAge on.
TEST(StoreOutageTest, TheOldestWaitingRecordsAgeShowsAStalledWriter) {
  TempDir dir;
  FakeClock clock;
  auto opened = TelemetryStore::Open(dir.File("t.db"), clock,
                                     StoreOptions{.commit_interval = std::chrono::hours(1)});
  ASSERT_TRUE(opened.has_value());
  TelemetryStore& store = **opened;
  EXPECT_EQ(store.stats().oldest_queued_age_us, 0);
  EXPECT_EQ(StoreHealth(store.stats()), (nlohmann::json{{"status", "ok"}}));
  store.Record(MakeRecord("req_1", "th", kT0, "gpt-4.1", UsageFlavor::kOpenAIChat, kUsage));
  clock.AdvanceSeconds(4);
  store.Record(MakeRecord("req_2", "th", kT0 + 1, "gpt-4.1", UsageFlavor::kOpenAIChat, kUsage));
  EXPECT_EQ(store.stats().oldest_queued_age_us, 4'000'000);
  EXPECT_EQ(StoreHealth(store.stats())["status"], "ok");
  clock.AdvanceSeconds(2);
  TelemetryStore::Stats stalled = store.stats();
  EXPECT_EQ(stalled.oldest_queued_age_us, 6'000'000);
  EXPECT_FALSE(stalled.failing);
  nlohmann::json health = StoreHealth(stalled);
  EXPECT_EQ(health["status"], "degraded") << health.dump();
  EXPECT_NE(health["telemetry"].get<std::string>().find("stalled"), std::string::npos);
  EXPECT_EQ(health["telemetry_queue"]["records"], 2);
  EXPECT_EQ(health["telemetry_queue"]["dropped"], 0);
  ASSERT_TRUE(store.Flush().has_value());
  EXPECT_EQ(store.stats().oldest_queued_age_us, 0);
  EXPECT_EQ(StoreHealth(store.stats()), (nlohmann::json{{"status", "ok"}}));
}

// A record that violates a constraint is still a failure of its own, not an outage: the batch
// around it is written and nothing waits.
TEST(StoreOutageTest, ADuplicateRequestIdIsStillAFailureNotAnOutage) {
  TempDir dir;
  FakeClock clock;
  auto opened = TelemetryStore::Open(dir.File("t.db"), clock);
  ASSERT_TRUE(opened.has_value());
  TelemetryStore& store = **opened;
  store.Record(MakeRecord("dup", "th", kT0, "gpt-4.1", UsageFlavor::kOpenAIChat, kUsage));
  ASSERT_TRUE(store.Flush().has_value());
  store.Record(MakeRecord("dup", "th", kT0 + 1, "gpt-4.1", UsageFlavor::kOpenAIChat, kUsage));
  store.Record(MakeRecord("other", "th", kT0 + 2, "gpt-4.1", UsageFlavor::kOpenAIChat, kUsage));
  EXPECT_FALSE(FlushWithin(store, std::chrono::seconds(10)).has_value());
  TelemetryStore::Stats stats = store.stats();
  EXPECT_EQ(stats.written, 2u);
  EXPECT_EQ(stats.write_errors, 1u);
  EXPECT_EQ(stats.queue_depth, 0u);
  EXPECT_EQ(stats.dropped, 0u);
}

}  // namespace
}  // namespace kvgate::telemetry
