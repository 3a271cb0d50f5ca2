#include "gateway/gateway.h"

#include <openssl/crypto.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/utf8.h"
#include "gateway/alerting.h"
#include "gateway/local_provider.h"
#include "gateway/targets.h"
#include "gateway/request_log.h"
#include "gateway/run_blocking.h"
#include "gateway/tracked_writer.h"
#include "gateway/virtual_keys.h"
#include "gateway/web_assets.h"
#include "telemetry/request_filters.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";
// Threads that read shared threads' latest turns for the request path: several, so that one
// read waiting on the database does not queue the requests behind it.
constexpr size_t kSharedThreadReaders = 4;

// The OpenAI error body (providers::MakeOpenAIError owns its shape); the status goes separately.
std::string ErrorJson(std::string message, std::string type, std::string code) {
  return JsonText(
      providers::MakeOpenAIError(0, std::move(message), std::move(type), std::move(code)).body);
}

int StatusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return 400;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kUnauthenticated: return 401;
    case ErrorCode::kPermissionDenied: return 403;
    case ErrorCode::kResourceExhausted: return 429;
    case ErrorCode::kUnavailable: return 503;
    case ErrorCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

// The OpenAI error type of a status kvgate answers with.
std::string ErrorTypeFor(int status) {
  return status < 500 ? "invalid_request_error" : "server_error";
}

// The credentials of an "Authorization: Bearer <token>" header (the scheme is case-insensitive,
// RFC 9110 11.1), or "" when there are none.
std::string_view BearerToken(std::string_view authorization) {
  if (authorization.size() <= 7 || authorization[6] != ' ') return {};
  for (size_t i = 0; i < 6; ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != "bearer"[i]) return {};
  }
  return authorization.substr(7);
}

// GET routes answer HEAD too (the server leaves the body out).
bool IsGet(std::string_view method) { return method == "GET" || method == "HEAD"; }

}  // namespace

std::string_view OpenAdminApiWarning() {
  return "no server.admin_token: /api/* is open to anyone who can reach this port";
}

std::string InternalErrorJson(std::string_view request_id) {
  return ErrorJson("kvgate failed on this request with an internal error (request " +
                       std::string(request_id) + "); it is recorded, and the server log has the "
                       "details",
                   "server_error", "internal_error");
}

namespace {

asio::awaitable<void> SendMethodNotAllowed(http::ResponseWriter& writer, const http::Request& request,
                                           std::string allow) {
  std::string message = "method " + request.method + " is not allowed on " + request.path +
                        " (allowed: " + allow + ")";
  // Built before the co_await: GCC 12 miscompiles braced temporaries inside one.
  std::vector<http::Header> headers{{"Allow", std::move(allow)}};
  std::string body = ErrorJson(std::move(message), "invalid_request_error", "method_not_allowed");
  co_await writer.Send(405, kJson, std::move(body), std::move(headers));
}

asio::awaitable<void> SendNotFound(http::ResponseWriter& writer, const http::Request& request) {
  co_await writer.Send(404, kJson,
                       ErrorJson("Invalid URL (" + request.method + " " + request.path + ")",
                                 "invalid_request_error", "not_found"));
}

// Parses an optional integer query parameter; nullopt when absent, error when malformed.
Result<std::optional<int64_t>> IntParam(const http::Request& request, std::string_view name) {
  std::string value = request.query_param(name);
  if (value.empty()) return std::optional<int64_t>{};
  char* end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(name) + " must be an integer, got \"" + value + "\"");
  }
  return std::optional<int64_t>{parsed};
}

