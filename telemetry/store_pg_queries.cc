// The PostgreSQL store's read side: each query's statement and parameters; the rows become JSON
// in store_json.cc / store_overview.cc, exactly as SQLite's do. Each query is one statement, so
// it reads one snapshot.
#include <algorithm>
#include <string>

#include "telemetry/store_pg.h"
#include "telemetry/store_rows.h"
#include "telemetry/store_writer.h"

namespace kvgate::telemetry::internal {

using nlohmann::json;

Result<json> PostgresTelemetryStore::ListThreads(const ThreadQuery& query) const {
  Result<ThreadPage> page = ParseThreadPage(query);
  if (!page) return std::unexpected(page.error());
  // $1..$8 as PostgresThreadListSql numbers them; each is sent typed, so one the statement does
  // not use (a filter that is off) is allowed.
  PgParams p;
  p.Text(query.model);
  p.Int(query.since_us.value_or(0));
  p.Int(page->limit + 1);
  p.Int(page->offset);
  if (page->has_cursor && !page->after_value.is_number_integer()) {
    p.Double(page->after_value.get<double>());
  } else {
    p.Int(page->has_cursor ? page->after_value.get<int64_t>() : 0);
  }
  p.Text(page->after_thread_id);
  p.Int(query.until_us.value_or(0));
  p.Text(query.id_prefix);
  auto rows = Read(PostgresThreadListSql(query, page->has_cursor), p);
  if (!rows) return std::unexpected(rows.error());
  return ThreadListJson(*rows, query, page->limit);
}

Result<json> PostgresTelemetryStore::GetThread(std::string_view thread_id) const {
  if (thread_id.empty()) return MakeError(ErrorCode::kNotFound, "no thread with an empty id");
  PgParams p;
  p.Text(thread_id);
  auto rows = Read("SELECT " + std::string(TurnColumns()) +
                       " FROM requests WHERE thread_id = $1 ORDER BY created_at_us, seq",
                   p);
  if (!rows) return std::unexpected(rows.error());
  return ThreadJson(*rows, thread_id);
}

Result<json> PostgresTelemetryStore::ListRequests(const RequestQuery& query) const {
  Result<RequestPage> page = ParseRequestPage(query);
  if (!page) return std::unexpected(page.error());
  PgParams p;  // $1..$9 as PostgresRequestListSql numbers them
  p.Text(query.thread_id);
  p.Text(query.model);
  p.Text(query.provider);
  p.Text(query.status);
  p.Int(query.since_us.value_or(0));
  p.Int(page->after ? page->after->first : 0);
  p.Int(page->after ? page->after->second : 0);
  p.Int(page->limit + 1);
  p.Int(query.until_us.value_or(0));
  auto rows = Read(PostgresRequestListSql(query, page->after.has_value()), p);
  if (!rows) return std::unexpected(rows.error());
  return RequestListJson(*rows, page->limit);
}

Result<json> PostgresTelemetryStore::GetRequest(std::string_view id) const {
  return GetRequestAfterWrite(writer_, id,
                              [this](std::string_view key) { return GetCommittedRequest(key); });
}

Result<json> PostgresTelemetryStore::GetCommittedRequest(std::string_view id) const {
  // kvgate's id, else the id of the response body (the newest). PostgreSQL does not promise the
  // branches of a UNION ALL in order, so the preference is an explicit sort key (a column after
  // the turn's, which TurnJson does not read).
  const std::string columns(TurnColumns());
  PgParams p;
  p.Text(id);
  auto rows = Read("SELECT * FROM ((SELECT " + columns +
                       ", 0 AS preference FROM requests WHERE request_id = $1) UNION ALL (SELECT " +
                       columns +
                       ", 1 FROM requests WHERE response_id = $1 AND response_id <> '' ORDER BY "
                       "seq DESC LIMIT 1)) AS found ORDER BY preference LIMIT 1",
                   p);
  if (!rows) return std::unexpected(rows.error());
  return RequestJson(*rows, id);
}

Result<json> PostgresTelemetryStore::Overview(int64_t since_us, int64_t until_us,
                                              int64_t bucket_seconds) const {
  Result<OverviewRange> range = CheckOverviewRange(since_us, until_us, bucket_seconds);
  if (!range) return std::unexpected(range.error());
  PgParams p;
  p.Int(range->first_minute_us);
  p.Int(until_us);
  // SQLite's OverviewSql with $n parameters; the rows' order does not matter to OverviewJson.
  auto rows = Read(
      "SELECT minute_us, model, provider, requests, errors, cache_read, cache_write, uncached, "
      "output_tokens, cost_total, cost_saved, cost_missed, known_input_read, known_input_total, "
      "latency_us_sum, latency_count FROM usage_by_minute "
      "WHERE minute_us >= $1 AND minute_us < $2",
      p);
  if (!rows) return std::unexpected(rows.error());
  Result<json> overview = OverviewJson(*rows, since_us, until_us, bucket_seconds, *range);
  if (!overview) return overview;
  PgParams window;
  window.Int(since_us);
  window.Int(until_us);
  // SQLite's LostByCauseSql and VolatilePrefixesSql. The cause is read with a pattern, not a
  // ::jsonb cast, which would fail the whole statement on one row that is not JSON; kvgate writes
  // the diagnosis compact, and no other key ends in "cause".
  auto by_cause = Read(
      "SELECT substring(cache_diagnosis from '\"cause\":\"([a-z_]*)\"') AS cause, count(*), "
      "coalesce(sum(cost_missed), 0)::bigint FROM requests WHERE created_at_us >= $1 AND "
      "created_at_us < $2 AND cache_diagnosis IS NOT NULL GROUP BY cause",
      window);
  if (!by_cause) return std::unexpected(by_cause.error());
  auto volatile_rows = Read(
      "SELECT thread_id, model, cache_diagnosis, created_at_us FROM requests "
      "WHERE created_at_us >= $1 AND created_at_us < $2 AND "
      "cache_diagnosis LIKE '%\"volatile\":true%' ORDER BY created_at_us",
      window);
  if (!volatile_rows) return std::unexpected(volatile_rows.error());
  if (Status s = AddCacheLosses(*by_cause, *volatile_rows, *overview); !s) {
    return std::unexpected(s.error());
  }
  auto kept = Read(KeepWarmOverviewSql('$'), window);
  if (!kept) return std::unexpected(kept.error());
  if (Status s = AddKeepWarmTotals(*kept, *overview); !s) return std::unexpected(s.error());
  return overview;
}

Result<json> PostgresTelemetryStore::Live(std::string_view thread_id) const {
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  json out;
  {
    auto last = (*reader)->conn().Query("SELECT coalesce(max(seq), 0) FROM requests", PgParams{});
    if (!last) return std::unexpected(last.error());
    out["last_seq"] = last->rows() > 0 ? last->Int(0, 0) : 0;
  }
  if (!thread_id.empty()) {
    PgParams p;
    p.Text(thread_id);
    auto thread = (*reader)->conn().Query(
        "SELECT count(*), coalesce(max(seq), 0) FROM requests WHERE thread_id = $1", p);
    if (!thread) return std::unexpected(thread.error());
    const bool row = thread->rows() > 0;
    out["thread"] = {{"turns", row ? thread->Int(0, 0) : 0},
                     {"last_seq", row ? thread->Int(0, 1) : 0}};
  }
  return out;
}

Result<std::vector<RequestRecord>> PostgresTelemetryStore::LatestThreadTurns(
    int64_t since_us, int max_threads, int* skipped_corrupt) const {
  if (skipped_corrupt) *skipped_corrupt = 0;
  PgParams p;
  p.Int(since_us);
  p.Int(std::max(0, max_threads));
  // SQLite's statement, with the derived table named (PostgreSQL 15 requires it).
  auto rows = Read(
      "SELECT " + std::string(TurnColumns()) + ", fingerprint FROM (SELECT p.request_id AS pick, "
      "p.fingerprint AS fingerprint, t.last_seen_us AS last_seen FROM thread_last_prompt p JOIN "
      "threads t ON t.thread_id = p.thread_id WHERE t.last_seen_us >= $1) AS latest JOIN requests "
      "ON requests.request_id = latest.pick ORDER BY last_seen DESC LIMIT $2",
      p);
  if (!rows) return std::unexpected(rows.error());
  return LatestTurnsFromRows(*rows, skipped_corrupt);
}

Result<std::optional<RequestRecord>> PostgresTelemetryStore::LatestThreadTurn(
    std::string_view thread_id) const {
  PgParams p;
  p.Text(thread_id);
  auto rows = Read("SELECT " + std::string(TurnColumns()) + ", fingerprint FROM (SELECT "
                   "request_id AS pick, fingerprint FROM thread_last_prompt WHERE thread_id = $1) "
                   "AS latest JOIN requests ON requests.request_id = latest.pick",
                   p);
  if (!rows) return std::unexpected(rows.error());
  auto turns = LatestTurnsFromRows(*rows, nullptr);
  if (!turns) return std::unexpected(turns.error());
  if (turns->empty()) return std::optional<RequestRecord>();
  return std::optional<RequestRecord>(std::move(turns->front()));
}

}  // namespace kvgate::telemetry::internal
