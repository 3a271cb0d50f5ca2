#include "telemetry/alerts/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/ids.h"
#include "common/json_text.h"
#include "common/thread_name.h"
#include "common/utf8.h"

namespace kvgate::telemetry::alerts {
namespace {

// Nearest-rank percentile.
std::optional<double> Percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nullopt;
  const size_t rank = size_t(std::ceil(p * double(values.size())));
  const size_t index = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + long(index), values.end());
  return values[index];
}

std::string Iso8601(int64_t unix_us) {
  const std::time_t t = std::time_t(unix_us / 1'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

bool Retryable(int status) { return status == 408 || status == 429 || status >= 500; }

}  // namespace

AlertEngine::AlertEngine(const Clock& clock, AlertStore& store, HttpSender& http, SmtpSender& smtp,
                         std::vector<ChannelConfig> channels, AlertEngineOptions options,
                         GatewayMetrics* metrics)
    : clock_(clock),
      store_(store),
      http_(http),
      smtp_(smtp),
      channels_(std::move(channels)),
      options_(options),
      metrics_(metrics),
      rng_(options.jitter_seed != 0 ? options.jitter_seed : std::random_device{}()) {}

AlertEngine::~AlertEngine() { Stop(); }

Status AlertEngine::Init() {
  auto pending = store_.LoadPendingDeliveries();
  if (!pending) return std::unexpected(pending.error());
  for (DeliveryRecord& d : *pending) {
    if (!events_.contains(d.event_id)) {
      auto event = store_.LoadEvent(d.event_id);
      if (!event) return std::unexpected(event.error());
      if (!*event) continue;  // an orphan row cannot be sent: nothing to say
      events_.emplace(d.event_id, std::move(**event));
    }
    pending_.push_back(std::move(d));
  }
  MutexLock lock(&mu_);
  pending_count_ = pending_.size();
  return {};
}

const ChannelConfig* AlertEngine::FindChannel(const std::string& name) const {
  for (const ChannelConfig& c : channels_) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const std::string& AlertEngine::KeyOf(Scope scope, const Queued& q) {
  static const std::string kGlobalKey;
  switch (scope) {
    case Scope::kGlobal:
      return kGlobalKey;
    case Scope::kModel:
      return q.model;
    case Scope::kProvider:
      return q.provider;
    case Scope::kThread:
      return q.thread_id;
    case Scope::kApiKey:
      return q.api_key_id;
  }
  return kGlobalKey;
}

bool AlertEngine::Submit(const RequestRecord& r) {
  Queued q;
  Sample& s = q.sample;
  s.at_us = clock_.NowUnixMicros();
  if (r.cost.priced) s.cost_usd = double(r.cost.total) / 1e12;
  if (r.latency_us) s.latency_s = double(*r.latency_us) / 1e6;
  if (r.ttft_us) s.ttft_s = double(*r.ttft_us) / 1e6;
  s.error = r.status != "ok" && r.status != "client_disconnected";
  s.cache_read = r.usage.cache_read;
  s.total_input = r.usage.TotalInput();
  s.cache_drop = r.cache_diagnosis.is_object();
  q.model = r.model;
  q.provider = r.provider;
  q.thread_id = r.thread_id;
  q.api_key_id = r.api_key_id;
  MutexLock lock(&mu_);
  if (queue_.size() >= options_.queue_capacity) {
    ++dropped_;
    return false;
  }
  queue_.push_back(std::move(q));
  return true;
}

void AlertEngine::SetBudgetSource(BudgetSource source) {
  MutexLock lock(&mu_);
  budget_source_ = std::move(source);
}

void AlertEngine::SetRules(std::vector<AlertRule> rules) {
  {
    MutexLock lock(&mu_);
    new_rules_ = std::move(rules);
    ++rules_generation_;
  }
  wake_.SignalAll();
}

Result<std::string> AlertEngine::TestFire(const std::string& channel_name) {
  if (!FindChannel(channel_name)) {
    return MakeError(ErrorCode::kNotFound, "no alert channel named '" + channel_name + "'");
  }
  const int64_t now = clock_.NowUnixMicros();
  AlertEvent e;
  e.id = NewId("alrt");
  e.incident_id = e.id;
  e.kind = "test";
  e.rule_id = "test";
  e.rule_name = "test notification";
  e.metric = "cost";
  e.scope = "global";
  e.condition = "above";
  e.at_us = now;
  e.channels = {channel_name};
  e.summary = "This is a test alert from kvgate to channel '" + channel_name + "'.";
  DeliveryRecord d{NewId("msg"), e.id, channel_name, "pending", 0, now, "", now};
  // Persisted here, on the caller's thread, so a test fire survives a crash before RunOnce.
  if (Status s = store_.SaveEvent(e, {d}); !s) return std::unexpected(s.error());
  {
    MutexLock lock(&mu_);
    inbox_.emplace_back(e, d);
  }
  wake_.SignalAll();
  return e.id;
}

void AlertEngine::ApplyRules() {
  std::optional<std::vector<AlertRule>> rules;
  {
    MutexLock lock(&mu_);
    rules.swap(new_rules_);
  }
  if (!rules) return;
  std::vector<MonitorState> next;
  for (AlertRule& rule : *rules) {
    MonitorState state{std::move(rule), {}};
    for (MonitorState& old : monitors_) {
      if (old.rule.id == state.rule.id && ToJson(old.rule) == ToJson(state.rule)) {
        state.keys = std::move(old.keys);
        break;
      }
    }
    next.push_back(std::move(state));
  }
  // A monitor deleted or changed forgets its open incidents: let them go in the store too, so
  // the changed monitor may fire at once rather than after the incidents go stale.
  for (const MonitorState& old : monitors_) {
    for (const auto& [key, k] : old.keys) {
      if (k.firing) (void)store_.ReleaseIncident(old.rule.id, key, k.incident_id);
    }
  }
  monitors_ = std::move(next);
}

void AlertEngine::ReloadMonitors(int64_t now_us) {
  if (options_.reload_monitors_ms <= 0 ||
      now_us - last_reload_us_ < options_.reload_monitors_ms * 1000) {
    return;
  }
  last_reload_us_ = now_us;
  uint64_t generation;
  {
    MutexLock lock(&mu_);
    generation = rules_generation_;
  }
  auto stored = store_.LoadMonitors();
  if (!stored) return;  // kept as they are; tried again at the next period
  MutexLock lock(&mu_);
  // A SetRules while the store was read is newer than what was read.
  // (Rows that do not parse are left out; MonitorService reports them.)
  if (generation == rules_generation_) new_rules_ = std::move(stored->rules);
}

void AlertEngine::Ingest(const Queued& q) {
  for (MonitorState& m : monitors_) {
    if (!m.rule.enabled) continue;
    const std::string& key = KeyOf(m.rule.scope, q);
    if (m.rule.scope != Scope::kGlobal && key.empty()) continue;  // no thread id / api key
    auto it = m.keys.find(key);
    if (it == m.keys.end()) {
      if (m.keys.size() >= options_.max_keys_per_monitor) continue;
      it = m.keys.emplace(key, KeyState{}).first;
    }
    it->second.samples.push_back(q.sample);
  }
}

void AlertEngine::Evaluate(MonitorState& m, int64_t now_us) {
  const AlertRule& rule = m.rule;
  const int64_t horizon = now_us - rule.window_seconds * 1'000'000;
  for (auto it = m.keys.begin(); it != m.keys.end();) {
    const std::string& key = it->first;
    KeyState& k = it->second;
    while (!k.samples.empty() && k.samples.front().at_us < horizon) k.samples.pop_front();
    const int64_t count = int64_t(k.samples.size());
    std::optional<double> value;
    if (count > 0) {
      switch (rule.metric) {
        case Metric::kCost: {
          double sum = 0;
          for (const Sample& s : k.samples) sum += s.cost_usd;
          value = sum;
          break;
        }
        case Metric::kLatencyP95:
        case Metric::kTtftP95: {
          std::vector<double> values;
          for (const Sample& s : k.samples) {
            const auto& v = rule.metric == Metric::kLatencyP95 ? s.latency_s : s.ttft_s;
            if (v) values.push_back(*v);
          }
          value = Percentile(std::move(values), 0.95);
          break;
        }
        case Metric::kErrorRate: {
          int64_t errors = 0;
          for (const Sample& s : k.samples) errors += s.error ? 1 : 0;
          value = double(errors) / double(count);
          break;
        }
        case Metric::kCacheHitRate: {
          int64_t read = 0, total = 0;
          for (const Sample& s : k.samples) {
            if (s.cache_read && s.total_input) {
              read += *s.cache_read;
              total += *s.total_input;
            }
          }
          if (total > 0) value = double(read) / double(total);
          break;
        }
        case Metric::kCacheDrop: {
          int64_t drops = 0;
          for (const Sample& s : k.samples) drops += s.cache_drop ? 1 : 0;
          value = double(drops);
          break;
        }
        case Metric::kBudget: {
          BudgetSource source;
          {
            MutexLock lock(&mu_);
            source = budget_source_;
          }
          if (source) value = source(key);
          break;
        }
      }
    }
    const bool judged = value && count >= rule.min_requests;
    const bool above = rule.condition == Condition::kAbove;
    const bool holds = judged && (above ? *value > rule.threshold : *value < rule.threshold);
    const double resolve_at = rule.resolve_threshold.value_or(rule.threshold);
    const bool resolved = judged && (above ? *value <= resolve_at : *value >= resolve_at);
    if (!holds) {
      k.holding_since_us.reset();
    } else if (!k.holding_since_us) {
      k.holding_since_us = now_us;
    }
    const bool held_long_enough =
        holds && now_us - *k.holding_since_us >= rule.pending_seconds * 1'000'000;
    auto make_event = [&](std::string kind) {
      AlertEvent e;
      e.id = NewId("alrt");
      e.kind = std::move(kind);
      e.rule_id = rule.id;
      e.rule_name = rule.name;
      e.metric = std::string(MetricName(rule.metric));
      e.scope = std::string(ScopeName(rule.scope));
      e.scope_key = key;
      e.condition = std::string(ConditionName(rule.condition));
      e.value = value.value_or(0);
      e.threshold = rule.threshold;
      e.requests = count;
      e.window_seconds = rule.window_seconds;
      e.at_us = now_us;
      e.channels = rule.channels;
      const std::string where = rule.scope == Scope::kGlobal ? "" : " for " + e.scope + " " + key;
      // Both thresholds, when they differ: a reader sees why it fired and what resolves it.
      const std::string resolve_note =
          rule.resolve_threshold && *rule.resolve_threshold != rule.threshold
              ? " (resolves " + std::string(above ? "at or below " : "at or above ") +
                    Number(*rule.resolve_threshold) + ")"
              : "";
      const std::string pending_note =
          rule.pending_seconds > 0 && e.kind == "firing"
              ? ", held for " + std::to_string(rule.pending_seconds) + " s"
              : "";
      e.summary = e.kind == "resolved"
                      ? e.metric + " resolved" + where + ": " + Number(e.value) + " is back " +
                            (above ? "at or below " : "at or above ") + Number(resolve_at) +
                            " (it fires " + e.condition + " " + Number(rule.threshold) + ") over " +
                            std::to_string(count) + " requests in the last " +
                            std::to_string(rule.window_seconds) + " s"
                      : e.metric + " " + e.condition + " " + Number(rule.threshold) +
                            resolve_note + where + ": " + Number(e.value) + " over " +
                            std::to_string(count) + " requests in the last " +
                            std::to_string(rule.window_seconds) + " s" + pending_note;
      return e;
    };
    const int64_t cooldown_us = rule.cooldown_seconds * 1'000'000;
    if (!k.firing && held_long_enough) {
      const bool cooling = k.last_fired_us && now_us - *k.last_fired_us < cooldown_us;
      if (!cooling && now_us >= k.next_claim_us) {
        AlertEvent e = make_event("firing");
        e.incident_id = e.id;
        // The store arbitrates between replicas: only the engine that holds the incident
        // announces it. A store that cannot answer does not silence the alert: sent twice
        // beats not sent.
        auto held = store_.HoldIncident(IncidentClaim{rule.id, key, e.id, now_us, cooldown_us,
                                                      options_.incident_stale_ms * 1000});
        if (!held || *held) {
          k.firing = true;
          k.incident_id = e.id;
          k.last_fired_us = now_us;
          k.heartbeat_us = now_us;
          Raise(std::move(e));
        } else {
          k.next_claim_us = now_us + options_.claim_retry_ms * 1000;
          if (metrics_) metrics_->ObserveAlertHeldElsewhere(rule.id);
        }
      }
    } else if (k.firing && (resolved || count == 0)) {
      AlertEvent e = make_event("resolved");
      e.incident_id = k.incident_id;
      (void)store_.ReleaseIncident(rule.id, key, k.incident_id);
      k.firing = false;
      k.incident_id.clear();
      Raise(std::move(e));
    } else if (k.firing &&
               now_us - k.heartbeat_us >= options_.incident_stale_ms * 1000 / kHeartbeatsPerStale) {
      // Still firing here: tell the other replicas this one is alive and holds it.
      auto held = store_.HoldIncident(IncidentClaim{rule.id, key, k.incident_id, now_us,
                                                    cooldown_us, options_.incident_stale_ms * 1000});
      k.heartbeat_us = now_us;
      if (held && !*held) {
        // Taken over while this engine looked stale (a long pause): the incident is now the
        // other holder's, to resolve; this one goes quiet.
        k.firing = false;
        k.incident_id.clear();
        k.next_claim_us = now_us + options_.claim_retry_ms * 1000;
      }
    }
    // Forget idle keys once nothing (open incident, cooldown) depends on them.
    const bool cooldown_over = !k.last_fired_us || now_us - *k.last_fired_us >= cooldown_us;
    if (k.samples.empty() && !k.firing && cooldown_over) {
      it = m.keys.erase(it);
    } else {
      ++it;
    }
  }
}

void AlertEngine::Raise(AlertEvent event) {
  std::vector<DeliveryRecord> deliveries;
  for (const std::string& channel : event.channels) {
    deliveries.push_back(DeliveryRecord{NewId("msg"), event.id, channel, "pending", 0, event.at_us,
                                        "", event.at_us});
  }
  // Saved before the first attempt; a failed save still leaves the delivery to be tried now.
  (void)store_.SaveEvent(event, deliveries);
  if (deliveries.empty()) return;
  for (DeliveryRecord& d : deliveries) pending_.push_back(std::move(d));
  events_.emplace(event.id, std::move(event));
}

int64_t AlertEngine::BackoffMs(int attempts) {
  const int shift = std::clamp(attempts - 1, 0, 30);
  const int64_t full = std::min(options_.max_backoff_ms, options_.base_backoff_ms << shift);
  // "Equal jitter": half fixed, half random, so retries from many alerts spread out.
  std::uniform_int_distribution<int64_t> jitter(0, std::max<int64_t>(0, full / 2));
  return full - full / 2 + jitter(rng_);
}

void AlertEngine::Attempt(DeliveryRecord& d, int64_t now_us) {
  enum class Outcome { kDelivered, kRetry, kFailed };
  Outcome outcome = Outcome::kFailed;
  int http_status = 0;
  std::string error;
  std::optional<int64_t> retry_after_s;
  const ChannelConfig* channel = FindChannel(d.channel);
  auto event_it = events_.find(d.event_id);
  ++d.attempts;

  auto classify_http = [&](const Result<HttpResponse>& response, bool slack) {
    if (!response) {
      outcome = Outcome::kRetry;
      error = response.error().ToString();
      return;
    }
    http_status = response->status;
    const bool ok =
        slack ? response->status == 200 : response->status >= 200 && response->status < 300;
    if (ok) {
      outcome = Outcome::kDelivered;
      return;
    }
    error = "HTTP " + std::to_string(response->status) + ": " + Utf8Snippet(response->body);
    outcome = Retryable(response->status) ? Outcome::kRetry : Outcome::kFailed;
    if (auto ra = response->Header("retry-after")) {
      retry_after_s = ParseRetryAfterSeconds(*ra, now_us / 1'000'000);
    }
  };

  if (!channel) {
    error = "no alert channel named '" + d.channel + "'";
  } else if (event_it == events_.end()) {
    error = "event " + d.event_id + " not found";
  } else {
    const AlertEvent& event = event_it->second;
    switch (channel->type) {
      case ChannelConfig::Type::kSlack:
        classify_http(
            http_.Post(HttpRequest{
                channel->url, {{"Content-Type", "application/json"}}, JsonText(SlackPayload(event))}),
            /*slack=*/true);
        break;
      case ChannelConfig::Type::kWebhook: {
        const nlohmann::json payload = {{"type", "alert." + event.kind},
                                        {"timestamp", Iso8601(now_us)},
                                        {"data", event.ToJson()}};
        const std::string body = JsonText(payload);
        const int64_t ts = now_us / 1'000'000;
        auto signature = SignWebhook(channel->secret, d.id, ts, body);
        if (!signature) {
          error = signature.error().ToString();
          break;
        }
        classify_http(http_.Post(HttpRequest{channel->url,
                                             {{"Content-Type", "application/json"},
                                              {"webhook-id", d.id},
                                              {"webhook-timestamp", std::to_string(ts)},
                                              {"webhook-signature", *signature}},
                                             body}),
                      /*slack=*/false);
        break;
      }
      case ChannelConfig::Type::kEmail: {
        Status sent = smtp_.Send(*channel, EmailMessage(*channel, event, d.id, now_us / 1'000'000));
        if (sent) {
          outcome = Outcome::kDelivered;
        } else {
          outcome = Outcome::kRetry;
          error = sent.error().ToString();
        }
        break;
      }
    }
  }
  if (outcome == Outcome::kRetry && d.attempts >= options_.max_attempts) {
    outcome = Outcome::kFailed;
    error = "gave up after " + std::to_string(d.attempts) + " attempts: " + error;
  }
  std::string outcome_name;
  switch (outcome) {
    case Outcome::kDelivered:
      d.status = "delivered";
      outcome_name = "delivered";
      break;
    case Outcome::kRetry:
      d.next_attempt_us =
          now_us + (retry_after_s ? *retry_after_s * 1'000'000 : BackoffMs(d.attempts) * 1000);
      outcome_name = "retry";
      break;
    case Outcome::kFailed:
      d.status = "failed";
      outcome_name = "failed";
      break;
  }
  d.last_error = error;
  d.updated_us = now_us;
  (void)store_.RecordAttempt(
      DeliveryAttempt{d.id, d.attempts, now_us, outcome_name, http_status, error}, d);
  if (metrics_) metrics_->ObserveAlertDelivery(d.channel, outcome_name);
}

void AlertEngine::DeliverDue(int64_t now_us) {
  for (DeliveryRecord& d : pending_) {
    if (d.status != "pending" || d.next_attempt_us > now_us) continue;
    // Two engines may both have loaded this delivery (replicas restarted together): only the
    // one holding its lease sends. A store that cannot answer does not hold the delivery back.
    auto lease = store_.LeaseDelivery(d.id, now_us, now_us + options_.lease_ms * 1000);
    if (lease && *lease == DeliveryLease::kBusy) {
      d.next_attempt_us = now_us + options_.lease_ms * 1000;
      continue;
    }
    if (lease && *lease == DeliveryLease::kSettled) {
      d.status = "settled elsewhere";  // never stored: only drops it from pending_
      continue;
    }
    Attempt(d, now_us);
  }
  std::erase_if(pending_, [](const DeliveryRecord& d) { return d.status != "pending"; });
  std::erase_if(events_, [&](const auto& entry) {
    return std::none_of(pending_.begin(), pending_.end(),
                        [&](const DeliveryRecord& d) { return d.event_id == entry.first; });
  });
}

void AlertEngine::RunOnce() {
  std::deque<Queued> batch;
  std::vector<std::pair<AlertEvent, DeliveryRecord>> inbox;
  {
    MutexLock lock(&mu_);
    batch.swap(queue_);
    inbox.swap(inbox_);
  }
  ReloadMonitors(clock_.NowUnixMicros());
  ApplyRules();
  for (const Queued& q : batch) Ingest(q);
  const int64_t now = clock_.NowUnixMicros();
  for (MonitorState& m : monitors_) Evaluate(m, now);
  for (auto& [event, delivery] : inbox) {
    events_.emplace(event.id, std::move(event));
    pending_.push_back(std::move(delivery));
  }
  DeliverDue(now);
  MutexLock lock(&mu_);
  pending_count_ = pending_.size();
}

void AlertEngine::Start() {
  if (thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] {
    NameThisThread("alerts");
    while (true) {
      RunOnce();
      int64_t wait_ms = options_.tick_ms;
      const int64_t now = clock_.NowUnixMicros();
      for (const DeliveryRecord& d : pending_) {
        wait_ms = std::min(wait_ms, std::max<int64_t>(0, (d.next_attempt_us - now) / 1000));
      }
      MutexLock lock(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
      while (!stop_ && inbox_.empty() && !new_rules_.has_value() &&
             wake_.WaitUntil(&mu_, deadline)) {
      }
      if (stop_) return;
    }
  });
}

void AlertEngine::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

uint64_t AlertEngine::dropped_records() const {
  MutexLock lock(&mu_);
  return dropped_;
}

size_t AlertEngine::PendingDeliveries() const {
  MutexLock lock(&mu_);
  return pending_count_;
}

}  // namespace kvgate::telemetry::alerts
