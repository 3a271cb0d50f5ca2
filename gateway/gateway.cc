#include "gateway/gateway.h"

#include <openssl/crypto.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/alerting.h"
#include "gateway/local_provider.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

// The OpenAI error body (providers::MakeOpenAIError owns its shape); the status goes separately.
std::string ErrorJson(std::string message, std::string type, std::string code) {
  return providers::MakeOpenAIError(0, std::move(message), std::move(type), std::move(code))
      .body.dump();
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
  auto limit = IntParam(request, "limit");
  if (!limit) return std::unexpected(limit.error());
  if (*limit) query.limit = static_cast<int>(std::clamp<int64_t>(**limit, 1, 500));
  auto offset = IntParam(request, "offset");
  if (!offset) return std::unexpected(offset.error());
  if (*offset) query.offset = std::max<int64_t>(0, **offset);
  auto since = IntParam(request, "since");
  if (!since) return std::unexpected(since.error());
  query.since_us = *since;
  return query;
}

Result<telemetry::RequestQuery> RequestQueryFrom(const http::Request& request) {
  telemetry::RequestQuery query;
  query.thread_id = request.query_param("thread_id");
  query.model = request.query_param("model");
  query.provider = request.query_param("provider");
  query.status = request.query_param("status");
  query.cursor = request.query_param("cursor");
  auto limit = IntParam(request, "limit");
  if (!limit) return std::unexpected(limit.error());
  if (*limit) query.limit = static_cast<int>(std::clamp<int64_t>(**limit, 1, 1000));
  auto since = IntParam(request, "since");
  if (!since) return std::unexpected(since.error());
  query.since_us = *since;
  return query;
}

// Runs `fn` (blocking: a SQLite query) on `pool` and resumes the awaiting coroutine on its own
// executor with the result. Callers pass lambdas that capture only references to locals of the
// suspended coroutine: GCC 12 destroys non-trivially-destructible temporaries of a co_await
// expression twice (strings captured by value crashed here).
template <class Fn>
auto RunBlocking(asio::thread_pool& pool, Fn fn) {
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(Result<json>)>(
      [&pool](auto handler, Fn work) {
        asio::post(pool, [handler = std::move(handler), work = std::move(work)]() mutable {
          Result<json> result = work();
          auto executor = asio::get_associated_executor(handler);
          asio::dispatch(executor, [handler = std::move(handler),
                                    result = std::move(result)]() mutable {
            std::move(handler)(std::move(result));
          });
        });
      },
      asio::use_awaitable, std::move(fn));
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::Create(const GatewayConfig& config,
                                                 telemetry::PriceCatalog catalog,
                                                 GatewayDeps deps) {
  std::unique_ptr<Gateway> gateway(new Gateway(config, std::move(catalog), deps));
  std::map<std::string, const ProviderConfig*> providers;
  for (const auto& p : config.providers) providers[p.name] = &p;
  for (const auto& m : config.models) {
    auto pit = providers.find(m.provider);
    if (pit == providers.end()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "model " + m.name + " names unknown provider " + m.provider);
    }
    const ProviderConfig& p = *pit->second;
    auto type = providers::ProviderTypeFromName(p.type);
    if (!type) {
      return MakeError(ErrorCode::kInvalidArgument, "provider " + p.name + ": unknown type " + p.type);
    }
    Route route{.model = m.name,
                .provider_name = p.name,
                .type = *type,
                .url = {},
                .api_key = p.api_key,
                .upstream_model = m.upstream_model.empty() ? m.name : m.upstream_model,
                .price = std::nullopt};
    if (*type != providers::ProviderType::kLocal) {
      auto url = upstream::Url::Parse(p.base_url);
      if (!url) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "provider " + p.name + ": " + url.error().message);
      }
      route.url = *url;
    }
    if (m.pricing) {
      route.price = m.pricing;
    } else if (auto price = gateway->catalog_.Find(route.upstream_model)) {
      route.price = price;
    } else {
      route.price = gateway->catalog_.Find(m.name);
    }
    gateway->routes_.emplace(m.name, std::move(route));
  }
  return gateway;
}

Gateway::Gateway(const GatewayConfig& config, telemetry::PriceCatalog catalog, GatewayDeps deps)
    : config_(config), catalog_(std::move(catalog)), deps_(std::move(deps)) {
  client_options_.connect_timeout = config.upstream_connect_timeout;
  client_options_.header_timeout = config.upstream_timeout;
  client_options_.idle_read_timeout = config.upstream_timeout;
}

