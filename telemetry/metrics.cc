#include "telemetry/metrics.h"
#include "telemetry/diagnosis.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

namespace kvgate::telemetry {
namespace {

const std::string kNoModel;  // the model label of requests that reached no provider


bool IsMetricName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

bool IsLabelName(std::string_view s) {
  if (s.empty() || s.starts_with("__")) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

// name{a="x",b="y"} with an optional extra label (le) appended; no braces when there are none.
void AppendSeriesName(std::string& out, std::string_view name,
                      const std::vector<std::string>& names, const std::vector<std::string>& values,
                      std::string_view extra_name = {}, std::string_view extra_value = {}) {
  out += name;
  if (names.empty() && extra_name.empty()) return;
  out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += names[i];
    out += "=\"";
    out += EscapeLabelValue(values[i]);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

// OpenMetrics escapes a HELP text as a label value (quotes too); the text format does not.
void AppendHeader(std::string& out, const std::string& name, const std::string& help,
                  std::string_view type, bool openmetrics = false) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += openmetrics ? EscapeLabelValue(help) : EscapeHelp(help);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// An unsigned integer shown with `decimals` digits after the point, exactly: 1500000, 6 -> "1.5".
std::string FormatFixed(uint64_t value, int decimals) {
  std::string digits = std::to_string(value);
  if (decimals <= 0) return digits;
  const size_t d = static_cast<size_t>(decimals);
  if (digits.size() <= d) digits.insert(0, d + 1 - digits.size(), '0');
  std::string out = digits.substr(0, digits.size() - d);
  std::string frac = digits.substr(digits.size() - d);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  if (!frac.empty()) out += '.' + frac;
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds),
      counts_(new std::atomic<uint64_t>[bounds.size() + 1]),
      exemplars_(bounds.size() + 1) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value, std::string_view trace_id) {
  // Buckets are "less than or equal": the first bound >= value.
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  if (!trace_id.empty()) {
    MutexLock lock(&exemplar_mu_);
    exemplars_[i].trace_id.assign(trace_id);
    exemplars_[i].value = value;
  }
}

std::vector<Exemplar> Histogram::Exemplars() const {
  MutexLock lock(&exemplar_mu_);
  return exemplars_;
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

// Family ----------------------------------------------------------------------------------------

template <class Series>
Series* Family<Series>::Find(std::span<const std::string_view> values) {
  if (values.size() != label_names_.size()) return nullptr;
  {
    ReaderMutexLock lock(&mu_);
    auto it = series_.find(values);
    if (it != series_.end()) return it->second.get();
  }
  WriterMutexLock lock(&mu_);
  auto& slot = series_[std::vector<std::string>(values.begin(), values.end())];
  if (!slot) {
    if constexpr (std::is_same_v<Series, Histogram>) {
      slot = std::make_unique<Histogram>(std::span<const double>(bounds_));
    } else {
      slot = std::make_unique<Series>();
    }
  }
  return slot.get();
}

template <class Series>
Series* Family<Series>::WithLabels(std::span<const std::string> values) {
  std::vector<std::string_view> views(values.begin(), values.end());
  return Find(views);
}

template <class Series>
Series* Family<Series>::WithLabels(std::initializer_list<std::string_view> values) {
  return Find(std::span<const std::string_view>(values.begin(), values.size()));
}

template <class Series>
void Family<Series>::ExposeTo(std::string& out, ExpositionFormat format) const {
  const bool om = format == ExpositionFormat::kOpenMetrics;
  ReaderMutexLock lock(&mu_);
  if constexpr (std::is_same_v<Series, Counter>) {
    // OpenMetrics names a counter family without the _total its samples carry (registration
    // made sure they end in it).
    AppendHeader(out, om ? name_.substr(0, name_.size() - 6) : name_, help_, "counter", om);
    for (const auto& [values, series] : series_) {
      AppendSeriesName(out, name_, label_names_, values);
      out += ' ';
      out += FormatFixed(series->Value(), decimals_);
      out += '\n';
    }
  } else if constexpr (std::is_same_v<Series, Gauge>) {
    AppendHeader(out, name_, help_, "gauge", om);
    for (const auto& [values, series] : series_) {
      AppendSeriesName(out, name_, label_names_, values);
      out += ' ';
      out += FormatMetricValue(series->Value());
      out += '\n';
    }
  } else {
    AppendHeader(out, name_, help_, "histogram", om);
    const std::string bucket = name_ + "_bucket";
    for (const auto& [values, series] : series_) {
      const std::vector<uint64_t> counts = series->CumulativeCounts();
      const std::vector<Exemplar> exemplars = om ? series->Exemplars() : std::vector<Exemplar>();
      for (size_t i = 0; i < counts.size(); ++i) {
        const std::string le = i < bounds_.size() ? FormatMetricValue(bounds_[i]) : "+Inf";
        AppendSeriesName(out, bucket, label_names_, values, "le", le);
        out += ' ';
        out += std::to_string(counts[i]);
        if (i < exemplars.size() && !exemplars[i].trace_id.empty()) {
          out += " # {trace_id=\"";
          out += EscapeLabelValue(exemplars[i].trace_id);
          out += "\"} ";
          out += FormatMetricValue(exemplars[i].value);
        }
        out += '\n';
      }
      AppendSeriesName(out, name_ + "_sum", label_names_, values);
      out += ' ';
      out += FormatMetricValue(series->Sum());
      out += '\n';
      AppendSeriesName(out, name_ + "_count", label_names_, values);
      out += ' ';
      out += std::to_string(counts.back());
      out += '\n';
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// MetricsRegistry -------------------------------------------------------------------------------

Status MetricsRegistry::CheckNewName(const std::string& name,
                                     const std::vector<std::string>& label_names) {
  if (!IsMetricName(name)) {
    return MakeError(ErrorCode::kInvalidArgument, "invalid metric name '" + name + "'");
  }
  for (size_t i = 0; i < label_names.size(); ++i) {
    if (!IsLabelName(label_names[i])) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "invalid label name '" + label_names[i] + "' in " + name);
    }
    for (size_t j = 0; j < i; ++j) {
      if (label_names[j] == label_names[i]) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "duplicate label name '" + label_names[i] + "' in " + name);
      }
    }
  }
  auto taken = [&](const auto& families) {
    for (const auto& f : families) {
      // A histogram also owns name_bucket/_sum/_count; keep the whole base name unique.
      if (f->name() == name) return true;
    }
    return false;
  };
  if (taken(counters_) || taken(gauges_) || taken(histograms_)) {
    return MakeError(ErrorCode::kInvalidArgument, "metric '" + name + "' already registered");
  }
  return {};
}

Result<CounterFamily*> MetricsRegistry::AddCounter(std::string name, std::string help,
                                                   std::vector<std::string> label_names,
                                                   int decimals) {
  MutexLock lock(&mu_);
  if (Status s = CheckNewName(name, label_names); !s) return std::unexpected(s.error());
  if (!name.ends_with("_total")) {
    return MakeError(ErrorCode::kInvalidArgument, "counter '" + name + "' must end in _total");
  }
  if (decimals < 0 || decimals > 18) {
    return MakeError(ErrorCode::kInvalidArgument, "counter decimals must be in [0, 18]");
  }
  auto family = std::unique_ptr<CounterFamily>(
      new CounterFamily(std::move(name), std::move(help), std::move(label_names)));
  family->decimals_ = decimals;
  CounterFamily* raw = family.get();
  counters_.push_back(std::move(family));
  order_.emplace_back(MetricType::kCounter, raw);
  return raw;
}

Result<GaugeFamily*> MetricsRegistry::AddGauge(std::string name, std::string help,
                                               std::vector<std::string> label_names) {
  MutexLock lock(&mu_);
  if (Status s = CheckNewName(name, label_names); !s) return std::unexpected(s.error());
  auto family = std::unique_ptr<GaugeFamily>(
      new GaugeFamily(std::move(name), std::move(help), std::move(label_names)));
  GaugeFamily* raw = family.get();
  gauges_.push_back(std::move(family));
  order_.emplace_back(MetricType::kGauge, raw);
  return raw;
}

Result<HistogramFamily*> MetricsRegistry::AddHistogram(std::string name, std::string help,
                                                       std::vector<std::string> label_names,
                                                       std::vector<double> bounds) {
  MutexLock lock(&mu_);
  if (Status s = CheckNewName(name, label_names); !s) return std::unexpected(s.error());
  for (const std::string& l : label_names) {
    if (l == "le") {
      return MakeError(ErrorCode::kInvalidArgument, "histogram '" + name + "' may not use 'le'");
    }
  }
  if (bounds.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "histogram '" + name + "' needs bounds");
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "histogram '" + name + "' bounds must be finite and strictly increasing");
    }
  }
  auto family = std::unique_ptr<HistogramFamily>(
      new HistogramFamily(std::move(name), std::move(help), std::move(label_names)));
  family->bounds_ = std::move(bounds);
  HistogramFamily* raw = family.get();
  histograms_.push_back(std::move(family));
  order_.emplace_back(MetricType::kHistogram, raw);
  return raw;
}