// A time query parameter (since, until): unix microseconds or RFC 3339; nullopt when absent.
Result<std::optional<int64_t>> TimeParam(const http::Request& request, std::string_view name) {
  std::string value = request.query_param(name);
  if (value.empty()) return std::optional<int64_t>{};
  // An unencoded "+hh:mm" offset reads back as a space (query strings decode '+' so).
  if (value.size() > 19 && value[value.size() - 6] == ' ') value[value.size() - 6] = '+';
  const size_t digits_from = value[0] == '-' ? 1 : 0;
  if (value.size() > digits_from &&
      value.find_first_not_of("0123456789", digits_from) == std::string::npos) {
    return IntParam(request, name);
  }
  Result<int64_t> parsed = telemetry::ParseRfc3339Micros(value);
  if (!parsed) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(name) + " must be unix microseconds or an RFC 3339 time: " +
                         parsed.error().message);
  }
  return std::optional<int64_t>{*parsed};
}

// `limit`: nullopt when absent; an error below 1; at most `max` (larger asks get `max`).
Result<std::optional<int>> LimitParam(const http::Request& request, int max) {
  auto limit = IntParam(request, "limit");
  if (!limit) return std::unexpected(limit.error());
  if (!*limit) return std::optional<int>{};
  if (**limit < 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "limit must be at least 1, got " + std::to_string(**limit));
  }
  return std::optional<int>{static_cast<int>(std::min<int64_t>(**limit, max))};
}

// The statuses a request can end with (docs/api.md).
constexpr std::string_view kRequestStatuses[] = {"ok", "error", "upstream_error", "timeout",
                                                 "client_disconnected", "shutdown"};

Result<telemetry::ThreadQuery> ThreadQueryFrom(const http::Request& request) {
  telemetry::ThreadQuery query;
  if (std::string sort = request.query_param("sort"); !sort.empty()) {
    auto parsed = telemetry::ParseThreadSort(sort);
    if (!parsed) return std::unexpected(parsed.error());
    query.sort = *parsed;
  }
  std::string order = request.query_param("order");
  if (!order.empty() && order != "asc" && order != "desc") {
    return MakeError(ErrorCode::kInvalidArgument, "order must be asc or desc, got \"" + order + "\"");
  }
  query.descending = order != "asc";
  query.model = request.query_param("model");
  query.cursor = request.query_param("cursor");
  auto limit = LimitParam(request, 500);
  if (!limit) return std::unexpected(limit.error());
  if (*limit) query.limit = **limit;
  auto offset = IntParam(request, "offset");
  if (!offset) return std::unexpected(offset.error());
  if (*offset) query.offset = std::max<int64_t>(0, **offset);
  auto since = TimeParam(request, "since");
  if (!since) return std::unexpected(since.error());
  query.since_us = *since;
  auto until = TimeParam(request, "until");
  if (!until) return std::unexpected(until.error());
  query.until_us = *until;
  query.id_prefix = request.query_param("q");
  return query;
}

Result<telemetry::RequestQuery> RequestQueryFrom(const http::Request& request) {
  telemetry::RequestQuery query;
  query.thread_id = request.query_param("thread_id");
  query.model = request.query_param("model");
  query.provider = request.query_param("provider");
  query.status = request.query_param("status");
  query.cursor = request.query_param("cursor");
  auto limit = LimitParam(request, 1000);
  if (!limit) return std::unexpected(limit.error());
  if (*limit) query.limit = **limit;
  if (!query.status.empty() && std::find(std::begin(kRequestStatuses), std::end(kRequestStatuses),
                                         query.status) == std::end(kRequestStatuses)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "status must be one of ok, error, upstream_error, timeout, "
                     "client_disconnected, shutdown; got \"" + query.status + "\"");
  }
  auto since = TimeParam(request, "since");
  if (!since) return std::unexpected(since.error());
  query.since_us = *since;
  auto until = TimeParam(request, "until");
  if (!until) return std::unexpected(until.error());
  query.until_us = *until;
  return query;
}

