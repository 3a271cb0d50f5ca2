// The crash journal: every record field survives an entry, a record the process never committed
// is committed by the next one, a torn or corrupt entry costs only itself, and a clean shutdown
// leaves no file behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/journal.h"
#include "telemetry/store.h"
#include "tests/telemetry/store_test_util.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;
using testing::MakeRecord;
using testing::TempDir;

constexpr int64_t kT0 = 1'767'225'600'000'000;

RequestRecord Full() {
  RequestRecord r = MakeRecord("req_full", "th_1", kT0, "claude-sonnet-4-5", UsageFlavor::kAnthropic,
                               R"({"input_tokens": 7, "cache_read_input_tokens": 900,
                                   "cache_creation_input_tokens": 300,
                                   "cache_creation": {"ephemeral_5m_input_tokens": 100,
                                                      "ephemeral_1h_input_tokens": 200},
                                   "output_tokens": 42})");
  r.endpoint = "chat.completions";
  r.provider = "claude";
  r.provider_type = "anthropic";
  r.upstream_model = "claude-sonnet-4-5-up";
  r.target = "sonnet";
  r.key_index = 2;
  r.system_fingerprint = "fp_1";
  r.api_key_id = "key_abc";
  r.stream = true;
  r.status = "ok";
  r.http_status = 200;
  r.upstream_status = 200;
  r.latency_us = 1234;
  r.ttft_us = 567;
  r.usage.clamped = true;
  r.usage.cache_write_no_ttl = 3;
  r.usage.reasoning = 5;
  r.usage.cache_read_offload = 640;
  r.usage.cache_read_offload_tier = "host";
  r.cost.missed = 77;
  r.error = "caf\xc3\xa9 \"quoted\"\n";
  r.upstream_request_id = "up_1";
  r.response_id = "msg_1";
  r.finish_reason = "stop";
  r.cache_diagnosis = json{{"cause", "expired"}};
  r.route = R"({"candidates":[{"target":"sonnet"}],"router":"r"})";  // (as JsonText writes it)
  r.attempts = json::array({{{"target", "sonnet"}, {"status", "ok"}}});
  r.cache_helper = "anthropic_auto_cache";
  r.provider_cache_miss_reason = "system_changed";
  r.purpose = "keep_warm";
  r.keep_warm_saved = 12'345;
  r.thread_source = "auto";
  r.thread_parent = "auto-0643a1f2c9b7e5d41c0f9a2b";
  return r;
}

