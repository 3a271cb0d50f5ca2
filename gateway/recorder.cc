#include "gateway/recorder.h"

namespace kvgate::gateway {

Recorder::Recorder(telemetry::TelemetryStore& store, telemetry::GatewayMetrics& metrics,
                   router::Router& router, bool shared_threads)
    : store_(store), metrics_(metrics), router_(router), shared_threads_(shared_threads) {}

void Recorder::SyncThread(const std::string& thread_id) const {
  if (!shared_threads_ || thread_id.empty()) return;
  auto stored = store_.LatestThreadTurn(thread_id);
  if (!stored) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (*stored && tracker_.Absorb(**stored)) taken_.fetch_add(1, std::memory_order_relaxed);
}

void Recorder::AddListener(std::function<void(const telemetry::RequestRecord&)> listener) {
  listeners_.push_back(std::move(listener));
}

std::optional<telemetry::TelemetryStore::JournalMark> Recorder::Checkpoint(
    telemetry::RequestRecord& record, const std::optional<telemetry::Price>& price) {
  if (price) record.cost = telemetry::ComputeCost(record.usage, *price);
  return store_.Checkpoint(record);
}

std::shared_ptr<const telemetry::PromptTexts> Recorder::CapturePromptTexts(
    const raw_json::Object& request_body) const {
  if (!text_redactor_) return nullptr;
  return std::make_shared<const telemetry::PromptTexts>(
      telemetry::CapturePromptTexts(request_body, *text_redactor_));
}

void Recorder::Record(telemetry::RequestRecord record,
                      const std::optional<telemetry::Price>& price,
                      std::optional<telemetry::TelemetryStore::JournalMark> checkpoint,
                      std::shared_ptr<const telemetry::PromptTexts> texts) {
  telemetry::MakeTextValid(record);  // before the metrics' labels and the listeners see it
  if (price) record.cost = telemetry::ComputeCost(record.usage, *price);
  // (A plain index: GCC 12 warns of a maybe-uninitialized std::optional<size_t> here.)
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t target = kNone;
  if (auto t = record.target.empty() ? std::nullopt : router_.FindTarget(record.target)) target = *t;
  const bool ping = record.purpose == telemetry::kPurposeKeepWarm;
  if (ping) {
    record.prompt_fingerprint.reset();
    if (record.status == "ok" && !record.thread_id.empty()) {
      tracker_.Renew(record.thread_id, record.target, record.created_at_us);
    }
  } else if (record.prompt_fingerprint && !record.thread_id.empty() && record.status == "ok") {
    telemetry::TurnContext context;
    if (record.route_facts.moved) {
      context.router = record.route_facts.router;
      context.route_reason = record.route_facts.reason;
    }
    context.texts = std::move(texts);
    if (price) {
      context.missed_cost = [&record, &price](const telemetry::Diagnosis& d) {
        return telemetry::MissCost(d.MissedTokens(), record.usage, *price);
      };
    }
    const telemetry::CacheRules rules =
        target != kNone ? router_.targets()[target].cache_rules : telemetry::CacheRules{};
    // Another replica may have served the previous turn.
    if (!record.thread_synced) SyncThread(record.thread_id);
    auto diagnosis = tracker_.Diagnose(record, record.prompt_fingerprint, rules, context);
    if (diagnosis) {
      record.cache_diagnosis = diagnosis->ToJson();
      if (price) {
        record.cost.missed = telemetry::MissCost(diagnosis->MissedTokens(), record.usage, *price);
      }
    }
  } else {
    record.prompt_fingerprint.reset();  // nothing will ever compare with it
  }
  if (target != kNone && record.status == "ok" && !ping) {
    router_.Learn(target, record.prompt_fingerprint ? record.prompt_fingerprint->TotalBytes() : 0,
                  record);
  }
  if (keep_warm_observer_) keep_warm_observer_(record);
  metrics_.Observe(record);
  // Listeners read the record before the store takes it: moving it in saves a copy per request.
  for (const auto& listener : listeners_) listener(record);
  store_.Record(std::move(record), checkpoint);
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
