// OTLP's data model, as much of it as kvgate exports (spans and explicit-bucket histograms), and
// its two encodings: ExportTraceServiceRequest / ExportMetricsServiceRequest as protobuf
// (opentelemetry/proto/collector/{trace,metrics}/v1) or as OTLP/JSON (the protobuf JSON mapping
// with lowerCamelCase names, hex trace and span ids, and 64-bit integers as strings).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "telemetry/trace_context.h"

namespace kvgate::telemetry::otlp {

enum class Encoding { kProtobuf, kJson };

// An attribute value: string, int, double, bool, or an array of strings.
using AttributeValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;
struct Attribute {
  std::string key;
  AttributeValue value;
};

enum class SpanKind { kServer = 2, kClient = 3 };  // opentelemetry.proto.trace.v1.Span.SpanKind
enum class StatusCode { kUnset = 0, kOk = 1, kError = 2 };

struct Span {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_span_id{};  // all zero: a root span
  std::string name;
  SpanKind kind = SpanKind::kServer;
  uint64_t start_unix_ns = 0, end_unix_ns = 0;
  std::vector<Attribute> attributes;
  StatusCode status = StatusCode::kUnset;
  std::string status_message;
};

// One cumulative histogram series: its attributes and its counts since start_unix_ns.
struct HistogramPoint {
  std::vector<Attribute> attributes;
  uint64_t start_unix_ns = 0, time_unix_nano = 0;
  uint64_t count = 0;
  double sum = 0, min = 0, max = 0;
  std::vector<uint64_t> bucket_counts;  // bounds.size() + 1, not cumulative (OTLP's form)
};
struct Histogram {
  std::string name, description, unit;
  std::vector<double> bounds;
  std::vector<HistogramPoint> points;
};

// The resource and instrumentation scope every export names.
struct Resource {
  std::vector<Attribute> attributes;  // service.name, ...
  std::string scope_name = "kvgate";
  std::string scope_version;
};

std::string EncodeTraces(const Resource& resource, std::span<const Span> spans, Encoding encoding);
std::string EncodeMetrics(const Resource& resource, std::span<const Histogram> metrics,
                          Encoding encoding);

// "application/x-protobuf" or "application/json".
const char* ContentType(Encoding encoding);

}  // namespace kvgate::telemetry::otlp
