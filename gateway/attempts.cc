// The attempt loop: the route decision's eligible candidates in order, each with its retries,
// until one answers or a failure may not be tried elsewhere. Each attempt is planned by the
// client's API for its target's wire (passed through, or translated with an answer encoder) and
// made through the Upstream seam (a remote provider or the built-in engine); its outcome goes to
// the router's health and to the record's attempts list.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/ids.h"
#include "common/utf8.h"
#include "gateway/api/client_api.h"
#include "gateway/client_stream.h"
#include "gateway/gateway.h"
#include "gateway/keep_warm.h"
#include "gateway/local_provider.h"
#include "gateway/request_log.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

// The attempts list entry of one attempt.
// The entry of one attempt: as it begins (`r` nullopt: ok so far, RequestLog::Commit fills it in
// if the answer commits the log while the attempt runs), or with its result.
json AttemptJson(const router::Target& target, int key, const std::optional<AttemptResult>& r,
                 const telemetry::RequestRecord& rec, int64_t latency_us) {
  std::string status = "ok";
  if (r && !r->answered) {
    status = r->status_word;
  } else if (r && (rec.status == "client_disconnected" || rec.status == "shutdown")) {
    status = rec.status;
  } else if (r && r->outcome.failure != router::Failure::kNone) {
    status = rec.status.empty() ? "upstream_error" : rec.status;
  }
  json j = {{"target", target.name},
            {"provider", target.provider},
            {"status", status},
            {"http_status", !r                       ? 0
                            : r->outcome.status != 0 ? r->outcome.status
                                                     : rec.upstream_status},
            {"error", !r || r->message.empty() ? json() : json(Utf8Snippet(r->message, 300))},
            {"latency_ms", !r ? json() : json(double(latency_us) / 1000.0)}};
  if (target.keys > 1) j["key"] = key;
  return j;
}

// The provider's cache helpers for a request of `thread_id`. The prompt_cache_key is a hash of
// the thread id, not the id itself: fixed in length, and nothing of the client's naming leaves
// for OpenAI.
// With anthropic_cache_diagnostics, the previous message id is that of the thread's latest turn
// on this same provider (an id of another provider's, or of another organisation's, is one
// Anthropic cannot find).
providers::CacheHelpers CacheHelpersFor(const ProviderConnection& connection,
                                        const std::string& thread_id, const Recorder& recorder) {
  providers::CacheHelpers helpers;
  if (connection.prompt_cache_key_thread && !thread_id.empty()) {
    helpers.prompt_cache_key = "kvgate-" + HashApiKey(thread_id).substr(0, 32);
  }
  helpers.anthropic_auto_cache_ttl = connection.anthropic_auto_cache_ttl;
  if (connection.anthropic_cache_diagnostics && !thread_id.empty()) {
    const telemetry::ThreadView view = recorder.View(thread_id);
    for (const telemetry::TurnSummary& turn : view.by_target) {  // most recent first
      if (turn.provider == connection.name && !turn.response_id.empty()) {
        helpers.anthropic_previous_message_id = turn.response_id;
        break;
      }
    }
  }
  return helpers;
}

// The attempt's span (RequestLog::BeginAttempt opened it): what it went to, and the traceparent
// the upstream gets, whose parent is this span.
void TraceAttempt(const router::Target& target, AttemptPlan& plan, telemetry::RequestRecord& rec) {
  telemetry::AttemptSpan& span = rec.trace.attempts.back();
  span.provider_type = rec.provider_type;
  span.model = target.upstream_model;
  if (!telemetry::IsBuiltInEngine(target.type)) {
    span.server_address = plan.connection->url.host;
    span.server_port = plan.connection->url.port;
  }
  plan.traceparent =
      telemetry::FormatTraceparent(rec.trace.trace_id, span.span_id, rec.trace.sampled);
}

}  // namespace

AttemptResult FailedAttempt(providers::ClientError error, std::string status_word,
                            router::Failure failure, int status) {
  AttemptResult r;
  r.message = error.message();
  r.error = std::move(error);
  r.status_word = std::move(status_word);
  r.outcome.failure = failure;
  r.outcome.status = status;
  return r;
}

AttemptPlan Gateway::PlanAttempt(const InferenceCall& call, const router::Target& target, int key,
                                 telemetry::RequestRecord& rec) {
  // The record's target fields: this attempt's, until another replaces it.
  rec.target = target.name;
  rec.provider = target.provider;
  rec.provider_type = telemetry::ProviderTypeName(target.type);
  rec.upstream_model = target.upstream_model;
  rec.key_index = key;
  rec.upstream_status = 0;
  rec.upstream_request_id.clear();
  rec.usage = telemetry::Usage{};
  const ProviderConnection& connection = connections_.at(target.provider);
  AttemptPlan plan{.target = &target, .connection = &connection, .key_index = key};
  plan.options = providers::CallOptions{
      .endpoint = call.endpoint,
      .upstream_model = target.upstream_model,
      .api_key = connection.api_keys.empty()
                     ? std::string()
                     : connection.api_keys[static_cast<size_t>(key) % connection.api_keys.size()],
      .stream = call.stream,
      .client_wants_usage = call.client_wants_usage};
  plan.options.cache_helpers = CacheHelpersFor(connection, rec.thread_id, *deps_.recorder);
  if (target.bedrock_api == "invoke") plan.options.bedrock_api = providers::BedrockApi::kInvoke;
  if (keep_warm_ != nullptr) {
    plan.options.cache_helpers.anthropic_write_ttl =
        keep_warm_->WriteTtl(rec.thread_id, rec.model, target);
  }
  return plan;
}

