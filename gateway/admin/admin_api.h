// The admin API: everything under /api/ (the read API over the telemetry store, monitors, alerts
// and channels, the gateway keys, the built-in engine's state and prefix lookup) and the model
// list, GET /v1/models[/{model}]. docs/api.md is the reference for the routes and their answers.
//
// Borrows what it reads (AdminDeps); owns nothing but copies of the deps, so the gateway that
// owns it decides every lifetime. Handlers may run at once on every event loop: the state they
// touch is the deps', each internally locked. Store reads and key writes run on the borrowed
// blocking pool, never on an event loop; the handler resumes on its own executor.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/error.h"
#include "gateway/http/server.h"
#include "gateway/virtual_keys.h"
#include "router/router.h"
#include "telemetry/store.h"

namespace kvgate::gateway {

class Upstream;  // gateway/upstream.h

class LocalEngines;  // local_provider.h
class Alerting;      // alerting.h

// What kvgate logs at startup when server.admin_token is not set (the dashboard shows it too).
std::string_view OpenAdminApiWarning();

struct AdminDeps {
  std::string admin_token;                            // server.admin_token; "" leaves /api/* open
  telemetry::TelemetryStore* store = nullptr;         // required: the read API queries it
  const Clock* clock = nullptr;                       // required: /api/overview's window ends now
  const router::Router* router = nullptr;             // required: the models and routers
  VirtualKeys* keys = nullptr;                        // required: /api/keys
  boost::asio::thread_pool* blocking_pool = nullptr;  // required: where blocking work runs
  LocalEngines* engines = nullptr;                    // optional: /api/engine's state
  Alerting* alerting = nullptr;                       // optional: /api/monitors, alerts, channels
  // optional: the Upstream that serves a target, for /api/engine/lookup's prefix lookups
  // (without it no target has a cache kvgate can read).
  std::function<const Upstream&(const router::Target&)> upstream_for;
};

class AdminApi {
 public:
  // REQUIRES: the required deps are set and outlive this object (and any handler still running;
  // the owner joins the blocking pool before destroying them).
  explicit AdminApi(AdminDeps deps) : deps_(std::move(deps)) {}

  // Any path under /api/. /api/access is open; every other path needs the admin token
  // (Authorized) and gets a 401 without it, then 404 for an unknown path and 405 (with Allow)
  // for a wrong method. Errors are OpenAI-shaped JSON bodies.
  boost::asio::awaitable<void> Handle(http::Request& request, http::ResponseWriter& writer);

  // GET or HEAD /v1/models (every target and router, sorted by name) and /v1/models/{model} (one,
  // as OpenAI's "retrieve model" answers; 404 model_not_found), as gateway key `key` sees them:
  // only the models its allow-list names. `key` null: keys are off, every model. The caller has
  // authenticated the key and checked the method.
  boost::asio::awaitable<void> HandleModels(const http::Request& request, const KeyState* key,
                                            http::ResponseWriter& writer);

  // The admin token check (server.admin_token): true when no token is set or the request shows
  // it (Authorization: Bearer, or X-Admin-Token), compared in constant time.
  bool Authorized(const http::Request& request) const;

 private:
  // What the keys API answers (keys_api.cc).
  struct ApiAnswer {
    Result<nlohmann::json> result = nlohmann::json();
    int ok_status = 200;
    std::string allow;  // set when the path exists but not with this method
  };

  // /api/threads, /api/requests, /api/overview, /api/live, /api/routes, /api/engine (read_api.cc).
  boost::asio::awaitable<void> HandleRead(http::Request& request, http::ResponseWriter& writer);
  // /api/monitors[/{id}], /api/alerts, /api/channels[/{name}/test] (alerts_api.cc).
  boost::asio::awaitable<void> HandleAlerts(http::Request& request, http::ResponseWriter& writer);
  // /api/keys and /api/keys/{id}[/rotate] (keys_api.cc).
  boost::asio::awaitable<ApiAnswer> HandleKeys(const http::Request& request);
  // POST /api/engine/lookup (engine_api.cc): what the built-in engine has cached of a prompt.
  Result<nlohmann::json> EngineLookup(const http::Request& request) const;
  // GET /api/engine (engine_api.cc): each engine's state and the models it serves.
  nlohmann::json EngineState() const;
  // {"<model>": "<catalog model>"} for each model priced as another (pricing: {as: ...}), so
  // that the thread view and the overview can label those costs as comparison prices.
  nlohmann::json ComparisonPrices() const;
  // The model entry of a target or router (its name), nullopt for an unknown name (models_api.cc).
  std::optional<nlohmann::json> ModelJson(std::string_view name) const;
  // Every model and router, or those `key` may use.
  std::string ModelsJson(const KeyState* key) const;

  // Constant after construction.
  AdminDeps deps_;
};

}  // namespace kvgate::gateway