// GET /api/requests: the store's filters, and provider_diagnosis=reported|agrees|disagrees (the
// requests whose provider reported on its cache; of those, the ones whose account agrees or
// disagrees with kvgate's diagnosis).
struct RequestListing {
  telemetry::RequestQuery query;
  std::optional<bool> agrees;  // agrees | disagrees
};
Result<RequestListing> RequestListingFrom(const http::Request& request) {
  auto query = RequestQueryFrom(request);
  if (!query) return std::unexpected(query.error());
  RequestListing listing{.query = std::move(*query)};
  const std::string diagnosis = request.query_param("provider_diagnosis");
  if (diagnosis == "agrees" || diagnosis == "disagrees") {
    listing.agrees = diagnosis == "agrees";
  } else if (diagnosis == "reported") {
    listing.query.provider_diagnosed = true;
  } else if (!diagnosis.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "provider_diagnosis must be one of reported, agrees, disagrees; got \"" +
                         Utf8Snippet(diagnosis) + "\"");
  }
  return listing;
}

// GET /api/overview: window=1h|24h|7d (default 24h), ending now, in buckets of 1 min, 15 min and
// 2 h (60, 96 and 84 points); the range is aligned to whole buckets.
struct OverviewRange {
  int64_t since_us = 0, until_us = 0, bucket_seconds = 0;
};
Result<OverviewRange> OverviewRangeFrom(const http::Request& request, int64_t now_us) {
  std::string window = request.query_param("window");
  if (window.empty()) window = "24h";
  int64_t span_s = 0, bucket_s = 0;
  if (window == "1h") {
    span_s = 3600, bucket_s = 60;
  } else if (window == "24h") {
    span_s = 86400, bucket_s = 900;
  } else if (window == "7d") {
    span_s = 7 * 86400, bucket_s = 7200;
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     "window must be 1h, 24h or 7d, got \"" + window + "\"");
  }
  const int64_t bucket_us = bucket_s * 1'000'000;
  const int64_t until = (now_us / bucket_us + 1) * bucket_us;
  return OverviewRange{until - span_s * 1'000'000, until, bucket_s};
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::Create(const GatewayConfig& config, GatewayDeps deps) {
  auto connections = BuildConnections(config);
  if (!connections) return std::unexpected(connections.error());
  std::unique_ptr<Gateway> gateway(new Gateway(config, deps));
  gateway->connections_ = std::move(*connections);
  std::vector<std::string> provider_keys;
  for (const auto& [name, connection] : gateway->connections_) {
    provider_keys.insert(provider_keys.end(), connection.api_keys.begin(),
                         connection.api_keys.end());
  }
  gateway->redactor_ = SecretRedactor(provider_keys);
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
      std::fprintf(stderr, "kvgate: warning: telemetry could not be written before the keys' "
                   "spend was read (%s); budgets may count less than was spent\n",
                   flushed.error().message.c_str());
    }
  }
  gateway->keys_ =
      std::make_shared<VirtualKeys>(*deps.clock, deps.key_store, deps.shared_keys_refresh);
  if (Status loaded = gateway->keys_->Load(config.api_keys); !loaded) {
    return std::unexpected(loaded.error());
  }
  deps.recorder->AddListener([keys = gateway->keys_](const telemetry::RequestRecord& record) {
    keys->OnRecord(record);
  });
  deps.metrics->registry().AddSection(
      [keys = gateway->keys_](std::string& out) { keys->ExposeMetrics(out); });
  if (deps.alerting != nullptr) {
    deps.alerting->SetBudgetSource([keys = gateway->keys_](const std::string& api_key_id) {
      return keys->BudgetFraction(api_key_id);
    });
  }
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
  clients_.at(index) = upstream::Client::Create(std::move(executor), client_options_);
}