asio::awaitable<void> Gateway::RunAttempts(const InferenceCall& call, api::ApiCall& api_call,
                                           const router::RouteDecision& decision,
                                           ClientStream& client) {
  router::Router& router = *deps_.router;
  RequestLog& log = client.log();
  auto& rec = client.record();
  const size_t fixed_headers = client.headers().size();
  std::optional<AttemptResult> last;  // the latest failure, answered if nothing else can be
  bool fall_back = true;              // false once a failure may not be tried elsewhere
  for (size_t i = 0; i < decision.eligible && fall_back; ++i) {
    const router::Candidate& candidate = decision.candidates[i];
    const router::Target& target = router.targets()[candidate.target];
    const int retries = decision.router != nullptr ? decision.router->retries : 0;
    int key = candidate.key;
    for (int attempt = 0; attempt <= retries && fall_back; ++attempt) {
      if (attempt > 0) {
        std::optional<std::chrono::milliseconds> delay =
            router.RetryDelay(attempt, last->outcome.retry_after_ms);
        if (!delay) break;  // a long Retry-After: the next target rather than a wait
        asio::steady_timer timer(co_await asio::this_coro::executor, *delay);
        co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        if (client.client_gone()) {
          client.RecordClientLeft("the client closed the connection while kvgate waited to retry");
          log.Commit();
          co_return;
        }
        // Rate limits are per key: a 429 is retried on the provider's next key.
        if (last->outcome.status == 429 && target.keys > 1) key = (key + 1) % target.keys;
      }
      // A half-open circuit admits one probe; a plain model (nowhere else to go) is always tried.
      if (!router.BeginAttempt(candidate.target, decision.router != nullptr)) break;
      client.headers().resize(fixed_headers);  // an earlier attempt's upstream headers go
      // The model that served the answer (a router's choice; the model asked for otherwise).
      client.headers().push_back({"x-kvgate-target", target.name});
      if (decision.router != nullptr) rec.route_facts = router.Facts(decision, target.name);
      log.set_price(target.price);
      AttemptPlan plan = PlanAttempt(call, target, key, rec);
      // The client's API tells the request on this target's wire (and its answer back).
      std::expected<api::WirePlan, AttemptResult> wire =
          api_call.Plan(call, plan.connection->type, plan.options);
      client.Encode(wire ? std::move(wire->encoder) : nullptr);
      const InferenceCall& sent = wire && wire->translated ? *wire->translated : call;
      const int64_t started_ns = deps_.clock->MonotonicNanos();
      log.BeginAttempt(AttemptJson(target, key, std::nullopt, rec, 0));
      if (rec.trace.active && !rec.trace.attempts.empty()) TraceAttempt(target, plan, rec);
      AttemptResult result;
      if (!wire) {
        result = std::move(wire.error());
      } else {
        StageKeepWarm(sent, plan, rec);
        result = co_await UpstreamFor(target).Attempt(sent, plan, client);
      }
      const int64_t latency_us = (deps_.clock->MonotonicNanos() - started_ns) / 1000;
      result.outcome.target = candidate.target;
      if (result.outcome.latency_us == 0) result.outcome.latency_us = latency_us;
      router.ReportAttempt(result.outcome);
      log.EndAttempt(AttemptJson(target, key, result, rec, latency_us));
      if (result.answered) {
        log.Commit();
        co_return;
      }
      last = std::move(result);
      fall_back = router.ShouldFallBack(decision.router, last->outcome);
    }
  }
  if (last) {
    co_await client.SendError(last->error, last->status_word);
  } else {
    // Every eligible target's half-open probe was taken by other requests.
    co_await client.SendError(
        providers::MakeOpenAIError(503,
                                   "every target of " + rec.model +
                                       " is recovering from "
                                       "failures and already probed; retry shortly",
                                   "server_error", "no_eligible_target"),
        "error");
  }
  log.Commit();
}

Upstream& Gateway::UpstreamFor(const router::Target& target) const {
  if (telemetry::IsBuiltInEngine(target.type) && deps_.engines != nullptr) return *deps_.engines;
  return deps_.remote != nullptr ? *deps_.remote : *remote_;
}

}  // namespace kvgate::gateway
