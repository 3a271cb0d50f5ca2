#include "gateway/gateway.h"

#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/utf8.h"
#include "gateway/alerting.h"
#include "gateway/answers.h"
#include "gateway/keep_warm.h"
#include "gateway/request_log.h"
#include "gateway/run_blocking.h"
#include "gateway/targets.h"
#include "gateway/tracked_writer.h"
#include "gateway/web_assets.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";
// Threads that read shared threads' latest turns for the request path: several, so that one
// read waiting on the database does not queue the requests behind it.
constexpr size_t kSharedThreadReaders = 4;

}  // namespace

std::string InternalErrorJson(std::string_view request_id) {
  return ErrorJson("kvgate failed on this request with an internal error (request " +
                       std::string(request_id) +
                       "); it is recorded, and the server log has the "
                       "details",
                   "server_error", "internal_error");
}

Result<std::unique_ptr<Gateway>> Gateway::Create(const GatewayConfig& config, GatewayDeps deps) {
  auto connections = BuildConnections(config);
  if (!connections) return std::unexpected(connections.error());
  std::unique_ptr<Gateway> gateway(new Gateway(config, deps));
  gateway->connections_ = std::move(*connections);
  std::vector<std::string> provider_keys;
  for (const auto& [name, connection] : gateway->connections_) {
    provider_keys.insert(provider_keys.end(), connection.api_keys.begin(),
                         connection.api_keys.end());
    // Bedrock: the session token goes out with every request (an upstream may quote it); the
    // secret never does, but is as secret as any key.
    for (const std::string* secret :
         {&connection.aws.secret_access_key, &connection.aws.session_token}) {
      if (!secret->empty()) provider_keys.push_back(*secret);
    }
  }
  gateway->redactor_ = SecretRedactor(provider_keys);
  if (config.diagnosis_excerpts) deps.recorder->KeepPromptTexts(gateway->redactor_);
  if (deps.recorder->shares_threads()) gateway->thread_reads_.emplace(kSharedThreadReaders);
  for (const router::Target& t : deps.router->targets()) {
    if (!gateway->connections_.contains(t.provider)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "model " + t.name + " names unknown provider " + t.provider);
    }
  }
  // The keys' spend is read back from the requests the store holds: all of them, the crash
  // journal's included.
  if (deps.key_store != nullptr) {
    if (Status flushed = deps.store->Flush(); !flushed) {
      std::fprintf(stderr,
                   "kvgate: warning: telemetry could not be written before the keys' "
                   "spend was read (%s); budgets may count less than was spent\n",
                   flushed.error().message.c_str());
    }
  }
  gateway->keys_ =
      std::make_shared<VirtualKeys>(*deps.clock, deps.key_store, deps.shared_keys_refresh);
  if (Status loaded = gateway->keys_->Load(config.api_keys); !loaded) {
    return std::unexpected(loaded.error());
  }
  deps.recorder->AddListener(
      [keys = gateway->keys_](const telemetry::RequestRecord& record) { keys->OnRecord(record); });
  if (config.auto_threads) {
    gateway->auto_threads_ = std::make_shared<AutoThreads>();
    deps.recorder->AddListener(
        [threads = gateway->auto_threads_](const telemetry::RequestRecord& record) {
          threads->Settle(record);
        });
  }
  deps.metrics->registry().AddSection(
      [keys = gateway->keys_](std::string& out) { keys->ExposeMetrics(out); });
  if (deps.alerting != nullptr) {
    deps.alerting->SetBudgetSource([keys = gateway->keys_](const std::string& api_key_id) {
      return keys->BudgetFraction(api_key_id);
    });
  }
  bool keep_warm = false;
  for (const auto& [name, c] : config.keep_warm) keep_warm = keep_warm || c.enabled;
  if (keep_warm) {
    Gateway* self = gateway.get();
    gateway->keep_warm_ = std::make_shared<KeepWarm>(
        *deps.router, config.keep_warm,
        [self](std::shared_ptr<const PingTemplate> ping, std::string thread_id) {
          // Called by the keep-warm timer, on loop 0.
          asio::co_spawn(*self->ping_executor_,
                         self->SendPing(std::move(ping), std::move(thread_id)), asio::detached);
        });
    deps.recorder->SetKeepWarmObserver(
        [kw = gateway->keep_warm_](telemetry::RequestRecord& record) { kw->Observe(record); });
    deps.metrics->registry().AddSection(
        [kw = gateway->keep_warm_](std::string& out) { kw->ExposeMetrics(out); });
  }
  gateway->admin_.emplace(
      AdminDeps{.admin_token = config.admin_token,
                .store = deps.store,
                .clock = deps.clock,
                .router = deps.router,
                .keys = gateway->keys_.get(),
                .blocking_pool = &gateway->blocking_pool_,
                .engines = deps.engines,
                .alerting = deps.alerting,
                .upstream_for = [g = gateway.get()](const router::Target& t) -> const Upstream& {
                  return g->UpstreamFor(t);
                }});
  Gateway* g = gateway.get();
  gateway->remote_ =
      NewRemoteUpstream([g](size_t worker) -> upstream::Client& { return g->ClientFor(worker); },
                        *deps.clock, gateway->redactor_);
  return gateway;
}

