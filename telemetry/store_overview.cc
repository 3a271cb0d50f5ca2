// The store's read side for the dashboard's overview and its polling: time series from the
// per-minute sums (usage_by_minute, see store_schema.cc) and the cheap "what changed" probe.
//
// Shapes: see store.h.
#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "telemetry/pricing.h"
#include "telemetry/store.h"
#include "telemetry/store_rows.h"
#include "telemetry/store_sqlite.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

constexpr int64_t kMinuteUs = 60'000'000;
constexpr int64_t kMaxBuckets = 2'000;

// The sums of one bucket (of one model, or of all).
struct Sums {
  int64_t requests = 0, errors = 0, cache_read = 0, cache_write = 0, uncached = 0, output = 0;
  int64_t cost_total = 0, cost_saved = 0, cost_missed = 0;
  int64_t known_read = 0, known_total = 0, latency_sum = 0, latency_count = 0;

  void Add(const Sums& o) {
    requests += o.requests;
    errors += o.errors;
    cache_read += o.cache_read;
    cache_write += o.cache_write;
    uncached += o.uncached;
    output += o.output;
    cost_total += o.cost_total;
    cost_saved += o.cost_saved;
    cost_missed += o.cost_missed;
    known_read += o.known_read;
    known_total += o.known_total;
    latency_sum += o.latency_sum;
    latency_count += o.latency_count;
  }
  json HitRatio() const {
    return known_total > 0 ? json(double(known_read) / double(known_total)) : json(nullptr);
  }
  json Json() const {
    return {{"requests", requests},
            {"errors", errors},
            {"cost_usd", PicoUsdToUsd(cost_total)},
            {"saved_usd", PicoUsdToUsd(cost_saved)},
            {"missed_usd", PicoUsdToUsd(cost_missed)},
            {"tokens",
             {{"cache_read", cache_read},
              {"cache_write", cache_write},
              {"uncached", uncached},
              {"output", output}}},
            {"hit_ratio", HitRatio()},
            {"latency_ms_avg", latency_count > 0
                                   ? json(double(latency_sum) / double(latency_count) / 1000.0)
                                   : json(nullptr)}};
  }
};

}  // namespace

namespace internal {

// One pass over the primary key's range, in key order; the rows are summed into buckets here
// (a GROUP BY would sort every row of the range first: 60 ms for a week of four models).
std::string_view OverviewSql() {
  return "SELECT minute_us, model, provider, requests, errors, cache_read, cache_write, uncached, "
         "output_tokens, cost_total, cost_saved, cost_missed, known_input_read, known_input_total, "
         "latency_us_sum, latency_count FROM usage_by_minute "
         "WHERE minute_us >= ?1 AND minute_us < ?2";
}

Result<OverviewRange> CheckOverviewRange(int64_t since_us, int64_t until_us,
                                         int64_t bucket_seconds) {
  if (bucket_seconds <= 0 || bucket_seconds % 60 != 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the bucket must be a positive multiple of 60 seconds, got " +
                         std::to_string(bucket_seconds));
  }
  OverviewRange range;
  range.bucket_us = bucket_seconds * 1'000'000;
  if (until_us <= since_us || (until_us - since_us) / range.bucket_us > kMaxBuckets) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the range must be non-empty and hold at most " +
                         std::to_string(kMaxBuckets) + " buckets");
  }
  range.buckets = (until_us - since_us + range.bucket_us - 1) / range.bucket_us;
  // Minutes are stored by their start: a range that starts mid-minute takes that whole minute.
  range.first_minute_us = since_us >= 0 ? since_us / kMinuteUs * kMinuteUs : since_us;
  return range;
}

