// The admin API's query parameters, parsed and checked (query_params.h).
#include "gateway/admin/query_params.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>

#include "common/utf8.h"

namespace kvgate::gateway::admin {
namespace {

// The statuses a request can end with (docs/api.md).
constexpr std::string_view kRequestStatuses[] = {
    "ok", "error", "upstream_error", "timeout", "client_disconnected", "shutdown"};

}  // namespace

Result<std::optional<int64_t>> IntParam(const http::Request& request, std::string_view name) {
  std::string value = request.query_param(name);
  if (value.empty()) return std::optional<int64_t>{};
  char* end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(name) + " must be an integer, got \"" + value + "\"");
  }
  return std::optional<int64_t>{parsed};
}

Result<std::optional<int64_t>> TimeParam(const http::Request& request, std::string_view name) {
  std::string value = request.query_param(name);
  if (value.empty()) return std::optional<int64_t>{};
  // An unencoded "+hh:mm" offset reads back as a space (query strings decode '+' so).
  if (value.size() > 19 && value[value.size() - 6] == ' ') value[value.size() - 6] = '+';
  const size_t digits_from = value[0] == '-' ? 1 : 0;
  if (value.size() > digits_from &&
      value.find_first_not_of("0123456789", digits_from) == std::string::npos) {
    return IntParam(request, name);
  }
  Result<int64_t> parsed = telemetry::ParseRfc3339Micros(value);
  if (!parsed) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(name) + " must be unix microseconds or an RFC 3339 time: " +
                         parsed.error().message);
  }
  return std::optional<int64_t>{*parsed};
}

Result<std::optional<int>> LimitParam(const http::Request& request, int max) {
  auto limit = IntParam(request, "limit");
  if (!limit) return std::unexpected(limit.error());
  if (!*limit) return std::optional<int>{};
  if (**limit < 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "limit must be at least 1, got " + std::to_string(**limit));
  }
  return std::optional<int>{static_cast<int>(std::min<int64_t>(**limit, max))};
}

Result<telemetry::ThreadQuery> ThreadQueryFrom(const http::Request& request) {
  telemetry::ThreadQuery query;
  if (std::string sort = request.query_param("sort"); !sort.empty()) {
    auto parsed = telemetry::ParseThreadSort(sort);
    if (!parsed) return std::unexpected(parsed.error());
    query.sort = *parsed;
  }
  std::string order = request.query_param("order");
  if (!order.empty() && order != "asc" && order != "desc") {
    return MakeError(ErrorCode::kInvalidArgument,
                     "order must be asc or desc, got \"" + order + "\"");
  }
  query.descending = order != "asc";
  query.model = request.query_param("model");
  query.cursor = request.query_param("cursor");
  auto limit = LimitParam(request, 500);
  if (!limit) return std::unexpected(limit.error());
  if (*limit) query.limit = **limit;
  auto offset = IntParam(request, "offset");
  if (!offset) return std::unexpected(offset.error());
  if (*offset) query.offset = std::max<int64_t>(0, **offset);
  auto since = TimeParam(request, "since");
  if (!since) return std::unexpected(since.error());
  query.since_us = *since;
  auto until = TimeParam(request, "until");
  if (!until) return std::unexpected(until.error());
  query.until_us = *until;
  query.id_prefix = request.query_param("q");
  return query;
}

Result<telemetry::RequestQuery> RequestQueryFrom(const http::Request& request) {
  telemetry::RequestQuery query;
  query.thread_id = request.query_param("thread_id");
  query.model = request.query_param("model");
  query.provider = request.query_param("provider");
  query.status = request.query_param("status");
  query.cursor = request.query_param("cursor");
  auto limit = LimitParam(request, 1000);
  if (!limit) return std::unexpected(limit.error());
  if (*limit) query.limit = **limit;
  if (!query.status.empty() && std::find(std::begin(kRequestStatuses), std::end(kRequestStatuses),
                                         query.status) == std::end(kRequestStatuses)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "status must be one of ok, error, upstream_error, timeout, "
                     "client_disconnected, shutdown; got \"" +
                         query.status + "\"");
  }
  query.purpose = request.query_param("purpose");
  if (!query.purpose.empty() && query.purpose != "client" &&
      query.purpose != telemetry::kPurposeKeepWarm) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "purpose must be one of client, keep_warm; got \"" + Utf8Snippet(query.purpose) + "\"");
  }
  auto since = TimeParam(request, "since");
  if (!since) return std::unexpected(since.error());
  query.since_us = *since;
  auto until = TimeParam(request, "until");
  if (!until) return std::unexpected(until.error());
  query.until_us = *until;
  return query;
}

Result<RequestListing> RequestListingFrom(const http::Request& request) {
  auto query = RequestQueryFrom(request);
  if (!query) return std::unexpected(query.error());
  RequestListing listing{.query = std::move(*query)};
  const std::string diagnosis = request.query_param("provider_diagnosis");
  if (diagnosis == "agrees" || diagnosis == "disagrees") {
    listing.agrees = diagnosis == "agrees";
  } else if (diagnosis == "reported") {
    listing.query.provider_diagnosed = true;
  } else if (!diagnosis.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "provider_diagnosis must be one of reported, agrees, disagrees; got \"" +
                         Utf8Snippet(diagnosis) + "\"");
  }
  return listing;
}

Result<OverviewRange> OverviewRangeFrom(const http::Request& request, int64_t now_us) {
  std::string window = request.query_param("window");
  if (window.empty()) window = "24h";
  int64_t span_s = 0, bucket_s = 0;
  if (window == "1h") {
    span_s = 3600, bucket_s = 60;
  } else if (window == "24h") {
    span_s = 86400, bucket_s = 900;
  } else if (window == "7d") {
    span_s = 7 * 86400, bucket_s = 7200;
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     "window must be 1h, 24h or 7d, got \"" + window + "\"");
  }
  const int64_t bucket_us = bucket_s * 1'000'000;
  const int64_t until = (now_us / bucket_us + 1) * bucket_us;
  return OverviewRange{until - span_s * 1'000'000, until, bucket_s};
}

}  // namespace kvgate::gateway::admin
