// The `telemetry:` section: OpenTelemetry export (`otlp:`, telemetry/otlp/exporter.h).
#include "gateway/config.h"
#include "gateway/config_internal.h"

namespace kvgate::gateway::config_internal {
namespace {

Error Invalid(std::string message) {
  return Error{ErrorCode::kInvalidArgument, std::move(message)};
}

}  // namespace

Result<std::optional<telemetry::otlp::ExporterOptions>> ParseTelemetry(const json& section) {
  if (section.is_null()) return std::nullopt;
  if (!section.is_object()) return std::unexpected(Invalid("telemetry must be a mapping"));
  if (Status s = OnlyKeys(section, "telemetry", {"otlp"}); !s) return std::unexpected(s.error());
  auto it = section.find("otlp");
  if (it == section.end() || it->is_null()) return std::nullopt;
  const json& o = *it;
  const std::string path = "telemetry.otlp";
  if (!o.is_object()) {
    return std::unexpected(
        Invalid(path + " must be a mapping, e.g. {endpoint: http://localhost:4318}"));
  }
  if (Status s = OnlyKeys(o, path,
                          {"endpoint", "headers", "traces", "metrics", "sample_ratio", "encoding",
                           "export_interval_s", "queue_size"});
      !s) {
    return std::unexpected(s.error());
  }
  Reader r{o, path};
  telemetry::otlp::ExporterOptions options;
  auto endpoint = r.String("endpoint");
  if (!endpoint) return std::unexpected(endpoint.error());
  std::string url = *endpoint;
  while (url.ends_with('/')) url.pop_back();
  const bool http = url.starts_with("http://") || url.starts_with("https://");
  const size_t host_at = url.find("://") + 3;
  if (!http || url.size() <= host_at || url[host_at] == '/' || url[host_at] == ':') {
    return std::unexpected(
        Invalid(path +
                ".endpoint must be the collector's OTLP/HTTP base URL, e.g. http://localhost:4318 "
                "(spans go to {endpoint}/v1/traces, metrics to {endpoint}/v1/metrics)" +
                (endpoint->empty() ? std::string() : ", got \"" + *endpoint + "\"")));
  }
  options.endpoint = std::move(url);
  if (auto h = o.find("headers"); h != o.end() && !h->is_null()) {
    if (!h->is_object()) {
      return std::unexpected(
          Invalid(path + ".headers must be a mapping of header names to values"));
    }
    for (const auto& [name, value] : h->items()) {
      const bool token = !name.empty() && name.find_first_of(" \t\r\n:") == std::string::npos;
      if (!token)
        return std::unexpected(Invalid(path + ".headers: \"" + name + "\" is not a header name"));
      if (!value.is_string() && !value.is_number_integer()) {
        return std::unexpected(Invalid(path + ".headers." + name + " must be a string"));
      }
      std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      if (text.find_first_of("\r\n") != std::string::npos) {
        return std::unexpected(Invalid(path + ".headers." + name + " must be one line"));
      }
      options.headers.emplace_back(name, std::move(text));
    }
  }
  auto traces = r.Bool("traces", options.traces);
  if (!traces) return std::unexpected(traces.error());
  options.traces = *traces;
  auto metrics = r.Bool("metrics", options.metrics);
  if (!metrics) return std::unexpected(metrics.error());
  options.metrics = *metrics;
  auto ratio = r.Number("sample_ratio", options.sample_ratio);
  if (!ratio) return std::unexpected(ratio.error());
  if (*ratio < 0 || *ratio > 1) {
    return std::unexpected(Invalid(path +
                                   ".sample_ratio must be between 0 and 1 (the share of new "
                                   "traces kvgate samples), got " +
                                   std::to_string(*ratio)));
  }
  options.sample_ratio = *ratio;
  auto encoding = r.String("encoding", "protobuf");
  if (!encoding) return std::unexpected(encoding.error());
  if (*encoding == "json") {
    options.encoding = telemetry::otlp::Encoding::kJson;
  } else if (*encoding != "protobuf") {
    return std::unexpected(Invalid(
        path + ".encoding must be protobuf (the default) or json, got \"" + *encoding + "\""));
  }
  auto interval = r.Int("export_interval_s", 10);
  if (!interval) return std::unexpected(interval.error());
  if (*interval < 1 || *interval > 3600) {
    return std::unexpected(Invalid(path + ".export_interval_s must be between 1 and 3600 seconds"));
  }
  options.export_interval = std::chrono::seconds(*interval);
  auto queue = r.Int("queue_size", static_cast<int64_t>(options.queue_capacity));
  if (!queue) return std::unexpected(queue.error());
  if (*queue < 1 || *queue > 1'000'000) {
    return std::unexpected(Invalid(path + ".queue_size must be between 1 and 1000000 requests"));
  }
  options.queue_capacity = static_cast<size_t>(*queue);
  if (!options.traces && !options.metrics) {
    return std::unexpected(Invalid(path + ": traces and metrics are both false; remove the otlp "
                                          "section to turn export off"));
  }
  return options;
}

}  // namespace kvgate::gateway::config_internal
