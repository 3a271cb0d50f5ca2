// The gateway proper: turns HTTP requests into upstream calls and telemetry records.
// Owns the model routes and the per-thread upstream clients; borrows the store, metrics and clock
// from main (which outlive it). Handle() is the server's request handler; it hands /api/* and
// GET /v1/models to the admin module (admin/admin_api.h), which it owns.
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <map>
#include <chrono>
#include <optional>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "common/clock.h"
#include "gateway/admin/admin_api.h"
#include "gateway/api/apis.h"
#include "gateway/auto_threads.h"
#include "gateway/config.h"
#include "gateway/http/server.h"
#include "gateway/providers/provider.h"
#include "gateway/recorder.h"
#include "gateway/thread_directory.h"
#include "gateway/upstream.h"
#include "gateway/upstream/client.h"
#include "gateway/virtual_keys.h"
#include "router/router.h"
#include "telemetry/key_store.h"
#include "telemetry/metrics.h"
#include "telemetry/store.h"

namespace kvgate::gateway {

class LocalEngines;  // the built-in engine instances (local providers), see local_provider.h
class Alerting;      // monitors and alert delivery, see alerting.h
class RequestLog;    // request_log.h
class KeepWarm;      // keep_warm.h
struct PingTemplate;  // keep_warm.h

// The body of the 500 a request gets when kvgate fails on it (an escaped exception).
std::string InternalErrorJson(std::string_view request_id);

struct GatewayDeps {
  telemetry::TelemetryStore* store = nullptr;      // required: the read API queries it
  telemetry::GatewayMetrics* metrics = nullptr;    // required: /metrics
  Recorder* recorder = nullptr;                    // required: where finished requests go
  const Clock* clock = nullptr;                    // required
  router::Router* router = nullptr;                // required: the targets and the routers
  LocalEngines* engines = nullptr;                 // optional: serves targets of type local
  Alerting* alerting = nullptr;                    // optional: /api/monitors, /api/alerts
  // optional: answers for every remote target instead of the HTTP client (tests of the attempt
  // loop); must outlive the gateway.
  Upstream* remote = nullptr;
  // optional: where keys made through /api/keys are kept (without it the config's keys are all
  // there is, and their spend starts at zero on every start).
  telemetry::KeyStore* key_store = nullptr;
  // > 0: key_store is shared by replicas (PostgreSQL); keys and spend are re-read this often.
  std::chrono::milliseconds shared_keys_refresh{0};
};

class Gateway {
 public:
  // The providers' connections come from the config (BuildConnections); the targets from
  // deps.router. Errors: an invalid base_url.
  static Result<std::unique_ptr<Gateway>> Create(const GatewayConfig& config, GatewayDeps deps);
  ~Gateway();

  // The http::Handler: routes /v1/*, /healthz, /metrics, /api/*, and the dashboard (/, /assets/*).
  boost::asio::awaitable<void> Handle(http::Request& request, http::ResponseWriter& writer);
  http::Handler handler();
  // ServerOptions::on_rejected: records an inference request the server could not read (413,
  // 431, malformed HTTP) and gives its answer an x-request-id.
  std::vector<http::Header> OnRejected(const http::Rejection& rejection);
  // ServerOptions::on_expect_continue (expect_continue.cc): the 401 a request without a valid
  // gateway key (/v1/*) or admin token (/api/*) gets before its body is read, recorded for the
  // inference endpoints; nullopt lets the body come.
  std::optional<http::EarlyAnswer> OnExpectContinue(const http::Request& request);

  // Per event loop state: the server calls OnLoopStart (ServerOptions::on_thread_start) once on
  // each of its `loops` threads before serving; ReleaseClients() after Server::Stop() and before
  // the Server is destroyed (the clients' sockets belong to the loops' io_contexts).
  void PrepareLoops(size_t loops) { clients_.resize(loops); }
  void OnLoopStart(size_t index, boost::asio::any_io_executor executor);
  void ReleaseClients() { clients_.clear(); }
  // Waits for the read API's queries still running on the blocking pool (after Server::Stop(),
  // before the Server is destroyed: each hands its result to a loop's executor).
  void FinishBlockingWork() {
    blocking_pool_.join();
    if (thread_reads_) thread_reads_->join();
  }

 private:
  Gateway(const GatewayConfig& config, GatewayDeps deps);