asio::awaitable<void> Gateway::Handle(http::Request& request, http::ResponseWriter& writer) {
  const std::string& path = request.path;
  if (request.method == "POST" && path == "/v1/chat/completions") {
    co_await HandleInference(request, writer, providers::Endpoint::kChatCompletions);
    co_return;
  }
  if (request.method == "POST" && path == "/v1/completions") {
    co_await HandleInference(request, writer, providers::Endpoint::kCompletions);
    co_return;
  }
  if (request.method == "POST" && path == "/v1/responses") {
    co_await HandleInference(request, writer, providers::Endpoint::kResponses);
    co_return;
  }
  if (request.method == "POST" && path == "/v1/embeddings") {
    co_await HandleInference(request, writer, providers::Endpoint::kEmbeddings);
    co_return;
  }
  if (request.method == "POST" && path == "/v1/messages") {
    co_await HandleInference(request, writer, providers::Endpoint::kMessages);
    co_return;
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
  std::fprintf(stderr, "kvgate: internal error on %s %s (request %s): %s\n",
               request.method.c_str(), Utf8Snippet(request.path).c_str(), request_id.c_str(),
               failure.c_str());
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
    co_await HandleReadApi(request, writer);
  } else if (IsWebPath(path)) {
    co_await SendWebAsset(request, writer);
  } else if (path == "/v1/messages/count_tokens") {
    if (request.method == "POST") {
      co_await HandleCountTokens(request, writer);
    } else {
      co_await SendMethodNotAllowed(writer, request, "POST");
    }
  } else if (path == "/v1/chat/completions" || path == "/v1/completions" ||
             path == "/v1/responses" || path == "/v1/embeddings" || path == "/v1/messages") {
    co_await SendMethodNotAllowed(writer, request, "POST");
  } else if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (get) {
      co_await HandleModels(request, writer);
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
      std::string text = deps_.metrics->registry().Expose();
      co_await writer.Send(200, "text/plain; version=0.0.4; charset=utf-8", std::move(text));
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
  std::string endpoint;
  for (providers::Endpoint e :
       {providers::Endpoint::kChatCompletions, providers::Endpoint::kCompletions,
        providers::Endpoint::kResponses, providers::Endpoint::kEmbeddings,
        providers::Endpoint::kMessages}) {
    if (request.path == providers::EndpointPath(e)) endpoint = providers::EndpointName(e);
  }
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
        std::optional<std::string> owner = thread_owners_.Find(thread_id);
        rec.thread_id = StoredThreadId(thread_id, rec.api_key_id, owner.value_or(rec.api_key_id));
      }
    }
  }
  log.SetError(rejection.status, "error", std::string(rejection.message));
  log.Commit();
  return headers;
}

asio::awaitable<Gateway::PreviousResponse> Gateway::ThreadOfResponse(
    const std::string& response_id, const std::string& api_key_id) {
  std::optional<std::string> key = response_threads_.KeyOf(response_id);
  std::optional<std::string> known = response_threads_.Find(response_id);
  if (key && known) {
    // (A response made before the gateway had keys is no key's.)
    if (!key->empty() && *key != api_key_id) co_return PreviousResponse{.other_key = true};
    co_return PreviousResponse{.thread_id = *known};
  }
  // Not remembered (kvgate restarted since, or it was forgotten): the stored request that
  // answered with this id, if any.
  telemetry::TelemetryStore& store = *deps_.store;
  Result<json> stored = co_await RunBlocking(
      blocking_pool_, [&store, &response_id] { return store.GetRequest(response_id); });
  if (!stored || !stored->is_object()) co_return PreviousResponse{};
  const std::string thread_id = stored->value("thread_id", std::string());
  const std::string stored_key = stored->value("api_key_id", std::string());
  if (!stored_key.empty() && stored_key != api_key_id)
    co_return PreviousResponse{.other_key = true};
  if (!thread_id.empty()) response_threads_.Remember(response_id, thread_id, stored_key);
  co_return PreviousResponse{.thread_id = thread_id};
}

