// Channels against real receivers on 127.0.0.1: a Slack-like endpoint, a verifying webhook
// endpoint, and an SMTP server (aiosmtpd) with STARTTLS or implicit TLS and AUTH.
#include "telemetry/alerts/channels.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "telemetry/alerts/engine.h"
#include "tests/alerts/http_receiver.h"
#include "tests/alerts/test_support.h"

namespace kvgate::telemetry::alerts {
namespace {

using kvgate::testing::CannedResponse;
using kvgate::testing::HttpReceiver;
using kvgate::testing::ReceivedRequest;
using kvgate::testing::TempDir;
using nlohmann::json;

class CurlEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { ASSERT_TRUE(CurlGlobalInit().has_value()); }
};
[[maybe_unused]] ::testing::Environment* const kCurlEnv =
    ::testing::AddGlobalTestEnvironment(new CurlEnvironment);

constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

TEST(WebhookSignatureTest, MatchesTheStandardWebhooksTestVector) {
  // The example from the Standard Webhooks specification.
  auto sig =
      SignWebhook(kSecret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, R"({"test": 2432232314})");
  ASSERT_TRUE(sig.has_value());
  EXPECT_EQ(*sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  EXPECT_FALSE(SignWebhook("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "id", 1, "b").has_value());
  EXPECT_FALSE(SignWebhook("whsec_!!!!", "id", 1, "b").has_value());
}

TEST(WebhookSignatureTest, VerifyChecksSignatureAndTolerance) {
  const std::string body = R"({"test": 2432232314})";
  const std::string id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
  const std::string good = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
  EXPECT_TRUE(VerifyWebhook(kSecret, id, "1614265330", body, good, 1614265330));
  EXPECT_TRUE(VerifyWebhook(kSecret, id, "1614265330", body, "v1,bogus " + good, 1614265330 + 299));
  EXPECT_FALSE(VerifyWebhook(kSecret, id, "1614265330", body, good, 1614265330 + 301));
  EXPECT_FALSE(VerifyWebhook(kSecret, id, "1614265330", body + " ", good, 1614265330));
  EXPECT_FALSE(VerifyWebhook(kSecret, "msg_other", "1614265330", body, good, 1614265330));
  EXPECT_FALSE(VerifyWebhook(kSecret, id, "16142653x0", body, good, 1614265330));
}

TEST(RetryAfterTest, SecondsAndHttpDate) {
  EXPECT_EQ(ParseRetryAfterSeconds("1", 0), 1);
  EXPECT_EQ(ParseRetryAfterSeconds(" 120 ", 0), 120);
  // 2026-01-01T00:00:30Z, 30 s after "now".
  EXPECT_EQ(ParseRetryAfterSeconds("Thu, 01 Jan 2026 00:00:30 GMT", 1767225600), 30);
  EXPECT_EQ(ParseRetryAfterSeconds("Thu, 01 Jan 2026 00:00:00 GMT", 1767225700), 0);
  EXPECT_FALSE(ParseRetryAfterSeconds("soon", 0).has_value());
  EXPECT_FALSE(ParseRetryAfterSeconds("", 0).has_value());
}

AlertEvent SampleEvent() {
  AlertEvent e;
  e.id = "alrt_x";
  e.incident_id = "alrt_x";
  e.kind = "firing";
  e.rule_id = "mon_1";
  e.rule_name = "spend\r\nBcc: evil@example.com";
  e.metric = "cost";
  e.scope = "model";
  e.scope_key = "gpt-4o";
  e.condition = "above";
  e.value = 12.5;
  e.threshold = 10;
  e.requests = 40;
  e.window_seconds = 300;
  e.summary = "cost above 10 for model gpt-4o";
  return e;
}

TEST(PayloadTest, SlackHasTextAndBlocks) {
  json p = SlackPayload(SampleEvent());
  ASSERT_TRUE(p["text"].is_string());
  EXPECT_NE(p["text"].get<std::string>().find("cost above 10"), std::string::npos);
  ASSERT_TRUE(p["blocks"].is_array());
  EXPECT_EQ(p["blocks"][0]["type"], "header");
  EXPECT_EQ(p["blocks"][1]["type"], "section");
}

TEST(PayloadTest, EmailHeadersAndNoHeaderInjection) {
  ChannelConfig c;
  c.from = "kvgate@example.com";
  c.to = {"a@example.com", "b@example.com"};
  MailMessage m = EmailMessage(c, SampleEvent(), "msg_1", 1767225600);
  EXPECT_NE(m.data.find("From: kvgate@example.com\r\n"), std::string::npos);
  EXPECT_NE(m.data.find("To: a@example.com, b@example.com\r\n"), std::string::npos);
  EXPECT_NE(m.data.find("Date: Thu, 01 Jan 2026 00:00:00 +0000\r\n"), std::string::npos);
  EXPECT_NE(m.data.find("Message-ID: <msg_1@kvgate>\r\n"), std::string::npos);
  EXPECT_NE(m.data.find("Subject: [kvgate] Alert: spend  Bcc: evil@example.com\r\n"),
            std::string::npos)
      << m.data;
  EXPECT_EQ(m.data.find("\r\nBcc:"), std::string::npos);
  EXPECT_EQ(m.to.size(), 2u);
}

// Engine plumbing shared by the channel tests: one channel, test fires, a FakeClock.
struct Harness {
  explicit Harness(std::vector<ChannelConfig> channels, AlertEngineOptions options = {}) {
    auto opened = SqliteAlertStore::Open(dir.File("alerts.db"));
    EXPECT_TRUE(opened.has_value());
    store = std::move(*opened);
    options.jitter_seed = 7;
    engine = std::make_unique<AlertEngine>(clock, *store, http, smtp, std::move(channels), options);
    EXPECT_TRUE(engine->Init().has_value());
  }
  std::vector<DeliveryRecord> Deliveries(const std::string& event_id) {
    return store->ListDeliveries(event_id).value();
  }
  TempDir dir;
  FakeClock clock{int64_t(::time(nullptr)) * 1'000'000};  // receivers check against real time
  CurlHttpSender http;
  CurlSmtpSender smtp{10'000};
  std::unique_ptr<SqliteAlertStore> store;
  std::unique_ptr<AlertEngine> engine;
};

TEST(SlackChannelTest, HonoursRetryAfterThenDelivers) {
  std::atomic<int> calls{0};
  HttpReceiver slack([&](const ReceivedRequest&) {
    if (calls.fetch_add(1) == 0) return CannedResponse{429, {{"Retry-After", "1"}}, "rate_limited"};
    return CannedResponse{200, {}, "ok"};
  });
  ChannelConfig c{.name = "slack", .type = ChannelConfig::Type::kSlack, .url = slack.Url()};
  Harness h({c});
  auto id = h.engine->TestFire("slack");
  ASSERT_TRUE(id.has_value());
  h.engine->RunOnce();
  ASSERT_EQ(slack.Count(), 1u);
  auto d = h.Deliveries(*id);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].status, "pending");
  EXPECT_EQ(d[0].next_attempt_us, h.clock.NowUnixMicros() + 1'000'000);  // exactly Retry-After
  h.clock.AdvanceMicros(999'000);
  h.engine->RunOnce();
  EXPECT_EQ(slack.Count(), 1u);  // not before Retry-After
  h.clock.AdvanceMicros(1'000);
  h.engine->RunOnce();
  ASSERT_EQ(slack.Count(), 2u);
  EXPECT_EQ(h.Deliveries(*id)[0].status, "delivered");
  EXPECT_EQ(h.engine->PendingDeliveries(), 0u);
  const ReceivedRequest req = slack.Requests()[1];
  EXPECT_EQ(req.headers.at("content-type"), "application/json");
  json body = json::parse(req.body);
  EXPECT_TRUE(body["text"].is_string());
  EXPECT_TRUE(body["blocks"].is_array());
  auto attempts = h.store->ListAttempts(h.Deliveries(*id)[0].id).value();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].outcome, "retry");
  EXPECT_EQ(attempts[0].http_status, 429);
  EXPECT_EQ(attempts[1].outcome, "delivered");
}

TEST(WebhookChannelTest, ReceiverVerifiesSignature) {
  std::atomic<Harness*> harness{nullptr};
  HttpReceiver hook([&](const ReceivedRequest& r) {
    const int64_t now = harness.load()->clock.NowUnixMicros() / 1'000'000;
    if (!kvgate::testing::ReceiverVerifies(kSecret, r.headers, r.body, now)) {
      return CannedResponse{401, {}, "bad signature"};
    }
    return CannedResponse{204, {}, ""};
  });
  ChannelConfig good{
      .name = "hook", .type = ChannelConfig::Type::kWebhook, .url = hook.Url(), .secret = kSecret};
  ChannelConfig wrong = good;
  wrong.name = "wrong-secret";
  wrong.secret = "whsec_c29tZSBvdGhlciBrZXk=";
  Harness h({good, wrong});
  harness = &h;
  auto ok_id = h.engine->TestFire("hook");
  auto bad_id = h.engine->TestFire("wrong-secret");
  ASSERT_TRUE(ok_id && bad_id);
  h.engine->RunOnce();
  ASSERT_EQ(hook.Count(), 2u);
  EXPECT_EQ(h.Deliveries(*ok_id)[0].status, "delivered");
  // A 401 is not retried.
  EXPECT_EQ(h.Deliveries(*bad_id)[0].status, "failed");
  EXPECT_EQ(h.Deliveries(*bad_id)[0].attempts, 1);
  const ReceivedRequest req = hook.Requests()[0];
  json body = json::parse(req.body);
  EXPECT_EQ(body["type"], "alert.test");
  EXPECT_EQ(body["data"]["id"], *ok_id);
  EXPECT_EQ(req.headers.at("webhook-id"), h.Deliveries(*ok_id)[0].id);
  // A stale timestamp is refused by the receiver's 5-minute tolerance.
  EXPECT_FALSE(kvgate::testing::ReceiverVerifies(kSecret, req.headers, req.body,
                                                 h.clock.NowUnixMicros() / 1'000'000 + 301));
}

TEST(WebhookChannelTest, RetriesWithBackoffKeepingTheWebhookId) {
  std::atomic<int> calls{0};
  HttpReceiver hook([&](const ReceivedRequest&) {
    return calls.fetch_add(1) < 3 ? CannedResponse{503, {}, "busy"} : CannedResponse{200, {}, ""};
  });
  ChannelConfig c{
      .name = "hook", .type = ChannelConfig::Type::kWebhook, .url = hook.Url(), .secret = kSecret};
  Harness h({c}, AlertEngineOptions{.base_backoff_ms = 2'000, .max_backoff_ms = 60'000});
  auto id = h.engine->TestFire("hook");
  ASSERT_TRUE(id.has_value());
  int64_t previous_delay = 0;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const int64_t now = h.clock.NowUnixMicros();
    h.engine->RunOnce();
    ASSERT_EQ(hook.Count(), size_t(attempt));
    auto d = h.Deliveries(*id)[0];
    ASSERT_EQ(d.status, "pending");
    // Equal jitter: between half and all of base * 2^(attempt-1).
    const int64_t full = 2'000'000LL << (attempt - 1);
    const int64_t delay = d.next_attempt_us - now;
    EXPECT_GE(delay, full / 2) << "attempt " << attempt;
    EXPECT_LE(delay, full) << "attempt " << attempt;
    EXPECT_GT(delay, previous_delay / 2);
    previous_delay = delay;
    h.clock.AdvanceMicros(delay);
  }
  h.engine->RunOnce();
  ASSERT_EQ(hook.Count(), 4u);
  EXPECT_EQ(h.Deliveries(*id)[0].status, "delivered");
  const auto requests = hook.Requests();
  for (const auto& r : requests)
    EXPECT_EQ(r.headers.at("webhook-id"), requests[0].headers.at("webhook-id"));
  // The timestamp and signature are per attempt.
  EXPECT_NE(requests[0].headers.at("webhook-timestamp"),
            requests[3].headers.at("webhook-timestamp"));
}

TEST(WebhookChannelTest, GivesUpAfterMaxAttempts) {
  HttpReceiver hook([](const ReceivedRequest&) { return CannedResponse{500, {}, "down"}; });
  ChannelConfig c{
      .name = "hook", .type = ChannelConfig::Type::kWebhook, .url = hook.Url(), .secret = kSecret};
  Harness h({c}, AlertEngineOptions{.max_attempts = 3, .base_backoff_ms = 100});
  auto id = h.engine->TestFire("hook");
  for (int i = 0; i < 5; ++i) {
    h.engine->RunOnce();
    h.clock.AdvanceSeconds(10);
  }
  EXPECT_EQ(hook.Count(), 3u);
  auto d = h.Deliveries(*id)[0];
  EXPECT_EQ(d.status, "failed");
  EXPECT_NE(d.last_error.find("gave up after 3 attempts"), std::string::npos) << d.last_error;
}

TEST(HttpSenderTest, TransportErrorIsAnError) {
  CurlHttpSender http;
  const int port = kvgate::testing::FreeLocalPort();  // nothing listens there
  auto r = http.Post(HttpRequest{"http://127.0.0.1:" + std::to_string(port) + "/", {}, "{}", 2000});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
}

TEST(HttpSenderTest, LargeBodyIsSentWithoutExpectContinue) {
  HttpReceiver receiver([](const ReceivedRequest&) { return CannedResponse{200, {}, "ok"}; });
  CurlHttpSender http;
  const std::string body(2 << 20, 'x');  // above libcurl's Expect threshold
  auto r = http.Post(HttpRequest{receiver.Url(), {{"Content-Type", "text/plain"}}, body, 5000});
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  ASSERT_EQ(receiver.Count(), 1u);
  const ReceivedRequest req = receiver.Requests()[0];
  EXPECT_EQ(req.body, body);
  EXPECT_FALSE(req.headers.contains("expect"));
  EXPECT_EQ(req.headers.at("content-type"), "text/plain");
}

ChannelConfig MailChannel(const kvgate::testing::SmtpServer& server, const std::string& scheme) {
  return ChannelConfig{.name = "mail",
                       .type = ChannelConfig::Type::kEmail,
                       .url = scheme + "://127.0.0.1:" + std::to_string(server.port()),
                       .username = "alerts",
                       .password = "s3cret",
                       .from = "kvgate@example.com",
                       .to = {"oncall@example.com", "lead@example.com"},
                       .ca_file = server.cert()};
}

void ExpectMailDelivered(const std::string& scheme, const std::string& tls_mode) {
  TempDir dir;
  kvgate::testing::SmtpServer server(dir, tls_mode, "alerts", "s3cret");
  ASSERT_TRUE(server.error().empty()) << server.error();
  Harness h({MailChannel(server, scheme)});
  auto id = h.engine->TestFire("mail");
  ASSERT_TRUE(id.has_value());
  h.engine->RunOnce();
  auto d = h.Deliveries(*id)[0];
  ASSERT_EQ(d.status, "delivered") << d.last_error;
  auto mails = server.Mails();
  ASSERT_EQ(mails.size(), 1u);
  const json& m = mails[0];
  EXPECT_TRUE(m["tls"].get<bool>());
  EXPECT_EQ(m["authenticated_as"], "alerts");
  EXPECT_EQ(m["mail_from"], "kvgate@example.com");
  EXPECT_EQ(m["rcpt_tos"], json({"oncall@example.com", "lead@example.com"}));
  const std::string content = m["content"];
  EXPECT_NE(content.find("Subject: [kvgate] Test alert: test notification"), std::string::npos)
      << content;
  EXPECT_NE(content.find("Message-ID: <" + d.id + "@kvgate>"), std::string::npos);
  EXPECT_NE(content.find("Date: "), std::string::npos);
  EXPECT_NE(content.find("This is a test alert from kvgate"), std::string::npos);
}

TEST(EmailChannelTest, StartTlsWithAuth) { ExpectMailDelivered("smtp", "starttls"); }

TEST(EmailChannelTest, ImplicitTlsWithAuth) { ExpectMailDelivered("smtps", "implicit"); }

TEST(EmailChannelTest, RefusesServerWithoutStartTls) {
  TempDir dir;
  kvgate::testing::SmtpServer server(dir, "none", "alerts", "s3cret");
  ASSERT_TRUE(server.error().empty()) << server.error();
  Harness h({MailChannel(server, "smtp")});
  auto id = h.engine->TestFire("mail");
  h.engine->RunOnce();
  auto d = h.Deliveries(*id)[0];
  EXPECT_EQ(d.status, "pending");  // retried later, never sent in the clear
  EXPECT_FALSE(d.last_error.empty());
  EXPECT_TRUE(server.Mails().empty());
}

}  // namespace
}  // namespace kvgate::telemetry::alerts