// Journals an older kvgate left still replay: entry version 1 (before cache_helper), 2 (before
// provider_cache_miss_reason), 3 (before cache_read_offload_tier), 4 (before usage.estimated), 5
// (before thread_source and thread_parent) and 6 (before purpose and keep_warm_saved): a record
// from before keep-warm is a client's.
TEST(JournalTest, OlderEntryVersionsStillDecode) {
  RequestRecord r = Full();
  r.usage.estimated = true;
  std::string v6 = EncodeJournalEntry(r);
  ASSERT_EQ(v6.front(), 7);
  v6.front() = 6;
  v6.resize(v6.size() - (4 + r.purpose.size() + 8));  // version 7's string and int64
  Result<RequestRecord> back6 = DecodeJournalEntry(v6);
  ASSERT_TRUE(back6.has_value()) << back6.error().message;
  EXPECT_EQ(back6->purpose, "client");
  EXPECT_EQ(back6->keep_warm_saved, 0);
  EXPECT_EQ(back6->thread_source, "auto");
  EXPECT_EQ(back6->thread_parent, r.thread_parent);

  // Below, version 7's fields are an empty string and a 0 (12 bytes), and version 6's two
  // empty strings (8 bytes).
  r.purpose.clear();
  r.keep_warm_saved = 0;
  std::string v5 = EncodeJournalEntry(r);
  v5.front() = 5;
  v5.resize(v5.size() - 12 - (4 + r.thread_source.size()) - (4 + r.thread_parent.size()));
  Result<RequestRecord> back5 = DecodeJournalEntry(v5);
  ASSERT_TRUE(back5.has_value()) << back5.error().message;
  EXPECT_EQ(back5->thread_source, "");
  EXPECT_EQ(back5->purpose, "client");
  EXPECT_TRUE(back5->usage.estimated);

  r.thread_source.clear();
  r.thread_parent.clear();
  std::string v4 = EncodeJournalEntry(r);
  ASSERT_EQ(v4.front(), 7);
  EXPECT_TRUE(DecodeJournalEntry(v4)->usage.estimated);
  v4.front() = 4;
  v4.resize(v4.size() - 20 - 1);  // version 5's last field: usage.estimated, one byte
  Result<RequestRecord> back4 = DecodeJournalEntry(v4);
  ASSERT_TRUE(back4.has_value()) << back4.error().message;
  EXPECT_FALSE(back4->usage.estimated);
  EXPECT_EQ(back4->usage.cache_read_offload_tier, r.usage.cache_read_offload_tier);

  r.usage.estimated = false;
  r.usage.cache_read_offload_tier.clear();
  std::string v3 = EncodeJournalEntry(r);
  ASSERT_EQ(v3.front(), 7);
  v3.front() = 3;
  v3.resize(v3.size() - 20 - 5);  // version 4's and 5's fields: an empty string's length, a bool
  Result<RequestRecord> back3 = DecodeJournalEntry(v3);
  ASSERT_TRUE(back3.has_value()) << back3.error().message;
  EXPECT_EQ(back3->provider_cache_miss_reason, r.provider_cache_miss_reason);
  EXPECT_EQ(back3->usage.cache_read_offload_tier, "");

  r.provider_cache_miss_reason.clear();
  std::string v2 = EncodeJournalEntry(r);
  v2.front() = 2;
  v2.resize(v2.size() - 20 - 9);  // the empty strings of versions 3 and 4, version 5's bool
  Result<RequestRecord> back = DecodeJournalEntry(v2);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->cache_helper, "anthropic_auto_cache");
  EXPECT_EQ(back->provider_cache_miss_reason, "");

  r.cache_helper.clear();
  std::string v1 = EncodeJournalEntry(r);
  v1.front() = 1;
  v1.resize(v1.size() - 20 - 13);  // the empty strings of versions 2, 3 and 4, version 5's bool
  back = DecodeJournalEntry(v1);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->request_id, r.request_id);
  EXPECT_EQ(back->cache_helper, "");
}

TEST(JournalTest, EveryFieldSurvivesAnEntry) {
  const RequestRecord r = Full();
  const std::string entry = EncodeJournalEntry(r);
  Result<RequestRecord> back = DecodeJournalEntry(entry);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(EncodeJournalEntry(*back), entry);
  EXPECT_EQ(back->usage, r.usage);
  EXPECT_EQ(back->cost.total, r.cost.total);
  EXPECT_EQ(back->cost.missed, 77);
  EXPECT_EQ(back->target, "sonnet");
  EXPECT_EQ(back->key_index, 2);
  EXPECT_EQ(back->error, r.error);
  EXPECT_EQ(back->cache_helper, "anthropic_auto_cache");
  EXPECT_EQ(back->purpose, "keep_warm");
  EXPECT_EQ(back->thread_source, "auto");
  EXPECT_EQ(back->thread_parent, r.thread_parent);
  EXPECT_EQ(back->keep_warm_saved, 12'345);
  EXPECT_EQ(json::parse(back->route), json::parse(r.route));
  EXPECT_EQ(back->attempts, r.attempts);
  EXPECT_EQ(back->cache_diagnosis, r.cache_diagnosis);
  EXPECT_EQ(back->latency_us, 1234);
  EXPECT_EQ(back->ttft_us, 567);
  // Every shortening of an entry is refused, never read as a record with fields missing.
  for (size_t n = 0; n < entry.size(); ++n) {
    EXPECT_FALSE(DecodeJournalEntry(std::string_view(entry).substr(0, n)).has_value()) << n;
  }
  EXPECT_FALSE(DecodeJournalEntry(entry + "x").has_value());
  EXPECT_FALSE(FromJournalLine("{\"id\": 1").has_value());
}

// The entry keeps bytes as they were (control characters, quotes), and what is not UTF-8 is made
// valid when it is read back, so a replayed record cannot put invalid text in the store.
TEST(JournalTest, TextThatIsNotUtf8IsMadeValidWhenReadBack) {
  RequestRecord r = Full();
  std::string every_control;
  for (int ch = 1; ch < 0x20; ++ch) every_control += static_cast<char>(ch);
  r.error = every_control + "\\ \" \x7f \xe2\x82\xac";
  r.thread_id = "bad\xff";
  r.attempts = json::array({{{"error", std::string("up\xc3")}}});
  Result<RequestRecord> back = DecodeJournalEntry(EncodeJournalEntry(r));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->error, r.error);
  EXPECT_EQ(back->thread_id, "bad\xef\xbf\xbd");
  EXPECT_EQ(back->attempts[0]["error"], "up\xef\xbf\xbd");
}

