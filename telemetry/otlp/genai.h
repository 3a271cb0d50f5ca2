// What OpenTelemetry sees of one finished request, in the GenAI semantic conventions' names
// (gen_ai.*, server.*, error.type; the open-telemetry semantic-conventions GenAI registry) and
// kvgate's own (kvgate.*): the request's SERVER span, a CLIENT span per upstream attempt, and the
// GenAI metrics (token usage, operation duration, time to first token) as cumulative histograms.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/otlp/encode.h"
#include "telemetry/record.h"

namespace kvgate::telemetry::otlp {

// The part of a RequestRecord the exporter needs, copied on the request path (a few strings and
// numbers: the exporter's thread does the rest). Counts are nullopt when not reported.
struct FinishedRequest {
  RequestTrace trace;
  int64_t created_at_us = 0;
  std::optional<int64_t> latency_us, ttft_us;
  std::string endpoint, model, upstream_model, provider, provider_type, target;
  std::string response_id, finish_reason, status, error, system_fingerprint;
  std::string thread_id, thread_source, purpose;
  std::string router, route_reason;
  int http_status = 0, upstream_status = 0;
  std::optional<int64_t> input_tokens, output_tokens, cache_read, cache_creation, uncached,
      cache_write_5m, cache_write_1h;
  std::optional<int64_t> cost_pico;  // when a price was found
  std::string diagnosis_cause;       // "" when the turn's cache did as expected
  int64_t lost_pico = 0;             // what the diagnosed miss cost beyond a hit
  bool stream = false;
};
FinishedRequest FinishedFrom(const RequestRecord& record);

// The convention's names for what kvgate calls an endpoint and a provider type.
std::string_view OperationName(std::string_view endpoint);
std::string_view ProviderName(std::string_view provider_type);

// The request's span and its attempts' spans (empty when its trace is not active).
std::vector<Span> SpansOf(const FinishedRequest& request);

// The GenAI metrics, cumulative since the aggregator was made. Not thread-safe: the exporter's
// thread owns it.
class GenAiMetrics {
 public:
  explicit GenAiMetrics(uint64_t start_unix_ns) : start_unix_ns_(start_unix_ns) {}
  void Add(const FinishedRequest& request);
  // Every series so far, as of `now_unix_ns`; empty when nothing was added.
  std::vector<Histogram> Snapshot(uint64_t now_unix_ns) const;

 private:
  struct Series {
    std::vector<Attribute> attributes;
    uint64_t count = 0;
    double sum = 0, min = 0, max = 0;
    std::vector<uint64_t> buckets;
  };
  struct Instrument {
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // by the attribute values joined
  };
  void Observe(Instrument& instrument, std::vector<Attribute> attributes, double value);

  uint64_t start_unix_ns_;
  Instrument token_usage_, duration_, ttft_;
};

}  // namespace kvgate::telemetry::otlp
