// The store's read side: the statements of the dashboard / admin queries, SQLite's and
// PostgreSQL's side by side where they differ, and the SQLite store's query methods. Every query
// runs on a read-only connection from the pool, as one statement (one consistent WAL snapshot);
// its rows become JSON in store_json.cc, the same for both stores.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <set>
#include <vector>

#include "telemetry/diagnosis.h"
#include "telemetry/pricing.h"
#include "telemetry/store.h"
#include "telemetry/store_rows.h"
#include "telemetry/store_writer.h"
#include "telemetry/store_sqlite.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

// See ListThreads: the most threads of a `since` window that are read and sorted rather than
// found by walking the order's index (sorting 20k rows takes about 15 ms).
constexpr int64_t kSortAfterFilterMax = 20'000;

// The sort key of each order. Every one is NOT NULL and has an index (store_schema.cc), so a page
// is an index walk that stops after `limit` rows. Threads without a known hit ratio sort last in
// either direction: their key is -1 descending and 2 ascending, outside [0, 1].
std::string_view SortExpr(ThreadQuery::Sort sort, bool descending) {
  switch (sort) {
    case ThreadQuery::Sort::kLastSeen: return "t.last_seen_us";
    case ThreadQuery::Sort::kFirstSeen: return "t.first_seen_us";
    case ThreadQuery::Sort::kCost: return "t.cost_total";
    case ThreadQuery::Sort::kTurns: return "t.turns";
    case ThreadQuery::Sort::kMissedCost: return "t.cost_missed";
    case ThreadQuery::Sort::kHitRatio:
      return descending ? "(CASE WHEN t.known_input_total > 0 THEN CAST(t.known_input_read AS "
                          "REAL) / t.known_input_total ELSE -1.0 END)"
                        : "(CASE WHEN t.known_input_total > 0 THEN CAST(t.known_input_read AS "
                          "REAL) / t.known_input_total ELSE 2.0 END)";
  }
  return "t.last_seen_us";
}

// The smallest string above every string that starts with `prefix`: thread ids are valid UTF-8,
// which never has the byte 0xFF, and text compares bytewise.
std::string PrefixEnd(std::string_view prefix) { return std::string(prefix) + "\xff"; }

}  // namespace

std::string FormatRfc3339Micros(int64_t unix_micros) {
  using namespace std::chrono;
  const sys_time<microseconds> tp{microseconds(unix_micros)};
  const sys_days day = floor<days>(tp);
  const year_month_day ymd{day};
  const hh_mm_ss<microseconds> tod{tp - day};
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02d:%02d:%02d.%06dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(tod.hours().count()), static_cast<int>(tod.minutes().count()),
                static_cast<int>(tod.seconds().count()), static_cast<int>(tod.subseconds().count()));
  return buf;
}

Result<int64_t> ParseRfc3339Micros(std::string_view text) {
  using namespace std::chrono;
  auto bad = [&]() -> Result<int64_t> {
    return MakeError(ErrorCode::kInvalidArgument,
                     "\"" + std::string(text.substr(0, 64)) +
                         "\" is not an RFC 3339 time (e.g. 2026-01-01T00:00:00Z)");
  };
  size_t pos = 0;
  auto digits = [&](size_t n, int* out) {
    if (pos + n > text.size()) return false;
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
      const char c = text[pos + i];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    pos += n;
    *out = v;
    return true;
  };
  auto expect = [&](std::string_view any_of) {
    if (pos >= text.size() || any_of.find(text[pos]) == std::string_view::npos) return false;
    ++pos;
    return true;
  };
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (!digits(4, &y) || !expect("-") || !digits(2, &mo) || !expect("-") || !digits(2, &d) ||
      !expect("Tt ") || !digits(2, &h) || !expect(":") || !digits(2, &mi) || !expect(":") ||
      !digits(2, &sec)) {
    return bad();
  }
  int64_t micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int n = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (n < 6) micros = micros * 10 + (text[pos] - '0');
      ++n;
      ++pos;
    }
    if (n == 0 || n > 9) return bad();
    for (int i = n; i < 6; ++i) micros *= 10;
  }
  int64_t offset_minutes = 0;
  if (expect("Zz")) {
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh = 0, om = 0;
    if (!digits(2, &oh) || !expect(":") || !digits(2, &om) || oh > 23 || om > 59) return bad();
    offset_minutes = sign * (oh * 60 + om);
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();
  const year_month_day ymd{year(y), month(static_cast<unsigned>(mo)), day(static_cast<unsigned>(d))};
  if (!ymd.ok() || h > 23 || mi > 59 || sec > 60) return bad();  // 60: a leap second
  const int64_t days_since_epoch = sys_days(ymd).time_since_epoch().count();
  return ((days_since_epoch * 24 + h) * 60 + mi - offset_minutes) * 60'000'000LL +
         int64_t{sec} * 1'000'000 + micros;
}

