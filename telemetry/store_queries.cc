// The store's read side: the dashboard / admin queries and the JSON they return. Every query runs on
// a read-only connection from the pool, as one statement (one consistent WAL snapshot).
//
// Shapes: see store.h.
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
#include "telemetry/store_sqlite.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

constexpr int kThreadLimitDefault = 50;
constexpr int kThreadLimitMax = 500;
// See ListThreads: the most threads of a `since` window that are read and sorted rather than
// found by walking the order's index (sorting 20k rows takes about 15 ms).
constexpr int64_t kSortAfterFilterMax = 20'000;

constexpr std::string_view kTurnColumns =
    "request_id, thread_id, created_at_us, endpoint, model, provider, provider_type, upstream_model, "
    "api_key_id, stream, status, http_status, upstream_status, latency_us, ttft_us, cache_read, "
    "cache_write_5m, cache_write_1h, uncached, output_tokens, reasoning_tokens, reported_input, "
    "usage_clamped, usage_raw, cost_cache_read, cost_cache_write, cost_uncached, cost_output, "
    "cost_total, cost_saved, cost_complete, cost_priced, error, upstream_request_id, finish_reason, "
    "cache_diagnosis, seq, response_id, cache_write_no_ttl, cost_missed, target, key_index, "
    "system_fingerprint, route, attempts, cache_read_offload, cache_helper, "
    "provider_cache_miss_reason";
enum Col {
  kRequestId, kThreadId, kCreatedAt, kEndpoint, kModel, kProvider, kProviderType, kUpstreamModel,
  kApiKeyId, kStream, kStatus, kHttpStatus, kUpstreamStatus, kLatency, kTtft, kCacheRead,
  kCacheWrite5m, kCacheWrite1h, kUncached, kOutput, kReasoning, kReportedInput, kClamped, kUsageRaw,
  kCostCacheRead, kCostCacheWrite, kCostUncached, kCostOutput, kCostTotal, kCostSaved, kCostComplete,
  kCostPriced, kError, kUpstreamRequestId, kFinishReason, kDiagnosis, kSeq, kResponseId,
  kCacheWriteNoTtl, kCostMissed, kTarget, kKeyIndex, kSystemFingerprint, kRoute, kAttempts,
  kCacheReadOffload, kCacheHelper, kProviderCacheMissReason, kTurnColumnCount
};

enum class Detail { kTurn, kListed, kFull };

json OptInt(std::optional<int64_t> v) { return v.has_value() ? json(*v) : json(nullptr); }
json OptBool(std::optional<bool> v) { return v.has_value() ? json(*v) : json(nullptr); }

// A thread's total of one token kind: the sum of the turns that reported it; unknown (null) when
// none did, since unknown is not zero.
class KnownSum {
 public:
  void Add(std::optional<int64_t> v) {
    if (!v) return;
    sum_ = sum_.value_or(0) + *v;
  }
  json Json() const { return OptInt(sum_); }

 private:
  std::optional<int64_t> sum_;
};
json OptMs(std::optional<int64_t> us) {
  return us.has_value() ? json(static_cast<double>(*us) / 1000.0) : json(nullptr);
}