void MetricsRegistry::AddSection(SectionWriter writer) {
  MutexLock lock(&mu_);
  sections_.push_back(std::move(writer));
}

namespace {

// A section's text-format exposition made OpenMetrics: a counter family's HELP and TYPE lines
// name it without _total (a counter without that suffix becomes "unknown", which OpenMetrics
// allows under any name), and raw quotes in HELP texts are escaped.
void AppendAsOpenMetrics(std::string_view text, std::string& out) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  // Counter families of this section, as their TYPE lines name them.
  std::set<std::string_view> counters;
  for (std::string_view line : lines) {
    if (line.starts_with("# TYPE ") && line.ends_with(" counter")) {
      counters.insert(line.substr(7, line.size() - 7 - 8));
    }
  }
  for (std::string_view line : lines) {
    if (line.empty()) continue;  // OpenMetrics has no blank lines
    if (!line.starts_with("# HELP ") && !line.starts_with("# TYPE ")) {
      out += line;
      out += '\n';
      continue;
    }
    const std::string_view rest = line.substr(7);
    const size_t space = rest.find(' ');
    const std::string_view name = rest.substr(0, space);
    const std::string_view tail = space == std::string_view::npos ? "" : rest.substr(space);
    out += line.substr(0, 7);
    const bool counter = counters.contains(name);
    const bool suffixed = name.ends_with("_total");
    out += counter && suffixed ? name.substr(0, name.size() - 6) : name;
    if (line.starts_with("# TYPE ")) {
      out += counter && !suffixed ? std::string_view(" unknown") : tail;
    } else {
      for (char c : tail) {
        if (c == '"') out += '\\';
        out += c;
      }
    }
    out += '\n';
  }
}

}  // namespace

