#include "telemetry/otlp/genai.h"

#include <algorithm>

namespace kvgate::telemetry::otlp {
namespace {

// The convention's recommended bucket boundaries (gen-ai-metrics: token usage, durations in
// seconds, time to first token in seconds).
const std::vector<double> kTokenBounds = {
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864};
const std::vector<double> kDurationBounds = {0.01, 0.02, 0.04, 0.08,  0.16,  0.32,  0.64,
                                             1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92};
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                         0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0};

void Put(std::vector<Attribute>& out, std::string key, const std::string& value) {
  if (!value.empty()) out.push_back({std::move(key), value});
}
void Put(std::vector<Attribute>& out, std::string key, const std::optional<int64_t>& value) {
  if (value) out.push_back({std::move(key), *value});
}

uint64_t UnixNanos(int64_t created_at_us, int64_t offset_us) {
  return static_cast<uint64_t>(created_at_us + offset_us) * 1000;
}

// error.type: the record's status word for a request that failed ("upstream_error", "timeout",
// "client_disconnected", ...), low in cardinality as the convention asks.
std::string ErrorType(const std::string& status, int http_status) {
  if (!status.empty() && status != "ok") return status;
  if (http_status >= 400) return std::to_string(http_status);
  return "";
}

}  // namespace

std::string_view OperationName(std::string_view endpoint) {
  if (endpoint == "chat.completions" || endpoint == "responses" || endpoint == "messages") {
    return "chat";
  }
  if (endpoint == "completions") return "text_completion";
  if (endpoint == "embeddings") return "embeddings";
  return endpoint;
}

std::string_view ProviderName(std::string_view provider_type) {
  // The convention's well-known values where one applies; kvgate's type name otherwise.
  if (provider_type == "gemini-openai") return "gcp.gemini";
  if (provider_type == "bedrock") return "aws.bedrock";
  if (provider_type == "local") return "kvgate";
  return provider_type;
}

FinishedRequest FinishedFrom(const RequestRecord& r) {
  FinishedRequest f;
  f.trace = r.trace;
  f.created_at_us = r.created_at_us;
  f.latency_us = r.latency_us;
  f.ttft_us = r.ttft_us;
  f.endpoint = r.endpoint;
  f.model = r.model;
  f.upstream_model = r.upstream_model;
  f.provider = r.provider;
  f.provider_type = r.provider_type;
  f.target = r.target;
  f.response_id = r.response_id;
  f.finish_reason = r.finish_reason;
  f.status = r.status;
  f.error = r.error;
  f.system_fingerprint = r.system_fingerprint;
  f.thread_id = r.thread_id;
  f.thread_source = r.thread_source;
  f.purpose = r.purpose;
  if (!r.route.empty()) {
    f.router = r.route_facts.router;
    f.route_reason = r.route_facts.reason;
  }
  f.http_status = r.http_status;
  f.upstream_status = r.upstream_status;
  const Usage& u = r.usage;
  f.input_tokens = u.TotalInput();
  if (!f.input_tokens) f.input_tokens = u.reported_input;
  f.output_tokens = u.output;
  f.cache_read = u.cache_read;
  f.cache_creation = u.CacheWrite();
  f.uncached = u.uncached;
  f.cache_write_5m = u.cache_write_5m;
  f.cache_write_1h = u.cache_write_1h;
  if (r.cost.priced) f.cost_pico = r.cost.total;
  if (r.cache_diagnosis.is_object()) {
    if (auto it = r.cache_diagnosis.find("cause");
        it != r.cache_diagnosis.end() && it->is_string()) {
      f.diagnosis_cause = it->get<std::string>();
    }
    f.lost_pico = r.cost.missed;
  }
  f.stream = r.stream;
  return f;
}

