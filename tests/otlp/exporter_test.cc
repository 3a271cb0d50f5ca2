// The exporter's thread against a scripted sender: retries, Retry-After, a full queue, a slow
// collector that never holds up Observe.
#include "telemetry/otlp/exporter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/mutex.h"

namespace kvgate::telemetry::otlp {
namespace {

using namespace std::chrono_literals;

// Answers with `statuses` in turn (then 200), after `delay` each; records what it got.
class ScriptedSender : public alerts::HttpSender {
 public:
  struct State {
    Mutex mu;
    std::vector<alerts::HttpRequest> got GUARDED_BY(mu);
    std::vector<std::chrono::steady_clock::time_point> at GUARDED_BY(mu);
  };
  ScriptedSender(std::shared_ptr<State> state, std::vector<int> statuses,
                 std::chrono::milliseconds delay = 0ms, std::string retry_after = "")
      : state_(std::move(state)),
        statuses_(std::move(statuses)),
        delay_(delay),
        retry_after_(std::move(retry_after)) {}
  Result<alerts::HttpResponse> Post(const alerts::HttpRequest& request) override {
    std::this_thread::sleep_for(delay_);
    size_t n;
    {
      MutexLock lock(&state_->mu);
      state_->got.push_back(request);
      state_->at.push_back(std::chrono::steady_clock::now());
      n = state_->got.size();
    }
    alerts::HttpResponse response;
    response.status = n <= statuses_.size() ? statuses_[n - 1] : 200;
    if (response.status == 0) return MakeError(ErrorCode::kUnavailable, "connection refused");
    if (!retry_after_.empty()) response.headers.emplace_back("retry-after", retry_after_);
    return response;
  }

 private:
  std::shared_ptr<State> state_;
  std::vector<int> statuses_;
  std::chrono::milliseconds delay_;
  std::string retry_after_;
};

FinishedRequest Traced() {
  FinishedRequest f;
  f.trace = StartRequestTrace("", 1.0);
  f.created_at_us = 1'700'000'000'000'000;
  f.latency_us = 1000;
  f.endpoint = "chat.completions";
  f.model = "m";
  f.status = "ok";
  return f;
}

ExporterOptions Options() {
  ExporterOptions o;
  o.endpoint = "http://collector:4318";
  o.headers = {{"x-honeycomb-team", "k"}};
  o.metrics = false;
  o.batch_delay = 10ms;
  o.first_backoff = 20ms;
  return o;
}

template <class F>
bool WaitFor(F done, std::chrono::milliseconds limit = 5s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(Exporter, PostsSpansWithHeadersAndRetriesWithBackoff) {
  auto state = std::make_shared<ScriptedSender::State>();
  Counter dropped;
  auto exporter = Exporter::Start(
      Options(), &dropped, std::make_unique<ScriptedSender>(state, std::vector<int>{502, 0}));
  exporter->Enqueue(Traced());
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().spans_exported == 1; }));
  exporter->Stop();
  MutexLock lock(&state->mu);
  ASSERT_EQ(state->got.size(), 3u);  // 502, a refused connection, then taken
  EXPECT_EQ(state->got[2].url, "http://collector:4318/v1/traces");
  bool team = false, type = false;
  for (const auto& [name, value] : state->got[2].headers) {
    team |= name == "x-honeycomb-team" && value == "k";
    type |= name == "Content-Type" && value == "application/x-protobuf";
  }
  EXPECT_TRUE(team && type);
  // Exponential: the second wait is about twice the first.
  EXPECT_GE(state->at[1] - state->at[0], 20ms);
  EXPECT_GE(state->at[2] - state->at[1], 40ms);
  EXPECT_EQ(exporter->stats().retries, 2u);
  EXPECT_EQ(dropped.Value(), 0u);
}

TEST(Exporter, HonoursRetryAfterAndGivesUpOnA400) {
  auto state = std::make_shared<ScriptedSender::State>();
  Counter dropped;
  auto exporter = Exporter::Start(
      Options(), &dropped,
      std::make_unique<ScriptedSender>(state, std::vector<int>{503, 400}, 0ms, "1"));
  exporter->Enqueue(Traced());
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().failed_exports == 1; }));
  {
    MutexLock lock(&state->mu);
    ASSERT_EQ(state->got.size(), 2u);
    EXPECT_GE(state->at[1] - state->at[0], 1s);  // Retry-After: 1, not the 20 ms backoff
  }
  EXPECT_EQ(dropped.Value(), 1u);  // a 400 is not retried: the request's spans are lost
  exporter->Stop();
}

TEST(Exporter, ASlowCollectorNeverBlocksObserveAndAFullQueueDrops) {
  auto state = std::make_shared<ScriptedSender::State>();
  Counter dropped;
  ExporterOptions o = Options();
  o.queue_capacity = 100;
  o.max_batch = 10;
  auto exporter = Exporter::Start(
      o, &dropped, std::make_unique<ScriptedSender>(state, std::vector<int>{}, 300ms));
  RequestRecord record;
  record.trace = StartRequestTrace("", 1.0);
  record.endpoint = "chat.completions";
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) exporter->Observe(record);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_LT(took, 100ms);  // 1000 requests while one export takes 300 ms
  // At most the queue and one batch in flight were kept.
  EXPECT_GE(dropped.Value(), 1000u - 100u - 10u);
  EXPECT_EQ(exporter->stats().dropped, dropped.Value());
  exporter->Stop();  // what was queued goes out, once each
  EXPECT_EQ(exporter->stats().spans_exported + dropped.Value(), 1000u);
}

TEST(Exporter, ExportsCumulativeMetricsOnItsInterval) {
  auto state = std::make_shared<ScriptedSender::State>();
  ExporterOptions o = Options();
  o.traces = false;
  o.metrics = true;
  o.export_interval = 100ms;
  o.encoding = Encoding::kJson;
  auto exporter =
      Exporter::Start(o, nullptr, std::make_unique<ScriptedSender>(state, std::vector<int>{}));
  FinishedRequest f = Traced();
  f.input_tokens = 10;
  f.output_tokens = 2;
  exporter->Enqueue(f);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().metric_exports >= 1; }));
  exporter->Stop();
  MutexLock lock(&state->mu);
  ASSERT_FALSE(state->got.empty());
  EXPECT_EQ(state->got[0].url, "http://collector:4318/v1/metrics");
  EXPECT_NE(state->got[0].body.find("gen_ai.client.token.usage"), std::string::npos);
  EXPECT_NE(state->got[0].body.find("\"aggregationTemporality\":2"), std::string::npos);
}

TEST(Exporter, ParsesRetryAfterSeconds) {
  EXPECT_EQ(ParseRetryAfter("120"), std::chrono::seconds(120));
  EXPECT_EQ(ParseRetryAfter(" 3 "), std::chrono::seconds(3));
  EXPECT_FALSE(ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"));
  EXPECT_FALSE(ParseRetryAfter(""));
}

}  // namespace
}  // namespace kvgate::telemetry::otlp