ExpositionFormat NegotiateExposition(std::string_view accept) {
  // Media ranges separated by commas, each with optional ;-parameters (q among them).
  while (!accept.empty()) {
    const size_t comma = accept.find(',');
    std::string_view range = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    const size_t semi = range.find(';');
    std::string_view type = range.substr(0, semi);
    while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
    while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
    if (type != "application/openmetrics-text") continue;
    bool refused = false;
    for (std::string_view params = semi == std::string_view::npos ? "" : range.substr(semi);
         !params.empty();) {
      params.remove_prefix(1);  // the ';'
      const size_t next = params.find(';');
      std::string_view param = params.substr(0, next);
      params = next == std::string_view::npos ? std::string_view() : params.substr(next);
      while (!param.empty() && param.front() == ' ') param.remove_prefix(1);
      if (param.starts_with("q=")) {
        const std::string_view q = param.substr(2);
        refused = !q.empty() && q.find_first_not_of("0.") == std::string_view::npos;
      }
    }
    if (!refused) return ExpositionFormat::kOpenMetrics;
  }
  return ExpositionFormat::kText;
}

std::string MetricsRegistry::Expose(ExpositionFormat format) const {
  std::vector<std::pair<MetricType, const void*>> order;
  std::vector<SectionWriter> sections;
  {
    MutexLock lock(&mu_);
    order = order_;
    sections = sections_;
  }
  std::string out;
  for (const auto& [type, family] : order) {
    switch (type) {
      case MetricType::kCounter:
        static_cast<const CounterFamily*>(family)->ExposeTo(out, format);
        break;
      case MetricType::kGauge:
        static_cast<const GaugeFamily*>(family)->ExposeTo(out, format);
        break;
      case MetricType::kHistogram:
        static_cast<const HistogramFamily*>(family)->ExposeTo(out, format);
        break;
    }
  }
  std::string text;
  for (const SectionWriter& section : sections) {
    text.clear();
    section(text);
    if (format == ExpositionFormat::kOpenMetrics) {
      AppendAsOpenMetrics(text, out);
    } else {
      out += text;
      if (!text.empty() && text.back() != '\n') out += '\n';
    }
  }
  if (format == ExpositionFormat::kOpenMetrics) out += "# EOF\n";
  return out;
}

