// The gateway's side of keep-warm (keep_warm.h): what a ping resends is staged before each
// attempt of a kept-warm thread's turn; the timer runs the service's decisions on event loop 0;
// each ping goes through the same Upstream as a client's attempt, to the thread's last target
// and provider key, and is recorded (purpose "keep_warm") like any request, its answer dropped.
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "common/ids.h"
#include "common/utf8.h"
#include "gateway/client_stream.h"
#include "gateway/gateway.h"
#include "gateway/keep_warm.h"
#include "gateway/request_log.h"

namespace kvgate::gateway {
namespace {

namespace asio = boost::asio;

// How often the timer looks for due threads at most: a thread's due time can come nearer while
// it sleeps (a turn recorded meanwhile), and a ping must go before the expiry, a tenth of the TTL
// later.
constexpr int64_t kMaxSleepUs = 100'000;
constexpr int64_t kMinSleepUs = 5'000;

// Where a ping's answer goes: nowhere. Nobody waits for it; the record keeps what it cost.
class DiscardWriter final : public http::ResponseWriter {
 public:
  asio::awaitable<Status> Send(int, std::string_view, std::string,
                               std::vector<http::Header>) override {
    co_return Status{};
  }
  asio::awaitable<Status> BeginStream(int, std::string_view, std::vector<http::Header>) override {
    co_return Status{};
  }
  asio::awaitable<Status> WriteChunk(std::string_view) override { co_return Status{}; }
  asio::awaitable<Status> EndStream() override { co_return Status{}; }
  void SetCutNotice(std::string_view) override {}
  void OnClientGone(std::function<void()>) override {}
  bool client_gone() const override { return false; }
};

const AnswerStyle& PingStyle() {
  static const AnswerStyle style{};
  return style;
}

}  // namespace

void Gateway::StageKeepWarm(const InferenceCall& sent, const AttemptPlan& plan,
                            const telemetry::RequestRecord& rec) {
  if (!keep_warm_ || rec.thread_id.empty() || plan.target == nullptr) return;
  if (!keep_warm_->Wants(rec.model, *plan.target, sent.endpoint)) return;
  std::optional<std::string> body = PingBody(sent.body);
  if (!body) return;
  std::optional<size_t> target = deps_.router->FindTarget(plan.target->name);
  if (!target) return;
  keep_warm_->Stage(rec.request_id,
                    PingTemplate{.endpoint = sent.endpoint,
                                 .body = std::move(*body),
                                 .target = *target,
                                 .key_index = plan.key_index,
                                 .model = rec.model,
                                 .record_endpoint = rec.endpoint,
                                 .api_key_id = rec.api_key_id,
                                 .anthropic_version = plan.options.anthropic_version,
                                 .anthropic_beta = plan.options.anthropic_beta,
                                 .default_max_tokens = plan.options.default_max_tokens});
}

asio::awaitable<void> Gateway::KeepWarmLoop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    const int64_t now = deps_.clock->NowUnixMicros();
    const std::optional<int64_t> next = keep_warm_->RunDue(now);
    const int64_t sleep_us = std::clamp(next ? *next - now : kMaxSleepUs, kMinSleepUs, kMaxSleepUs);
    timer.expires_after(std::chrono::microseconds(sleep_us));
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
  }
}

asio::awaitable<void> Gateway::SendPing(std::shared_ptr<const PingTemplate> ping,
                                        std::string thread_id) {
  RequestLog log(*deps_.recorder, *deps_.clock, deps_.clock->MonotonicNanos());
  telemetry::RequestRecord& rec = log.record();
  rec.request_id = NewId("req");
  rec.purpose = std::string(telemetry::kPurposeKeepWarm);
  rec.thread_id = std::move(thread_id);
  rec.endpoint = ping->record_endpoint;
  rec.model = ping->model;
  rec.api_key_id = ping->api_key_id;
  rec.stream = false;
  const router::Router& router = *deps_.router;
  if (ping->target >= router.targets().size()) co_return;
  const router::Target& target = router.targets()[ping->target];
  DiscardWriter writer;
  ClientStream client(writer, log, PingStyle());
  Result<raw_json::Value> parsed = raw_json::Parse(ping->body);
  if (!parsed || !parsed->is_object()) {
    log.SetError(500, "error", "kvgate could not read its own keep-warm body");
    log.Commit();
    co_return;
  }
  const InferenceCall call{.endpoint = ping->endpoint,
                           .body = raw_json::Object(*parsed),
                           .stream = false,
                           .client_wants_usage = false,
                           .worker_index = 0};
  log.set_price(target.price);
  AttemptPlan plan = PlanAttempt(call, target, ping->key_index, rec);
  plan.options.anthropic_version = ping->anthropic_version;
  plan.options.anthropic_beta = ping->anthropic_beta;
  plan.options.default_max_tokens = ping->default_max_tokens;
  const int64_t started_ns = deps_.clock->MonotonicNanos();
  log.BeginAttempt({{"target", target.name}, {"provider", target.provider}, {"status", "ok"}});
  AttemptResult result;
  try {
    result = co_await UpstreamFor(target).Attempt(call, plan, client);
  } catch (const std::exception& e) {
    result = FailedAttempt(providers::MakeOpenAIError(500, e.what(), "server_error"), "error",
                           router::Failure::kNone);
  }
  const double latency_ms = double(deps_.clock->MonotonicNanos() - started_ns) / 1e6;
  if (!result.answered && !log.committed()) {
    log.SetError(result.error.status, result.status_word, Utf8Snippet(result.message, 300));
  }
  log.EndAttempt(
      {{"target", target.name},
       {"provider", target.provider},
       {"status", result.answered ? "ok" : result.status_word},
       {"http_status", result.outcome.status != 0 ? result.outcome.status : rec.upstream_status},
       {"error", result.message.empty() ? nlohmann::json()
                                        : nlohmann::json(Utf8Snippet(result.message, 300))},
       {"latency_ms", latency_ms}});
  log.Commit();
}

}  // namespace kvgate::gateway
