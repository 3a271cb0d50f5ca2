// The inference path ("the hall"): every POST of a client API (gateway/api/) goes
//   parse (the key, the body, the API's own fields) -> thread -> route -> admit (the key's
//   limits) -> attempts (attempts.cc: retry or fall back while nothing reached the client) ->
//   commit,
// and its RequestLog records what happened on every path, with the route and every attempt. The
// hall knows no client API: what differs between them is the ApiCall's.
#include <algorithm>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/utf8.h"
#include "gateway/api/client_api.h"
#include "gateway/client_stream.h"
#include "gateway/gateway.h"
#include "gateway/local_provider.h"
#include "gateway/request_log.h"
#include "gateway/run_blocking.h"
#include "gateway/tracked_writer.h"
#include "local_engine/block_size.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

// The dearest rates of the targets a decision may try (a fallback may land on any of them), rate
// by rate, for the cost a key's budget holds at admission; nullopt when none of them is priced.
std::optional<telemetry::Price> DearestPrice(const router::Router& router,
                                             const router::RouteDecision& decision) {
  std::optional<telemetry::Price> dearest;
  auto raise = [](telemetry::Rates& to, const telemetry::Rates& from) {
    to.input = std::max(to.input, from.input);
    to.cached_input = std::max(to.cached_input, from.cached_input);
    to.cache_write_5m = std::max(to.cache_write_5m, from.cache_write_5m);
    to.cache_write_1h = std::max(to.cache_write_1h, from.cache_write_1h);
    to.cache_write_no_ttl = std::max(to.cache_write_no_ttl, from.cache_write_no_ttl);
    to.output = std::max(to.output, from.output);
  };
  for (size_t i = 0; i < decision.eligible; ++i) {
    const std::optional<telemetry::Price>& price =
        router.targets()[decision.candidates[i].target].price;
    if (!price) continue;
    if (!dearest) dearest.emplace();
    raise(dearest->base, price->base);
    // A long-context tier's rates count as base ones: the estimate cannot tell the tier.
    if (price->tier_threshold_tokens) raise(dearest->base, price->above);
  }
  return dearest;
}

}  // namespace