// Stored JSON text back to JSON; text that is not JSON comes back as a string, NULL as null.
json StoredJson(const internal::Stmt& s, int column) {
  if (s.IsNull(column)) return nullptr;
  json parsed = json::parse(s.Text(column), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return s.Text(column);
  return parsed;
}

struct CostParts {
  int64_t total = 0, cache_read = 0, cache_write = 0, uncached = 0, output = 0, saved = 0;
  int64_t missed = 0;
};

void CostJson(const CostParts& c, json* usd, json* pico) {
  *pico = {{"total", c.total},       {"cache_read", c.cache_read}, {"cache_write", c.cache_write},
           {"uncached", c.uncached}, {"output", c.output},         {"saved", c.saved},
           {"missed", c.missed}};
  *usd = json::object();
  for (const auto& [key, value] : pico->items()) (*usd)[key] = PicoUsdToUsd(value.get<int64_t>());
}

json TurnJson(const internal::Stmt& s, Detail detail) {
  json turn;
  turn["request_id"] = s.Text(kRequestId);
  turn["created_at"] = FormatRfc3339Micros(s.Int(kCreatedAt));
  turn["model"] = s.Text(kModel);
  turn["provider"] = s.Text(kProvider);
  turn["status"] = s.Text(kStatus);
  turn["stream"] = s.Int(kStream) != 0;
  turn["latency_ms"] = OptMs(s.OptInt(kLatency));
  turn["ttft_ms"] = OptMs(s.OptInt(kTtft));
  turn["response_id"] = s.Text(kResponseId);
  turn["usage"] = {{"cache_read", OptInt(s.OptInt(kCacheRead))},
                   {"cache_write_5m", OptInt(s.OptInt(kCacheWrite5m))},
                   {"cache_write_1h", OptInt(s.OptInt(kCacheWrite1h))},
                   {"cache_write_no_ttl", OptInt(s.OptInt(kCacheWriteNoTtl))},
                   {"uncached", OptInt(s.OptInt(kUncached))},
                   {"output", OptInt(s.OptInt(kOutput))},
                   {"reasoning", OptInt(s.OptInt(kReasoning))}};
  // Where the cache reads came from, for a provider with cache tiers (the built-in engine's KV
  // pool and disk tier); null when it reported none. Beside "usage", whose shape is every
  // provider's.
  const std::optional<int64_t> read = s.OptInt(kCacheRead), offload = s.OptInt(kCacheReadOffload);
  turn["cache_read_by_tier"] =
      read && offload ? json{{"pool", *read - *offload}, {"disk", *offload}} : json(nullptr);
  CostParts cost{s.Int(kCostTotal),  s.Int(kCostCacheRead), s.Int(kCostCacheWrite),
                 s.Int(kCostUncached), s.Int(kCostOutput), s.Int(kCostSaved),
                 s.Int(kCostMissed)};
  CostJson(cost, &turn["cost_usd"], &turn["cost_pico_usd"]);
  turn["cost_complete"] = s.Int(kCostComplete) != 0;
  const std::string error = s.Text(kError);
  turn["error"] = error.empty() ? json(nullptr) : json(error);
  turn["http_status"] = s.Int(kHttpStatus);
  turn["cache_diagnosis"] = StoredJson(s, kDiagnosis);
  turn["usage_clamped"] = s.Int(kClamped) != 0;
  // The configured model that served it (a router's choice), the router's decision, the attempts.
  const std::string target = s.Text(kTarget);
  turn["target"] = target.empty() ? turn["model"] : json(target);
  turn["route"] = StoredJson(s, kRoute);
  turn["attempts"] = s.IsNull(kAttempts) ? json::array() : StoredJson(s, kAttempts);
  // The cache helper that changed the request (docs/configuration.md), null when none did.
  const std::string helper = s.Text(kCacheHelper);
  turn["cache_helper"] = helper.empty() ? json(nullptr) : json(helper);
  // The provider's own account of its cache (Anthropic's cache diagnostics) beside kvgate's,
  // and whether the two agree (null where they cannot be compared); null when it gave none.
  const std::string provider_reason = s.Text(kProviderCacheMissReason);
  turn["provider_cache_diagnosis"] =
      provider_reason.empty()
          ? json(nullptr)
          : json{{"cache_miss_reason", provider_reason == "none" ? json(nullptr)
                                                                 : json(provider_reason)},
                 {"agrees_with_kvgate", OptBool(ProviderDiagnosisAgrees(turn["cache_diagnosis"],
                                                                        provider_reason))}};
  if (detail == Detail::kListed || detail == Detail::kFull) {
    turn["thread_id"] = s.Text(kThreadId);
    turn["endpoint"] = s.Text(kEndpoint);
    turn["upstream_status"] = s.Int(kUpstreamStatus);
    turn["upstream_model"] = s.Text(kUpstreamModel);
  }
  if (detail == Detail::kFull) {
    turn["provider_type"] = s.Text(kProviderType);
    turn["api_key_id"] = s.Text(kApiKeyId);
    turn["upstream_request_id"] = s.Text(kUpstreamRequestId);
    turn["finish_reason"] = s.Text(kFinishReason);
    turn["usage_raw"] = StoredJson(s, kUsageRaw);
    turn["reported_input"] = OptInt(s.OptInt(kReportedInput));
    turn["cost_priced"] = s.Int(kCostPriced) != 0;
    turn["key_index"] = s.Int(kKeyIndex);
    turn["system_fingerprint"] = s.Text(kSystemFingerprint);
  }
  return turn;
}

json HitRatio(int64_t read, int64_t total_input) {
  if (total_input <= 0) return nullptr;
  return static_cast<double>(read) / static_cast<double>(total_input);
}

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

bool ParseInt(std::string_view text, int64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

// Cursors are opaque to clients: "t<offset>" for threads, "r<created_at_us>_<seq>" for requests.
// Where a page of threads ended: the sort value of its last row (null in the NULLS LAST tail) and
// that row's thread id. As a cursor: "k" + the hex of the JSON [value, thread_id].
struct ThreadKey {
  json value;
  std::string thread_id;
};

std::string ThreadCursor(const ThreadKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string text = json::array({key.value, key.thread_id}).dump();
  std::string out = "k";
  for (const unsigned char c : text) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

std::optional<ThreadKey> ParseThreadCursor(std::string_view cursor) {
  if (cursor.size() < 3 || cursor[0] != 'k' || cursor.size() % 2 != 1) return std::nullopt;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  std::string text;
  for (size_t i = 1; i < cursor.size(); i += 2) {
    const int hi = nibble(cursor[i]), lo = nibble(cursor[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    text.push_back(static_cast<char>(hi * 16 + lo));
  }
  json parsed = json::parse(text, nullptr, false);
  if (!parsed.is_array() || parsed.size() != 2 || !parsed[1].is_string() ||
      !(parsed[0].is_null() || parsed[0].is_number())) {
    return std::nullopt;
  }
  return ThreadKey{std::move(parsed[0]), parsed[1].get<std::string>()};
}
std::string RequestCursor(int64_t created_at_us, int64_t seq) {
  return "r" + std::to_string(created_at_us) + "_" + std::to_string(seq);
}

template <class F>
auto Guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal, std::string("telemetry query: ") + e.what());
  }
}

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

Result<json> SqliteTelemetryStore::ListThreads(const ThreadQuery& query) const {
  // Keyset paging: the cursor is the last row's sort value and thread id, so threads that start
  // or move while a client pages neither repeat nor push others off a page (an offset would).
  std::optional<ThreadKey> after;
  if (!query.cursor.empty()) {
    after = ParseThreadCursor(query.cursor);
    if (!after || !after->value.is_number()) {
      return MakeError(ErrorCode::kInvalidArgument, "bad thread cursor");
    }
  }
  const int64_t offset = after ? 0 : std::max<int64_t>(0, query.offset);
  const int limit = query.limit <= 0 ? kThreadLimitDefault : std::min(query.limit, kThreadLimitMax);
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
  const std::string sql = ThreadListSql(query, after.has_value(), sort_after_filter);

  auto stmt = (*reader)->db().Prepare(sql);
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  if (!query.model.empty()) s.BindText(1, query.model);
  if (query.since_us.has_value()) s.BindInt(2, *query.since_us);
  s.BindInt(3, limit + 1);
  s.BindInt(4, offset);
  if (after) {
    if (after->value.is_number_integer()) {
      s.BindInt(5, after->value.get<int64_t>());
    } else {
      s.BindDouble(5, after->value.get<double>());
    }
    s.BindText(6, after->thread_id);
  }
  if (query.until_us.has_value()) s.BindInt(7, *query.until_us);
  const std::string prefix_end = PrefixEnd(query.id_prefix);
  if (!query.id_prefix.empty()) {
    s.BindText(8, query.id_prefix);
    s.BindText(9, prefix_end);
  }
  return Guarded([&]() -> Result<json> {
    json threads = json::array();
    bool more = false;
    ThreadKey last;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      if (static_cast<int>(threads.size()) == limit) {
        more = true;
        break;
      }
      json t;
      t["thread_id"] = s.Text(0);
      t["turns"] = s.Int(1);
      t["first_seen"] = FormatRfc3339Micros(s.Int(2));
      t["last_seen"] = FormatRfc3339Micros(s.Int(3));
      json models = json::parse(s.Text(11), nullptr, false);
      t["models"] = models.is_array() ? models : json::array();
      // The token names of the thread view's summary (store.h), plus the writes' total.
      t["tokens"] = {{"cache_read", s.Int(4)},          {"cache_write", s.Int(5)},
                     {"cache_write_5m", s.Int(13)},     {"cache_write_1h", s.Int(14)},
                     {"cache_write_no_ttl", s.Int(15)}, {"uncached", s.Int(6)},
                     {"output", s.Int(7)},              {"reasoning", s.Int(16)}};
      t["cost_usd"] = PicoUsdToUsd(s.Int(8));
      t["cost_pico_usd"] = s.Int(8);
      t["saved_usd"] = PicoUsdToUsd(s.Int(17));
      t["saved_pico_usd"] = s.Int(17);
      t["missed_usd"] = PicoUsdToUsd(s.Int(18));
      t["missed_pico_usd"] = s.Int(18);
      t["hit_ratio"] = HitRatio(s.Int(9), s.Int(10));
      last.thread_id = s.Text(0);
      last.value = query.sort == ThreadQuery::Sort::kHitRatio ? json(s.Real(12)) : json(s.Int(12));
      threads.push_back(std::move(t));
    }
    json out;
    out["threads"] = std::move(threads);
    out["next_cursor"] = more ? json(ThreadCursor(last)) : json(nullptr);
    return out;
  });
}

Result<json> SqliteTelemetryStore::GetThread(std::string_view thread_id) const {
  if (thread_id.empty()) return MakeError(ErrorCode::kNotFound, "no thread with an empty id");
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  auto stmt = (*reader)->db().Prepare("SELECT " + std::string(kTurnColumns) +
                                      " FROM requests WHERE thread_id = ?1 ORDER BY created_at_us, seq");
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  s.BindText(1, thread_id);
  return Guarded([&]() -> Result<json> {
    json turns = json::array();
    CostParts cost;
    KnownSum read, w5m, w1h, no_ttl, uncached, output, reasoning;
    int64_t known_read = 0, known_total = 0;
    bool complete = true;
    json models = json::array();
    std::set<std::string> seen_models;
    int64_t first = 0, last = 0;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      turns.push_back(TurnJson(s, Detail::kTurn));
      const int64_t created = s.Int(kCreatedAt);
      if (turns.size() == 1 || created < first) first = created;
      if (turns.size() == 1 || created > last) last = created;
      if (seen_models.insert(s.Text(kModel)).second) models.push_back(s.Text(kModel));
      cost.total += s.Int(kCostTotal);
      cost.cache_read += s.Int(kCostCacheRead);
      cost.cache_write += s.Int(kCostCacheWrite);
      cost.uncached += s.Int(kCostUncached);
      cost.output += s.Int(kCostOutput);
      cost.saved += s.Int(kCostSaved);
      cost.missed += s.Int(kCostMissed);
      complete = complete && s.Int(kCostComplete) != 0;
      const auto r = s.OptInt(kCacheRead), a = s.OptInt(kCacheWrite5m), b = s.OptInt(kCacheWrite1h),
                 n = s.OptInt(kCacheWriteNoTtl), u = s.OptInt(kUncached);
      read.Add(r);
      w5m.Add(a);
      w1h.Add(b);
      no_ttl.Add(n);
      uncached.Add(u);
      output.Add(s.OptInt(kOutput));
      reasoning.Add(s.OptInt(kReasoning));
      if (r && a && b && n && u) {
        known_read += *r;
        known_total += *r + *a + *b + *n + *u;
      }
    }
    if (turns.empty()) {
      return MakeError(ErrorCode::kNotFound, "no thread \"" + std::string(thread_id) + "\"");
    }
    json summary;
    summary["turns"] = turns.size();
    summary["first_seen"] = FormatRfc3339Micros(first);
    summary["last_seen"] = FormatRfc3339Micros(last);
    summary["models"] = std::move(models);
    KnownSum writes;
    for (const KnownSum* w : {&w5m, &w1h, &no_ttl}) {
      const json v = w->Json();
      writes.Add(v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>()));
    }
    summary["tokens"] = {{"cache_read", read.Json()},         {"cache_write", writes.Json()},
                         {"cache_write_5m", w5m.Json()},       {"cache_write_1h", w1h.Json()},
                         {"cache_write_no_ttl", no_ttl.Json()}, {"uncached", uncached.Json()},
                         {"output", output.Json()},            {"reasoning", reasoning.Json()}};
    CostJson(cost, &summary["cost_usd"], &summary["cost_pico_usd"]);
    summary["cost_complete"] = complete;
    summary["hit_ratio"] = HitRatio(known_read, known_total);
    json out;
    out["thread_id"] = std::string(thread_id);
    out["turns"] = std::move(turns);
    out["summary"] = std::move(summary);
    return out;
  });
}