  // POST of a client API (inference.cc, the hall): recorded on every path, behind the last
  // barrier (an exception becomes a recorded 500, or an error event mid-stream).
  boost::asio::awaitable<void> HandleInference(http::Request& request, http::ResponseWriter& writer,
                                               const api::ClientApi& api);
  // parse -> thread -> route -> admit -> attempts -> commit.
  boost::asio::awaitable<void> ServeInference(http::Request& request, http::ResponseWriter& writer,
                                              const api::ClientApi& api, RequestLog& log);
  // Parse: the gateway key (`key`, null without keys), the body, then the API's own fields; the
  // client's error otherwise.
  // Gives a request that names no thread the automatic thread it continues, or a new one
  // (auto_threads.h); its fingerprint goes to the log, for the router and the diagnosis.
  void InferThread(const http::Request& request, const api::ApiCall& call, RequestLog& log);
  std::expected<std::unique_ptr<api::ApiCall>, providers::ClientError> ReadRequest(
      const http::Request& request, const api::ClientApi& api, std::shared_ptr<KeyState>& key,
      telemetry::RequestRecord& rec) const;
  // Route: the decision with at least one eligible candidate, or the client's error (404 for an
  // unknown model, 400 for targets that cannot serve the API, 503 when none is eligible now).
  std::expected<router::RouteDecision, providers::ClientError> Route(
      const http::Request& request, const api::ClientApi& api, const api::ApiCall& call,
      RequestLog& log, ClientStream& client) const;
  // Exact cache answers from the built-in engines a router would ask (router::ProbeTargets).
  void ProbeEngines(const api::ApiCall& call, std::string_view api_key_id,
                    router::RequestFacts& facts) const;
  // Tries the decision's eligible candidates in order (each with its retries) until one answers
  // or a failure may not be tried elsewhere; records every attempt. Commits the log (attempts.cc).
  boost::asio::awaitable<void> RunAttempts(const InferenceCall& call, api::ApiCall& api_call,
                                           const router::RouteDecision& decision,
                                           ClientStream& client);
  // One attempt's plan on `target` with its provider's key `key`; fills the record's target
  // fields.
  AttemptPlan PlanAttempt(const InferenceCall& call, const router::Target& target, int key,
                          telemetry::RequestRecord& rec);
  // Every route but inference: /api/* and GET /v1/models go to admin_.
  boost::asio::awaitable<void> HandleOther(http::Request& request, http::ResponseWriter& writer);
  // POST /v1/messages/count_tokens (count_tokens.cc): counted by the serving model's own
  // tokenizer (Anthropic's, or the built-in engine's), not recorded.
  boost::asio::awaitable<void> HandleCountTokens(http::Request& request,
                                                 http::ResponseWriter& writer);
  struct CountTarget {
    const router::Target* target = nullptr;
    raw_json::Value body;  // the request's JSON object (its bytes are the request's)
  };
  std::expected<CountTarget, providers::ClientError> CountTokensTarget(
      const http::Request& request) const;
  // The gateway key check (server.api_keys): the key's id for telemetry ("" when no keys are
  // configured), or kUnauthenticated with the message for the client.
  Result<std::string> Authenticate(const http::Request& request) const;
  // The same check, giving the key itself (null when keys are off).
  Result<std::shared_ptr<KeyState>> AuthenticateKey(const http::Request& request) const;
  // The model allow-list and the limits of `key` for a request of `model` (key_admission.cc): the
  // hold to keep while it runs, or the refusal (403, 429) already answered and recorded. `price`
  // is the dearest of the targets the request may reach (nullopt: none is priced), for the
  // cost the key's budget holds while the request runs.
  boost::asio::awaitable<std::optional<KeyAdmission>> AdmitKey(
      const std::shared_ptr<KeyState>& key, const std::string& model,
      const raw_json::Object& body, const std::optional<telemetry::Price>& price,
      ClientStream& client);
  upstream::Client& ClientFor(size_t worker_index) { return *clients_[worker_index]; }
  // Keep-warm (keep_warm_ping.cc): the timer that runs the service's due decisions, on event
  // loop 0; one ping, recorded with purpose "keep_warm", sent on that loop to the thread's target
  // with its provider key, its answer discarded.
  boost::asio::awaitable<void> KeepWarmLoop();
  boost::asio::awaitable<void> SendPing(std::shared_ptr<const PingTemplate> ping,
                                        std::string thread_id);
  // Before an attempt: what a ping of this turn would resend, when its thread is kept warm.
  void StageKeepWarm(const InferenceCall& sent, const AttemptPlan& plan,
                     const telemetry::RequestRecord& rec);
  // The upstream that serves `target`'s provider (the engines for local, else remote_): its
  // attempts, its prefix lookups and its token counts.
  Upstream& UpstreamFor(const router::Target& target) const;

  // Constant after construction.
  GatewayConfig config_;
  GatewayDeps deps_;
  std::map<std::string, ProviderConnection> connections_;  // by provider name
  // Every key of every provider, taken out of what upstreams say on the error path (remote_ and
  // count_tokens); declared before remote_, which borrows it.
  SecretRedactor redactor_;
  std::unique_ptr<Upstream> remote_;
  upstream::ClientOptions client_options_;
  // One upstream client (connection pool) per event loop, used only from that loop: no locks.
  std::vector<std::unique_ptr<upstream::Client>> clients_;
  // Blocking work (SQLite reads for /api/* and the request path) runs here, never on the event
  // loops.
  boost::asio::thread_pool blocking_pool_{2};
  // With threads shared between replicas: the request path's read of a thread's latest stored
  // turn (Recorder::SyncThread), on its own threads so that a slow dashboard query never holds a
  // request up. Absent otherwise.
  std::optional<boost::asio::thread_pool> thread_reads_;
  // Which thread a request belongs to: owners of thread ids, Responses API responses (internally
  // locked; its store reads run on blocking_pool_).
  ThreadDirectory threads_{*deps_.store, blocking_pool_};
  // Threads inferred for requests that name none (internally locked); null with
  // `threads: {auto: false}`. Shared with the recorder listener that settles each request.
  std::shared_ptr<AutoThreads> auto_threads_;
  // The client APIs by path (constant).
  api::ClientApis apis_;
  // The gateway keys and their limits (internally locked); shared with the recorder listener and
  // the metrics section that read it, which may outlive this object.
  std::shared_ptr<VirtualKeys> keys_;
  // The admin API and the model list; borrows keys_ and blocking_pool_, so declared after them.
  std::optional<AdminApi> admin_;
  // Keep-warm pings (null when no model or router enables keep_warm); shared with the recorder's
  // observer and the metrics section. Its pings run on event loop 0 (ping_executor_, set by
  // OnLoopStart before that loop serves).
  std::shared_ptr<KeepWarm> keep_warm_;
  std::optional<boost::asio::any_io_executor> ping_executor_;
};

}  // namespace kvgate::gateway
