// The alert engine: evaluates monitors over sliding windows of request records, raises alert
// events (one per incident per scope key within the cooldown, a resolve notice when the condition
// clears) and delivers them to Slack, signed webhooks and email with retries, persisting every
// event and delivery so that pending deliveries survive a restart. Engines that share a store
// (replicas on one database) announce each incident once: the store arbitrates
// (AlertStore::HoldIncident, LeaseDelivery).
//
// Off the request path: Submit() only appends to a bounded queue. All evaluation and every network
// call happen in RunOnce(), which Start() runs on the engine's own thread every tick (and promptly
// after Submit/TestFire). Tests drive RunOnce() directly with a FakeClock.
//
// Windows: per monitor and scope key (the record's model, provider, thread id or api key id; ""
// for global) the samples of the last `window` seconds, stamped with the clock at Submit. A monitor
// fires when its value is computable, the window holds >= min_requests requests and the condition
// has held on every evaluation for the rule's `for` (pending period), unless it fired for that
// key less than `cooldown` ago. A firing incident resolves when, over >= min_requests requests,
// the value is back past the resolve threshold (hysteresis: the threshold itself unless the rule
// sets one further on the resolved side), or when its window is empty. Windows
// live in memory. Incidents are also claimed in the store: an engine that finds the incident held
// by another (live) engine stays silent, and an engine restarted with its incident open takes it
// up again once its old hold goes stale.
//
// Deliveries: 2xx (Slack: 200) is delivered; transport errors, 408, 429 and 5xx are retried after
// Retry-After when given, else after exponential backoff with jitter; other answers fail at once.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "telemetry/alerts/channels.h"
#include "telemetry/alerts/rules.h"
#include "telemetry/alerts/store.h"
#include "telemetry/metrics.h"
#include "telemetry/record.h"

namespace kvgate::telemetry::alerts {

struct AlertEngineOptions {
  size_t queue_capacity = 65'536;        // records waiting for RunOnce; beyond this Submit drops
  size_t max_keys_per_monitor = 10'000;  // scope keys tracked per monitor (thread scope grows)
  int max_attempts = 8;                  // per delivery, then "failed"
  int64_t base_backoff_ms = 1'000;       // first retry after ~this, doubling per attempt
  int64_t max_backoff_ms = 3'600'000;
  int64_t tick_ms = 1'000;   // Start(): evaluation period
  // Engines sharing a store (replicas on one PostgreSQL): see AlertStore::HoldIncident.
  int64_t incident_stale_ms = 60'000;  // an open incident not heartbeaten this long is taken over
  int64_t claim_retry_ms = 10'000;     // a key whose incident another engine holds asks again
  int64_t lease_ms = 120'000;          // a delivery attempt's hold on the delivery
  int64_t reload_monitors_ms = 0;      // > 0: re-read the store's monitors this often
  uint64_t jitter_seed = 0;  // 0: from std::random_device
};

class AlertEngine {
 public:
  // All references must outlive the engine. `metrics` may be null.
  AlertEngine(const Clock& clock, AlertStore& store, HttpSender& http, SmtpSender& smtp,
              std::vector<ChannelConfig> channels, AlertEngineOptions options = {},
              GatewayMetrics* metrics = nullptr);
  ~AlertEngine();  // Stop()s
  AlertEngine(const AlertEngine&) = delete;
  AlertEngine& operator=(const AlertEngine&) = delete;

  // Loads pending deliveries (and their events) from the store. Call once before RunOnce/Start.
  Status Init();

  // Thread safe, never blocks on I/O. Returns false (and counts a drop) when the queue is full.
  bool Submit(const RequestRecord& record);
  // Replaces the monitor set (thread safe; applied at the next RunOnce). Windows and incident state
  // are kept for monitors whose definition did not change.
  void SetRules(std::vector<AlertRule> rules);
  // Where the `budget` metric is read: the fraction of an api key id's budget spent, nullopt
  // for a key without one. Called on the engine thread; must be thread safe. Null: no values.
  using BudgetSource = std::function<std::optional<double>(const std::string& api_key_id)>;
  void SetBudgetSource(BudgetSource source);
  // Raises a "test" event for one channel and queues its delivery; returns the event id.
  // kNotFound when no such channel. Thread safe.
  Result<std::string> TestFire(const std::string& channel_name);