Gateway::Gateway(const GatewayConfig& config, GatewayDeps deps)
    : config_(config), deps_(std::move(deps)) {
  client_options_.connect_timeout = config.upstream_connect_timeout;
  client_options_.header_timeout = config.upstream_timeout;
  client_options_.idle_read_timeout = config.upstream_timeout;
  client_options_.pool_idle_timeout = config.upstream_pool_idle_timeout;
}

Gateway::~Gateway() { FinishBlockingWork(); }

http::Handler Gateway::handler() {
  return [this](http::Request& request, http::ResponseWriter& writer) {
    return Handle(request, writer);
  };
}

void Gateway::OnLoopStart(size_t index, asio::any_io_executor executor) {
  if (index == 0 && keep_warm_) {
    ping_executor_ = executor;
    asio::co_spawn(executor, KeepWarmLoop(), asio::detached);
  }
  clients_.at(index) = upstream::Client::Create(std::move(executor), client_options_);
}

asio::awaitable<void> Gateway::Handle(http::Request& request, http::ResponseWriter& writer) {
  const std::string& path = request.path;
  if (request.method == "POST") {
    if (const api::ClientApi* api = apis_.Find(path)) {
      co_await HandleInference(request, writer, *api);
      co_return;
    }
  }
  // Every other answer carries an id too (not recorded: the read API holds inference requests).
  const std::string request_id = NewId("req");
  TrackedWriter tracked(writer, {{"x-request-id", request_id}});
  std::string failure;
  try {
    co_await HandleOther(request, tracked);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (failure.empty()) co_return;
  // The last barrier: a defect must cost one request a 500 that says so, never the connection
  // or the process (the server's own catch-all would answer without the request's id).
  std::fprintf(stderr, "kvgate: internal error on %s %s (request %s): %s\n", request.method.c_str(),
               Utf8Snippet(request.path).c_str(), request_id.c_str(), failure.c_str());
  if (tracked.status() == 0) {
    std::vector<http::Header> no_headers;  // (the tags carry the id)
    co_await tracked.Send(500, kJson, InternalErrorJson(request_id), std::move(no_headers));
  } else if (tracked.stream_open()) {
    co_await tracked.EndStream();
  }
}

asio::awaitable<void> Gateway::HandleOther(http::Request& request, http::ResponseWriter& writer) {
  const std::string& path = request.path;
  const bool get = IsGet(request.method);
  if (path.rfind("/api/", 0) == 0) {
    co_await admin_->Handle(request, writer);
  } else if (IsWebPath(path)) {
    co_await SendWebAsset(request, writer);
  } else if (path == "/v1/messages/count_tokens") {
    if (request.method == "POST") {
      co_await HandleCountTokens(request, writer);
    } else {
      co_await SendMethodNotAllowed(writer, request, "POST");
    }
  } else if (apis_.Find(path) != nullptr) {
    co_await SendMethodNotAllowed(writer, request, "POST");
  } else if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (get) {
      // The model list is the key's view of it: a wrong key gets the 401 /v1/* gives.
      Result<std::shared_ptr<KeyState>> key = AuthenticateKey(request);
      if (key) {
        co_await admin_->HandleModels(request, key->get(), writer);
      } else {
        co_await writer.Send(
            401, kJson, ErrorJson(key.error().message, "invalid_request_error", "invalid_api_key"));
      }
    } else {
      co_await SendMethodNotAllowed(writer, request, "GET, HEAD");
    }
  } else if (path == "/healthz" || path == "/metrics") {
    if (!get) {
      co_await SendMethodNotAllowed(writer, request, "GET, HEAD");
    } else if (path == "/healthz") {
      // Still 200 when telemetry cannot be written: the gateway serves; the body says what ails.
      co_await writer.Send(200, kJson, JsonText(telemetry::StoreHealth(deps_.store->stats())));
    } else {
      const telemetry::ExpositionFormat format =
          telemetry::NegotiateExposition(request.header("accept"));
      std::string text = deps_.metrics->registry().Expose(format);
      co_await writer.Send(200,
                           std::string(format == telemetry::ExpositionFormat::kOpenMetrics
                                           ? telemetry::kOpenMetricsContentType
                                           : telemetry::kTextContentType),
                           std::move(text));
    }
  } else {
    co_await SendNotFound(writer, request);
  }
}

