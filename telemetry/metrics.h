// Prometheus metrics: a small registry of counter, gauge and histogram families with fixed label
// names, its text exposition (format 0.0.4), and the gateway's own metric set (GatewayMetrics).
//
// Ownership: main() creates the one process-wide MetricsRegistry and passes it (by reference) to
// whoever records metrics; there is no global instance. Families and series live as long as the
// registry; the pointers and references handed out stay valid until it is destroyed.
//
// Thread safety: every method of every class here is safe to call from any thread.
//   - Recording into an existing series is a few relaxed atomic operations.
//   - Finding a series by label values takes the family's shared (reader) lock; only creating a new
//     label set takes it exclusively. Hot paths may keep the returned Counter&/Gauge&/Histogram&.
//   - Expose() takes each family's reader lock in turn; a scrape never blocks recording for long.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "telemetry/record.h"
#include "telemetry/store.h"

namespace kvgate::telemetry {

// A monotonically increasing integer. The family's `decimals` say how the integer is shown:
// decimals = 12 exposes pico-units as units (pico-USD as USD) exactly, with no float rounding.
class Counter {
 public:
  void Inc(uint64_t delta = 1) { value_.fetch_add(delta, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// One observation kept beside a histogram bucket, for OpenMetrics exemplars: the trace it came
// from.
struct Exemplar {
  std::string trace_id;  // "" when the bucket has none
  double value = 0;
};

// Bucket counts are kept per bucket (not cumulative) and summed at exposition, so `_count` always
// equals the `+Inf` bucket even while observations race with a scrape.
class Histogram {
 public:
  // REQUIRES: `bounds` strictly increasing and outliving this object (the family owns them).
  explicit Histogram(std::span<const double> bounds);
  // With a `trace_id`, the observation also becomes its bucket's exemplar (the latest one wins).
  void Observe(double value, std::string_view trace_id = {});
  // Cumulative counts per upper bound, the last one for +Inf.
  std::vector<uint64_t> CumulativeCounts() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }
  // Each bucket's exemplar (bounds.size() + 1 of them), trace_id "" where none was observed.
  std::vector<Exemplar> Exemplars() const;

 private:
  std::span<const double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1 (the overflow bucket)
  std::atomic<double> sum_{0.0};
  // Only observations with a trace id take it: one short critical section per request.
  mutable Mutex exemplar_mu_;
  std::vector<Exemplar> exemplars_ GUARDED_BY(exemplar_mu_);  // bounds_.size() + 1
};

// The two exposition formats /metrics serves.
enum class ExpositionFormat {
  kText,         // Prometheus text format 0.0.4
  kOpenMetrics,  // OpenMetrics 1.0: counter families named without _total, exemplars, # EOF
};
inline constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr std::string_view kOpenMetricsContentType =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
// The format an Accept header asks for: OpenMetrics when it lists application/openmetrics-text
// with a q above 0 (as Prometheus does by default), else the text format.
ExpositionFormat NegotiateExposition(std::string_view accept);

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric family: a name, help text, fixed label names and one series per label-value tuple.
template <class Series>
class Family {
 public:
  // The series for these label values, created on first use. Returns nullptr (and records nothing)
  // when the number of values differs from the number of label names: that is a caller bug.
  Series* WithLabels(std::span<const std::string> values);
  Series* WithLabels(std::initializer_list<std::string_view> values);

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

 private:
  friend class MetricsRegistry;
  Family(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  Series* Find(std::span<const std::string_view> values);

  // Orders label-value lists; transparent, so a lookup by string_views allocates nothing (Observe
  // runs ~10 lookups per request).
  struct LabelsLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return std::lexicographical_compare(
          a.begin(), a.end(), b.begin(), b.end(),
          [](std::string_view x, std::string_view y) { return x < y; });
    }
  };

  // Constant after construction.
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  int decimals_ = 0;            // counters only: see Counter
  std::vector<double> bounds_;  // histograms only
  // Guards the map's shape (not the series' values, which are atomics).
  mutable SharedMutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>, LabelsLess> series_ GUARDED_BY(mu_);

  void ExposeTo(std::string& out, ExpositionFormat format) const;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Registration validates names: metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
  // [a-zA-Z_][a-zA-Z0-9_]* and do not start with "__"; counter names must end in "_total";
  // histograms may not use the label "le" and need strictly increasing, finite bounds. A name may
  // be registered once. Errors are kInvalidArgument.
  Result<CounterFamily*> AddCounter(std::string name, std::string help,
                                    std::vector<std::string> label_names, int decimals = 0);
  Result<GaugeFamily*> AddGauge(std::string name, std::string help,
                                std::vector<std::string> label_names);
  Result<HistogramFamily*> AddHistogram(std::string name, std::string help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds);

  // A writer that appends complete, valid exposition text (HELP/TYPE lines included) for metrics
  // this registry does not hold, e.g. the local engine's. Called by Expose() after the registry's
  // own families, in the order added; it must be thread safe and must not call Expose().
  using SectionWriter = std::function<void(std::string& out)>;
  void AddSection(SectionWriter writer);

  // The whole exposition, in the text format 0.0.4 (kTextContentType) or OpenMetrics
  // (kOpenMetricsContentType). In OpenMetrics the sections' text is converted: a counter family
  // is named without its _total suffix, quotes in HELP are escaped, and `# EOF` ends it all.
  std::string Expose(ExpositionFormat format = ExpositionFormat::kText) const;

 private:
  Status CheckNewName(const std::string& name, const std::vector<std::string>& label_names)
      REQUIRES(mu_);

  mutable Mutex mu_;  // guards the lists below (not the families' contents)
  std::vector<std::unique_ptr<CounterFamily>> counters_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<GaugeFamily>> gauges_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<HistogramFamily>> histograms_ GUARDED_BY(mu_);
  std::vector<std::pair<MetricType, const void*>> order_ GUARDED_BY(mu_);
  std::vector<SectionWriter> sections_ GUARDED_BY(mu_);
};

// Exposition helpers, public for tests and for SectionWriters.
std::string EscapeLabelValue(std::string_view value);  // \ -> \\, " -> \", newline -> \n
std::string EscapeHelp(std::string_view help);         // \ -> \\, newline -> \n
std::string FormatMetricValue(double value);           // shortest round-trip; +Inf, -Inf, NaN

// The telemetry store's own health, for a SectionWriter:
//   kvgate_telemetry_records_total{outcome="written"|"failed"|"dropped"}  records committed /
//       given up on / dropped, oldest first, beyond StoreOptions::max_queued_records
//   kvgate_telemetry_queue_depth                                 recorded, not yet committed
//   kvgate_telemetry_oldest_queued_seconds                       the oldest of those's wait
//   kvgate_telemetry_store_failing                               1 while the latest write failed
void ExposeStoreStats(const TelemetryStore::Stats& stats, std::string& out);

// How long the oldest record not yet written may wait before /healthz says "degraded". A healthy
// writer commits every group-commit interval (20 ms by default, at most 10 s by configuration,
// which an operator who sets it knows about); a disk or lock that holds a batch for seconds is a
// stall worth a health check's attention, while one slow fsync is not.
inline constexpr std::chrono::seconds kStalledQueueAge{5};

// The telemetry store's part of /healthz (still answered with 200: requests are served):
//   {"status": "ok"} while records are written;
//   {"status": "degraded", "telemetry": why (the last error, or how long the writer has stalled),
//    "telemetry_queue": {"records": waiting, "oldest_age_s": the oldest one's wait,
//                        "dropped": records dropped to the queue's bound since start}}
//   while the latest write failed or the oldest waiting record is kStalledQueueAge old or more;
//   "telemetry_queue" is given with "ok" too once records were dropped, so that the loss stays
//   visible after the outage.
nlohmann::json StoreHealth(const TelemetryStore::Stats& stats);

// The label values the gateway's per-model series may take, from the config: every client-facing
// name (a configured model or a router) with each configured model that can serve it and that
// model's provider. They bound the series' cardinality (a name outside them is counted as
// kOtherLabel) and are the series that exist, at 0, from startup.
struct MetricsScope {
  struct Route {
    std::string model;     // what a client asks for: a configured model's or a router's name
    std::string target;    // the configured model that serves it (== model without a router)
    std::string provider;  // the target's provider
  };
  std::vector<Route> routes;
};

// The label value a model name outside the scope is counted under.
inline constexpr std::string_view kOtherLabel = "other";

// kvgate's own cache-miss causes (Diagnosis::cause), the values of the `cause` label.
inline constexpr std::array<std::string_view, 7> kMissCauses = {
    "expired",     "partial_eviction", "prompt_changed", "model_switch",
    "routed_away", "engine_restarted", "below_minimum"};

// The gateway's metric set on top of a registry. Thread safe.
class GatewayMetrics {
 public:
  // Registers the families below on `registry`, which must outlive this object, and creates every
  // series `scope` names at 0. With an empty scope any model name becomes a label value (tests);
  // otherwise names outside it are counted as kOtherLabel. Fails only if the names are already
  // taken in that registry.
  static Result<std::unique_ptr<GatewayMetrics>> Create(MetricsRegistry& registry,
                                                        MetricsScope scope = {});