std::vector<Span> SpansOf(const FinishedRequest& f) {
  std::vector<Span> spans;
  if (!f.trace.active) return spans;
  const std::string operation(OperationName(f.endpoint));
  const std::string provider(ProviderName(f.provider_type));
  Span& request = spans.emplace_back();
  request.trace_id = f.trace.trace_id;
  request.span_id = f.trace.span_id;
  request.parent_span_id = f.trace.parent_id;
  request.name = operation + " " + f.model;
  request.kind = SpanKind::kServer;
  request.start_unix_ns = UnixNanos(f.created_at_us, 0);
  request.end_unix_ns = UnixNanos(f.created_at_us, f.latency_us.value_or(0));
  std::vector<Attribute>& a = request.attributes;
  a.reserve(32);
  Put(a, "gen_ai.operation.name", operation);
  Put(a, "gen_ai.provider.name", provider);
  Put(a, "gen_ai.system", provider);  // the older name, for backends that read only it
  Put(a, "gen_ai.request.model", f.model);
  Put(a, "gen_ai.response.model", f.upstream_model);
  Put(a, "gen_ai.response.id", f.response_id);
  if (!f.finish_reason.empty()) {
    a.push_back({"gen_ai.response.finish_reasons", std::vector<std::string>{f.finish_reason}});
  }
  Put(a, "gen_ai.usage.input_tokens", f.input_tokens);
  Put(a, "gen_ai.usage.output_tokens", f.output_tokens);
  Put(a, "gen_ai.usage.cache_read.input_tokens", f.cache_read);
  Put(a, "gen_ai.usage.cache_creation.input_tokens", f.cache_creation);
  a.push_back({"gen_ai.request.stream", f.stream});
  if (f.http_status != 0) a.push_back({"http.response.status_code", int64_t{f.http_status}});
  const std::string error_type = ErrorType(f.status, f.http_status);
  Put(a, "error.type", error_type);
  Put(a, "kvgate.status", f.status);
  Put(a, "kvgate.thread.id", f.thread_id);
  Put(a, "kvgate.thread.source", f.thread_source);
  Put(a, "kvgate.usage.uncached_tokens", f.uncached);
  Put(a, "kvgate.usage.cache_write_5m_tokens", f.cache_write_5m);
  Put(a, "kvgate.usage.cache_write_1h_tokens", f.cache_write_1h);
  if (f.cost_pico) a.push_back({"kvgate.cost.usd", PicoUsdToUsd(*f.cost_pico)});
  if (!f.diagnosis_cause.empty()) {
    a.push_back({"kvgate.cache.diagnosis", f.diagnosis_cause});
    a.push_back({"kvgate.cache.lost_usd", PicoUsdToUsd(f.lost_pico)});
  }
  Put(a, "kvgate.route.target", f.target);
  Put(a, "kvgate.route.router", f.router);
  Put(a, "kvgate.route.decision", f.route_reason);
  if (!error_type.empty()) {
    request.status = StatusCode::kError;
    request.status_message = f.error;
  }
  for (const AttemptSpan& at : f.trace.attempts) {
    Span& span = spans.emplace_back();
    span.trace_id = f.trace.trace_id;
    span.span_id = at.span_id;
    span.parent_span_id = f.trace.span_id;
    span.name = operation + " " + (at.model.empty() ? at.target : at.model);
    span.kind = SpanKind::kClient;
    span.start_unix_ns = UnixNanos(f.created_at_us, at.start_us);
    span.end_unix_ns =
        UnixNanos(f.created_at_us, at.end_us >= 0 ? at.end_us : f.latency_us.value_or(at.start_us));
    std::vector<Attribute>& s = span.attributes;
    Put(s, "gen_ai.operation.name", operation);
    const std::string attempt_provider(ProviderName(at.provider_type));
    Put(s, "gen_ai.provider.name", attempt_provider);
    Put(s, "gen_ai.system", attempt_provider);
    Put(s, "gen_ai.request.model", at.model);
    Put(s, "server.address", at.server_address);
    if (at.server_port != 0) s.push_back({"server.port", int64_t{at.server_port}});
    if (at.http_status != 0) s.push_back({"http.response.status_code", int64_t{at.http_status}});
    const std::string attempt_error = ErrorType(at.status, at.http_status);
    Put(s, "error.type", attempt_error);
    Put(s, "kvgate.attempt.status", at.status);
    Put(s, "kvgate.route.target", at.target);
    Put(s, "kvgate.provider", at.provider);
    if (!attempt_error.empty()) {
      span.status = StatusCode::kError;
      span.status_message = at.error;
    }
  }
  return spans;
}