std::vector<http::Header> Gateway::OnRejected(const http::Rejection& rejection) {
  std::vector<http::Header> headers{{"x-request-id", NewId("req")}};
  const http::Request& request = rejection.request;
  // Inference requests are recorded whatever happens to them; so is a request that could not be
  // read far enough to tell what it was.
  const api::ClientApi* api = apis_.Find(request.path);
  std::string endpoint(api != nullptr ? providers::EndpointName(api->endpoint()) : "");
  if (endpoint.empty() && rejection.head_read) return headers;
  RequestLog log(*deps_.recorder, *deps_.clock, request.arrival_monotonic_ns);
  telemetry::RequestRecord& rec = log.record();
  rec.request_id = headers.front().value;
  rec.endpoint = std::move(endpoint);
  // The body was not read, so only the header can name a thread. A request that could not show
  // a gateway key (or whose head was never read) is recorded without one: an unauthenticated
  // client must not create or poison threads.
  if (rejection.head_read) {
    if (Result<std::string> key = Authenticate(request)) {
      rec.api_key_id = std::move(*key);
      std::string_view thread_id = request.header("x-thread-id");
      if (providers::ValidateThreadId(thread_id, "the X-Thread-Id header")) {
        // Under gateway keys, the key's own thread (thread_scope.h). No store read here: an id
        // whose owner is not remembered is kept as sent, unclaimed (a failed turn never decides
        // who owns a thread: ScopeThread reads the owner from successful turns only).
        std::optional<std::string> owner = threads_.OwnerOf(thread_id);
        rec.thread_id = StoredThreadId(thread_id, rec.api_key_id, owner.value_or(rec.api_key_id));
        if (!rec.thread_id.empty()) rec.thread_source = telemetry::kThreadFromHeader;
      }
    }
  }
  log.SetError(rejection.status, "error", std::string(rejection.message));
  log.Commit();
  return headers;
}

Result<std::string> Gateway::Authenticate(const http::Request& request) const {
  Result<std::shared_ptr<KeyState>> key = AuthenticateKey(request);
  if (!key) return std::unexpected(key.error());
  return *key ? (*key)->id() : std::string();
}

Result<std::shared_ptr<KeyState>> Gateway::AuthenticateKey(const http::Request& request) const {
  if (!keys_->required()) return std::shared_ptr<KeyState>();
  std::string_view key = BearerToken(request.header("authorization"));
  if (key.empty()) key = request.header("x-api-key");
  if (key.empty()) {
    return MakeError(ErrorCode::kUnauthenticated,
                     "Missing API key: send it as Authorization: Bearer <key> (or x-api-key: "
                     "<key>)");
  }
  // Found by the SHA-256 of what was sent: how long the lookup takes says nothing about any
  // key's secret (that would take a preimage).
  std::shared_ptr<KeyState> found = keys_->Find(HashApiKey(key));
  if (!found) return MakeError(ErrorCode::kUnauthenticated, "Incorrect API key provided");
  return found;
}

}  // namespace kvgate::gateway