  // Drains the queue, evaluates every monitor at the clock's now, and attempts due deliveries.
  // REQUIRES: not called concurrently with itself (nor while Start()ed).
  void RunOnce();
  void Start();
  void Stop();

  const std::vector<ChannelConfig>& channels() const { return channels_; }
  const ChannelConfig* FindChannel(const std::string& name) const;
  uint64_t dropped_records() const;
  // Deliveries not yet delivered or failed, as known to the engine thread.
  size_t PendingDeliveries() const;

 private:
  struct Sample {
    int64_t at_us = 0;
    double cost_usd = 0;
    std::optional<double> latency_s, ttft_s;
    bool error = false;
    std::optional<int64_t> cache_read, total_input;
    bool cache_drop = false;
  };
  struct KeyState {
    std::deque<Sample> samples;
    bool firing = false;  // this engine holds the key's open incident
    std::string incident_id;
    std::optional<int64_t> last_fired_us;
    int64_t heartbeat_us = 0;   // when this engine last refreshed its hold on the incident
    int64_t next_claim_us = 0;  // another engine holds the incident: ask again from then
    // Since when the condition has held on every evaluation (the rule's "for"); unset while it
    // does not hold.
    std::optional<int64_t> holding_since_us;
  };
  struct MonitorState {
    AlertRule rule;
    std::map<std::string, KeyState> keys;
  };
  // What the monitors read of one record, taken at Submit: its sample and its scope keys. (The
  // queue holding whole records cost a copy of each one's fingerprint, raw usage and diagnosis on
  // the request path.)
  struct Queued {
    Sample sample;
    std::string model, provider, thread_id, api_key_id;
  };
  static const std::string& KeyOf(Scope scope, const Queued& q);
  // Heartbeats of a held incident per incident_stale_ms: several, so one late tick is not stale.
  static constexpr int64_t kHeartbeatsPerStale = 4;

  void ReloadMonitors(int64_t now_us);               // engine thread
  void ApplyRules();                                // engine thread
  void Ingest(const Queued& q);                     // engine thread
  void Evaluate(MonitorState& m, int64_t now_us);   // engine thread
  void Raise(AlertEvent event);                     // persists + schedules; engine thread
  void DeliverDue(int64_t now_us);                  // engine thread
  void Attempt(DeliveryRecord& d, int64_t now_us);  // engine thread
  int64_t BackoffMs(int attempts);

  // Constant after construction.
  const Clock& clock_;
  AlertStore& store_;
  HttpSender& http_;
  SmtpSender& smtp_;
  const std::vector<ChannelConfig> channels_;
  const AlertEngineOptions options_;
  GatewayMetrics* const metrics_;

  // Shared with other threads.
  mutable Mutex mu_;
  CondVar wake_;
  std::deque<Queued> queue_ GUARDED_BY(mu_);
  std::optional<std::vector<AlertRule>> new_rules_ GUARDED_BY(mu_);
  uint64_t rules_generation_ GUARDED_BY(mu_) = 0;                             // SetRules calls
  std::vector<std::pair<AlertEvent, DeliveryRecord>> inbox_ GUARDED_BY(mu_);  // test fires
  uint64_t dropped_ GUARDED_BY(mu_) = 0;
  BudgetSource budget_source_ GUARDED_BY(mu_);
  size_t pending_count_ GUARDED_BY(mu_) = 0;  // mirror of pending_.size()
  bool stop_ GUARDED_BY(mu_) = false;

  // Engine thread only.
  std::vector<MonitorState> monitors_;
  std::vector<DeliveryRecord> pending_;
  std::map<std::string, AlertEvent> events_;  // events with pending deliveries
  std::mt19937_64 rng_;
  int64_t last_reload_us_ = 0;
  std::thread thread_;
};

}  // namespace kvgate::telemetry::alerts