TEST(JournalTest, ALineFromBeforeCacheTiersStillReads) {
  // A line as a kvgate without usage.cache_read_offload wrote it ("u" has no "cro").
  const std::string old_line =
      R"({"id":"req_old","th":"th","t":1,"ep":"chat.completions","m":"smollm2","p":"local",)"
      R"("pt":"local","s":false,"st":"ok","hs":200,"us":200,)"
      R"("u":{"cr":64,"w5":0,"w1":0,"wn":16,"un":4,"o":5,"r":null,"cl":false,"raw":"","ri":84},)"
      R"("c":{"cr":0,"cw":0,"un":0,"o":0,"t":0,"sv":0,"cp":true,"pr":true,"ms":0}})";
  Result<RequestRecord> r = FromJournalLine(old_line);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->usage.cache_read, 64);
  EXPECT_EQ(r->usage.cache_write_no_ttl, 16);
  EXPECT_EQ(r->usage.cache_read_offload, std::nullopt);
}

size_t JournalFiles(const TempDir& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(dir.File("x")).parent_path())) {
    n += e.path().filename().string().find("-journal.") != std::string::npos;
  }
  return n;
}

TEST(JournalTest, ACheckpointedRecordWhoseProcessDiedIsCommittedOnTheNextOpen) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  {
    auto store = TelemetryStore::Open(path, clock);
    ASSERT_TRUE(store.has_value());
    // Answered (journaled before its last bytes), then the process "died" before Record().
    ASSERT_TRUE((*store)->Checkpoint(Full()).has_value());
    // And a normal one.
    (*store)->Record(MakeRecord("req_normal", "th_1", kT0 + 1, "gpt-4o-mini",
                                UsageFlavor::kOpenAIChat,
                                R"({"prompt_tokens": 10, "completion_tokens": 1})"));
  }
  EXPECT_GE(JournalFiles(dir), 1u) << "the open checkpoint keeps its segment";
  {
    auto store = TelemetryStore::Open(path, clock);
    ASSERT_TRUE(store.has_value());
    auto got = (*store)->GetRequest("req_full");
    ASSERT_TRUE(got.has_value()) << "the checkpointed record was not recovered";
    EXPECT_EQ((*got)["target"], "sonnet");
    EXPECT_EQ((*got)["usage"]["cache_read"], 900);
    auto thread = (*store)->GetThread("th_1");
    ASSERT_TRUE(thread.has_value());
    EXPECT_EQ((*thread)["turns"].size(), 2u);
  }
  EXPECT_EQ(JournalFiles(dir), 0u) << "a clean shutdown leaves no journal";
  // Opening again recovers nothing twice.
  auto store = TelemetryStore::Open(path, clock);
  auto listed = (*store)->ListRequests({});
  EXPECT_EQ((*listed)["requests"].size(), 2u);
}

