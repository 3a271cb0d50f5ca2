// Internal to the telemetry module: the read side both stores share. A store runs its dialect's
// statement and hands the rows, through RowCursor, to the functions here, which check the
// paging arguments and build the JSON of store.h; so SQLite and PostgreSQL answer alike.
// store_queries.cc and store_overview.cc define them.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "telemetry/record.h"
#include "telemetry/store.h"

namespace kvgate::telemetry::internal {

// Runs a read that builds JSON; a JSON exception (a stored value of an unexpected type) becomes a
// kInternal error naming the query instead of escaping into the server.
template <class F>
auto Guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal, std::string("telemetry query: ") + e.what());
  }
}

// The rows of one statement, read forward. Columns are 0-based.
class RowCursor {
 public:
  virtual ~RowCursor() = default;
  // Moves to the next row: true when there is one, false at the end; kUnavailable on an error.
  virtual Result<bool> Step() = 0;
  virtual bool IsNull(int column) const = 0;
  virtual int64_t Int(int column) const = 0;  // 0 for NULL
  virtual std::optional<int64_t> OptInt(int column) const = 0;
  virtual std::string Text(int column) const = 0;  // "" for NULL
  virtual double Real(int column) const = 0;
};

// The columns of a turn, in the order TurnJson reads them (both dialects select these names).
std::string_view TurnColumns();
inline constexpr int kTurnColumnCount = 54;

// ListThreads: the page a query asks for; kInvalidArgument for a bad cursor.
struct ThreadPage {
  int limit = 50;
  int64_t offset = 0;
  bool has_cursor = false;
  nlohmann::json after_value;  // the sort value of the previous page's last thread (a number)
  std::string after_thread_id;
};
Result<ThreadPage> ParseThreadPage(const ThreadQuery& query);
// The rows of ThreadListSql / PostgresThreadListSql (limit + 1 of them at most) as the page.
Result<nlohmann::json> ThreadListJson(RowCursor& rows, const ThreadQuery& query, int limit);
// The thread's turns (TurnColumns, oldest first) as GetThread's answer.
Result<nlohmann::json> ThreadJson(RowCursor& rows, std::string_view thread_id);

// ListRequests: the page a query asks for; kInvalidArgument for a bad cursor.
struct RequestPage {
  int limit = 100;
  std::optional<std::pair<int64_t, int64_t>> after;  // (created_at_us, seq) of the last row
};
Result<RequestPage> ParseRequestPage(const RequestQuery& query);
Result<nlohmann::json> RequestListJson(RowCursor& rows, int limit);
// The first row (TurnColumns) as GetRequest's answer; kNotFound without one.
Result<nlohmann::json> RequestJson(RowCursor& rows, std::string_view id);
// A record handed to the writer and not yet committed (BatchWriter::FindPending) as GetRequest
// will answer for it once committed.
Result<nlohmann::json> PendingRequestJson(const RequestRecord& record);
// Rows of TurnColumns plus the fingerprint's text (column kTurnColumnCount).
Result<std::vector<RequestRecord>> LatestTurnsFromRows(RowCursor& rows, int* skipped_corrupt);

// Overview: kInvalidArgument for a bad bucket or range; the first minute to read otherwise.
struct OverviewRange {
  int64_t bucket_us = 0;
  int64_t buckets = 0;
  int64_t first_minute_us = 0;  // minutes are stored by their start
};
Result<OverviewRange> CheckOverviewRange(int64_t since_us, int64_t until_us,
                                         int64_t bucket_seconds);
// The overview's keep-warm sums over [since, until] (pings, their cost, what they saved), for
// `mark` '?' (SQLite) or '$' (PostgreSQL), the times as parameters 1 and 2; and its one row added
// to an overview as "keep_warm": {pings, cost_usd, saved_usd, net_usd}.
std::string KeepWarmOverviewSql(char mark);
Status AddKeepWarmTotals(RowCursor& row, nlohmann::json& overview);

// The rows of OverviewSql (any order) as the overview.
Result<nlohmann::json> OverviewJson(RowCursor& rows, int64_t since_us, int64_t until_us,
                                    int64_t bucket_seconds, const OverviewRange& range);

// The overview's cache losses, from the diagnosed requests of the range: `by_cause` holds the rows
// of LostByCauseSql (cause, requests, cost_missed), `volatile_rows` those of VolatilePrefixesSql
// (thread_id, model, cache_diagnosis, cost_missed; oldest first). Adds "lost_by_cause" and
// "volatile_prefixes" to `overview` (store.h says their shape).
Status AddCacheLosses(RowCursor& by_cause, RowCursor& volatile_rows, nlohmann::json& overview);
// SQLite's statements for it (?1 = since_us, ?2 = until_us).
std::string_view LostByCauseSql();
std::string_view VolatilePrefixesSql();

// The PostgreSQL statements beside the SQLite ones (store_queries.cc), with $n parameters of
// the same numbers.
std::string PostgresThreadListSql(const ThreadQuery& query, bool has_cursor);
std::string PostgresRequestListSql(const RequestQuery& query, bool has_cursor);

}  // namespace kvgate::telemetry::internal