asio::awaitable<std::string> Gateway::ScopeThread(const std::string& thread_id,
                                                  const std::string& api_key_id) {
  if (api_key_id.empty() || thread_id.empty() || IsScopedThreadId(thread_id)) {
    co_return StoredThreadId(thread_id, api_key_id, "");
  }
  std::optional<std::string> owner = thread_owners_.Find(thread_id);
  if (!owner) {
    // The key of the thread's newest successful stored turn (all of them are its owner's; a
    // rejected request may be filed under an id it does not own, OnRejected); none, or a turn
    // from before gateway keys: the id is free.
    telemetry::TelemetryStore& store = *deps_.store;
    Result<std::string> stored =
        co_await RunBlocking(blocking_pool_, [&store, &thread_id]() -> Result<std::string> {
          telemetry::RequestQuery query{.thread_id = thread_id, .status = "ok", .limit = 1};
          Result<json> listed = store.ListRequests(query);
          if (!listed) return std::unexpected(listed.error());
          const json& requests = (*listed)["requests"];
          if (!requests.is_array() || requests.empty()) return std::string();
          Result<json> turn = store.GetRequest(requests[0].value("request_id", std::string()));
          if (!turn) return std::unexpected(turn.error());
          return turn->value("api_key_id", std::string());
        });
    // The store cannot say (an outage): the turn keeps the id as sent, unclaimed, so that a
    // conversation is not split in two by a database restart; the owner is settled on the next
    // turn that can read the store. The cost: a thread id another key used before this process
    // started may take this turn while the database is away (docs/api.md).
    if (!stored) co_return std::string(thread_id);
    owner = thread_owners_.Claim(thread_id, stored->empty() ? api_key_id : *stored);
  }
  co_return StoredThreadId(thread_id, api_key_id, *owner);
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

bool Gateway::AdminAuthorized(const http::Request& request) const {
  if (config_.admin_token.empty()) return true;
  std::string_view token = BearerToken(request.header("authorization"));
  if (token.empty()) token = request.header("x-admin-token");
  return token.size() == config_.admin_token.size() &&
         CRYPTO_memcmp(token.data(), config_.admin_token.data(), token.size()) == 0;
}

asio::awaitable<void> Gateway::HandleAlertsApi(http::Request& request,
                                               http::ResponseWriter& writer) {
  if (deps_.alerting == nullptr) {
    co_await writer.Send(404, kJson,
                         ErrorJson("alerting is not configured", "invalid_request_error",
                                   "not_found"));
    co_return;
  }
  Alerting& alerting = *deps_.alerting;
  const std::string& path = request.path;
  const std::string& method = request.method;
  const bool get = IsGet(method);
  json body;
  if ((method == "POST" || method == "PUT") && !request.body.empty()) {
    body = json::parse(request.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      co_await writer.Send(400, kJson,
                           ErrorJson("the body must be a JSON object", "invalid_request_error",
                                     "invalid_json"));
      co_return;
    }
  }
  auto run = [this](auto fn) { return RunBlocking(blocking_pool_, std::move(fn)); };
  const std::string monitors_prefix = "/api/monitors/";
  const std::string id = path.rfind(monitors_prefix, 0) == 0
                             ? http::PercentDecode(path.substr(monitors_prefix.size()))
                             : std::string();
  Result<json> result = MakeError(ErrorCode::kNotFound, "Invalid URL (" + method + " " + path + ")");
  int ok_status = 200;
  std::string allow;  // set when the path exists but not with this method
  if (path == "/api/monitors") {
    if (get) {
      result = co_await run([&alerting] { return alerting.ListMonitors(); });
    } else if (method == "POST") {
      ok_status = 201;
      result = co_await run([&alerting, &body] { return alerting.CreateMonitor(body); });
    } else {
      allow = "GET, HEAD, POST";
    }
  } else if (!id.empty()) {
    if (get) {
      result = co_await run([&alerting, &id] { return alerting.GetMonitor(id); });
    } else if (method == "PUT") {
      result = co_await run([&alerting, &id, &body] { return alerting.UpdateMonitor(id, body); });
    } else if (method == "DELETE") {
      result = co_await run([&alerting, &id] { return alerting.DeleteMonitor(id); });
    } else {
      allow = "GET, HEAD, PUT, DELETE";
    }
  } else if (path == "/api/alerts") {
    auto limit = IntParam(request, "limit");
    if (!get) {
      allow = "GET, HEAD";
    } else if (!limit) {
      result = std::unexpected(limit.error());
    } else {
      int n = static_cast<int>(std::clamp<int64_t>(limit->value_or(100), 1, 1000));
      result = co_await run([&alerting, n] { return alerting.ListAlerts(n); });
    }
  } else if (path == "/api/channels") {
    if (get) {
      result = co_await run([&alerting] { return alerting.ListChannels(); });
    } else {
      allow = "GET, HEAD";
    }
  } else if (path.rfind("/api/channels/", 0) == 0 && path.size() > 19 &&
             path.compare(path.size() - 5, 5, "/test") == 0) {
    const std::string channel = http::PercentDecode(path.substr(14, path.size() - 14 - 5));
    if (method == "POST") {
      ok_status = 202;
      result = co_await run([&alerting, &channel] { return alerting.TestFire(channel); });
    } else {
      allow = "POST";
    }
  }
  if (!allow.empty()) {
    co_await SendMethodNotAllowed(writer, request, std::move(allow));
    co_return;
  }
  if (!result) {
    int status = StatusFor(result.error().code);
    co_await writer.Send(status, kJson,
                         ErrorJson(result.error().message, ErrorTypeFor(status),
                                   std::string(ErrorCodeName(result.error().code))));
    co_return;
  }
  co_await writer.Send(ok_status, kJson, JsonText(*result));
}

Result<json> Gateway::EngineLookup(const http::Request& request) const {
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("model") ||
      !body["model"].is_string()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the body must be a JSON object with \"model\" and \"messages\" or "
                     "\"prompt\"");
  }
  const std::string model = body["model"].get<std::string>();
  std::optional<size_t> t = deps_.router->FindTarget(model);
  if (!t) return MakeError(ErrorCode::kNotFound, "unknown model " + model);
  const router::Target& target = deps_.router->targets()[*t];
  if (!telemetry::IsBuiltInEngine(target.type) || deps_.engines == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "model " + target.name + " is not served by the built-in engine");
  }
  // Each gateway key's requests are cached under a salt of their own (local_provider.h): the
  // admin names the key to ask about, or sees every key's (the best answer, and each key's hits).
  if (auto key = body.find("api_key_id"); key != body.end() && !key->is_null()) {
    if (!key->is_string()) {
      return MakeError(ErrorCode::kInvalidArgument, "api_key_id must be a string (a key's id)");
    }
    return deps_.engines->Lookup(target, body, key->get<std::string>());
  }
  Result<json> best = deps_.engines->Lookup(target, body, "");
  if (!best || !keys_->required()) return best;
  Result<json> keys = keys_->List();
  if (!keys) return std::unexpected(keys.error());
  json by_key = json::object();
  for (const json& k : (*keys)["keys"]) {
    const std::string id = k.value("id", std::string());
    Result<json> one = deps_.engines->Lookup(target, body, id);
    if (!one) return one;
    const int64_t cached = (*one)["cached_tokens"].get<int64_t>();
    if (cached > 0) by_key[id] = cached;
    if (cached > (*best)["cached_tokens"].get<int64_t>()) best = std::move(one);
  }
  (*best)["cached_tokens_by_key"] = std::move(by_key);
  return best;
}

