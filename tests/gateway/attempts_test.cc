// The attempt loop with a fake Upstream behind a real gateway (gateway_harness.h). What a client
// sees and what is recorded when an attempt fails before anything was sent (retry, fall back, or
// answer the error), when a circuit opens, and when an attempt throws (the last barrier).
#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "common/mutex.h"
#include "tests/gateway/gateway_harness.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

std::string Answer(const std::string& target) {
  return json{{"id", "chatcmpl-fake"}, {"served_by", target}}.dump();
}

// Answers each attempt with the next scripted behaviour for its target; records who was asked.
class FakeUpstream final : public Upstream {
 public:
  enum class Kind { kAnswer, kFail503, kFail400, kFail429, kThrow };

  void Script(const std::string& target, std::vector<Kind> kinds) {
    MutexLock lock(&mu_);
    for (Kind k : kinds) script_[target].push_back(k);
  }
  std::vector<std::string> asked() const {
    MutexLock lock(&mu_);
    return asked_;
  }

  asio::awaitable<AttemptResult> Attempt(const InferenceCall&, const AttemptPlan& plan,
                                         ClientStream& client) override {
    Kind kind = Kind::kAnswer;
    {
      MutexLock lock(&mu_);
      asked_.push_back(plan.target->name + "#" + std::to_string(plan.key_index));
      auto& queue = script_[plan.target->name];
      if (!queue.empty()) {
        kind = queue.front();
        queue.pop_front();
      }
    }
    AttemptResult r;
    switch (kind) {
      case Kind::kThrow:
        throw std::runtime_error(std::string("a defect in an upstream"));
      case Kind::kFail503:
      case Kind::kFail400:
      case Kind::kFail429: {
        const int status = kind == Kind::kFail503 ? 503 : kind == Kind::kFail400 ? 400 : 429;
        // (std::string arguments: GCC 12 cannot copy string literals into a coroutine frame.)
        r.error = providers::MakeOpenAIError(status, "fake " + std::to_string(status),
                                             std::string("upstream_error"), std::string("fake"));
        r.status_word = "upstream_error";
        r.outcome.failure = router::Failure::kStatus;
        r.outcome.status = status;
        if (status == 429) r.outcome.retry_after_ms = 1;
        r.message = "fake " + std::to_string(status);
        co_return r;
      }
      case Kind::kAnswer:
        break;
    }
    client.record().usage.cache_read = 0;
    client.record().usage.uncached = 10;
    client.record().usage.output = 2;
    client.record().usage.cache_write_5m = 0;
    client.record().usage.cache_write_1h = 0;
    client.record().usage.cache_write_no_ttl = 0;
    std::string answer = Answer(plan.target->name);
    co_await client.SendAnswer(std::move(answer));
    r.answered = true;
    co_return r;
  }

 private:
  mutable Mutex mu_;
  std::map<std::string, std::deque<Kind>> script_;
  std::vector<std::string> asked_;
};

constexpr char kConfig[] = R"(
server: {listen: 127.0.0.1:0}
providers:
  - {name: pa, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: a}
  - {name: pb, type: openai, base_url: "http://127.0.0.1:9/v1", api_keys: [k1, k2]}
models:
  - {name: a, provider: pa, upstream_model: gpt-4o}
  - {name: b, provider: pb, upstream_model: gpt-4o-mini}
routers:
  - name: both
    strategy: fallback
    targets: [{model: a}, {model: b}]
    retries: 1
    affinity: none
routing:
  health: {failures_to_open: 3, cooldown_ms: 60000, backoff_ms: 1}
)";

class AttemptsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(gateway_.Start(kConfig, fake_)); }

  ::kvgate::testing::RawResponse Chat(const std::string& model,
                                      const std::string& extra_headers = "") {
    SCOPED_TRACE(model);
    const std::string body =
        R"({"model":")" + model + R"(","messages":[{"role":"user","content":"hi"}]})";
    return gateway_.Post("/v1/chat/completions", body, extra_headers);
  }
  json Stored(const std::string& request_id) { return gateway_.Stored(request_id); }

  FakeUpstream fake_;
  gateway::testing::GatewayHarness gateway_;
  telemetry::TelemetryStore& store() { return gateway_.store(); }
};

TEST_F(AttemptsTest, A503IsRetriedThenFallsBackAndEveryAttemptIsRecorded) {
  fake_.Script("a", {FakeUpstream::Kind::kFail503, FakeUpstream::Kind::kFail503});
  auto r = Chat("both");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["served_by"], "b");
  EXPECT_EQ(r.header("x-kvgate-router"), "both");
  EXPECT_EQ(fake_.asked(), (std::vector<std::string>{"a#0", "a#0", "b#0"}));
  json row = Stored(r.header("x-request-id"));
  EXPECT_EQ(row["status"], "ok");
  EXPECT_EQ(row["target"], "b");
  EXPECT_EQ(row["provider"], "pb");
  EXPECT_EQ(row["model"], "both");
  ASSERT_EQ(row["attempts"].size(), 3u) << row.dump();
  EXPECT_EQ(row["attempts"][0]["target"], "a");
  EXPECT_EQ(row["attempts"][0]["http_status"], 503);
  EXPECT_EQ(row["attempts"][0]["status"], "upstream_error");
  EXPECT_EQ(row["attempts"][2]["status"], "ok");
  EXPECT_EQ(row["route"]["router"], "both");
  EXPECT_EQ(row["route"]["target"], "a");  // the first choice; attempts say what happened
  // One client request, one record. (GET by id answers from the write queue before the commit;
  // the list shows committed records only.)
  ASSERT_TRUE(store().Flush().has_value());
  auto listed = store().ListRequests({});
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ((*listed)["requests"].size(), 1u);
}

