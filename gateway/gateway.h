// The gateway proper: turns HTTP requests into upstream calls and telemetry records.
// Owns the model routes and the per-thread upstream clients; borrows the store, metrics and clock
// from main (which outlive it). Handle() is the server's request handler.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "common/clock.h"
#include "gateway/config.h"
#include "gateway/http/server.h"
#include "gateway/providers/provider.h"
#include "gateway/recorder.h"
#include "gateway/upstream/client.h"
#include "telemetry/metrics.h"
#include "telemetry/pricing.h"
#include "telemetry/store.h"

namespace kvgate::gateway {

class LocalEngines;  // the built-in engine instances (local providers), see local_provider.h

// Where one client-visible model name goes. Constant after construction.
struct Route {
  std::string model;           // client-visible name
  std::string provider_name;
  providers::ProviderType type;
  upstream::Url url;           // unused for local
  std::string api_key;
  std::string upstream_model;
  std::optional<telemetry::Price> price;  // nullopt: unknown price, cost is marked incomplete
};

struct GatewayDeps {
  telemetry::TelemetryStore* store = nullptr;      // required: the read API queries it
  telemetry::GatewayMetrics* metrics = nullptr;    // required: /metrics
  Recorder* recorder = nullptr;                    // required: where finished requests go
  const Clock* clock = nullptr;                    // required
  LocalEngines* engines = nullptr;                 // optional: serves routes of type local
};

class Gateway {
 public:
  // Builds routes from the config (prices: config override, else the catalog by upstream model,
  // else by client name). Errors: an invalid base_url.
  static Result<std::unique_ptr<Gateway>> Create(const GatewayConfig& config,
                                                 telemetry::PriceCatalog catalog, GatewayDeps deps);
  ~Gateway();

  // The http::Handler: routes /v1/*, /healthz, /metrics, /api/*.
  boost::asio::awaitable<void> Handle(http::Request& request, http::ResponseWriter& writer);
  http::Handler handler();

  const Route* FindRoute(std::string_view model) const;

 private:
  Gateway(const GatewayConfig& config, telemetry::PriceCatalog catalog, GatewayDeps deps);

  boost::asio::awaitable<void> HandleInference(http::Request& request, http::ResponseWriter& writer,
                                               providers::Endpoint endpoint);
  boost::asio::awaitable<void> HandleReadApi(http::Request& request, http::ResponseWriter& writer);
  boost::asio::awaitable<void> HandleModels(http::ResponseWriter& writer);
  std::string ModelsJson() const;
  upstream::Client& ClientForThisThread(const boost::asio::any_io_executor& executor);

  // Constant after construction.
  GatewayConfig config_;
  telemetry::PriceCatalog catalog_;
  GatewayDeps deps_;
  std::unordered_map<std::string, Route> routes_;
  upstream::ClientOptions client_options_;
  // Blocking work (SQLite reads for /api/*) runs here, never on the event loops.
  boost::asio::thread_pool blocking_pool_{2};
};

}  // namespace kvgate::gateway