// GatewayMetrics --------------------------------------------------------------------------------

namespace {

constexpr std::array<std::string_view, 4> kTokenKindNames = {"cache_read", "cache_write",
                                                             "uncached", "output"};

std::set<std::string, std::less<>> KnownModels(const MetricsScope& scope) {
  std::set<std::string, std::less<>> names;
  for (const MetricsScope::Route& route : scope.routes) {
    names.insert(route.model);
    names.insert(route.target);
  }
  return names;
}

// The index of `cause` in kMissCauses, kMissCauses.size() when it is none of them.
size_t MissCauseIndex(std::string_view cause) {
  return static_cast<size_t>(std::find(kMissCauses.begin(), kMissCauses.end(), cause) -
                             kMissCauses.begin());
}

}  // namespace

GatewayMetrics::GatewayMetrics(MetricsRegistry& registry, MetricsScope scope)
    : registry_(registry), known_models_(KnownModels(scope)) {}

Result<std::unique_ptr<GatewayMetrics>> GatewayMetrics::Create(MetricsRegistry& registry,
                                                               MetricsScope scope) {
  auto m = std::unique_ptr<GatewayMetrics>(new GatewayMetrics(registry, scope));
  const std::vector<std::string> mtp = {"model", "target", "provider"};
  // Request durations span fast cache hits to multi-minute reasoning runs.
  const std::vector<double> duration_bounds = {0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                               5,    10,  30,   60,  120, 300};
  const std::vector<double> ttft_bounds = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30};
  auto requests = registry.AddCounter(
      "kvgate_requests_total",
      "Requests handled, by the model asked for, the configured model that served it (target), "
      "its provider and the final status.",
      {"model", "target", "provider", "status"});
  if (!requests) return std::unexpected(requests.error());
  m->requests_ = *requests;
  auto by_endpoint = registry.AddCounter(
      "kvgate_endpoint_requests_total",
      "Requests handled, by API endpoint (chat.completions, completions, responses, embeddings, "
      "messages) and final status.",
      {"endpoint", "status"});
  if (!by_endpoint) return std::unexpected(by_endpoint.error());
  m->endpoint_requests_ = *by_endpoint;
  auto tokens = registry.AddCounter(
      "kvgate_tokens_total",
      "Tokens by kind (cache_read, cache_write, uncached, output) as the provider reported them; "
      "unreported counts are not added (kvgate_tokens_unreported_total counts those turns).",
      {"model", "target", "provider", "kind"});
  if (!tokens) return std::unexpected(tokens.error());
  m->tokens_ = *tokens;
  auto unreported = registry.AddCounter(
      "kvgate_tokens_unreported_total",
      "Successful turns whose provider did not report the token count of this kind (not zero: "
      "unknown).",
      {"model", "target", "provider", "kind"});
  if (!unreported) return std::unexpected(unreported.error());
  m->unreported_ = *unreported;
  auto cost = registry.AddCounter("kvgate_cost_usd_total", "Cost in USD of priced requests.", mtp,
                                  /*decimals=*/12);
  if (!cost) return std::unexpected(cost.error());
  m->cost_ = *cost;
  auto saved = registry.AddCounter(
      "kvgate_cache_saved_usd_total",
      "What caching saved in USD against the uncached input price (each turn's saving net of "
      "its cache-write premium; a turn whose writes cost more than they saved adds 0).",
      mtp, /*decimals=*/12);
  if (!saved) return std::unexpected(saved.error());
  m->saved_ = *saved;
  auto misses = registry.AddCounter(
      "kvgate_cache_misses_total",
      "Turns on which kvgate diagnosed a cache miss, by cause (expired, partial_eviction, "
      "prompt_changed, model_switch, routed_away, engine_restarted, below_minimum).",
      {"model", "target", "provider", "cause"});
  if (!misses) return std::unexpected(misses.error());
  m->misses_ = *misses;
  auto miss_cost = registry.AddCounter(
      "kvgate_cache_miss_cost_usd_total",
      "What the diagnosed cache misses cost in USD beyond a hit (missed tokens at the input "
      "price instead of the cached price), by cause.",
      {"model", "target", "provider", "cause"}, /*decimals=*/12);
  if (!miss_cost) return std::unexpected(miss_cost.error());
  m->miss_cost_ = *miss_cost;
  auto duration = registry.AddHistogram("kvgate_request_duration_seconds",
                                        "Request arrival to last byte sent.", mtp, duration_bounds);
  if (!duration) return std::unexpected(duration.error());
  m->duration_ = *duration;
  auto ttft =
      registry.AddHistogram("kvgate_time_to_first_token_seconds",
                            "Request arrival to first content token sent.", mtp, ttft_bounds);
  if (!ttft) return std::unexpected(ttft.error());
  m->ttft_ = *ttft;
  auto ratio = registry.AddGauge(
      "kvgate_cache_hit_ratio",
      "Since start: cache-read tokens over all input tokens, for requests with fully known input "
      "(for a windowed ratio use kvgate_tokens_total).",
      mtp);
  if (!ratio) return std::unexpected(ratio.error());
  m->hit_ratio_ = *ratio;
  auto upstream = registry.AddCounter("kvgate_upstream_errors_total",
                                      "Failed upstream calls by upstream HTTP status or kind.",
                                      {"provider", "code"});
  if (!upstream) return std::unexpected(upstream.error());
  m->upstream_errors_ = *upstream;
  auto alerts = registry.AddCounter("kvgate_alert_deliveries_total",
                                    "Alert delivery attempts by channel and outcome.",
                                    {"channel", "outcome"});
  if (!alerts) return std::unexpected(alerts.error());
  m->alert_deliveries_ = *alerts;
  auto elsewhere = registry.AddCounter(
      "kvgate_alerts_held_elsewhere_total",
      "Monitor crossings not announced here because another replica holds the incident.",
      {"monitor"});
  if (!elsewhere) return std::unexpected(elsewhere.error());
  m->alerts_held_elsewhere_ = *elsewhere;
  auto diagnoses = registry.AddCounter(
      "kvgate_provider_cache_diagnoses_total",
      "Turns whose provider reported why its cache missed (reason none: it did not), and whether "
      "that agrees with kvgate's own diagnosis (agrees, disagrees, not_comparable).",
      {"provider", "reason", "agreement"});
  if (!diagnoses) return std::unexpected(diagnoses.error());
  m->provider_diagnoses_ = *diagnoses;
  for (const MetricsScope::Route& route : scope.routes) m->Precreate(route);
  return m;
}

