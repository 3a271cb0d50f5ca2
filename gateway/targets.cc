#include "gateway/targets.h"

#include <tuple>

#include "gateway/local_provider.h"

namespace kvgate::gateway {

Result<std::vector<router::Target>> BuildTargets(const GatewayConfig& config,
                                                 const telemetry::PriceCatalog& catalog,
                                                 const LocalEngines* engines) {
  std::map<std::string, const ProviderConfig*> providers;
  for (const auto& p : config.providers) providers[p.name] = &p;
  std::vector<router::Target> targets;
  for (const ModelConfig& m : config.models) {
    auto pit = providers.find(m.provider);
    if (pit == providers.end()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "model " + m.name + " names unknown provider " + m.provider);
    }
    const ProviderConfig& p = *pit->second;
    const std::optional<providers::ProviderType> type = TypeOf(p);
    if (!type) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "provider " + p.name + ": unknown type " + p.type);
    }
    const telemetry::ProviderTraits& traits = telemetry::TraitsOf(*type);
    const bool engine = telemetry::IsBuiltInEngine(*type);
    router::Target t;
    t.name = m.name;
    t.provider = p.name;
    t.type = *type;
    t.upstream_model = m.upstream_model.empty() ? m.name : m.upstream_model;
    if (*type == providers::ProviderType::kBedrock) t.bedrock_api = m.api.empty() ? "converse" : m.api;
    if (m.pricing) {
      t.price = m.pricing;
    } else if (!m.price_as.empty()) {
      t.price = catalog.Find(m.price_as);
      if (!t.price) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "model " + m.name + ": pricing.as names " + m.price_as +
                             ", which is not in the price catalog");
      }
      t.price_as = m.price_as;
    } else if (auto price = catalog.Find(t.upstream_model)) {
      t.price = price;
    } else {
      t.price = catalog.Find(m.name);
    }
    // The built-in engine runs here at no per-token charge: a model it serves without a
    // configured price costs 0, a complete cost (not an unknown price).
    if (!t.price && engine) t.price = telemetry::Price{};
    t.cache_rules = router::CacheRulesFor(catalog, *type, t.upstream_model);
    if (m.context_window > 0) {
      t.context_window = m.context_window;
    } else if (auto window = catalog.ContextWindow(t.upstream_model)) {
      t.context_window = *window;
    } else if (engine && engines != nullptr) {
      t.context_window = engines->ContextLength(p.name).value_or(0);
    }
    // The type's defaults (ProviderTraits::defaults). The Responses API and embeddings pass
    // through as they are, so only OpenAI-compatible servers can take them; the built-in engine
    // and Anthropic serve the Responses API by translation to chat (gateway/api/responses_api.cc)
    // and may still turn it off (supports.responses: false).
    const bool pass_through = telemetry::PassesThrough(*type);
    const bool translated = traits.translates_responses;
    t.capabilities = {.tools = traits.defaults.tools,
                      .images = traits.defaults.images,
                      .response_format = traits.defaults.response_format,
                      .responses = traits.defaults.responses,
                      .embeddings = traits.defaults.embeddings};
    if (m.supports_tools) t.capabilities.tools = *m.supports_tools;
    if (m.supports_images) t.capabilities.images = *m.supports_images;
    if (m.supports_response_format) t.capabilities.response_format = *m.supports_response_format;
    for (auto [wanted, slot, what] :
         {std::tuple{m.supports_responses, &t.capabilities.responses, "responses"},
          {m.supports_embeddings, &t.capabilities.embeddings, "embeddings"}}) {
      if (!wanted) continue;
      if (*wanted && !pass_through && !(slot == &t.capabilities.responses && translated)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "model " + m.name + ": supports." + what + " cannot be true on a " +
                             p.type + " provider (kvgate passes that API through unchanged, and " +
                             p.type + " does not speak it)");
      }
      *slot = *wanted;
    }
    t.keys = std::max<int>(1, static_cast<int>(p.api_keys.size()));
    t.auto_cache_ttl = p.anthropic_auto_cache_ttl;
    targets.push_back(std::move(t));
  }
  return targets;
}

Result<std::map<std::string, ProviderConnection>> BuildConnections(const GatewayConfig& config) {
  std::map<std::string, ProviderConnection> out;
  for (const ProviderConfig& p : config.providers) {
    auto type = providers::ProviderTypeFromName(p.type);
    if (!type) {
      return MakeError(ErrorCode::kInvalidArgument, "provider " + p.name + ": unknown type " + p.type);
    }
    ProviderConnection c;
    c.name = p.name;
    c.type = *type;
    if (!telemetry::IsBuiltInEngine(*type)) {
      auto url = upstream::Url::Parse(p.base_url);
      if (!url) {
        return MakeError(ErrorCode::kInvalidArgument, "provider " + p.name + ": " + url.error().message);
      }
      c.url = *url;
    }
    c.api_keys = p.api_keys;
    c.prompt_cache_key_thread = p.prompt_cache_key_thread;
    c.anthropic_auto_cache_ttl = p.anthropic_auto_cache_ttl;
    c.anthropic_cache_diagnostics = p.anthropic_cache_diagnostics;
    c.region = p.region;
    c.aws = {.access_key_id = p.aws_access_key_id,
             .secret_access_key = p.aws_secret_access_key,
             .session_token = p.aws_session_token};
    if (c.api_keys.empty() && !p.api_key.empty()) c.api_keys.push_back(p.api_key);
    out.emplace(p.name, std::move(c));
  }
  return out;
}

telemetry::MetricsScope MetricsScopeOf(const GatewayConfig& config) {
  telemetry::MetricsScope scope;
  std::map<std::string, std::string, std::less<>> provider_of;
  for (const ModelConfig& m : config.models) {
    provider_of.emplace(m.name, m.provider);
    scope.routes.push_back({.model = m.name, .target = m.name, .provider = m.provider});
  }
  for (const router::RouterConfig& r : config.routing.routers) {
    for (const auto& t : r.targets) {
      auto it = provider_of.find(t.model);
      if (it == provider_of.end()) continue;
      scope.routes.push_back({.model = r.name, .target = t.model, .provider = it->second});
    }
  }
  return scope;
}

}  // namespace kvgate::gateway