TEST(JournalTest, AFinalRecordReplacesItsCheckpointAndATornLineIsSkipped) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  {
    auto store = TelemetryStore::Open(path, clock);
    auto mark = (*store)->Checkpoint(Full());
    RequestRecord final = Full();
    final.status = "client_disconnected";  // the last write failed after the checkpoint
    final.http_status = 200;
    (*store)->Record(std::move(final), mark);
    ASSERT_TRUE((*store)->Flush().has_value());
    auto got = (*store)->GetRequest("req_full");
    EXPECT_EQ((*got)["status"], "client_disconnected");
  }
  // A journal in the line format of an earlier kvgate, left by a process killed mid-write: one
  // whole entry, one torn.
  const std::string lost =
      R"({"id":"req_lost","th":"th_1","t":1767225600000001,"ep":"chat.completions","m":"m",)"
      R"("p":"p","pt":"openai","s":false,"st":"ok","hs":200,"us":200,"u":{"cr":1},"c":{}})";
  {
    std::ofstream out(path + "-journal.7", std::ios::binary);
    out << lost << "\n" << lost.substr(0, lost.size() / 2);
  }
  auto store = TelemetryStore::Open(path, clock);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  EXPECT_TRUE((*store)->GetRequest("req_lost").has_value());
  EXPECT_EQ((*(*store)->GetRequest("req_full"))["status"], "client_disconnected");
  EXPECT_EQ((*(*store)->ListRequests({}))["requests"].size(), 2u);
}

// The framed format: an entry torn or corrupted anywhere costs that entry alone; the scan finds
// the entries after it, including one that starts right after a torn frame.
TEST(JournalTest, ATornOrCorruptFrameCostsOnlyItsOwnEntry) {
  auto body = [](const std::string& id) {
    RequestRecord r = Full();
    r.request_id = id;
    return EncodeJournalEntry(r);
  };
  using internal::FrameJournalEntry;
  using internal::ReadJournalSegment;
  std::string corrupt = FrameJournalEntry(body("req_b"), 3);
  corrupt[corrupt.size() / 2] ^= 0x20;
  const std::string torn = FrameJournalEntry(body("req_d"), 3);
  const std::string bytes = FrameJournalEntry(body("req_a"), 3) + corrupt +
                            FrameJournalEntry(body("req_c"), 3) + torn.substr(0, 40) +
                            FrameJournalEntry(body("req_e"), 3) + std::string(4096, '\0') +
                            torn.substr(0, torn.size() - 8);
  std::vector<std::string> ids;
  for (const RequestRecord& r : ReadJournalSegment(bytes, 3)) ids.push_back(r.request_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"req_a", "req_c", "req_e"}));
  // An entry framed for another segment (a file renamed by hand) does not check out.
  EXPECT_TRUE(ReadJournalSegment(FrameJournalEntry(body("req_a"), 4), 3).empty());
}

// Appends from several threads, across many rotations (8 KB segments), then a "crash": every
// checkpoint is recovered once by the next process.
TEST(JournalTest, ConcurrentAppendsAcrossRotationsAreAllRecovered) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  constexpr int kThreads = 4, kEach = 300;
  {
    auto store = TelemetryStore::Open(path, clock, StoreOptions{.journal_segment_bytes = 8192});
    ASSERT_TRUE(store.has_value());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          RequestRecord r = Full();
          r.request_id = "req_" + std::to_string(t) + "_" + std::to_string(i);
          EXPECT_TRUE((*store)->Checkpoint(r).has_value());
        }
      });
    }
    for (std::thread& t : threads) t.join();
    // And one entry larger than a whole segment gets a segment of its own.
    RequestRecord big = Full();
    big.request_id = "req_big";
    big.error = std::string(20000, 'x');
    EXPECT_TRUE((*store)->Checkpoint(big).has_value());
  }
  auto store = TelemetryStore::Open(path, clock);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  int found = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      found += (*store)->GetRequest("req_" + std::to_string(t) + "_" + std::to_string(i)).has_value();
    }
  }
  EXPECT_EQ(found, kThreads * kEach);
  auto big = (*store)->GetRequest("req_big");
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ((*big)["error"].get<std::string>().size(), 20000u);
}