std::optional<json> Gateway::ModelJson(std::string_view name) const {
  if (std::optional<size_t> t = deps_.router->FindTarget(name)) {
    const router::Target& target = deps_.router->targets()[*t];
    return json{{"id", target.name}, {"object", "model"}, {"created", 0},
                {"owned_by", target.provider}};
  }
  if (const router::RouterConfig* r = deps_.router->FindRouter(name)) {
    json targets = json::array();
    for (const auto& ref : r->targets) targets.push_back(ref.model);
    return json{{"id", r->name}, {"object", "model"}, {"created", 0}, {"owned_by", "kvgate-router"},
                {"kvgate_router", {{"strategy", router::StrategyName(r->strategy)},
                                   {"targets", targets}}}};
  }
  return std::nullopt;
}

std::string Gateway::ModelsJson(const KeyState* key) const {
  std::vector<std::string> names;
  for (const router::Target& t : deps_.router->targets()) names.push_back(t.name);
  for (const router::RouterConfig& r : deps_.router->routers()) names.push_back(r.name);
  if (key != nullptr) {  // a key with a model allow-list sees only those models
    std::erase_if(names, [key](const std::string& name) { return !key->AllowsModel(name); });
  }
  std::sort(names.begin(), names.end());
  json data = json::array();
  for (const std::string& name : names) data.push_back(*ModelJson(name));
  return JsonText(json{{"object", "list"}, {"data", data}});
}