TEST_F(AttemptsTest, AClientErrorIsNotTriedElsewhere) {
  fake_.Script("a", {FakeUpstream::Kind::kFail400});
  auto r = Chat("both");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(fake_.asked(), (std::vector<std::string>{"a#0"}));
  json row = Stored(r.header("x-request-id"));
  EXPECT_EQ(row["status"], "upstream_error");
  EXPECT_EQ(row["http_status"], 400);
  EXPECT_EQ(row["attempts"].size(), 1u);
}

TEST_F(AttemptsTest, APlainModelIsTriedOnceAndItsErrorAnswered) {
  fake_.Script("a", {FakeUpstream::Kind::kFail503});
  auto r = Chat("a");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.header("x-kvgate-router"), "");
  EXPECT_EQ(fake_.asked().size(), 1u);
  json row = Stored(r.header("x-request-id"));
  EXPECT_TRUE(row["route"].is_null());
  EXPECT_EQ(row["attempts"].size(), 1u);
}

TEST_F(AttemptsTest, A429IsRetriedOnTheProvidersNextKey) {
  fake_.Script("b", {FakeUpstream::Kind::kFail429});
  auto r = Chat("both", "x-kvgate-route-target: b\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(fake_.asked(), (std::vector<std::string>{"b#0", "b#1"}));
  json row = Stored(r.header("x-request-id"));
  EXPECT_EQ(row["route"]["pinned"], true);
  EXPECT_EQ(row["key_index"], 1);
}

TEST_F(AttemptsTest, APinnedTargetThatIsNotOneOfTheRoutersIsA400) {
  auto r = Chat("both", "x-kvgate-route-target: nope\r\n");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("x-kvgate-route-target"), std::string::npos) << r.body;
  EXPECT_TRUE(fake_.asked().empty());
}

TEST_F(AttemptsTest, TheCircuitOpensAfterConsecutiveFailuresAndThenSkipsTheTarget) {
  // Two requests: a, a (retry) -> b; then a -> b, since a's third failure opens its circuit and
  // its retry is not made.
  fake_.Script("a", std::vector<FakeUpstream::Kind>(3, FakeUpstream::Kind::kFail503));
  for (int i = 0; i < 2; ++i) ASSERT_EQ(Chat("both").status, 200);
  const size_t before = fake_.asked().size();
  auto r = Chat("both");
  ASSERT_EQ(r.status, 200);
  auto asked = fake_.asked();
  EXPECT_EQ(std::vector<std::string>(asked.begin() + before, asked.end()),
            (std::vector<std::string>{"b#0"}))
      << "a's circuit should be open";
  json row = Stored(r.header("x-request-id"));
  EXPECT_EQ(row["route"]["target"], "b");
  bool saw_a = false;
  for (const json& c : row["route"]["candidates"]) {
    if (c["target"] != "a") continue;
    saw_a = true;
    EXPECT_EQ(c["eligible"], false);
    EXPECT_NE(c["why_not"].get<std::string>().find("circuit open"), std::string::npos) << c.dump();
  }
  EXPECT_TRUE(saw_a);
  EXPECT_NE(gateway_.registry().Expose().find("kvgate_circuit_open{target=\"a\"} 1"),
            std::string::npos);
  // After the cool-down one probe goes to a, and its success closes the circuit.
  gateway_.clock().AdvanceSeconds(61);
  r = Chat("both");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["served_by"], "a");
  // (The attempt is reported just after its answer went out.)
  bool closed = false;
  for (int i = 0; i < 200 && !closed; ++i) {
    closed = gateway_.registry().Expose().find("kvgate_circuit_open{target=\"a\"} 0") !=
             std::string::npos;
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(closed);
}

TEST_F(AttemptsTest, AnExceptionInAnAttemptIsARecorded500WithTheRequestId) {
  fake_.Script("a", {FakeUpstream::Kind::kThrow});
  auto r = Chat("a");
  EXPECT_EQ(r.status, 500) << r.body;
  const std::string id = r.header("x-request-id");
  ASSERT_FALSE(id.empty());
  EXPECT_NE(r.body.find(id), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("a defect in an upstream"), std::string::npos) << "details stay internal";
  json row = Stored(id);
  EXPECT_EQ(row["status"], "error");
  EXPECT_EQ(row["http_status"], 500);
  EXPECT_NE(row["error"].get<std::string>().find("a defect in an upstream"), std::string::npos);
  // And the gateway goes on serving.
  EXPECT_EQ(Chat("a").status, 200);
}

}  // namespace
}  // namespace kvgate::gateway