std::string RequestListSql(const RequestQuery& query, bool has_cursor) {
  // Only the filters present appear in the SQL, so SQLite can use the matching index.
  std::string sql = "SELECT " + std::string(kTurnColumns) + " FROM requests WHERE 1";
  if (!query.thread_id.empty()) sql += " AND thread_id = ?1";
  if (!query.model.empty()) sql += " AND model = ?2";
  if (!query.provider.empty()) sql += " AND provider = ?3";
  if (!query.status.empty()) sql += " AND status = ?4";
  if (query.since_us.has_value()) sql += " AND created_at_us >= ?5";
  if (query.until_us.has_value()) sql += " AND created_at_us <= ?9";
  if (query.provider_diagnosed) sql += " AND provider_cache_miss_reason <> ''";
  if (has_cursor) sql += " AND (created_at_us, seq) < (?6, ?7)";
  sql += " ORDER BY created_at_us DESC, seq DESC LIMIT ?8";
  return sql;
}

Result<json> SqliteTelemetryStore::ListRequests(const RequestQuery& query) const {
  std::optional<std::pair<int64_t, int64_t>> after;
  if (!query.cursor.empty()) {
    const std::string_view c = query.cursor;
    const size_t sep = c.find('_');
    int64_t created = 0, seq = 0;
    if (c[0] != 'r' || sep == std::string_view::npos || !ParseInt(c.substr(1, sep - 1), &created) ||
        !ParseInt(c.substr(sep + 1), &seq)) {
      return MakeError(ErrorCode::kInvalidArgument, "bad request cursor");
    }
    after = std::pair{created, seq};
  }
  const int limit = query.limit <= 0 ? 100 : std::min(query.limit, kRequestLimitMax);
  const std::string sql = RequestListSql(query, after.has_value());

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
  if (after.has_value()) {
    s.BindInt(6, after->first);
    s.BindInt(7, after->second);
  }
  s.BindInt(8, limit + 1);
  return Guarded([&]() -> Result<json> {
    json requests = json::array();
    std::optional<std::pair<int64_t, int64_t>> last;
    bool more = false;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      if (static_cast<int>(requests.size()) == limit) {
        more = true;
        break;
      }
      requests.push_back(TurnJson(s, Detail::kListed));
      last = std::pair{s.Int(kCreatedAt), s.Int(kSeq)};
    }
    json out;
    out["requests"] = std::move(requests);
    out["next_cursor"] = more && last ? json(RequestCursor(last->first, last->second)) : json(nullptr);
    return out;
  });
}