  // Updates, for one finished request (`model` is the name the client asked for, a router's name
  // for a routed request; `target` the configured model that served it; both "" with `provider`
  // for a request that reached no provider):
  //   kvgate_requests_total{model,target,provider,status}
  //   kvgate_endpoint_requests_total{endpoint,status}  endpoint: chat.completions | completions |
  //                                                 responses | embeddings ("" when unreadable)
  //   kvgate_tokens_total{model,target,provider,kind=cache_read|cache_write|uncached|output}
  //                                                 (reported counts only)
  //   kvgate_tokens_unreported_total{model,target,provider,kind}  successful turns whose provider
  //                                                 did not report that kind's count
  //   kvgate_cost_usd_total{model,target,provider}  (exact pico-USD, exposed as USD; priced only)
  //   kvgate_cache_saved_usd_total{model,target,provider}  what caching saved against the
  //                                                 uncached input price (Cost::saved, when > 0)
  //   kvgate_cache_misses_total{model,target,provider,cause}  turns kvgate diagnosed a miss on
  //   kvgate_cache_miss_cost_usd_total{model,target,provider,cause}  what they lost (Cost::missed)
  //   kvgate_request_duration_seconds{model,target,provider},
  //   kvgate_time_to_first_token_seconds{...}       both with the request's trace id as
  //                                                 exemplar: RequestRecord::trace_id, else the
  //                                                 hex of its request id
  //   kvgate_cache_hit_ratio{model,target,provider}  since-start cache_read / total input, over
  //                                                 requests whose whole input is known
  //   kvgate_upstream_errors_total{provider,code}  when status is upstream_error/timeout or the
  //                                                 upstream answered >= 400; code is the upstream
  //                                                 HTTP status, or the status word if none
  //   kvgate_provider_cache_diagnoses_total{provider,reason,agreement}  turns whose provider
  //                                                 reported its own cache-miss reason (reason
  //                                                 "none": no miss); agreement with kvgate's
  //                                                 diagnosis: agrees | disagrees | not_comparable
  void Observe(const RequestRecord& record);
  // kvgate_alert_deliveries_total{channel,outcome}; outcome e.g. "delivered", "failed", "retry".
  void ObserveAlertDelivery(std::string_view channel, std::string_view outcome);
  // kvgate_alerts_held_elsewhere_total{monitor}: a crossing another replica announces.
  void ObserveAlertHeldElsewhere(std::string_view monitor_id);