namespace {

// The series cached in `slot`: on first use, `family`'s series for `labels`.
template <class Series>
Series* Cached(std::atomic<Series*>& slot, Family<Series>* family,
               std::initializer_list<std::string_view> labels) {
  Series* series = slot.load(std::memory_order_acquire);
  if (series == nullptr) {
    series = family->WithLabels(labels);
    slot.store(series, std::memory_order_release);
  }
  return series;
}

}  // namespace

GatewayMetrics::RouteSeries& GatewayMetrics::SeriesOf(std::string_view model,
                                                      std::string_view target,
                                                      std::string_view provider) {
  const std::array<std::string_view, 3> key = {model, target, provider};
  {
    ReaderMutexLock lock(&routes_mu_);
    if (auto it = routes_.find(key); it != routes_.end()) return *it->second;
  }
  WriterMutexLock lock(&routes_mu_);
  auto [it, inserted] = routes_.try_emplace(
      RouteKey{std::string(model), std::string(target), std::string(provider)});
  if (inserted) it->second = std::make_unique<RouteSeries>();
  return *it->second;
}

std::string_view GatewayMetrics::Bounded(std::string_view name) const {
  if (known_models_.empty() || name.empty() || known_models_.contains(name)) return name;
  return kOtherLabel;
}

void GatewayMetrics::Precreate(const MetricsScope::Route& route) {
  const std::string_view model = route.model, target = route.target, provider = route.provider;
  RouteSeries& s = SeriesOf(model, target, provider);
  Cached(s.requests_ok, requests_, {model, target, provider, "ok"});
  for (size_t k = 0; k < kTokenKinds; ++k) {
    Cached(s.tokens[k], tokens_, {model, target, provider, kTokenKindNames[k]});
    Cached(s.unreported[k], unreported_, {model, target, provider, kTokenKindNames[k]});
  }
  Cached(s.cost, cost_, {model, target, provider});
  Cached(s.saved, saved_, {model, target, provider});
  for (size_t c = 0; c < kMissCauses.size(); ++c) {
    Cached(s.misses[c], misses_, {model, target, provider, kMissCauses[c]});
    Cached(s.miss_cost[c], miss_cost_, {model, target, provider, kMissCauses[c]});
  }
  Cached(s.duration, duration_, {model, target, provider});
  Cached(s.ttft, ttft_, {model, target, provider});
}