void GenAiMetrics::Observe(Instrument& instrument, std::vector<Attribute> attributes,
                           double value) {
  if (instrument.bounds.empty()) {
    instrument.bounds = &instrument == &token_usage_ ? kTokenBounds
                        : &instrument == &duration_  ? kDurationBounds
                                                     : kTtftBounds;
  }
  std::string key;
  for (const Attribute& a : attributes) {
    key += a.key;
    key.push_back('=');
    if (const auto* s = std::get_if<std::string>(&a.value)) key += *s;
    key.push_back('\x1f');
  }
  auto [it, fresh] = instrument.series.try_emplace(std::move(key));
  Series& series = it->second;
  if (fresh) {
    series.attributes = std::move(attributes);
    series.buckets.assign(instrument.bounds.size() + 1, 0);
    series.min = series.max = value;
  }
  ++series.count;
  series.sum += value;
  series.min = std::min(series.min, value);
  series.max = std::max(series.max, value);
  // OTLP's explicit buckets are (previous bound, bound]: the first bound >= value.
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(instrument.bounds.begin(), instrument.bounds.end(), value) -
      instrument.bounds.begin());
  ++series.buckets[bucket];
}

void GenAiMetrics::Add(const FinishedRequest& f) {
  std::vector<Attribute> base;
  Put(base, "gen_ai.operation.name", std::string(OperationName(f.endpoint)));
  Put(base, "gen_ai.provider.name", std::string(ProviderName(f.provider_type)));
  Put(base, "gen_ai.request.model", f.model);
  Put(base, "gen_ai.response.model", f.upstream_model);
  if (f.status == "ok") {
    auto tokens = [&](const char* type, const std::optional<int64_t>& count) {
      if (!count) return;
      std::vector<Attribute> attributes = base;
      attributes.push_back({"gen_ai.token.type", std::string(type)});
      Observe(token_usage_, std::move(attributes), static_cast<double>(*count));
    };
    tokens("input", f.input_tokens);
    tokens("output", f.output_tokens);
  }
  if (f.latency_us) {
    std::vector<Attribute> attributes = base;
    Put(attributes, "error.type", ErrorType(f.status, f.http_status));
    Observe(duration_, std::move(attributes), static_cast<double>(*f.latency_us) / 1e6);
  }
  if (f.ttft_us) Observe(ttft_, base, static_cast<double>(*f.ttft_us) / 1e6);
}

std::vector<Histogram> GenAiMetrics::Snapshot(uint64_t now_unix_ns) const {
  std::vector<Histogram> out;
  auto emit = [&](const Instrument& instrument, const char* name, const char* description,
                  const char* unit) {
    if (instrument.series.empty()) return;
    Histogram& h = out.emplace_back();
    h.name = name;
    h.description = description;
    h.unit = unit;
    h.bounds = instrument.bounds;
    for (const auto& [_, s] : instrument.series) {
      h.points.push_back({.attributes = s.attributes,
                          .start_unix_ns = start_unix_ns_,
                          .time_unix_nano = now_unix_ns,
                          .count = s.count,
                          .sum = s.sum,
                          .min = s.min,
                          .max = s.max,
                          .bucket_counts = s.buckets});
    }
  };
  emit(token_usage_, "gen_ai.client.token.usage", "Input and output tokens used", "{token}");
  emit(duration_, "gen_ai.client.operation.duration", "GenAI operation duration", "s");
  emit(ttft_, "gen_ai.server.time_to_first_token",
       "Time from the request's arrival to its first content token", "s");
  return out;
}

}  // namespace kvgate::telemetry::otlp