  MetricsRegistry& registry() { return registry_; }

 private:
  GatewayMetrics(MetricsRegistry& registry, MetricsScope scope);

  struct HitRatio {
    uint64_t cache_read = 0;
    uint64_t total_input = 0;
  };
  static constexpr size_t kTokenKinds = 4;  // cache_read, cache_write, uncached, output
  // The series one (model, target, provider) triple updates on every request, found with one map
  // lookup per request instead of one per family. Each is created on first use (or at startup for
  // the scope's routes) and then kept; creation races are harmless, since a family hands the same
  // series to every caller for the same labels.
  struct RouteSeries {
    std::atomic<Counter*> requests_ok{nullptr};  // status "ok"; other statuses are looked up
    std::array<std::atomic<Counter*>, kTokenKinds> tokens{};
    std::array<std::atomic<Counter*>, kTokenKinds> unreported{};
    std::atomic<Counter*> cost{nullptr};
    std::atomic<Counter*> saved{nullptr};
    std::array<std::atomic<Counter*>, kMissCauses.size()> misses{};
    std::array<std::atomic<Counter*>, kMissCauses.size()> miss_cost{};
    std::atomic<Histogram*> duration{nullptr};
    std::atomic<Histogram*> ttft{nullptr};
    std::atomic<Gauge*> hit_ratio{nullptr};
    // The ratio's numerator and denominator must move together, so they share a lock.
    Mutex ratio_mu;
    HitRatio ratio GUARDED_BY(ratio_mu);
  };
  using RouteKey = std::array<std::string, 3>;  // model, target, provider
  // Orders route keys; transparent, so a lookup by string_views allocates nothing.
  struct RouteLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return std::lexicographical_compare(
          a.begin(), a.end(), b.begin(), b.end(),
          [](std::string_view x, std::string_view y) { return x < y; });
    }
  };
  RouteSeries& SeriesOf(std::string_view model, std::string_view target, std::string_view provider);
  // Creates the series of `route` a request would update, at 0.
  void Precreate(const MetricsScope::Route& route);
  // `name` when the scope knows it as a model (or there is no scope), else kOtherLabel.
  std::string_view Bounded(std::string_view name) const;

  MetricsRegistry& registry_;
  // Constant after construction: the client-facing and configured names of the scope.
  const std::set<std::string, std::less<>> known_models_;
  CounterFamily* requests_ = nullptr;
  CounterFamily* endpoint_requests_ = nullptr;
  CounterFamily* tokens_ = nullptr;
  CounterFamily* unreported_ = nullptr;
  CounterFamily* cost_ = nullptr;
  CounterFamily* saved_ = nullptr;
  CounterFamily* misses_ = nullptr;
  CounterFamily* miss_cost_ = nullptr;
  HistogramFamily* duration_ = nullptr;
  HistogramFamily* ttft_ = nullptr;
  GaugeFamily* hit_ratio_ = nullptr;
  CounterFamily* upstream_errors_ = nullptr;
  CounterFamily* alert_deliveries_ = nullptr;
  CounterFamily* alerts_held_elsewhere_ = nullptr;
  CounterFamily* provider_diagnoses_ = nullptr;

  SharedMutex routes_mu_;  // guards the map's shape, not the series
  std::map<RouteKey, std::unique_ptr<RouteSeries>, RouteLess> routes_ GUARDED_BY(routes_mu_);
};

}  // namespace kvgate::telemetry