Result<json> OverviewJson(RowCursor& s, int64_t since_us, int64_t until_us,
                          int64_t bucket_seconds, const OverviewRange& range) {
  const int64_t bucket_us = range.bucket_us, buckets = range.buckets;
  return Guarded([&]() -> Result<json> {
    std::vector<Sums> series(static_cast<size_t>(buckets));
    struct ModelSeries {
      Sums total;
      std::vector<Sums> points;
    };
    std::map<std::pair<std::string, std::string>, ModelSeries> models;
    std::pair<std::string, std::string> key;
    ModelSeries* m = nullptr;  // the previous row's: looked up again when the row's model differs
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      const int64_t index =
          std::clamp<int64_t>((s.Int(0) - since_us) / bucket_us, 0, buckets - 1);
      Sums v;
      int64_t* fields[] = {&v.requests,    &v.errors,      &v.cache_read, &v.cache_write,
                           &v.uncached,    &v.output,      &v.cost_total, &v.cost_saved,
                           &v.cost_missed, &v.known_read,  &v.known_total, &v.latency_sum,
                           &v.latency_count};
      int column = 3;
      for (int64_t* f : fields) *f = s.Int(column++);
      series[static_cast<size_t>(index)].Add(v);
      std::string model = s.Text(1), provider = s.Text(2);
      if (m == nullptr || model != key.first || provider != key.second) {
        key = {std::move(model), std::move(provider)};
        m = &models[key];
        if (m->points.empty()) m->points.resize(static_cast<size_t>(buckets));
      }
      m->points[static_cast<size_t>(index)].Add(v);
      m->total.Add(v);
    }
    json out;
    out["since"] = FormatRfc3339Micros(since_us);
    out["until"] = FormatRfc3339Micros(until_us);
    out["bucket_seconds"] = bucket_seconds;
    Sums totals;
    json points = json::array();
    for (size_t i = 0; i < series.size(); ++i) {
      totals.Add(series[i]);
      json p = series[i].Json();
      p["start"] = FormatRfc3339Micros(since_us + static_cast<int64_t>(i) * bucket_us);
      points.push_back(std::move(p));
    }
    out["series"] = std::move(points);
    out["totals"] = totals.Json();
    std::vector<std::pair<const std::pair<std::string, std::string>*, const ModelSeries*>> order;
    for (const auto& [key, m] : models) order.push_back({&key, &m});
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second->total.requests > b.second->total.requests;
    });
    json by_model = json::array();
    for (const auto& [key, m] : order) {
      json entry = m->total.Json();
      entry["model"] = key->first;
      entry["provider"] = key->second;
      json compact = json::array();
      for (const Sums& p : m->points) {
        compact.push_back({{"requests", p.requests},
                           {"hit_ratio", p.HitRatio()},
                           {"cost_usd", PicoUsdToUsd(p.cost_total)}});
      }
      entry["series"] = std::move(compact);
      by_model.push_back(std::move(entry));
    }
    out["by_model"] = std::move(by_model);
    return out;
  });
}

// The diagnosed requests only (cache_diagnosis is NULL on the others), through requests_by_time.
// (json_extract fails the whole statement on text that is not JSON: such a row counts under "".)
std::string_view LostByCauseSql() {
  return "SELECT CASE WHEN json_valid(cache_diagnosis) THEN json_extract(cache_diagnosis, "
         "'$.cause') END AS cause, count(*), "
         "coalesce(sum(cost_missed), 0) FROM requests WHERE created_at_us >= ?1 AND "
         "created_at_us < ?2 AND cache_diagnosis IS NOT NULL GROUP BY cause";
}

// The diagnosis is stored compact (WriteJson), so the text match finds exactly the volatile ones
// without parsing every diagnosis of the range.
std::string_view VolatilePrefixesSql() {
  return "SELECT thread_id, model, cache_diagnosis, created_at_us FROM requests "
         "WHERE created_at_us >= ?1 AND created_at_us < ?2 AND "
         "cache_diagnosis LIKE '%\"volatile\":true%' ORDER BY created_at_us";
}

Status AddCacheLosses(RowCursor& by_cause, RowCursor& volatile_rows, json& overview) {
  constexpr size_t kMaxVolatile = 50;
  auto added = Guarded([&]() -> Result<bool> {
    struct Lost {
      std::string cause;
      int64_t requests = 0, missed = 0;
    };
    std::vector<Lost> causes;
    for (;;) {
      Result<bool> row = by_cause.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      causes.push_back({by_cause.Text(0), by_cause.Int(1), by_cause.Int(2)});
    }
    std::stable_sort(causes.begin(), causes.end(), [](const Lost& a, const Lost& b) {
      return a.missed != b.missed ? a.missed > b.missed : a.requests > b.requests;
    });
    json lost = json::array();
    for (const Lost& c : causes) {
      lost.push_back({{"cause", c.cause},
                      {"requests", c.requests},
                      {"cost_missed_usd", PicoUsdToUsd(c.missed)}});
    }
    overview["lost_by_cause"] = std::move(lost);

    // Oldest first: a thread's later diagnosis (a longer run) replaces its earlier one.
    std::map<std::pair<std::string, std::string>, json> latest;
    for (;;) {
      Result<bool> row = volatile_rows.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      const json d = json::parse(volatile_rows.Text(2), nullptr, /*allow_exceptions=*/false);
      if (!d.is_object() || !d.value("volatile", false)) continue;
      json entry = {{"thread_id", volatile_rows.Text(0)},
                    {"model", volatile_rows.Text(1)},
                    {"role", d.value("role", json())},
                    {"message_number", d.value("message_number", json())},
                    {"char_offset", d.value("char_offset", json())},
                    {"turns_changed", d.value("turns_changed", 0)},
                    {"cost_missed_usd", d.value("lost_usd", 0.0)},
                    {"last_seen", FormatRfc3339Micros(volatile_rows.Int(3))}};
      latest[{volatile_rows.Text(0), volatile_rows.Text(1)}] = std::move(entry);
    }
    std::vector<json> found;
    for (auto& [key, entry] : latest) found.push_back(std::move(entry));
    std::stable_sort(found.begin(), found.end(), [](const json& a, const json& b) {
      return a["cost_missed_usd"].get<double>() > b["cost_missed_usd"].get<double>();
    });
    if (found.size() > kMaxVolatile) found.resize(kMaxVolatile);
    overview["volatile_prefixes"] = std::move(found);
    return true;
  });
  if (!added) return std::unexpected(added.error());
  return {};
}

