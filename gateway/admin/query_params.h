// The admin API's query parameters (docs/api.md): each parser reads what its route takes from a
// request's query string and checks it, giving the store's query or an kInvalidArgument error
// whose message names the parameter and what it must be. Pure: no I/O, no clock (the caller
// passes the time). Private to the admin module.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/error.h"
#include "gateway/http/server.h"
#include "telemetry/store.h"

namespace kvgate::gateway::admin {

// An optional integer parameter: nullopt when absent, an error when malformed.
Result<std::optional<int64_t>> IntParam(const http::Request& request, std::string_view name);

// A time parameter (since, until): unix microseconds or RFC 3339; nullopt when absent.
Result<std::optional<int64_t>> TimeParam(const http::Request& request, std::string_view name);

// `limit`: nullopt when absent; an error below 1; at most `max` (larger asks get `max`).
Result<std::optional<int>> LimitParam(const http::Request& request, int max);

// GET /api/threads: sort, order, model, cursor, limit (at most 500), offset, since, until, q.
Result<telemetry::ThreadQuery> ThreadQueryFrom(const http::Request& request);

// The request filters: thread_id, model, provider, status (one of the statuses a request ends
// with), cursor, limit (at most 1000), since, until.
Result<telemetry::RequestQuery> RequestQueryFrom(const http::Request& request);

// GET /api/requests: the store's filters, and provider_diagnosis=reported|agrees|disagrees (the
// requests whose provider reported on its cache; of those, the ones whose account agrees or
// disagrees with kvgate's diagnosis).
struct RequestListing {
  telemetry::RequestQuery query;
  std::optional<bool> agrees;  // agrees | disagrees
};
Result<RequestListing> RequestListingFrom(const http::Request& request);

// GET /api/overview: window=1h|24h|7d (default 24h), ending at `now_us`, in buckets of 1 min,
// 15 min and 2 h (60, 96 and 84 points); the range is aligned to whole buckets.
struct OverviewRange {
  int64_t since_us = 0, until_us = 0, bucket_seconds = 0;
};
Result<OverviewRange> OverviewRangeFrom(const http::Request& request, int64_t now_us);

}  // namespace kvgate::gateway::admin
