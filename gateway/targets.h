// The router's table, built from the config: one router::Target per configured model (provider,
// upstream model, price, caching rules, context window, what it supports, how many keys), and
// one ProviderConnection per remote provider. Pure: reads the config, the catalog and the
// engines' context lengths; starts nothing.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "gateway/config.h"
#include "gateway/upstream.h"
#include "router/router.h"
#include "telemetry/metrics.h"
#include "telemetry/pricing.h"

namespace kvgate::gateway {

class LocalEngines;

// Prices: the model's config override, else the catalog by upstream model, else by name.
// Context windows: the config's, else the catalog's, else (local) the engine's. Capabilities: the
// provider type's defaults (telemetry::ProviderTraits::defaults), overridden by `supports`. Errors:
// a model naming an unknown provider or a provider of an unknown type; supports.responses /
// embeddings true on a type that can take neither passed through (nor, for the Responses API,
// translated).
// `engines` may be null (no local provider).
Result<std::vector<router::Target>> BuildTargets(const GatewayConfig& config,
                                                 const telemetry::PriceCatalog& catalog,
                                                 const LocalEngines* engines);

// The label values of the gateway's per-model metric series (telemetry::MetricsScope): each
// configured model served by itself, and each router with each of its targets that is a
// configured model, with that model's provider.
telemetry::MetricsScope MetricsScopeOf(const GatewayConfig& config);

// Errors: an invalid base_url (its credentials redacted), an unknown provider type.
Result<std::map<std::string, ProviderConnection>> BuildConnections(const GatewayConfig& config);

}  // namespace kvgate::gateway
