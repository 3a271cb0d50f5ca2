#include "telemetry/otlp/encode.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "telemetry/otlp/proto_writer.h"

namespace kvgate::telemetry::otlp {
namespace {

using nlohmann::json;

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

template <size_t N>
std::string_view AsBytes(const std::array<uint8_t, N>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), N};
}

// --- protobuf --------------------------------------------------------------------------------

// opentelemetry.proto.common.v1.AnyValue: string_value = 1, bool_value = 2, int_value = 3,
// double_value = 4, array_value = 5 (ArrayValue: repeated AnyValue values = 1).
void WriteAnyValue(ProtoWriter& w, const AttributeValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) {
    w.Bytes(1, *s);
  } else if (const auto* b = std::get_if<bool>(&value)) {
    w.Bool(2, *b);
  } else if (const auto* i = std::get_if<int64_t>(&value)) {
    w.Int64(3, *i);
  } else if (const auto* d = std::get_if<double>(&value)) {
    w.Double(4, *d);
  } else if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    w.Message(5, [&](ProtoWriter& array) {
      for (const std::string& item : *list) {
        array.Message(1, [&](ProtoWriter& any) { any.Bytes(1, item); });
      }
    });
  }
}

// KeyValue: key = 1, value = 2.
void WriteAttributes(ProtoWriter& w, uint32_t field, const std::vector<Attribute>& attributes) {
  for (const Attribute& a : attributes) {
    w.Message(field, [&](ProtoWriter& kv) {
      kv.Bytes(1, a.key);
      kv.Message(2, [&](ProtoWriter& any) { WriteAnyValue(any, a.value); });
    });
  }
}

// Resource: attributes = 1. InstrumentationScope: name = 1, version = 2.
void WriteResource(ProtoWriter& w, const Resource& resource) {
  w.Message(1, [&](ProtoWriter& r) { WriteAttributes(r, 1, resource.attributes); });
}
void WriteScope(ProtoWriter& w, const Resource& resource) {
  w.Message(1, [&](ProtoWriter& s) {
    s.Bytes(1, resource.scope_name);
    if (!resource.scope_version.empty()) s.Bytes(2, resource.scope_version);
  });
}

// opentelemetry.proto.trace.v1.Span: trace_id = 1, span_id = 2, parent_span_id = 4, name = 5,
// kind = 6, start_time_unix_nano = 7 (fixed64), end_time_unix_nano = 8 (fixed64),
// attributes = 9, status = 15 (Status: message = 2, code = 3).
void WriteSpan(ProtoWriter& w, const Span& span) {
  w.Bytes(1, AsBytes(span.trace_id));
  w.Bytes(2, AsBytes(span.span_id));
  if (!AllZero(span.parent_span_id)) w.Bytes(4, AsBytes(span.parent_span_id));
  w.Bytes(5, span.name);
  w.Varint(6, static_cast<uint64_t>(span.kind));
  w.Fixed64(7, span.start_unix_ns);
  w.Fixed64(8, span.end_unix_ns);
  WriteAttributes(w, 9, span.attributes);
  if (span.status != StatusCode::kUnset || !span.status_message.empty()) {
    w.Message(15, [&](ProtoWriter& status) {
      if (!span.status_message.empty()) status.Bytes(2, span.status_message);
      if (span.status != StatusCode::kUnset) status.Varint(3, static_cast<uint64_t>(span.status));
    });
  }
}

// Metric: name = 1, description = 2, unit = 3, histogram = 9 (Histogram: data_points = 1,
// aggregation_temporality = 2, CUMULATIVE = 2). HistogramDataPoint: start_time_unix_nano = 2,
// time_unix_nano = 3, count = 4 (fixed64), sum = 5 (double), bucket_counts = 6 (packed fixed64),
// explicit_bounds = 7 (packed double), attributes = 9, min = 11, max = 12.
void WriteHistogram(ProtoWriter& w, const Histogram& h) {
  w.Bytes(1, h.name);
  if (!h.description.empty()) w.Bytes(2, h.description);
  if (!h.unit.empty()) w.Bytes(3, h.unit);
  w.Message(9, [&](ProtoWriter& hist) {
    for (const HistogramPoint& p : h.points) {
      hist.Message(1, [&](ProtoWriter& point) {
        point.Fixed64(2, p.start_unix_ns);
        point.Fixed64(3, p.time_unix_nano);
        point.Fixed64(4, p.count);
        point.Double(5, p.sum);
        point.PackedFixed64(6, p.bucket_counts);
        point.PackedDouble(7, h.bounds);
        WriteAttributes(point, 9, p.attributes);
        if (p.count > 0) {
          point.Double(11, p.min);
          point.Double(12, p.max);
        }
      });
    }
    hist.Varint(2, 2);
  });
}

// --- JSON --------------------------------------------------------------------------------------

