#include "gateway/recorder.h"

namespace kvgate::gateway {

Recorder::Recorder(telemetry::TelemetryStore& store, telemetry::GatewayMetrics& metrics,
                   const telemetry::PriceCatalog& catalog)
    : store_(store), metrics_(metrics), catalog_(catalog) {}

void Recorder::AddListener(std::function<void(const telemetry::RequestRecord&)> listener) {
  listeners_.push_back(std::move(listener));
}

telemetry::CacheRules Recorder::RulesFor(std::string_view provider_type,
                                         std::string_view model) const {
  // kvgate's provider types -> the catalog's caching-rule keys.
  std::string_view key = provider_type;
  if (provider_type == "gemini-openai") key = "gemini";
  if (provider_type == "local") key = "kvgate";
  if (provider_type == "openrouter") key = "openai";
  telemetry::CacheRules rules;
  auto rule = catalog_.FindCachingRule(key);
  if (!rule) return rules;
  rules.automatic = rule->automatic;
  rules.min_tokens = rule->MinCacheableTokensFor(model);
  rules.granularity = std::max<int64_t>(1, rule->granularity_tokens);
  // nullopt for caches without time-based expiry (self-hosted engines): never "expired".
  rules.ttl_seconds = rule->ttl_seconds;
  return rules;
}

void Recorder::Record(telemetry::RequestRecord record,
                      const std::optional<telemetry::Price>& price) {
  telemetry::MakeTextValid(record);  // before the metrics' labels and the listeners see it
  if (price) record.cost = telemetry::ComputeCost(record.usage, *price);
  if (record.prompt_fingerprint && !record.thread_id.empty() && record.status == "ok") {
    auto diagnosis = tracker_.Diagnose(record, record.prompt_fingerprint,
                                       RulesFor(record.provider_type, record.upstream_model));
    if (diagnosis) {
      record.cache_diagnosis = diagnosis->ToJson();
      if (price) {
        record.cost.missed =
            telemetry::MissCost(diagnosis->MissedTokens(), record.usage, *price);
      }
    }
  } else {
    record.prompt_fingerprint.reset();  // nothing will ever compare with it
  }
  metrics_.Observe(record);
  // Listeners read the record before the store takes it: moving it in saves a copy per request.
  for (const auto& listener : listeners_) listener(record);
  store_.Record(std::move(record));
}

Result<Recorder::Restored> Recorder::RestoreThreads(int64_t since_us) {
  Restored restored;
  auto turns = store_.LatestThreadTurns(since_us, static_cast<int>(tracker_.capacity()),
                                        &restored.unreadable);
  if (!turns) return std::unexpected(turns.error());
  // Oldest first, so that the newest thread ends up the most recently used one.
  for (auto it = turns->rbegin(); it != turns->rend(); ++it) {
    if (tracker_.Restore(*it)) ++restored.threads;
  }
  return restored;
}

}  // namespace kvgate::gateway