Gateway::~Gateway() { blocking_pool_.join(); }

const Route* Gateway::FindRoute(std::string_view model) const {
  auto it = routes_.find(std::string(model));
  return it == routes_.end() ? nullptr : &it->second;
}

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
  } else if (request.method == "POST" && path == "/v1/completions") {
    co_await HandleInference(request, writer, providers::Endpoint::kCompletions);
  } else if (request.method == "GET" && path == "/v1/models") {
    co_await HandleModels(writer);
  } else if (request.method == "GET" && path == "/healthz") {
    co_await writer.Send(200, kJson, R"({"status":"ok"})");
  } else if (request.method == "GET" && path == "/metrics") {
    std::string text = deps_.metrics->registry().Expose();
    co_await writer.Send(200, "text/plain; version=0.0.4; charset=utf-8", std::move(text));
  } else if (path.rfind("/api/", 0) == 0) {
    co_await HandleReadApi(request, writer);
  } else if (path.rfind("/v1/", 0) == 0 || path == "/healthz" || path == "/metrics") {
    co_await writer.Send(405, kJson,
                         ErrorJson("method " + request.method + " is not allowed on " + path,
                                   "invalid_request_error", "method_not_allowed"));
  } else {
    co_await writer.Send(404, kJson,
                         ErrorJson("no route for " + request.method + " " + path,
                                   "invalid_request_error", "not_found"));
  }
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
  const std::string id = path.rfind(monitors_prefix, 0) == 0 ? path.substr(monitors_prefix.size())
                                                             : std::string();
  Result<json> result = MakeError(ErrorCode::kNotFound, "no route for " + method + " " + path);
  int ok_status = 200;
  bool allowed = true;
  if (path == "/api/monitors") {
    if (method == "GET") {
      result = co_await run([&alerting] { return alerting.ListMonitors(); });
    } else if (method == "POST") {
      ok_status = 201;
      result = co_await run([&alerting, &body] { return alerting.CreateMonitor(body); });
    } else {
      allowed = false;
    }
  } else if (!id.empty()) {
    if (method == "GET") {
      result = co_await run([&alerting, &id] { return alerting.GetMonitor(id); });
    } else if (method == "PUT") {
      result = co_await run([&alerting, &id, &body] { return alerting.UpdateMonitor(id, body); });
    } else if (method == "DELETE") {
      result = co_await run([&alerting, &id] { return alerting.DeleteMonitor(id); });
    } else {
      allowed = false;
    }
  } else if (path == "/api/alerts") {
    auto limit = IntParam(request, "limit");
    if (!limit) {
      result = std::unexpected(limit.error());
    } else if (method != "GET") {
      allowed = false;
    } else {
      int n = static_cast<int>(std::clamp<int64_t>(limit->value_or(100), 1, 1000));
      result = co_await run([&alerting, n] { return alerting.ListAlerts(n); });
    }
  } else if (path == "/api/channels") {
    if (method == "GET") {
      result = co_await run([&alerting] { return alerting.ListChannels(); });
    } else {
      allowed = false;
    }
  } else if (path.rfind("/api/channels/", 0) == 0 && path.size() > 19 &&
             path.compare(path.size() - 5, 5, "/test") == 0) {
    const std::string channel = path.substr(14, path.size() - 14 - 5);
    if (method == "POST") {
      ok_status = 202;
      result = co_await run([&alerting, &channel] { return alerting.TestFire(channel); });
    } else {
      allowed = false;
    }
  }
  if (!allowed) {
    co_await writer.Send(405, kJson,
                         ErrorJson("method " + method + " is not allowed on " + path,
                                   "invalid_request_error", "method_not_allowed"));
    co_return;
  }
  if (!result) {
    int status = StatusFor(result.error().code);
    co_await writer.Send(status, kJson,
                         ErrorJson(result.error().message,
                                   status < 500 ? "invalid_request_error" : "server_error",
                                   std::string(ErrorCodeName(result.error().code))));
    co_return;
  }
  co_await writer.Send(ok_status, kJson, result->dump());
}

Result<json> Gateway::EngineLookup(const http::Request& request) const {
  if (request.method != "POST") {
    return MakeError(ErrorCode::kInvalidArgument, "use POST /api/engine/lookup");
  }
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("model") ||
      !body["model"].is_string()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the body must be a JSON object with \"model\" and \"messages\" or "
                     "\"prompt\"");
  }
  const Route* route = FindRoute(body["model"].get<std::string>());
  if (route == nullptr) {
    return MakeError(ErrorCode::kNotFound, "unknown model " + body["model"].get<std::string>());
  }
  if (route->type != providers::ProviderType::kLocal || deps_.engines == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "model " + route->model + " is not served by the built-in engine");
  }
  return deps_.engines->Lookup(*route, body);
}