json AnyValueJson(const AttributeValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return {{"stringValue", *s}};
  if (const auto* b = std::get_if<bool>(&value)) return {{"boolValue", *b}};
  if (const auto* i = std::get_if<int64_t>(&value)) return {{"intValue", std::to_string(*i)}};
  if (const auto* d = std::get_if<double>(&value)) return {{"doubleValue", *d}};
  json values = json::array();
  for (const std::string& item : std::get<std::vector<std::string>>(value)) {
    values.push_back({{"stringValue", item}});
  }
  return {{"arrayValue", {{"values", std::move(values)}}}};
}

json AttributesJson(const std::vector<Attribute>& attributes) {
  json out = json::array();
  for (const Attribute& a : attributes) {
    out.push_back({{"key", a.key}, {"value", AnyValueJson(a.value)}});
  }
  return out;
}

json ResourceJson(const Resource& resource) {
  return {{"attributes", AttributesJson(resource.attributes)}};
}
json ScopeJson(const Resource& resource) {
  json scope = {{"name", resource.scope_name}};
  if (!resource.scope_version.empty()) scope["version"] = resource.scope_version;
  return scope;
}

json SpanJson(const Span& span) {
  json j = {{"traceId", HexOf(span.trace_id)},
            {"spanId", HexOf(span.span_id)},
            {"name", span.name},
            {"kind", static_cast<int>(span.kind)},
            {"startTimeUnixNano", std::to_string(span.start_unix_ns)},
            {"endTimeUnixNano", std::to_string(span.end_unix_ns)},
            {"attributes", AttributesJson(span.attributes)}};
  if (!AllZero(span.parent_span_id)) j["parentSpanId"] = HexOf(span.parent_span_id);
  if (span.status != StatusCode::kUnset || !span.status_message.empty()) {
    json status = json::object();
    if (!span.status_message.empty()) status["message"] = span.status_message;
    if (span.status != StatusCode::kUnset) status["code"] = static_cast<int>(span.status);
    j["status"] = std::move(status);
  }
  return j;
}

json HistogramJson(const Histogram& h) {
  json points = json::array();
  for (const HistogramPoint& p : h.points) {
    json counts = json::array();
    for (uint64_t c : p.bucket_counts) counts.push_back(std::to_string(c));
    json point = {{"attributes", AttributesJson(p.attributes)},
                  {"startTimeUnixNano", std::to_string(p.start_unix_ns)},
                  {"timeUnixNano", std::to_string(p.time_unix_nano)},
                  {"count", std::to_string(p.count)},
                  {"sum", p.sum},
                  {"bucketCounts", std::move(counts)},
                  {"explicitBounds", h.bounds}};
    if (p.count > 0) {
      point["min"] = p.min;
      point["max"] = p.max;
    }
    points.push_back(std::move(point));
  }
  json j = {{"name", h.name},
            {"histogram", {{"dataPoints", std::move(points)}, {"aggregationTemporality", 2}}}};
  if (!h.description.empty()) j["description"] = h.description;
  if (!h.unit.empty()) j["unit"] = h.unit;
  return j;
}

}  // namespace

std::string EncodeTraces(const Resource& resource, std::span<const Span> spans, Encoding encoding) {
  if (encoding == Encoding::kJson) {
    json list = json::array();
    for (const Span& span : spans) list.push_back(SpanJson(span));
    json request = {
        {"resourceSpans",
         {{{"resource", ResourceJson(resource)},
           {"scopeSpans", {{{"scope", ScopeJson(resource)}, {"spans", std::move(list)}}}}}}}};
    return request.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  // ExportTraceServiceRequest: resource_spans = 1. ResourceSpans: resource = 1, scope_spans = 2.
  // ScopeSpans: scope = 1, spans = 2.
  ProtoWriter w;
  w.Message(1, [&](ProtoWriter& rs) {
    WriteResource(rs, resource);
    rs.Message(2, [&](ProtoWriter& ss) {
      WriteScope(ss, resource);
      for (const Span& span : spans) ss.Message(2, [&](ProtoWriter& s) { WriteSpan(s, span); });
    });
  });
  return w.Take();
}

std::string EncodeMetrics(const Resource& resource, std::span<const Histogram> metrics,
                          Encoding encoding) {
  if (encoding == Encoding::kJson) {
    json list = json::array();
    for (const Histogram& h : metrics) list.push_back(HistogramJson(h));
    json request = {
        {"resourceMetrics",
         {{{"resource", ResourceJson(resource)},
           {"scopeMetrics", {{{"scope", ScopeJson(resource)}, {"metrics", std::move(list)}}}}}}}};
    return request.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  // ExportMetricsServiceRequest: resource_metrics = 1. ResourceMetrics: resource = 1,
  // scope_metrics = 2. ScopeMetrics: scope = 1, metrics = 2.
  ProtoWriter w;
  w.Message(1, [&](ProtoWriter& rm) {
    WriteResource(rm, resource);
    rm.Message(2, [&](ProtoWriter& sm) {
      WriteScope(sm, resource);
      for (const Histogram& h : metrics)
        sm.Message(2, [&](ProtoWriter& m) { WriteHistogram(m, h); });
    });
  });
  return w.Take();
}

const char* ContentType(Encoding encoding) {
  return encoding == Encoding::kJson ? "application/json" : "application/x-protobuf";
}

}  // namespace kvgate::telemetry::otlp