Result<ThreadQuery::Sort> ParseThreadSort(std::string_view name) {
  if (name == "last_seen") return ThreadQuery::Sort::kLastSeen;
  if (name == "first_seen") return ThreadQuery::Sort::kFirstSeen;
  if (name == "cost") return ThreadQuery::Sort::kCost;
  if (name == "turns") return ThreadQuery::Sort::kTurns;
  if (name == "hit_ratio") return ThreadQuery::Sort::kHitRatio;
  if (name == "missed_cost") return ThreadQuery::Sort::kMissedCost;
  return MakeError(ErrorCode::kInvalidArgument, "unknown thread sort \"" + std::string(name) + "\"");
}

namespace internal {

std::string ThreadListSql(const ThreadQuery& query, bool has_cursor, bool sort_after_filter) {
  const char* dir = query.descending ? " DESC" : " ASC";
  const char* beyond = query.descending ? " < " : " > ";
  const std::string sort(SortExpr(query.sort, query.descending));
  std::string sql =
      "SELECT t.thread_id, t.turns, t.first_seen_us, t.last_seen_us, t.cache_read, t.cache_write, "
      "t.uncached, t.output_tokens, t.cost_total, t.known_input_read, t.known_input_total, "
      "(SELECT json_group_array(model) FROM (SELECT model FROM thread_models m "
      "WHERE m.thread_id = t.thread_id ORDER BY model)), " + sort +
      ", t.cache_write_5m, t.cache_write_1h, t.cache_write_no_ttl, t.reasoning_tokens, "
      "t.cost_saved, t.cost_missed FROM threads t";
  // A model filter joins the model's index entries, so a rare model is found without walking
  // every thread.
  if (!query.model.empty()) sql += " JOIN thread_models f ON f.thread_id = t.thread_id AND f.model = ?1";
  sql += " WHERE 1";
  if (query.since_us.has_value()) sql += " AND t.last_seen_us >= ?2";
  if (query.until_us.has_value()) sql += " AND t.first_seen_us <= ?7";
  if (!query.id_prefix.empty()) sql += " AND t.thread_id >= ?8 AND t.thread_id < ?9";
  if (has_cursor && sort_after_filter) {  // ("+": not a range of the sort's index either)
    sql += " AND (+" + sort + ", +t.thread_id)" + beyond + "(?5, ?6)";
  } else if (has_cursor) {
    sql += " AND (" + sort + ", t.thread_id)" + beyond + "(?5, ?6)";
  }
  // With an id prefix the prefix's primary-key range is read and sorted ("+" keeps SQLite from
  // walking the whole sort index instead, which a prefix matching nothing would make a full scan);
  // so is the `since` window's range of threads_by_last_seen when ListThreads asks for it.
  const bool unary = !query.id_prefix.empty() || sort_after_filter;
  sql += std::string(" ORDER BY ") + (unary ? "+" : "") + sort + dir +
         ", t.thread_id" + dir + " LIMIT ?3 OFFSET ?4";
  return sql;
}

// PostgreSQL's ThreadListSql: the same columns, filters and order. The differences: the model
// list is json_agg's; the hit ratio is a double precision division (SQLite's REAL is a double,
// PostgreSQL's a float4); an id prefix is starts_with (a bound above the prefix would be text
// that is not UTF-8, which PostgreSQL refuses); no "+" planner hints (PostgreSQL plans from
// statistics); and the cursor's sort value is bound as the type of the sort.
std::string PostgresThreadListSql(const ThreadQuery& query, bool has_cursor) {
  const char* dir = query.descending ? " DESC" : " ASC";
  const char* beyond = query.descending ? " < " : " > ";
  std::string sort(SortExpr(query.sort, query.descending));
  const bool ratio = query.sort == ThreadQuery::Sort::kHitRatio;
  if (ratio) {
    sort = query.descending ? "(CASE WHEN t.known_input_total > 0 THEN t.known_input_read::float8 "
                              "/ t.known_input_total ELSE -1.0::float8 END)"
                            : "(CASE WHEN t.known_input_total > 0 THEN t.known_input_read::float8 "
                              "/ t.known_input_total ELSE 2.0::float8 END)";
  }
  std::string sql =
      "SELECT t.thread_id, t.turns, t.first_seen_us, t.last_seen_us, t.cache_read, t.cache_write, "
      "t.uncached, t.output_tokens, t.cost_total, t.known_input_read, t.known_input_total, "
      "(SELECT coalesce(json_agg(m.model ORDER BY m.model), '[]'::json)::text FROM thread_models m "
      "WHERE m.thread_id = t.thread_id), " + sort +
      ", t.cache_write_5m, t.cache_write_1h, t.cache_write_no_ttl, t.reasoning_tokens, "
      "t.cost_saved, t.cost_missed FROM threads t";
  if (!query.model.empty()) sql += " JOIN thread_models f ON f.thread_id = t.thread_id AND f.model = $1";
  sql += " WHERE true";
  if (query.since_us.has_value()) sql += " AND t.last_seen_us >= $2";
  if (query.until_us.has_value()) sql += " AND t.first_seen_us <= $7";
  if (!query.id_prefix.empty()) sql += " AND starts_with(t.thread_id, $8)";
  if (has_cursor) {
    sql += " AND (" + sort + ", t.thread_id)" + beyond + (ratio ? "($5::float8, $6)" : "($5::int8, $6)");
  }
  sql += " ORDER BY " + sort + dir + ", t.thread_id" + dir + " LIMIT $3 OFFSET $4";
  return sql;
}

Result<json> SqliteTelemetryStore::ListThreads(const ThreadQuery& query) const {
  Result<ThreadPage> page = ParseThreadPage(query);
  if (!page) return std::unexpected(page.error());
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  // A `since` window with another order: walking the order's index finds `limit` threads of the
  // window quickly when the window holds many threads, and slowly when it holds few (the overview's
  // "lost the most in the last hour" walked all 100k threads, 100 ms). Counting the window on its
  // index (a few ms at worst) says which: up to kSortAfterFilterMax threads are read and sorted.
  bool sort_after_filter = false;
  if (query.since_us.has_value() && query.sort != ThreadQuery::Sort::kLastSeen &&
      query.model.empty() && query.id_prefix.empty()) {
    auto count = (*reader)->db().Prepare(
        "SELECT count(*) FROM (SELECT 1 FROM threads WHERE last_seen_us >= ?1 LIMIT ?2)");
    if (!count) return std::unexpected(count.error());
    (*count)->BindInt(1, *query.since_us);
    (*count)->BindInt(2, kSortAfterFilterMax + 1);
    Result<bool> row = (*count)->Step();
    if (!row) return std::unexpected(row.error());
    sort_after_filter = *row && (*count)->Int(0) <= kSortAfterFilterMax;
  }
  const std::string sql = ThreadListSql(query, page->has_cursor, sort_after_filter);

  auto stmt = (*reader)->db().Prepare(sql);
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  if (!query.model.empty()) s.BindText(1, query.model);
  if (query.since_us.has_value()) s.BindInt(2, *query.since_us);
  s.BindInt(3, page->limit + 1);
  s.BindInt(4, page->offset);
  if (page->has_cursor) {
    if (page->after_value.is_number_integer()) {
      s.BindInt(5, page->after_value.get<int64_t>());
    } else {
      s.BindDouble(5, page->after_value.get<double>());
    }
    s.BindText(6, page->after_thread_id);
  }
  if (query.until_us.has_value()) s.BindInt(7, *query.until_us);
  const std::string prefix_end = PrefixEnd(query.id_prefix);
  if (!query.id_prefix.empty()) {
    s.BindText(8, query.id_prefix);
    s.BindText(9, prefix_end);
  }
  SqliteRows rows(s);
  return ThreadListJson(rows, query, page->limit);
}

Result<json> SqliteTelemetryStore::GetThread(std::string_view thread_id) const {
  if (thread_id.empty()) return MakeError(ErrorCode::kNotFound, "no thread with an empty id");
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  auto stmt = (*reader)->db().Prepare("SELECT " + std::string(TurnColumns()) +
                                      " FROM requests WHERE thread_id = ?1 ORDER BY created_at_us, seq");
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindText(1, thread_id);
  SqliteRows rows(**stmt);
  return ThreadJson(rows, thread_id);
}

namespace {

// One builder for both dialects, so a filter cannot reach one store and not the other. Only the
// filters present appear in the SQL, so the database can use the matching index. `mark` is '?'
// (SQLite's ?n) or '$' (PostgreSQL's $n); the numbers are the same in both.
std::string RequestListSqlWith(const RequestQuery& query, bool has_cursor, char mark) {
  auto p = [mark](int n) { return std::string(1, mark) + std::to_string(n); };
  std::string sql = "SELECT " + std::string(TurnColumns()) + " FROM requests WHERE true";
  if (!query.thread_id.empty()) sql += " AND thread_id = " + p(1);
  if (!query.model.empty()) sql += " AND model = " + p(2);
  if (!query.provider.empty()) sql += " AND provider = " + p(3);
  if (!query.status.empty()) sql += " AND status = " + p(4);
  if (query.since_us.has_value()) sql += " AND created_at_us >= " + p(5);
  if (query.until_us.has_value()) sql += " AND created_at_us <= " + p(9);
  if (query.provider_diagnosed) sql += " AND provider_cache_miss_reason <> ''";
  // One of two literals, never the caller's text.
  if (query.purpose == kPurposeKeepWarm) sql += " AND purpose = 'keep_warm'";
  if (query.purpose == "client") sql += " AND purpose = 'client'";
  if (has_cursor) sql += " AND (created_at_us, seq) < (" + p(6) + ", " + p(7) + ")";
  sql += " ORDER BY created_at_us DESC, seq DESC LIMIT " + p(8);
  return sql;
}

}  // namespace

std::string RequestListSql(const RequestQuery& query, bool has_cursor) {
  return RequestListSqlWith(query, has_cursor, '?');
}

std::string PostgresRequestListSql(const RequestQuery& query, bool has_cursor) {
  return RequestListSqlWith(query, has_cursor, '$');
}

Result<json> SqliteTelemetryStore::ListRequests(const RequestQuery& query) const {
  Result<RequestPage> page = ParseRequestPage(query);
  if (!page) return std::unexpected(page.error());
  const std::string sql = RequestListSql(query, page->after.has_value());

  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  auto stmt = (*reader)->db().Prepare(sql);
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  if (!query.thread_id.empty()) s.BindText(1, query.thread_id);
  if (!query.model.empty()) s.BindText(2, query.model);
  if (!query.provider.empty()) s.BindText(3, query.provider);
  if (!query.status.empty()) s.BindText(4, query.status);
  if (query.since_us.has_value()) s.BindInt(5, *query.since_us);
  if (query.until_us.has_value()) s.BindInt(9, *query.until_us);
  if (page->after.has_value()) {
    s.BindInt(6, page->after->first);
    s.BindInt(7, page->after->second);
  }
  s.BindInt(8, page->limit + 1);
  SqliteRows rows(s);
  return RequestListJson(rows, page->limit);
}

Result<json> SqliteTelemetryStore::GetRequest(std::string_view id) const {
  return GetRequestAfterWrite(writer_, id,
                              [this](std::string_view key) { return GetCommittedRequest(key); });
}

Result<json> SqliteTelemetryStore::GetCommittedRequest(std::string_view request_id) const {
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  // kvgate's id, else the id of the response body (the newest, should an upstream reuse one).
  const std::string columns(TurnColumns());
  auto stmt = (*reader)->db().Prepare(
      "SELECT * FROM (SELECT " + columns +
      " FROM requests WHERE request_id = ?1) UNION ALL SELECT * FROM (SELECT " + columns +
      " FROM requests WHERE response_id = ?1 AND response_id != '' ORDER BY seq DESC LIMIT 1) "
      "LIMIT 1");
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindText(1, request_id);
  SqliteRows rows(**stmt);
  return RequestJson(rows, request_id);
}

Result<std::vector<RequestRecord>> SqliteTelemetryStore::LatestThreadTurns(int64_t since_us,
                                                                          int max_threads,
                                                                          int* skipped_corrupt) const {
  if (skipped_corrupt) *skipped_corrupt = 0;
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  // The fingerprint comes from thread_last_prompt, the rest of the turn from its request row.
  auto stmt = (*reader)->db().Prepare(
      "SELECT " + std::string(TurnColumns()) + ", fingerprint FROM (SELECT p.request_id AS pick, "
      "p.fingerprint AS fingerprint, t.last_seen_us AS last_seen FROM thread_last_prompt p JOIN "
      "threads t ON t.thread_id = p.thread_id WHERE t.last_seen_us >= ?1) JOIN requests ON "
      "requests.request_id = pick ORDER BY last_seen DESC LIMIT ?2");
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  s.BindInt(1, since_us);
  s.BindInt(2, std::max(0, max_threads));
  SqliteRows rows(s);
  return LatestTurnsFromRows(rows, skipped_corrupt);
}

Result<std::optional<RequestRecord>> SqliteTelemetryStore::LatestThreadTurn(
    std::string_view thread_id) const {
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  auto stmt = (*reader)->db().Prepare(
      "SELECT " + std::string(TurnColumns()) + ", fingerprint FROM (SELECT request_id AS pick, "
      "fingerprint FROM thread_last_prompt WHERE thread_id = ?1) AS latest JOIN requests ON "
      "requests.request_id = latest.pick");
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindText(1, thread_id);
  SqliteRows rows(**stmt);
  auto turns = LatestTurnsFromRows(rows, nullptr);
  if (!turns) return std::unexpected(turns.error());
  if (turns->empty()) return std::optional<RequestRecord>();
  return std::optional<RequestRecord>(std::move(turns->front()));
}

}  // namespace internal
}  // namespace kvgate::telemetry
