// The gateway proper: turns HTTP requests into upstream calls and telemetry records.
// Owns the model routes and the per-thread upstream clients; borrows the store, metrics and clock
// from main (which outlive it). Handle() is the server's request handler.
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
#include "gateway/config.h"
#include "gateway/http/server.h"
#include "gateway/providers/provider.h"
#include "gateway/recorder.h"
#include "gateway/response_threads.h"
#include "gateway/thread_scope.h"
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

// What kvgate logs at startup when server.admin_token is not set (the dashboard shows it too).
std::string_view OpenAdminApiWarning();

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

  // POST /v1/chat/completions, /v1/completions, /v1/responses and /v1/embeddings (proxy.cc):
  // recorded on every path, behind the last barrier (an exception becomes a recorded 500, or an
  // error event mid-stream).
  boost::asio::awaitable<void> HandleInference(http::Request& request, http::ResponseWriter& writer,
                                               providers::Endpoint endpoint);
  boost::asio::awaitable<void> ServeInference(http::Request& request, http::ResponseWriter& writer,
                                              providers::Endpoint endpoint, RequestLog& log);
  // Tries the decision's eligible candidates in order (each with its retries) until one answers
  // or a failure may not be tried elsewhere; records every attempt. Commits the log.
  boost::asio::awaitable<void> RunAttempts(const InferenceCall& call,
                                           const router::RouteDecision& decision,
                                           ClientStream& client);
  // The 400 for a request whose endpoint none of the decision's targets can serve (the Responses
  // API or embeddings on Anthropic or the built-in engine), naming each target and its provider
  // type; nullopt when one can (or could, once healthy again).
  std::optional<providers::ClientError> RefuseEndpoint(providers::Endpoint endpoint,
                                                       const router::RouteDecision& decision,
                                                       const std::string& model) const;
  // What kvgate knows of the response a Responses API request continues.
  struct PreviousResponse {
    std::string thread_id;   // its thread as stored; "" when kvgate does not know the response
    bool other_key = false;  // made by another gateway key than the request's (then no thread)
  };
  // The response `response_id` as gateway key `api_key_id` ("" without keys) may see it:
  // remembered, else read from the store on the blocking pool.
  boost::asio::awaitable<PreviousResponse> ThreadOfResponse(const std::string& response_id,
                                                            const std::string& api_key_id);
  // The id under which a turn of gateway key `api_key_id` naming thread `thread_id` is stored
  // (thread_scope.h): the id when the key owns it (the first key to use it; an owner not
  // remembered is the key of the thread's newest stored turn, read on the blocking pool), else
  // the key's own scoped thread. An unreadable store scopes it (never joins another's thread).
  boost::asio::awaitable<std::string> ScopeThread(const std::string& thread_id,
                                                  const std::string& api_key_id);
  // Exact cache answers a router would ask for (router::ProbeTargets), from the targets'
  // upstreams (Upstream::LookupPrefix).
  void ProbeEngines(const raw_json::Object& body, std::string_view api_key_id,
                    router::RequestFacts& facts) const;
  // Every route but inference.
  boost::asio::awaitable<void> HandleOther(http::Request& request, http::ResponseWriter& writer);
  boost::asio::awaitable<void> HandleReadApi(http::Request& request, http::ResponseWriter& writer);
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
  boost::asio::awaitable<void> HandleAlertsApi(http::Request& request,
                                               http::ResponseWriter& writer);
  // GET /v1/models and /v1/models/{model}.
  boost::asio::awaitable<void> HandleModels(const http::Request& request,
                                            http::ResponseWriter& writer);
  // The model entry of a target or router (its name), nullopt for an unknown name.
  std::optional<nlohmann::json> ModelJson(std::string_view name) const;
  // Every model and router, or those `key` may use.
  std::string ModelsJson(const KeyState* key = nullptr) const;
  // The gateway key check (server.api_keys): the key's id for telemetry ("" when no keys are
  // configured), or kUnauthenticated with the message for the client.
  Result<std::string> Authenticate(const http::Request& request) const;
  // The same check, giving the key itself (null when keys are off).
  Result<std::shared_ptr<KeyState>> AuthenticateKey(const http::Request& request) const;
  // The admin API's check (server.admin_token): true when no token is set or the request shows it.
  bool AdminAuthorized(const http::Request& request) const;
  // The model allow-list and the limits of `key` for a request of `model` (keys_api.cc): the
  // hold to keep while it runs, or the refusal (403, 429) already answered and recorded. `price`
  // is the dearest of the targets the request may reach (nullopt: none is priced), for the
  // cost the key's budget holds while the request runs.
  boost::asio::awaitable<std::optional<KeyAdmission>> AdmitKey(
      const std::shared_ptr<KeyState>& key, const std::string& model,
      const raw_json::Object& body, const std::optional<telemetry::Price>& price,
      ClientStream& client);
  // /api/keys and /api/keys/{id}[/rotate] (keys_api.cc); answers like HandleAlertsApi's.
  struct ApiAnswer {
    Result<nlohmann::json> result = nlohmann::json();
    int ok_status = 200;
    std::string allow;  // set when the path exists but not with this method
  };
  boost::asio::awaitable<ApiAnswer> HandleKeysApi(const http::Request& request);
  Result<nlohmann::json> EngineLookup(const http::Request& request) const;
  upstream::Client& ClientFor(size_t worker_index) { return *clients_[worker_index]; }
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
  // Blocking work (SQLite reads for /api/*) runs here, never on the event loops.
  boost::asio::thread_pool blocking_pool_{2};
  // With threads shared between replicas: the request path's read of a thread's latest stored
  // turn (Recorder::SyncThread), on its own threads so that a slow dashboard query never holds a
  // request up. Absent otherwise.
  std::optional<boost::asio::thread_pool> thread_reads_;
  // Responses API response id -> thread (internally locked).
  ResponseThreads response_threads_;
  // Which gateway key owns each thread id (internally locked).
  ThreadOwners thread_owners_;
  // The gateway keys and their limits (internally locked); shared with the recorder listener and
  // the metrics section that read it, which may outlive this object.
  std::shared_ptr<VirtualKeys> keys_;
};

}  // namespace kvgate::gateway
