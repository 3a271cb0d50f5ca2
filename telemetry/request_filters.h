// Request-log filters that the store's SQL cannot express, built on TelemetryStore::ListRequests
// so that every store implementation serves them the same way.
#pragma once

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "telemetry/store.h"

namespace kvgate::telemetry {

// GET /api/requests?provider_diagnosis=agrees|disagrees: the requests whose provider's account of
// its cache miss (Anthropic's cache diagnostics) agrees, or disagrees, with kvgate's diagnosis.
// Whether they agree is decided when the row is read (ProviderDiagnosisAgrees), so this pages
// through the provider-diagnosed requests (RequestQuery::provider_diagnosed) and keeps the
// matching ones, newest first. A page holds at most query.limit requests and may hold fewer
// (even none) while next_cursor is non-null: it stops after scanning kMaxScannedPages pages of
// the underlying log, so a reply stays bounded however rare the matches are.
Result<nlohmann::json> ListRequestsByAgreement(const TelemetryStore& store, RequestQuery query,
                                               bool agrees);

inline constexpr int kMaxScannedPages = 16;

}  // namespace kvgate::telemetry