asio::awaitable<void> Gateway::HandleModels(const http::Request& request,
                                            http::ResponseWriter& writer) {
  Result<std::shared_ptr<KeyState>> key = AuthenticateKey(request);
  if (!key) {
    co_await writer.Send(401, kJson,
                         ErrorJson(key.error().message, "invalid_request_error", "invalid_api_key"));
    co_return;
  }
  if (request.path == "/v1/models") {
    co_await writer.Send(200, kJson, ModelsJson(key->get()));
    co_return;
  }
  // GET /v1/models/{model}: one model, as OpenAI's "retrieve model" answers.
  const std::string name = http::PercentDecode(std::string_view(request.path).substr(11));
  std::optional<json> model = ModelJson(name);
  if (*key && !(*key)->AllowsModel(name)) model.reset();
  if (!model) {
    std::string body = JsonText(
        providers::MakeOpenAIError(404, "The model '" + name + "' does not exist",
                                   "invalid_request_error", "model_not_found", "model")
            .body);
    co_await writer.Send(404, kJson, std::move(body));
    co_return;
  }
  co_await writer.Send(200, kJson, JsonText(*model));
}

asio::awaitable<void> Gateway::HandleReadApi(http::Request& request, http::ResponseWriter& writer) {
  // Open to all: whether the dashboard must ask for the admin token, and, when none is set, the
  // warning kvgate logs at startup. It says nothing an unauthenticated caller could not learn
  // from a 401.
  if (request.path == "/api/access") {
    if (!IsGet(request.method)) {
      co_await SendMethodNotAllowed(writer, request, "GET, HEAD");
      co_return;
    }
    const bool required = !config_.admin_token.empty();
    std::string access = JsonText(
        json{{"token_required", required},
             {"warning", required ? json(nullptr) : json(std::string(OpenAdminApiWarning()))}});
    co_await writer.Send(200, kJson, std::move(access));
    co_return;
  }
  if (!AdminAuthorized(request)) {
    co_await writer.Send(401, kJson,
                         ErrorJson("the admin API needs Authorization: Bearer <admin_token>",
                                   "invalid_request_error", "invalid_admin_token"));
    co_return;
  }
  const std::string& path = request.path;
  if (path == "/api/keys" || path.rfind("/api/keys/", 0) == 0) {
    ApiAnswer answer = co_await HandleKeysApi(request);
    if (!answer.allow.empty()) {
      co_await SendMethodNotAllowed(writer, request, std::move(answer.allow));
    } else if (!answer.result) {
      const int status = StatusFor(answer.result.error().code);
      co_await writer.Send(status, kJson,
                           ErrorJson(answer.result.error().message, ErrorTypeFor(status),
                                     std::string(ErrorCodeName(answer.result.error().code))));
    } else {
      co_await writer.Send(answer.ok_status, kJson, JsonText(*answer.result));
    }
    co_return;
  }
  if (path.rfind("/api/monitors", 0) == 0 || path.rfind("/api/alerts", 0) == 0 ||
      path.rfind("/api/channels", 0) == 0) {
    co_await HandleAlertsApi(request, writer);
    co_return;
  }
  const bool known = path == "/api/threads" || path.rfind("/api/threads/", 0) == 0 ||
                     path == "/api/requests" || path.rfind("/api/requests/", 0) == 0 ||
                     path == "/api/engine" || path == "/api/engine/lookup" ||
                     path == "/api/routes" || path == "/api/overview" || path == "/api/live";
  if (!known) {
    co_await SendNotFound(writer, request);
    co_return;
  }
  if (path == "/api/engine/lookup") {
    if (request.method != "POST") {
      co_await SendMethodNotAllowed(writer, request, "POST");
      co_return;
    }
    // Tokenizing and a hash walk: microseconds, fine on the event loop.
    Result<json> lookup = EngineLookup(request);
    if (!lookup) {
      co_await writer.Send(StatusFor(lookup.error().code), kJson,
                           ErrorJson(lookup.error().message, "invalid_request_error",
                                     std::string(ErrorCodeName(lookup.error().code))));
    } else {
      co_await writer.Send(200, kJson, JsonText(*lookup));
    }
    co_return;
  }
  if (!IsGet(request.method)) {
    co_await SendMethodNotAllowed(writer, request, "GET, HEAD");
    co_return;
  }
  telemetry::TelemetryStore& store = *deps_.store;
  auto run = [this](auto fn) { return RunBlocking(blocking_pool_, std::move(fn)); };

  Result<json> result = MakeError(ErrorCode::kNotFound, "Invalid URL (GET " + path + ")");
  if (path == "/api/threads") {
    auto query = ThreadQueryFrom(request);
    if (!query) {
      result = std::unexpected(query.error());
    } else {
      const telemetry::ThreadQuery& q = *query;
      result = co_await run([&store, &q] { return store.ListThreads(q); });
    }
  } else if (path.rfind("/api/threads/", 0) == 0) {
    std::string id = http::PercentDecode(std::string_view(path).substr(13));
    result = co_await run([&store, &id] { return store.GetThread(id); });
  } else if (path == "/api/requests") {
    auto listing = RequestListingFrom(request);
    if (!listing) {
      result = std::unexpected(listing.error());
    } else {
      const RequestListing& l = *listing;
      result = co_await run([&store, &l] {
        return l.agrees ? telemetry::ListRequestsByAgreement(store, l.query, *l.agrees)
                        : store.ListRequests(l.query);
      });
    }
  } else if (path.rfind("/api/requests/", 0) == 0) {
    std::string id = http::PercentDecode(std::string_view(path).substr(14));
    result = co_await run([&store, &id] { return store.GetRequest(id); });
  } else if (path == "/api/routes") {
    result = deps_.router->Describe();
  } else if (path == "/api/overview") {
    auto range = OverviewRangeFrom(request, deps_.clock->NowUnixMicros());
    if (!range) {
      result = std::unexpected(range.error());
    } else {
      const OverviewRange& r = *range;
      result = co_await run(
          [&store, &r] { return store.Overview(r.since_us, r.until_us, r.bucket_seconds); });
    }
  } else if (path == "/api/live") {
    const std::string thread_id = request.query_param("thread_id");
    result = co_await run([&store, &thread_id] { return store.Live(thread_id); });
  } else if (path == "/api/engine") {
    result = deps_.engines ? Result<json>(deps_.engines->Describe())
                           : Result<json>(json{{"engines", json::array()}});
    // The models each engine serves: what the dashboard's lookup box offers.
    for (json& engine : (*result)["engines"]) {
      json models = json::array();
      for (const router::Target& t : deps_.router->targets()) {
        if (telemetry::IsBuiltInEngine(t.type) && engine.value("provider", "") == t.provider) {
          models.push_back(t.name);
        }
      }
      std::sort(models.begin(), models.end());
      engine["models"] = std::move(models);
    }
  }
  if (!result) {
    int status = StatusFor(result.error().code);
    co_await writer.Send(status, kJson,
                         ErrorJson(result.error().message, ErrorTypeFor(status),
                                   std::string(ErrorCodeName(result.error().code))));
    co_return;
  }
  co_await writer.Send(200, kJson, JsonText(*result));
}

}  // namespace kvgate::gateway