asio::awaitable<void> Gateway::HandleInference(http::Request& request, http::ResponseWriter& writer,
                                               const api::ClientApi& api) {
  RequestLog log(*deps_.recorder, *deps_.clock, request.arrival_monotonic_ns);
  auto& rec = log.record();
  rec.request_id = NewId("req");
  rec.endpoint = std::string(providers::EndpointName(api.endpoint()));
  // The client's trace continued (or a new one), when spans are exported (telemetry.otlp); the
  // metrics' exemplars name that trace, or without export the client's.
  const std::string_view traceparent = request.header("traceparent");
  if (config_.otlp && config_.otlp->traces) {
    rec.trace = telemetry::StartRequestTrace(traceparent, config_.otlp->sample_ratio);
    rec.trace_id = telemetry::HexOf(rec.trace.trace_id);
  } else if (std::optional<telemetry::TraceParent> client =
                 traceparent.empty() ? std::nullopt : telemetry::ParseTraceparent(traceparent)) {
    rec.trace_id = telemetry::HexOf(client->trace_id);
  }
  TrackedWriter tracked(writer, {});
  std::string failure;
  try {
    co_await ServeInference(request, tracked, api, log);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (failure.empty()) co_return;
  // The last barrier: the turn is recorded as kvgate's error (never as a client that left), and
  // the client gets a 500 with the request's id, or an error event if its stream had begun, in
  // the shape its API reads.
  std::fprintf(stderr, "kvgate: internal error on request %s: %s\n", rec.request_id.c_str(),
               failure.c_str());
  const int status = tracked.status() == 0 ? 500 : tracked.status();
  log.SetError(status, "error", "kvgate internal error: " + Utf8Snippet(failure));
  providers::ClientError error{.status = 500,
                               .body = json::parse(InternalErrorJson(rec.request_id))};
  if (api.style().shape_error != nullptr) error = api.style().shape_error(error);
  std::string body = JsonText(error.body);
  std::string event = api.style().error_event != nullptr ? api.style().error_event(error)
                                                         : "data: " + body + "\n\n";
  if (tracked.status() == 0) {
    std::vector<http::Header> headers{{"x-request-id", rec.request_id}};
    co_await tracked.Send(500, kJson, std::move(body), std::move(headers));
  } else if (tracked.stream_open()) {
    co_await tracked.WriteChunk(event);
    co_await tracked.EndStream();
  }
  log.Commit();
}

asio::awaitable<void> Gateway::ServeInference(http::Request& request, http::ResponseWriter& writer,
                                              const api::ClientApi& api, RequestLog& log) {
  auto& rec = log.record();
  ClientStream client(writer, log, api.style());
  // Parse: who asks (gateway keys are optional), and what.
  std::shared_ptr<KeyState> key;
  std::expected<std::unique_ptr<api::ApiCall>, providers::ClientError> call =
      ReadRequest(request, api, key, rec);
  if (!call) {
    // A refused request is still filed under the key's own thread.
    if (key && !rec.thread_id.empty()) {
      rec.thread_id = co_await threads_.Scope(rec.thread_id, rec.api_key_id);
    }
    co_await client.SendError(call.error(), "error");
    co_return;
  }
  api::ApiCall& api_call = **call;
  if (std::optional<providers::ClientError> refused =
          co_await api_call.ResolveThread(threads_, rec)) {
    co_await client.SendError(*refused, "error");
    co_return;
  }
  // A request that names no thread joins the one whose last turn it continues (auto_threads.h).
  if (rec.thread_id.empty() && auto_threads_ && api_call.whole_prompt() &&
      !api_call.thread_from_answer()) {
    InferThread(request, api_call, log);
  }
  // With threads shared between replicas, the thread's latest stored turn is read once, off the
  // event loop, before anything looks at the thread (the router, the cache helpers, the
  // diagnosis): another replica may have served its previous turn.
  if (thread_reads_ && !rec.thread_id.empty()) {
    const Recorder& recorder = *deps_.recorder;
    const std::string& thread_id = rec.thread_id;
    co_await RunOnPool<bool>(*thread_reads_, [&recorder, &thread_id] {
      recorder.SyncThread(thread_id);
      return true;
    });
    rec.thread_synced = true;
  }
  // Route: the request's facts and the thread's memory in, an ordered list of candidates out.
  std::expected<router::RouteDecision, providers::ClientError> decision =
      Route(request, api, api_call, log, client);
  if (!decision) {
    co_await client.SendError(decision.error(), "error");
    co_return;
  }
  // Admit: the key's model allow-list and limits, last, so that a request refused for its own
  // faults above costs its key nothing. The hold is given back when the request is over.
  std::optional<KeyAdmission> admission = co_await AdmitKey(
      key, rec.model, api_call.body(), DearestPrice(*deps_.router, *decision), client);
  if (!admission) co_return;
  // Attempts, then commit (RunAttempts commits the log on every path).
  const InferenceCall inference{
      .endpoint = api.endpoint(),
      .body = api_call.body(),
      .stream = rec.stream,
      .client_wants_usage = providers::ClientWantsStreamUsage(api_call.body()),
      .worker_index = request.worker_index};
  client.OnAnswerId([&api_call](telemetry::RequestRecord& r) { api_call.OnAnswerId(r); });
  co_await RunAttempts(inference, api_call, *decision, client);
}

void Gateway::InferThread(const http::Request& request, const api::ApiCall& call, RequestLog& log) {
  auto& rec = log.record();
  auto fingerprint =
      std::make_shared<const telemetry::PromptFingerprint>(telemetry::Fingerprint(call.body()));
  if (fingerprint->elements.empty()) return;  // no prompt kvgate can read: nothing to continue
  const uint64_t tenant =
      TenantOf(rec.api_key_id, request.header("authorization"), request.header("x-api-key"),
               request.header("api-key"), request.header("x-goog-api-key"));
  AutoThreads::Assignment assigned =
      auto_threads_->Assign(rec.request_id, tenant, call.body(), *fingerprint);
  // Under gateway keys the id is the key's (thread_scope.h): a new random id, so claimed as is.
  rec.thread_id = rec.api_key_id.empty() ? std::move(assigned.thread_id)
                                         : threads_.ClaimNew(assigned.thread_id, rec.api_key_id);
  rec.thread_source = telemetry::kThreadFromAuto;
  rec.thread_parent = std::move(assigned.parent);
  log.set_fingerprint(std::move(fingerprint));  // hashed once: the router and the diagnosis
}

std::expected<std::unique_ptr<api::ApiCall>, providers::ClientError> Gateway::ReadRequest(
    const http::Request& request, const api::ClientApi& api, std::shared_ptr<KeyState>& key,
    telemetry::RequestRecord& rec) const {
  Result<std::shared_ptr<KeyState>> found = AuthenticateKey(request);
  if (!found) {
    return std::unexpected(providers::MakeOpenAIError(401, found.error().message,
                                                      "invalid_request_error", "invalid_api_key"));
  }
  key = std::move(*found);
  if (key) rec.api_key_id = key->id();
  // A compressed body would read as malformed JSON; say what is wrong instead (RFC 9110 15.5.16).
  if (std::string_view encoding = request.header("content-encoding");
      !encoding.empty() && encoding != "identity") {
    return std::unexpected(providers::MakeOpenAIError(415,
                                                      "Content-Encoding " + Utf8Snippet(encoding) +
                                                          " is not supported; send the body "
                                                          "uncompressed",
                                                      "invalid_request_error",
                                                      "unsupported_content_encoding"));
  }
  // Validated once; the few fields kvgate needs are read from the raw bytes, and the body is
  // forwarded from the same bytes (raw_json): a tree is built only for the adapters that rewrite
  // it.
  Result<raw_json::Value> parsed = raw_json::Parse(request.body);
  if (!parsed || !parsed->is_object()) {
    return std::unexpected(api::BadRequest(
        parsed ? "The request body must be a JSON object"
               : "We could not parse the JSON body of your request: " + parsed.error().message,
        "invalid_json"));
  }
  return api.Read(request, raw_json::Object(*parsed), rec);
}

std::expected<router::RouteDecision, providers::ClientError> Gateway::Route(
    const http::Request& request, const api::ClientApi& api, const api::ApiCall& call,
    RequestLog& log, ClientStream& client) const {
  auto& rec = log.record();
  const router::Router& router = *deps_.router;
  router::RequestFacts facts;
  facts.model = rec.model;
  facts.thread_id = rec.thread_id;
  facts.pinned_target = request.header("x-kvgate-route-target");
  facts.now_us = deps_.clock->NowUnixMicros();
  facts.stream = rec.stream;
  facts.prompt_bytes = request.body.size();
  call.FillNeeds(facts);
  telemetry::ThreadView thread;
  if (router.FindRouter(rec.model) != nullptr) {
    call.FillContentFacts(facts);
    if (!rec.thread_id.empty() && call.whole_prompt()) {
      std::shared_ptr<const telemetry::PromptFingerprint> fingerprint = log.fingerprint();
      if (!fingerprint) {
        fingerprint = std::make_shared<const telemetry::PromptFingerprint>(
            telemetry::Fingerprint(call.body()));
        log.set_fingerprint(fingerprint);  // hashed once, for the diagnosis too
      }
      facts.prompt_bytes = fingerprint->TotalBytes();
      facts.fingerprint = std::move(fingerprint);
      thread = deps_.recorder->View(rec.thread_id);
    }
    ProbeEngines(call, rec.api_key_id, facts);
  } else if (auto t = router.FindTarget(rec.model);
             t && router.targets()[*t].keys > 1 && !rec.thread_id.empty()) {
    thread = deps_.recorder->View(rec.thread_id);  // the key this thread used last
  }
  if ((!rec.thread_id.empty() || call.thread_from_answer()) && call.whole_prompt()) {
    log.set_prompt(call.body().value());  // request.body outlives the log
  }

  Result<router::RouteDecision> decision = router.Route(facts, thread);
  if (!decision && decision.error().code == ErrorCode::kNotFound) {
    return std::unexpected(providers::MakeOpenAIError(
        404,
        "The model `" + Utf8Snippet(rec.model) +
            "` does not exist or is not configured in this kvgate (see GET /v1/models)",
        "invalid_request_error", "model_not_found", "model"));
  }
  if (!decision) {
    return std::unexpected(api::BadRequest(decision.error().message, "invalid_route_target"));
  }
  if (decision->router != nullptr) {
    rec.route = router.DecisionText(*decision);
    client.headers().push_back({"x-kvgate-router", decision->router->name});
  }
  if (std::optional<providers::ClientError> refused =
          api.RefuseTargets(*decision, router.targets(), rec.model)) {
    return std::unexpected(std::move(*refused));
  }
  if (decision->eligible == 0) {
    std::string why;
    for (const router::Candidate& c : decision->candidates) {
      why += (why.empty() ? "" : "; ") + router.targets()[c.target].name + ": " + c.why_not;
    }
    return std::unexpected(providers::MakeOpenAIError(
        503, "no target of router " + rec.model + " can serve this request (" + why + ")",
        "server_error", "no_eligible_target"));
  }
  return std::move(*decision);
}

void Gateway::ProbeEngines(const api::ApiCall& call, std::string_view api_key_id,
                           router::RequestFacts& facts) const {
  const std::vector<size_t> targets = deps_.router->ProbeTargets(facts.model);
  if (targets.empty()) return;
  // The chat body the engines would tokenize (a Responses request's is its translation).
  std::optional<std::string> chat = call.ProbeBody();
  Result<raw_json::Value> parsed =
      chat ? raw_json::Parse(*chat) : MakeError(ErrorCode::kInvalidArgument, "no chat body");
  if (!parsed || !parsed->is_object()) return;
  const raw_json::Object body(*parsed);
  for (size_t t : targets) {
    const router::Target& target = deps_.router->targets()[t];
    // The key's own cache; upstreams that keep none kvgate can read (remote replicas) say so.
    Result<PrefixLookup> lookup = UpstreamFor(target).LookupPrefix(target, body, api_key_id);
    if (!lookup) continue;
    facts.probes.push_back({.target = t,
                            .prompt_tokens = lookup->prompt_tokens,
                            .cached_tokens = lookup->cached_tokens,
                            .load = lookup->running + lookup->waiting,
                            .block_tokens = engine::kBlockSize});
  }
}

}  // namespace kvgate::gateway
