// W3C Trace Context for one request (https://www.w3.org/TR/trace-context/): the client's
// `traceparent` continued, or a new trace; the sampling decision (parent-based, else by trace id
// ratio); and the spans of the request's upstream attempts as the attempt loop times them. The
// OTLP exporter (telemetry/otlp/) turns a finished record's trace into spans.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::telemetry {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

// A parsed `traceparent` header: version 00 (or a later version read as 00 would be, as the spec
// asks), a non-zero trace id and parent id, and the sampled flag.
struct TraceParent {
  TraceId trace_id{};
  SpanId parent_id{};
  bool sampled = false;
};
// nullopt when `header` is not a valid traceparent (a bad one starts a new trace, per the spec).
std::optional<TraceParent> ParseTraceparent(std::string_view header);
// "00-<trace id>-<span id>-<01|00>".
std::string FormatTraceparent(const TraceId& trace_id, const SpanId& span_id, bool sampled);
// Lowercase hex of the bytes.
std::string HexOf(std::span<const uint8_t> bytes);

// Random, never all zero. Safe from any thread (a per-thread generator).
TraceId NewTraceId();
SpanId NewSpanId();

// The TraceIdRatioBased decision: the trace id's last 8 bytes, as an integer, below ratio * 2^64.
// The same trace id always gets the same answer, so every service with the same ratio agrees.
bool SampledByRatio(const TraceId& trace_id, double ratio);

// One upstream attempt's span: a CLIENT span, child of the request's span, whose id is the parent
// in the traceparent the upstream gets. Times are microseconds after the request arrived
// (RequestRecord::created_at_us).
struct AttemptSpan {
  SpanId span_id{};
  int64_t start_us = 0;
  int64_t end_us = -1;  // -1: still open
  std::string target, provider;
  std::string provider_type;   // telemetry::ProviderTypeName of the target's type
  std::string model;           // the model name sent upstream
  std::string server_address;  // the upstream's host and port, "" / 0 for the built-in engine
  int server_port = 0;
  std::string status;  // the attempts list's word: "ok", "upstream_error", "timeout", ...
  int http_status = 0;
  std::string error;
};

// The trace a request belongs to. `active` only when tracing is configured (telemetry.otlp);
// then every request gets a span id, and `sampled` says whether its spans are exported.
struct RequestTrace {
  bool active = false;
  bool sampled = false;
  TraceId trace_id{};
  SpanId span_id{};    // the request's own (SERVER) span
  SpanId parent_id{};  // the client's span; all zero when the request started the trace
  std::vector<AttemptSpan> attempts;
};

// The trace of a request that arrived with `traceparent` ("" when it had none): the client's
// trace continued and its sampled flag honoured, or a new trace sampled by `sample_ratio`.
RequestTrace StartRequestTrace(std::string_view traceparent, double sample_ratio);

}  // namespace kvgate::telemetry