Result<json> SqliteTelemetryStore::GetRequest(std::string_view request_id) const {
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  // kvgate's id, else the id of the response body (the newest, should an upstream reuse one).
  auto stmt = (*reader)->db().Prepare(
      "SELECT * FROM (SELECT " + std::string(kTurnColumns) +
      " FROM requests WHERE request_id = ?1) UNION ALL SELECT * FROM (SELECT " +
      std::string(kTurnColumns) +
      " FROM requests WHERE response_id = ?1 AND response_id != '' ORDER BY seq DESC LIMIT 1) "
      "LIMIT 1");
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  s.BindText(1, request_id);
  return Guarded([&]() -> Result<json> {
    Result<bool> row = s.Step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return MakeError(ErrorCode::kNotFound, "no request \"" + std::string(request_id) + "\"");
    return TurnJson(s, Detail::kFull);
  });
}

Result<std::vector<RequestRecord>> SqliteTelemetryStore::LatestThreadTurns(int64_t since_us,
                                                                          int max_threads,
                                                                          int* skipped_corrupt) const {
  if (skipped_corrupt) *skipped_corrupt = 0;
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  // The fingerprint comes from thread_last_prompt, the rest of the turn from its request row.
  constexpr int kFingerprintColumn = kTurnColumnCount;
  auto stmt = (*reader)->db().Prepare(
      "SELECT " + std::string(kTurnColumns) + ", fingerprint FROM (SELECT p.request_id AS pick, "
      "p.fingerprint AS fingerprint, t.last_seen_us AS last_seen FROM thread_last_prompt p JOIN "
      "threads t ON t.thread_id = p.thread_id WHERE t.last_seen_us >= ?1) JOIN requests ON "
      "requests.request_id = pick ORDER BY last_seen DESC LIMIT ?2");
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  s.BindInt(1, since_us);
  s.BindInt(2, std::max(0, max_threads));
  return Guarded([&]() -> Result<std::vector<RequestRecord>> {
    std::vector<RequestRecord> turns;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      auto fingerprint =
          FromJson(json::parse(s.Text(kFingerprintColumn), nullptr, /*allow_exceptions=*/false));
      if (!fingerprint) {
        if (skipped_corrupt) ++*skipped_corrupt;
        continue;
      }
      RequestRecord r;
      r.thread_id = s.Text(kThreadId);
      r.request_id = s.Text(kRequestId);
      r.created_at_us = s.Int(kCreatedAt);
      r.model = s.Text(kModel);
      r.provider = s.Text(kProvider);
      r.provider_type = s.Text(kProviderType);
      r.upstream_model = s.Text(kUpstreamModel);
      r.target = s.Text(kTarget);
      r.key_index = static_cast<int>(s.Int(kKeyIndex));
      r.system_fingerprint = s.Text(kSystemFingerprint);
      r.status = s.Text(kStatus);
      r.usage.cache_read = s.OptInt(kCacheRead);
      r.usage.cache_write_5m = s.OptInt(kCacheWrite5m);
      r.usage.cache_write_1h = s.OptInt(kCacheWrite1h);
      r.usage.cache_write_no_ttl = s.OptInt(kCacheWriteNoTtl);
      r.usage.uncached = s.OptInt(kUncached);
      r.usage.output = s.OptInt(kOutput);
      r.usage.reasoning = s.OptInt(kReasoning);
      r.usage.reported_input = s.OptInt(kReportedInput);
      r.usage.cache_read_offload = s.OptInt(kCacheReadOffload);
      r.response_id = s.Text(kResponseId);
      r.prompt_fingerprint = std::make_shared<const PromptFingerprint>(std::move(*fingerprint));
      turns.push_back(std::move(r));
    }
    return turns;
  });
}

}  // namespace internal
}  // namespace kvgate::telemetry