std::string KeepWarmOverviewSql(char mark) {
  const std::string since = std::string(1, mark) + "1", until = std::string(1, mark) + "2";
  return "SELECT (SELECT count(*) FROM requests WHERE purpose = 'keep_warm' AND created_at_us >= " +
         since + " AND created_at_us <= " + until +
         "), (SELECT CAST(coalesce(sum(cost_total), 0) AS BIGINT) FROM requests WHERE purpose = 'keep_warm' AND "
         "created_at_us >= " +
         since + " AND created_at_us <= " + until +
         "), (SELECT CAST(coalesce(sum(keep_warm_saved), 0) AS BIGINT) FROM requests WHERE keep_warm_saved <> 0 "
         "AND created_at_us >= " +
         since + " AND created_at_us <= " + until + ")";
}

Status AddKeepWarmTotals(RowCursor& row, json& overview) {
  Result<bool> step = row.Step();
  if (!step) return std::unexpected(step.error());
  const int64_t pings = *step ? row.Int(0) : 0, cost = *step ? row.Int(1) : 0,
                saved = *step ? row.Int(2) : 0;
  overview["keep_warm"] = {{"pings", pings},
                           {"cost_usd", PicoUsdToUsd(cost)},
                           {"saved_usd", PicoUsdToUsd(saved)},
                           {"net_usd", PicoUsdToUsd(saved - cost)}};
  return {};
}

Result<json> SqliteTelemetryStore::Overview(int64_t since_us, int64_t until_us,
                                            int64_t bucket_seconds) const {
  Result<OverviewRange> range = CheckOverviewRange(since_us, until_us, bucket_seconds);
  if (!range) return std::unexpected(range.error());
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  auto stmt = (*reader)->db().Prepare(OverviewSql());
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindInt(1, range->first_minute_us);
  (*stmt)->BindInt(2, until_us);
  SqliteRows rows(**stmt);
  Result<json> overview = OverviewJson(rows, since_us, until_us, bucket_seconds, *range);
  if (!overview) return overview;
  auto by_cause = (*reader)->db().Prepare(LostByCauseSql());
  if (!by_cause) return std::unexpected(by_cause.error());
  auto volatile_stmt = (*reader)->db().Prepare(VolatilePrefixesSql());
  if (!volatile_stmt) return std::unexpected(volatile_stmt.error());
  auto kept = (*reader)->db().Prepare(KeepWarmOverviewSql('?'));
  if (!kept) return std::unexpected(kept.error());
  for (auto* s : {&**by_cause, &**volatile_stmt, &**kept}) {
    s->BindInt(1, since_us);
    s->BindInt(2, until_us);
  }
  SqliteRows cause_rows(**by_cause), volatile_rows(**volatile_stmt), kept_rows(**kept);
  if (Status s = AddCacheLosses(cause_rows, volatile_rows, *overview); !s) {
    return std::unexpected(s.error());
  }
  if (Status s = AddKeepWarmTotals(kept_rows, *overview); !s) return std::unexpected(s.error());
  return overview;
}

Result<json> SqliteTelemetryStore::Live(std::string_view thread_id) const {
  auto reader = AcquireReader();
  if (!reader) return std::unexpected(reader.error());
  return Guarded([&]() -> Result<json> {
    json out;
    {
      // seq is the rowid: the newest row is the b-tree's last.
      auto stmt = (*reader)->db().Prepare("SELECT coalesce(max(seq), 0) FROM requests");
      if (!stmt) return std::unexpected(stmt.error());
      Result<bool> row = (*stmt)->Step();
      if (!row) return std::unexpected(row.error());
      out["last_seq"] = *row ? (*stmt)->Int(0) : 0;
    }
    if (!thread_id.empty()) {
      auto stmt = (*reader)->db().Prepare(
          "SELECT count(*), coalesce(max(seq), 0) FROM requests WHERE thread_id = ?1");
      if (!stmt) return std::unexpected(stmt.error());
      (*stmt)->BindText(1, thread_id);
      Result<bool> row = (*stmt)->Step();
      if (!row) return std::unexpected(row.error());
      out["thread"] = {{"turns", *row ? (*stmt)->Int(0) : 0},
                       {"last_seq", *row ? (*stmt)->Int(1) : 0}};
    }
    return out;
  });
}

}  // namespace internal
}  // namespace kvgate::telemetry