TEST(JournalTest, SegmentsRotateAndCommittedOnesAreDeleted) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  auto store = TelemetryStore::Open(path, clock, StoreOptions{.journal_segment_bytes = 8192});
  for (int i = 0; i < 200; ++i) {
    RequestRecord r = Full();
    r.request_id = "req_" + std::to_string(i);
    (*store)->Record(std::move(r));
  }
  ASSERT_TRUE((*store)->Flush().has_value());
  EXPECT_LE(JournalFiles(dir), 1u) << "committed segments must not pile up";
  EXPECT_EQ((*(*store)->ListRequests({.limit = 1000}))["requests"].size(), 200u);
}

TEST(JournalTest, WithoutAJournalNothingIsWritten) {
  TempDir dir;
  FakeClock clock;
  auto store = TelemetryStore::Open(dir.File("t.db"), clock, StoreOptions{.journal = false});
  EXPECT_FALSE((*store)->Checkpoint(Full()).has_value());
  (*store)->Record(Full());
  EXPECT_EQ(JournalFiles(dir), 0u);
}

// A segment with an entry that does not check out (a bit flipped on disk, a torn copy) gives up
// that entry alone, is said on stderr with its counts, and is kept aside as
// `<segment>.damaged-<k>` once its readable records are committed, not deleted.
TEST(JournalTest, ADamagedSegmentIsKeptAsideAndItsValidRecordsRecovered) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.File("t.db");
  {
    auto store = TelemetryStore::Open(path, clock, StoreOptions{.journal_segment_bytes = 64 << 10});
    ASSERT_TRUE(store.has_value());
    for (int i = 0; i < 5; ++i) {
      RequestRecord r = Full();
      r.request_id = "req_" + std::to_string(i);
      ASSERT_TRUE((*store)->Checkpoint(r).has_value());  // answered, then the process "died"
    }
  }
  const std::string segment = path + "-journal.1";
  std::string bytes;
  {
    std::ifstream in(segment, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The third entry's body gets a flipped bit.
  std::vector<size_t> entries;
  for (size_t at = bytes.find("KVJ1"); at != std::string::npos; at = bytes.find("KVJ1", at + 8)) {
    entries.push_back(at);
  }
  ASSERT_EQ(entries.size(), 5u);
  bytes[entries[2] + 40] ^= 0x10;
  {
    std::ofstream out(segment, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  internal::JournalDamage damage;
  EXPECT_EQ(internal::ReadJournalSegment(bytes, 1, &damage).size(), 4u);
  EXPECT_EQ(damage.entries_skipped, 1u);
  EXPECT_GT(damage.bytes_skipped, 0u);

  auto store = TelemetryStore::Open(path, clock);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*store)->GetRequest("req_" + std::to_string(i)).has_value(), i != 2) << i;
  }
  EXPECT_FALSE(std::filesystem::exists(segment)) << "the segment is replayed only once";
  const std::string aside = segment + ".damaged-1";
  ASSERT_TRUE(std::filesystem::exists(aside)) << "the damaged segment was deleted";
  EXPECT_EQ(std::filesystem::file_size(aside), bytes.size());
  // A clean segment from the same crash would be gone; this one stays through the next start.
  store->reset();
  ASSERT_TRUE(TelemetryStore::Open(path, clock).has_value());
  EXPECT_TRUE(std::filesystem::exists(aside));
}

}  // namespace
}  // namespace kvgate::telemetry