std::string Gateway::ModelsJson() const {
  json data = json::array();
  std::vector<const Route*> sorted;
  for (const auto& [_, route] : routes_) sorted.push_back(&route);
  std::sort(sorted.begin(), sorted.end(),
            [](const Route* a, const Route* b) { return a->model < b->model; });
  for (const Route* route : sorted) {
    data.push_back({{"id", route->model},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", route->provider_name}});
  }
  return json{{"object", "list"}, {"data", data}}.dump();
}

asio::awaitable<void> Gateway::HandleModels(http::ResponseWriter& writer) {
  co_await writer.Send(200, kJson, ModelsJson());
}

asio::awaitable<void> Gateway::HandleReadApi(http::Request& request, http::ResponseWriter& writer) {
  if (!config_.admin_token.empty()) {
    std::string_view auth = request.header("authorization");
    std::string_view token = request.header("x-admin-token");
    if (auth.size() > 7 && auth.substr(0, 7) == "Bearer ") token = auth.substr(7);
    bool ok = token.size() == config_.admin_token.size() &&
              CRYPTO_memcmp(token.data(), config_.admin_token.data(), token.size()) == 0;
    if (!ok) {
      co_await writer.Send(401, kJson,
                           ErrorJson("the admin API needs Authorization: Bearer <admin_token>",
                                     "invalid_request_error", "invalid_admin_token"));
      co_return;
    }
  }
  if (request.path.rfind("/api/monitors", 0) == 0 || request.path.rfind("/api/alerts", 0) == 0 ||
      request.path.rfind("/api/channels", 0) == 0) {
    co_await HandleAlertsApi(request, writer);
    co_return;
  }
  if (request.path == "/api/engine/lookup") {
    // Tokenizing and a hash walk: microseconds, fine on the event loop.
    Result<json> lookup = EngineLookup(request);
    if (!lookup) {
      co_await writer.Send(StatusFor(lookup.error().code), kJson,
                           ErrorJson(lookup.error().message, "invalid_request_error",
                                     std::string(ErrorCodeName(lookup.error().code))));
    } else {
      co_await writer.Send(200, kJson, lookup->dump());
    }
    co_return;
  }
  if (request.method != "GET") {
    co_await writer.Send(405, kJson,
                         ErrorJson("method " + request.method + " is not allowed on " +
                                       request.path,
                                   "invalid_request_error", "method_not_allowed"));
    co_return;
  }
  const std::string& path = request.path;
  telemetry::TelemetryStore& store = *deps_.store;
  auto run = [this](auto fn) { return RunBlocking(blocking_pool_, std::move(fn)); };

  Result<json> result = MakeError(ErrorCode::kNotFound, "no route for GET " + path);
  if (path == "/api/threads") {
    auto query = ThreadQueryFrom(request);
    if (!query) {
      result = std::unexpected(query.error());
    } else {
      const telemetry::ThreadQuery& q = *query;
      result = co_await run([&store, &q] { return store.ListThreads(q); });
    }
  } else if (path.rfind("/api/threads/", 0) == 0) {
    std::string id = path.substr(13);
    result = co_await run([&store, &id] { return store.GetThread(id); });
  } else if (path == "/api/requests") {
    auto query = RequestQueryFrom(request);
    if (!query) {
      result = std::unexpected(query.error());
    } else {
      const telemetry::RequestQuery& q = *query;
      result = co_await run([&store, &q] { return store.ListRequests(q); });
    }
  } else if (path.rfind("/api/requests/", 0) == 0) {
    std::string id = path.substr(14);
    result = co_await run([&store, &id] { return store.GetRequest(id); });
  } else if (path == "/api/engine") {
    result = deps_.engines ? Result<json>(deps_.engines->Describe())
                           : Result<json>(json{{"engines", json::array()}});
  }
  if (!result) {
    int status = StatusFor(result.error().code);
    co_await writer.Send(status, kJson,
                         ErrorJson(result.error().message,
                                   status == 404 ? "invalid_request_error" : "server_error",
                                   std::string(ErrorCodeName(result.error().code))));
    co_return;
  }
  co_await writer.Send(200, kJson, result->dump());
}

}  // namespace kvgate::gateway