void GatewayMetrics::Observe(const RequestRecord& r) {
  // A request that never reached a provider (unknown model, bad request) is counted without its
  // model name: the client chooses that name, and one series per name would let any client grow
  // the exposition without bound. For the same reason a name the config does not know (the
  // scope's) is counted as "other".
  const bool reached = !r.provider.empty();
  const std::string_view model = reached ? Bounded(r.model) : std::string_view(kNoModel);
  const std::string_view target =
      reached ? Bounded(r.target.empty() ? r.model : r.target) : std::string_view(kNoModel);
  const std::string_view provider = r.provider;
  RouteSeries& route = SeriesOf(model, target, provider);
  if (r.status == "ok") {
    Cached(route.requests_ok, requests_, {model, target, provider, "ok"})->Inc();
  } else {
    requests_->WithLabels({model, target, provider, r.status})->Inc();
  }
  // The endpoint names are kvgate's own (RequestRecord::endpoint), a handful: no cardinality risk.
  endpoint_requests_->WithLabels({r.endpoint, r.status})->Inc();

  const Usage& u = r.usage;
  auto add_tokens = [&](size_t kind, std::optional<int64_t> n) {
    if (n && *n > 0) {
      Cached(route.tokens[kind], tokens_, {model, target, provider, kTokenKindNames[kind]})
          ->Inc(uint64_t(*n));
    }
  };
  add_tokens(0, u.cache_read);
  add_tokens(1, u.cache_write_5m);
  add_tokens(1, u.cache_write_1h);
  add_tokens(1, u.cache_write_no_ttl);
  add_tokens(2, u.uncached);
  add_tokens(3, u.output);
  if (r.status == "ok") {
    // Unknown is not zero: a turn whose provider left a count out is counted apart, so that a hit
    // rate from the token counters can say how much it did not see.
    const std::array<bool, kTokenKinds> known = {u.cache_read.has_value(),
                                                 u.CacheWrite().has_value(),
                                                 u.uncached.has_value(), u.output.has_value()};
    for (size_t k = 0; k < kTokenKinds; ++k) {
      if (!known[k]) {
        Cached(route.unreported[k], unreported_, {model, target, provider, kTokenKindNames[k]})
            ->Inc();
      }
    }
  }

  if (r.cost.priced && r.cost.total > 0) {
    Cached(route.cost, cost_, {model, target, provider})->Inc(uint64_t(r.cost.total));
  }
  // Cost::saved, the figure the overview and the threads show, is net of the write premium and so
  // negative on a turn whose writes cost more than its reads saved; a counter cannot go down, so
  // such a turn adds nothing.
  if (r.cost.priced && r.cost.saved > 0) {
    Cached(route.saved, saved_, {model, target, provider})->Inc(uint64_t(r.cost.saved));
  }
  if (r.cache_diagnosis.is_object()) {
    const auto cause_field = r.cache_diagnosis.find("cause");
    const std::string_view cause =
        cause_field != r.cache_diagnosis.end() && cause_field->is_string()
            ? std::string_view(cause_field->get_ref<const std::string&>())
            : std::string_view();
    if (const size_t c = MissCauseIndex(cause); c < kMissCauses.size()) {
      Cached(route.misses[c], misses_, {model, target, provider, kMissCauses[c]})->Inc();
      if (r.cost.missed > 0) {
        Cached(route.miss_cost[c], miss_cost_, {model, target, provider, kMissCauses[c]})
            ->Inc(uint64_t(r.cost.missed));
      }
    }
  }
  // The exemplars' trace: the client's W3C trace when it sent one, else kvgate's request id,
  // whose hex follows "req_".
  std::string_view trace_id = r.trace_id;
  if (trace_id.empty()) {
    trace_id = r.request_id;
    if (const size_t sep = trace_id.find('_'); sep != std::string_view::npos) {
      trace_id.remove_prefix(sep + 1);
    }
  }
  if (r.latency_us) {
    Cached(route.duration, duration_, {model, target, provider})
        ->Observe(*r.latency_us / 1e6, trace_id);
  }
  if (r.ttft_us) {
    Cached(route.ttft, ttft_, {model, target, provider})->Observe(*r.ttft_us / 1e6, trace_id);
  }

  const std::optional<int64_t> total = u.TotalInput();  // nullopt unless every part is known
  if (total && *total > 0 && u.cache_read) {
    Gauge* gauge = Cached(route.hit_ratio, hit_ratio_, {model, target, provider});
    MutexLock lock(&route.ratio_mu);
    route.ratio.cache_read += uint64_t(std::max<int64_t>(0, *u.cache_read));
    route.ratio.total_input += uint64_t(*total);
    gauge->Set(double(route.ratio.cache_read) / double(route.ratio.total_input));
  }

  const bool upstream_failed =
      r.status == "upstream_error" || r.status == "timeout" || r.upstream_status >= 400;
  if (upstream_failed) {
    const std::string code = r.upstream_status != 0 ? std::to_string(r.upstream_status) : r.status;
    upstream_errors_->WithLabels({r.provider, code})->Inc();
  }
  // The reason is a vetted token of the provider's small vocabulary (or "unrecognized").
  if (!r.provider_cache_miss_reason.empty()) {
    const std::optional<bool> agrees =
        ProviderDiagnosisAgrees(r.cache_diagnosis, r.provider_cache_miss_reason);
    provider_diagnoses_
        ->WithLabels({r.provider, r.provider_cache_miss_reason,
                      !agrees ? "not_comparable" : *agrees ? "agrees" : "disagrees"})
        ->Inc();
  }
}

