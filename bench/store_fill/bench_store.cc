// Fills a telemetry store with synthetic threads (default 100k threads, 1M requests, spread over
// the past 7 days, four model/provider pairs, a tenth of the turns diagnosed as cache misses)
// through TelemetryStore::Record, as the gateway writes them, then times each query the
// dashboard's pages run: the median and the slowest of --reps runs, in milliseconds.
//
//   kvgate_bench_store [--threads N] [--requests N] [--db PATH | --postgres CONNINFO] [--reps N]
//                      [--keep]
// --postgres fills a PostgreSQL database instead (it should be empty: the fill's request ids
// would collide with an earlier run's); its crash journal goes to a temporary file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "telemetry/pricing.h"
#include "telemetry/store.h"

namespace {

using namespace kvgate;
using namespace kvgate::telemetry;
using Steady = std::chrono::steady_clock;

struct Model {
  const char *model, *provider, *type;
  UsageFlavor flavor;
};
constexpr Model kModels[] = {
    {"gpt-4o-mini", "openai", "openai", UsageFlavor::kOpenAIChat},
    {"claude-sonnet-4-5", "claude", "anthropic", UsageFlavor::kAnthropic},
    {"deepseek-chat", "ds", "deepseek", UsageFlavor::kDeepSeek},
    {"smollm2", "local", "local", UsageFlavor::kKvgateEngine},
};

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

double Ms(Steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  int64_t threads = 100'000, requests = 1'000'000;
  int reps = 15;
  bool keep = false;
  std::string db = (std::filesystem::temp_directory_path() / "kvgate_bench_store.db").string();
  std::string postgres;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoll(next());
    else if (!std::strcmp(argv[i], "--requests")) requests = std::atoll(next());
    else if (!std::strcmp(argv[i], "--db")) db = next();
    else if (!std::strcmp(argv[i], "--postgres")) postgres = next();
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(next());
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads N] [--requests N] [--db PATH | --postgres CONNINFO] "
                   "[--reps N] [--keep]\n",
                   argv[0]);
      return 2;
    }
  }
  const bool on_postgres = !postgres.empty();
  const std::string journal = db + ".journal";
  for (const char* suffix : {"", "-wal", "-shm", ".journal"}) std::filesystem::remove(db + suffix);
  kvgate::SystemClock clock;
  StoreOptions options;
  options.commit_interval = std::chrono::milliseconds(0);
  options.max_batch_records = 20'000;
  if (on_postgres) options.journal_path = journal;
  auto opened = on_postgres ? TelemetryStore::OpenPostgres(postgres, clock, options)
                            : TelemetryStore::Open(db, clock, options);
  const std::string where = on_postgres ? RedactConninfo(postgres) : db;
  if (!opened) {
    std::fprintf(stderr, "cannot open %s: %s\n", where.c_str(), opened.error().ToString().c_str());
    return 1;
  }
  TelemetryStore& store = **opened;
  const PriceCatalog catalog = PriceCatalog::BuiltIn();
  const int64_t now = clock.NowUnixMicros();
  const int64_t week = 7LL * 86'400'000'000;

  // Thread t gets turns_of(t) turns (1..19, 10 on average), the last thread the remainder, one
  // model per thread (a tenth switch once), starting at a random point of the week.
  const auto fill_start = Steady::now();
  int64_t written = 0;
  for (int64_t t = 0; t < threads && written < requests; ++t) {
    int64_t turns = 1 + static_cast<int64_t>(Mix(t * 2 + 1) % 19);
    if (t == threads - 1) turns = requests - written;
    turns = std::min(turns, requests - written);
    const Model& base = kModels[Mix(t) % 4];
    // (A thread's turns span about an hour: the newest end around now.)
    int64_t at = now - week +
                 static_cast<int64_t>(Mix(t + 7) % static_cast<uint64_t>(week - 3'600'000'000LL));
    char thread_id[32];
    std::snprintf(thread_id, sizeof(thread_id), "thread-%07lld", static_cast<long long>(t));
    int64_t prompt = 1200;
    for (int64_t k = 0; k < turns; ++k, ++written) {
      const uint64_t h = Mix(written * 31 + 5);
      const Model& m = (k > 3 && t % 10 == 0) ? kModels[(Mix(t) + 1) % 4] : base;
      const bool miss = k > 0 && h % 10 == 0;
      const int64_t read = k == 0 || miss ? 0 : prompt - 200;
      prompt += 150 + static_cast<int64_t>(h % 400);
      RequestRecord r;
      char id[40];
      std::snprintf(id, sizeof(id), "req_%09lld", static_cast<long long>(written));
      r.request_id = id;
      r.response_id = std::string("chatcmpl-") + id;
      r.thread_id = thread_id;
      r.created_at_us = at;
      at += 30'000'000 + static_cast<int64_t>(h % 600'000'000);
      r.endpoint = "chat.completions";
      r.model = m.model;
      r.provider = m.provider;
      r.provider_type = m.type;
      r.upstream_model = m.model;
      r.stream = h % 2 == 0;
      const uint64_t s = h % 100;
      r.status = s < 97 ? "ok" : s < 99 ? "upstream_error" : "client_disconnected";
      r.http_status = s < 97 ? 200 : s < 99 ? 502 : 499;
      r.upstream_status = r.http_status == 499 ? 200 : r.http_status;
      r.latency_us = 200'000 + static_cast<int64_t>(h % 3'000'000);
      r.ttft_us = *r.latency_us / 4;
      r.usage.cache_read = read;
      r.usage.cache_write_5m = m.flavor == UsageFlavor::kAnthropic ? prompt - read - 50 : 0;
      r.usage.cache_write_1h = 0;
      r.usage.cache_write_no_ttl = m.flavor == UsageFlavor::kKvgateEngine ? prompt - read - 50 : 0;
      r.usage.uncached = prompt - read - *r.usage.cache_write_5m - *r.usage.cache_write_no_ttl;
      r.usage.output = 50 + static_cast<int64_t>(h % 500);
      r.usage.raw = R"({"prompt_tokens":)" + std::to_string(prompt) + "}";
      if (auto price = catalog.Find(m.model)) r.cost = ComputeCost(r.usage, *price);
      if (miss) {
        r.cache_diagnosis = {{"cause", "expired"}, {"detail", "synthetic"},
                             {"expected_cached", prompt - 200}, {"cached", 0},
                             {"idle_seconds", 400.0}, {"ttl_seconds", 300}};
        if (auto price = catalog.Find(m.model)) r.cost.missed = MissCost(prompt - 200, r.usage, *price);
      }
      store.Record(std::move(r));
      if (written % 50'000 == 49'999) {
        if (!store.Flush()) {
          std::fprintf(stderr, "flush failed\n");
          return 1;
        }
      }
    }
  }
  if (Status s = store.Flush(); !s) {
    std::fprintf(stderr, "flush failed: %s\n", s.error().ToString().c_str());
    return 1;
  }
  const double fill_s = Ms(Steady::now() - fill_start) / 1000;
  std::printf("filled %s (%s): %lld threads, %lld requests in %.1f s (%.0f requests/s)",
              where.c_str(), on_postgres ? "postgres" : "sqlite",
              static_cast<long long>(std::min(threads, written)), static_cast<long long>(written),
              fill_s, written / fill_s);
  if (!on_postgres) std::printf(", %.0f MiB", std::filesystem::file_size(db) / 1048576.0);
  std::printf("\n\n");
  std::fflush(stdout);  // the fill's line before the queries' (stdout may be a pipe)

  // Cursors and ids that later pages and lookups start from.
  ThreadQuery first_page;
  auto page1 = store.ListThreads(first_page);
  RequestQuery rfirst;
  auto rpage1 = store.ListRequests(rfirst);
  if (!page1 || !rpage1) {
    std::fprintf(stderr, "query failed\n");
    return 1;
  }
  std::string thread_cursor = (*page1)["next_cursor"].get<std::string>();
  for (int i = 0; i < 500; ++i) {  // page 501, 25,000 threads in (or the last page of fewer)
    ThreadQuery q;
    q.cursor = thread_cursor;
    const nlohmann::json next = (*store.ListThreads(q))["next_cursor"];
    if (!next.is_string()) break;
    thread_cursor = next.get<std::string>();
  }
  const std::string request_cursor = (*rpage1)["next_cursor"].get<std::string>();
  // A thread and a request from the middle of the fill, whatever its size.
  char some_thread_id[32], some_request_id[40];
  std::snprintf(some_thread_id, sizeof(some_thread_id), "thread-%07lld",
                static_cast<long long>(std::min(threads, written) / 2));
  std::snprintf(some_request_id, sizeof(some_request_id), "req_%09lld",
                static_cast<long long>(written * 7 / 9));
  const std::string some_thread = some_thread_id;
  const std::string some_request = some_request_id;

  struct Case {
    std::string name;
    std::function<bool()> run;
  };
  auto threads_q = [&](std::function<void(ThreadQuery&)> set) {
    return [&store, set] {
      ThreadQuery q;
      set(q);
      return store.ListThreads(q).has_value();
    };
  };
  auto requests_q = [&](std::function<void(RequestQuery&)> set) {
    return [&store, set] {
      RequestQuery q;
      set(q);
      return store.ListRequests(q).has_value();
    };
  };
  const int64_t hour_ago = now - 3'600'000'000LL;
  std::vector<Case> cases = {
      {"threads: last seen (first page)", threads_q([](ThreadQuery&) {})},
      {"threads: page 501 by cursor", threads_q([&](ThreadQuery& q) { q.cursor = thread_cursor; })},
      {"threads: by cost", threads_q([](ThreadQuery& q) { q.sort = ThreadQuery::Sort::kCost; })},
      {"threads: by turns, ascending", threads_q([](ThreadQuery& q) { q.sort = ThreadQuery::Sort::kTurns; q.descending = false; })},
      {"threads: by hit rate", threads_q([](ThreadQuery& q) { q.sort = ThreadQuery::Sort::kHitRatio; })},
      {"threads: by hit rate, ascending", threads_q([](ThreadQuery& q) { q.sort = ThreadQuery::Sort::kHitRatio; q.descending = false; })},
      {"threads: by money lost to misses", threads_q([](ThreadQuery& q) { q.sort = ThreadQuery::Sort::kMissedCost; })},
      {"threads: first seen", threads_q([](ThreadQuery& q) { q.sort = ThreadQuery::Sort::kFirstSeen; })},
      {"threads: model filter", threads_q([](ThreadQuery& q) { q.model = "deepseek-chat"; })},
      {"threads: model filter, by cost", threads_q([](ThreadQuery& q) { q.model = "smollm2"; q.sort = ThreadQuery::Sort::kCost; })},
      {"threads: model nobody used", threads_q([](ThreadQuery& q) { q.model = "gpt-5"; })},
      {"threads: active in the last hour", threads_q([&](ThreadQuery& q) { q.since_us = hour_ago; })},
      {"threads: lost most in the last hour", threads_q([&](ThreadQuery& q) { q.since_us = hour_ago; q.sort = ThreadQuery::Sort::kMissedCost; q.limit = 10; })},
      {"threads: lost most in the last 24 h", threads_q([&](ThreadQuery& q) { q.since_us = now - 86'400'000'000LL; q.sort = ThreadQuery::Sort::kMissedCost; q.limit = 10; })},
      {"threads: lost most in the last 7 days", threads_q([&](ThreadQuery& q) { q.since_us = now - week; q.sort = ThreadQuery::Sort::kMissedCost; q.limit = 10; })},
      {"threads: active in 24 h, by cost", threads_q([&](ThreadQuery& q) { q.since_us = now - 86'400'000'000LL; q.sort = ThreadQuery::Sort::kCost; })},
      {"threads: id prefix thread-00123", threads_q([](ThreadQuery& q) { q.id_prefix = "thread-00123"; })},
      {"threads: id prefix matching nothing", threads_q([](ThreadQuery& q) { q.id_prefix = "zzz"; })},
      {"requests: newest", requests_q([](RequestQuery&) {})},
      {"requests: page 2 by cursor", requests_q([&](RequestQuery& q) { q.cursor = request_cursor; })},
      {"requests: one thread", requests_q([&](RequestQuery& q) { q.thread_id = some_thread; })},
      {"requests: model", requests_q([](RequestQuery& q) { q.model = "claude-sonnet-4-5"; })},
      {"requests: provider", requests_q([](RequestQuery& q) { q.provider = "local"; })},
      {"requests: status client_disconnected", requests_q([](RequestQuery& q) { q.status = "client_disconnected"; })},
      {"requests: status + model", requests_q([](RequestQuery& q) { q.status = "upstream_error"; q.model = "gpt-4o-mini"; })},
      {"requests: last hour", requests_q([&](RequestQuery& q) { q.since_us = hour_ago; })},
      {"requests: a day, 3 days ago", requests_q([&](RequestQuery& q) { q.since_us = now - 4 * 86'400'000'000LL; q.until_us = now - 3 * 86'400'000'000LL; })},
      {"thread view: one thread", [&] { return store.GetThread(some_thread).has_value(); }},
      {"request by kvgate id", [&] { return store.GetRequest(some_request).has_value(); }},
      {"request by response id", [&] { return store.GetRequest("chatcmpl-" + some_request).has_value(); }},
      {"overview: 1h", [&] { return store.Overview(now - 3'600'000'000LL, now, 60).has_value(); }},
      {"overview: 24h", [&] { return store.Overview(now - 86'400'000'000LL, now, 900).has_value(); }},
      {"overview: 7d", [&] { return store.Overview(now - week, now, 7200).has_value(); }},
      {"live probe (with a thread)", [&] { return store.Live(some_thread).has_value(); }},
  };
  std::printf("%-40s %10s %10s\n", "query", "median ms", "max ms");
  bool all_ok = true;
  double worst_list = 0;
  for (const Case& c : cases) {
    std::vector<double> times;
    bool ok = true;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = Steady::now();
      ok = c.run() && ok;
      times.push_back(Ms(Steady::now() - t0));
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::printf("%-40s %10.2f %10.2f%s\n", c.name.c_str(), median, times.back(), ok ? "" : "  FAILED");
    all_ok = all_ok && ok;
    if (c.name.starts_with("threads") || c.name.starts_with("requests")) {
      worst_list = std::max(worst_list, median);
    }
  }
  std::printf("\nslowest list query (median): %.2f ms (target: under 50 ms)\n", worst_list);
  store.Close();
  if (!keep) {
    for (const char* suffix : {"", "-wal", "-shm", ".journal"}) std::filesystem::remove(db + suffix);
  }
  return all_ok ? 0 : 1;
}
