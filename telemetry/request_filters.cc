#include "telemetry/request_filters.h"

#include <algorithm>

namespace kvgate::telemetry {

using nlohmann::json;

Result<json> ListRequestsByAgreement(const TelemetryStore& store, RequestQuery query, bool agrees) {
  const int limit = query.limit <= 0 ? 100 : std::min(query.limit, kRequestLimitMax);
  query.provider_diagnosed = true;
  json kept = json::array();
  json next = nullptr;
  for (int page = 0; page < kMaxScannedPages; ++page) {
    // Each scan asks for no more rows than can still be kept, so the reply's cursor (the last
    // scanned row's) never skips a match.
    query.limit = limit - static_cast<int>(kept.size());
    Result<json> rows = store.ListRequests(query);
    if (!rows) return rows;
    for (json& r : (*rows)["requests"]) {
      const json& d = r["provider_cache_diagnosis"];
      const json* verdict = d.is_object() && d.contains("agrees_with_kvgate")
                                ? &d["agrees_with_kvgate"]
                                : nullptr;
      if (verdict != nullptr && verdict->is_boolean() && verdict->get<bool>() == agrees) {
        kept.push_back(std::move(r));
      }
    }
    next = (*rows)["next_cursor"];
    if (!next.is_string() || static_cast<int>(kept.size()) >= limit) break;
    query.cursor = next.get<std::string>();
  }
  json out;
  out["requests"] = std::move(kept);
  out["next_cursor"] = std::move(next);
  return out;
}

}  // namespace kvgate::telemetry