void GatewayMetrics::ObserveAlertDelivery(std::string_view channel, std::string_view outcome) {
  alert_deliveries_->WithLabels({channel, outcome})->Inc();
}

void GatewayMetrics::ObserveAlertHeldElsewhere(std::string_view monitor_id) {
  alerts_held_elsewhere_->WithLabels({monitor_id})->Inc();
}

void ExposeStoreStats(const TelemetryStore::Stats& stats, std::string& out) {
  out += "# HELP kvgate_telemetry_records_total Request records by what became of them in the "
         "telemetry store.\n# TYPE kvgate_telemetry_records_total counter\n"
         "kvgate_telemetry_records_total{outcome=\"written\"} ";
  out += std::to_string(stats.written);
  out += "\nkvgate_telemetry_records_total{outcome=\"failed\"} ";
  out += std::to_string(stats.write_errors - std::min(stats.dropped, stats.write_errors));
  out += "\nkvgate_telemetry_records_total{outcome=\"dropped\"} ";
  out += std::to_string(stats.dropped);
  out += "\n# HELP kvgate_telemetry_queue_depth Records waiting for the telemetry writer.\n"
         "# TYPE kvgate_telemetry_queue_depth gauge\nkvgate_telemetry_queue_depth ";
  out += std::to_string(stats.queue_depth);
  out +=
      "\n# HELP kvgate_telemetry_oldest_queued_seconds How long the oldest record not yet "
      "written has waited.\n# TYPE kvgate_telemetry_oldest_queued_seconds gauge\n"
      "kvgate_telemetry_oldest_queued_seconds ";
  out += FormatMetricValue(static_cast<double>(stats.oldest_queued_age_us) / 1e6);
  out += "\n# HELP kvgate_telemetry_store_failing 1 while the telemetry store's latest write "
         "failed.\n# TYPE kvgate_telemetry_store_failing gauge\nkvgate_telemetry_store_failing ";
  out += stats.failing ? "1" : "0";
  out += "\n";
}

nlohmann::json StoreHealth(const TelemetryStore::Stats& stats) {
  const bool stalled =
      stats.oldest_queued_age_us >=
      std::chrono::duration_cast<std::chrono::microseconds>(kStalledQueueAge).count();
  const double oldest_s = std::round(static_cast<double>(stats.oldest_queued_age_us) / 1e5) / 10;
  nlohmann::json health = {{"status", stats.failing || stalled ? "degraded" : "ok"}};
  if (stats.failing) {
    health["telemetry"] = "failing: " + stats.last_error;
  } else if (stalled) {
    health["telemetry"] = "stalled: the oldest of " + std::to_string(stats.queue_depth) +
                          " records waiting to be written has waited " +
                          std::to_string(stats.oldest_queued_age_us / 1'000'000) + " s";
  }
  if (stats.failing || stalled || stats.dropped > 0) {
    health["telemetry_queue"] = {
        {"records", stats.queue_depth}, {"oldest_age_s", oldest_s}, {"dropped", stats.dropped}};
  }
  return health;
}

}  // namespace kvgate::telemetry
