// The store's schema as numbered migrations, and the code that applies them.
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "telemetry/store.h"
#include "telemetry/store_schema.h"
#include "telemetry/store_sqlite.h"

namespace kvgate::telemetry {
namespace {

// requests: one row per RequestRecord, every field. `seq` is the insertion order (ties on
// created_at_us and the keyset cursor). Token counts are NULL when unknown; money is integer
// pico-USD. threads / thread_models: per-thread aggregates maintained by the writer in the same
// transaction as the request rows (sums of *known* counts; the hit ratio over turns whose total
// input is known).
constexpr std::string_view kRequestsAndThreads = R"sql(
CREATE TABLE requests (
  seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
  request_id          TEXT    NOT NULL UNIQUE,
  thread_id           TEXT    NOT NULL,
  created_at_us       INTEGER NOT NULL,
  endpoint            TEXT    NOT NULL,
  model               TEXT    NOT NULL,
  provider            TEXT    NOT NULL,
  provider_type       TEXT    NOT NULL,
  upstream_model      TEXT    NOT NULL,
  api_key_id          TEXT    NOT NULL,
  stream              INTEGER NOT NULL,
  status              TEXT    NOT NULL,
  http_status         INTEGER NOT NULL,
  upstream_status     INTEGER NOT NULL,
  latency_us          INTEGER,
  ttft_us             INTEGER,
  cache_read          INTEGER,
  cache_write_5m      INTEGER,
  cache_write_1h      INTEGER,
  uncached            INTEGER,
  output_tokens       INTEGER,
  reasoning_tokens    INTEGER,
  reported_input      INTEGER,
  usage_clamped       INTEGER NOT NULL,
  usage_raw           TEXT,
  cost_cache_read     INTEGER NOT NULL,
  cost_cache_write    INTEGER NOT NULL,
  cost_uncached       INTEGER NOT NULL,
  cost_output         INTEGER NOT NULL,
  cost_total          INTEGER NOT NULL,
  cost_saved          INTEGER NOT NULL,
  cost_complete       INTEGER NOT NULL,
  cost_priced         INTEGER NOT NULL,
  error               TEXT    NOT NULL,
  upstream_request_id TEXT    NOT NULL,
  finish_reason       TEXT    NOT NULL,
  prompt_fingerprint  TEXT    NOT NULL,
  cache_diagnosis     TEXT
);
CREATE INDEX requests_by_time ON requests (created_at_us, seq);
CREATE INDEX requests_by_thread ON requests (thread_id, created_at_us, seq);
CREATE INDEX requests_by_model ON requests (model, created_at_us, seq);
CREATE INDEX requests_by_provider ON requests (provider, created_at_us, seq);

CREATE TABLE threads (
  thread_id          TEXT    PRIMARY KEY,
  turns              INTEGER NOT NULL,
  first_seen_us      INTEGER NOT NULL,
  last_seen_us       INTEGER NOT NULL,
  cache_read         INTEGER NOT NULL,
  cache_write        INTEGER NOT NULL,
  uncached           INTEGER NOT NULL,
  output_tokens      INTEGER NOT NULL,
  cost_total         INTEGER NOT NULL,
  known_input_read   INTEGER NOT NULL,
  known_input_total  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX threads_by_last_seen ON threads (last_seen_us);
CREATE INDEX threads_by_first_seen ON threads (first_seen_us);
CREATE INDEX threads_by_cost ON threads (cost_total);

CREATE TABLE thread_models (
  thread_id TEXT NOT NULL,
  model     TEXT NOT NULL,
  PRIMARY KEY (thread_id, model)
) WITHOUT ROWID;
CREATE INDEX thread_models_by_model ON thread_models (model, thread_id);
)sql";

// PostgreSQL's version 1: BIGINT where SQLite's INTEGER is 64-bit (PostgreSQL's is 32), an
// identity column for seq, and the "C" collation on the text that queries sort or page by, so
// that order is bytewise as in SQLite whatever the database's locale.
constexpr std::string_view kRequestsAndThreadsPostgres = R"sql(
CREATE TABLE requests (
  seq                 BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  request_id          TEXT    COLLATE "C" NOT NULL UNIQUE,
  thread_id           TEXT    COLLATE "C" NOT NULL,
  created_at_us       BIGINT  NOT NULL,
  endpoint            TEXT    NOT NULL,
  model               TEXT    COLLATE "C" NOT NULL,
  provider            TEXT    COLLATE "C" NOT NULL,
  provider_type       TEXT    NOT NULL,
  upstream_model      TEXT    NOT NULL,
  api_key_id          TEXT    COLLATE "C" NOT NULL,
  stream              BIGINT  NOT NULL,
  status              TEXT    COLLATE "C" NOT NULL,
  http_status         BIGINT  NOT NULL,
  upstream_status     BIGINT  NOT NULL,
  latency_us          BIGINT,
  ttft_us             BIGINT,
  cache_read          BIGINT,
  cache_write_5m      BIGINT,
  cache_write_1h      BIGINT,
  uncached            BIGINT,
  output_tokens       BIGINT,
  reasoning_tokens    BIGINT,
  reported_input      BIGINT,
  usage_clamped       BIGINT  NOT NULL,
  usage_raw           TEXT,
  cost_cache_read     BIGINT  NOT NULL,
  cost_cache_write    BIGINT  NOT NULL,
  cost_uncached       BIGINT  NOT NULL,
  cost_output         BIGINT  NOT NULL,
  cost_total          BIGINT  NOT NULL,
  cost_saved          BIGINT  NOT NULL,
  cost_complete       BIGINT  NOT NULL,
  cost_priced         BIGINT  NOT NULL,
  error               TEXT    NOT NULL,
  upstream_request_id TEXT    NOT NULL,
  finish_reason       TEXT    NOT NULL,
  prompt_fingerprint  TEXT    NOT NULL,
  cache_diagnosis     TEXT
);
CREATE INDEX requests_by_time ON requests (created_at_us, seq);
CREATE INDEX requests_by_thread ON requests (thread_id, created_at_us, seq);
CREATE INDEX requests_by_model ON requests (model, created_at_us, seq);
CREATE INDEX requests_by_provider ON requests (provider, created_at_us, seq);

CREATE TABLE threads (
  thread_id          TEXT    COLLATE "C" PRIMARY KEY,
  turns              BIGINT  NOT NULL,
  first_seen_us      BIGINT  NOT NULL,
  last_seen_us       BIGINT  NOT NULL,
  cache_read         BIGINT  NOT NULL,
  cache_write        BIGINT  NOT NULL,
  uncached           BIGINT  NOT NULL,
  output_tokens      BIGINT  NOT NULL,
  cost_total         BIGINT  NOT NULL,
  known_input_read   BIGINT  NOT NULL,
  known_input_total  BIGINT  NOT NULL
);
CREATE INDEX threads_by_last_seen ON threads (last_seen_us);
CREATE INDEX threads_by_first_seen ON threads (first_seen_us);
CREATE INDEX threads_by_cost ON threads (cost_total);

CREATE TABLE thread_models (
  thread_id TEXT COLLATE "C" NOT NULL,
  model     TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (thread_id, model)
);
CREATE INDEX thread_models_by_model ON thread_models (model, thread_id);
)sql";

// thread_last_prompt: the prompt fingerprint (diagnosis.h's JSON form) of each thread's latest
// diagnosable turn, overwritten turn by turn, so that a restarted gateway can compare the thread's
// next turn with it. One row per thread rather than a column per request: a fingerprint is about
// 1/12 of the prompt's size, which in a long agent thread would dwarf the rest of its rows. The
// per-request column of version 1 was never filled and is dropped.
constexpr std::string_view kThreadLastPrompt = R"sql(
CREATE TABLE thread_last_prompt (
  thread_id   TEXT PRIMARY KEY,
  request_id  TEXT NOT NULL,
  fingerprint TEXT NOT NULL
);
ALTER TABLE requests DROP COLUMN prompt_fingerprint;
)sql";

// Routing: the configured model that served each request (its router may have chosen it), the
// provider key it used, the backend instance it reported, the router's decision and every
// upstream attempt (JSON, NULL when there was no router / no attempt).
constexpr std::string_view kRouting = R"sql(
ALTER TABLE requests ADD COLUMN target TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN key_index INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN system_fingerprint TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN route TEXT;
ALTER TABLE requests ADD COLUMN attempts TEXT;
)sql";

// Version 4, what the dashboard reads (version 3 is the router's):
// - requests.response_id: the id the client got in the response body (GET /api/requests/{id}
//   finds a request by it too), indexed where set;
// - requests.cache_write_no_ttl: writes reported without a TTL (Usage::cache_write_no_ttl); the
//   writes of the provider types that report them so (the built-in engine, OpenAI, OpenRouter),
//   which older rows filed as 5-minute writes, move there;
// - requests.cost_missed / threads.cost_missed: what diagnosed cache misses cost (Cost::missed);
// - threads carry every token kind the thread view shows, so the list and the detail use the
//   same names (back-filled from the requests);
// - an index for each list query's filter and sort (requests by status; threads by turns, by
//   missed cost, by hit ratio with unknown ratios last in either direction: the two expressions
//   are the sort keys ListThreads uses);
// - usage_by_minute: per minute, model and provider, the sums the overview charts, maintained by
//   the writer in the same transaction as the rows (back-filled here), so a 7-day chart reads at
//   most 10,080 rows per model instead of every request. Requests that reached no provider are
//   summed under model "" (a client must not grow the table by inventing model names).
constexpr std::string_view kDashboard = R"sql(
ALTER TABLE requests ADD COLUMN response_id TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN cache_write_no_ttl INTEGER;
ALTER TABLE requests ADD COLUMN cost_missed INTEGER NOT NULL DEFAULT 0;
UPDATE requests SET cache_write_no_ttl = cache_write_5m, cache_write_5m = 0
  WHERE provider_type IN ('local', 'openai', 'openrouter');
UPDATE requests SET cache_write_no_ttl = 0
  WHERE provider_type NOT IN ('local', 'openai', 'openrouter') AND cache_write_5m IS NOT NULL;
CREATE INDEX requests_by_response_id ON requests (response_id) WHERE response_id != '';
CREATE INDEX requests_by_status ON requests (status, created_at_us, seq);

ALTER TABLE threads ADD COLUMN cache_write_5m INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cache_write_1h INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cache_write_no_ttl INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cost_saved INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cost_missed INTEGER NOT NULL DEFAULT 0;
UPDATE threads SET
  cache_write_5m = (SELECT coalesce(sum(r.cache_write_5m), 0) FROM requests r
                    WHERE r.thread_id = threads.thread_id),
  cache_write_1h = (SELECT coalesce(sum(r.cache_write_1h), 0) FROM requests r
                    WHERE r.thread_id = threads.thread_id),
  cache_write_no_ttl = (SELECT coalesce(sum(r.cache_write_no_ttl), 0) FROM requests r
                        WHERE r.thread_id = threads.thread_id),
  reasoning_tokens = (SELECT coalesce(sum(r.reasoning_tokens), 0) FROM requests r
                      WHERE r.thread_id = threads.thread_id),
  cost_saved = (SELECT coalesce(sum(r.cost_saved), 0) FROM requests r
                WHERE r.thread_id = threads.thread_id);
CREATE INDEX threads_by_turns ON threads (turns);
CREATE INDEX threads_by_cost_missed ON threads (cost_missed);
CREATE INDEX threads_by_hit_ratio_desc ON threads (
  (CASE WHEN known_input_total > 0 THEN CAST(known_input_read AS REAL) / known_input_total
   ELSE -1.0 END));
CREATE INDEX threads_by_hit_ratio_asc ON threads (
  (CASE WHEN known_input_total > 0 THEN CAST(known_input_read AS REAL) / known_input_total
   ELSE 2.0 END));

CREATE TABLE usage_by_minute (
  minute_us         INTEGER NOT NULL,
  model             TEXT    NOT NULL,
  provider          TEXT    NOT NULL,
  requests          INTEGER NOT NULL,
  errors            INTEGER NOT NULL,
  cache_read        INTEGER NOT NULL,
  cache_write       INTEGER NOT NULL,
  uncached          INTEGER NOT NULL,
  output_tokens     INTEGER NOT NULL,
  cost_total        INTEGER NOT NULL,
  cost_saved        INTEGER NOT NULL,
  cost_missed       INTEGER NOT NULL,
  known_input_read  INTEGER NOT NULL,
  known_input_total INTEGER NOT NULL,
  latency_us_sum    INTEGER NOT NULL,
  latency_count     INTEGER NOT NULL,
  PRIMARY KEY (minute_us, model, provider)
) WITHOUT ROWID;
INSERT INTO usage_by_minute
SELECT created_at_us / 60000000 * 60000000, CASE WHEN provider = '' THEN '' ELSE model END,
       provider, count(*), sum(status != 'ok'), coalesce(sum(cache_read), 0),
       coalesce(sum(cache_write_5m), 0) + coalesce(sum(cache_write_1h), 0) +
         coalesce(sum(cache_write_no_ttl), 0),
       coalesce(sum(uncached), 0), coalesce(sum(output_tokens), 0), sum(cost_total),
       sum(cost_saved), 0,
       coalesce(sum(CASE WHEN cache_write_5m IS NOT NULL AND cache_write_1h IS NOT NULL AND
                              cache_write_no_ttl IS NOT NULL AND uncached IS NOT NULL
                         THEN cache_read END), 0),
       coalesce(sum(cache_read + cache_write_5m + cache_write_1h + cache_write_no_ttl +
                    uncached), 0),
       coalesce(sum(latency_us), 0), count(latency_us)
FROM requests GROUP BY 1, 2, 3;
)sql";

// PostgreSQL's version 4: BIGINT columns, a double precision hit ratio, count(*) FILTER where
// SQLite sums a comparison.
constexpr std::string_view kDashboardPostgres = R"sql(
ALTER TABLE requests ADD COLUMN response_id TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN cache_write_no_ttl BIGINT;
ALTER TABLE requests ADD COLUMN cost_missed BIGINT NOT NULL DEFAULT 0;
UPDATE requests SET cache_write_no_ttl = cache_write_5m, cache_write_5m = 0
  WHERE provider_type IN ('local', 'openai', 'openrouter');
UPDATE requests SET cache_write_no_ttl = 0
  WHERE provider_type NOT IN ('local', 'openai', 'openrouter') AND cache_write_5m IS NOT NULL;
CREATE INDEX requests_by_response_id ON requests (response_id) WHERE response_id <> '';
CREATE INDEX requests_by_status ON requests (status, created_at_us, seq);

ALTER TABLE threads ADD COLUMN cache_write_5m BIGINT NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cache_write_1h BIGINT NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cache_write_no_ttl BIGINT NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cost_saved BIGINT NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN cost_missed BIGINT NOT NULL DEFAULT 0;
UPDATE threads SET
  cache_write_5m = (SELECT coalesce(sum(r.cache_write_5m), 0) FROM requests r
                    WHERE r.thread_id = threads.thread_id),
  cache_write_1h = (SELECT coalesce(sum(r.cache_write_1h), 0) FROM requests r
                    WHERE r.thread_id = threads.thread_id),
  cache_write_no_ttl = (SELECT coalesce(sum(r.cache_write_no_ttl), 0) FROM requests r
                        WHERE r.thread_id = threads.thread_id),
  reasoning_tokens = (SELECT coalesce(sum(r.reasoning_tokens), 0) FROM requests r
                      WHERE r.thread_id = threads.thread_id),
  cost_saved = (SELECT coalesce(sum(r.cost_saved), 0) FROM requests r
                WHERE r.thread_id = threads.thread_id);
CREATE INDEX threads_by_turns ON threads (turns);
CREATE INDEX threads_by_cost_missed ON threads (cost_missed);
CREATE INDEX threads_by_hit_ratio_desc ON threads (
  (CASE WHEN known_input_total > 0 THEN known_input_read::float8 / known_input_total
   ELSE -1.0::float8 END));
CREATE INDEX threads_by_hit_ratio_asc ON threads (
  (CASE WHEN known_input_total > 0 THEN known_input_read::float8 / known_input_total
   ELSE 2.0::float8 END));

CREATE TABLE usage_by_minute (
  minute_us         BIGINT NOT NULL,
  model             TEXT   COLLATE "C" NOT NULL,
  provider          TEXT   COLLATE "C" NOT NULL,
  requests          BIGINT NOT NULL,
  errors            BIGINT NOT NULL,
  cache_read        BIGINT NOT NULL,
  cache_write       BIGINT NOT NULL,
  uncached          BIGINT NOT NULL,
  output_tokens     BIGINT NOT NULL,
  cost_total        BIGINT NOT NULL,
  cost_saved        BIGINT NOT NULL,
  cost_missed       BIGINT NOT NULL,
  known_input_read  BIGINT NOT NULL,
  known_input_total BIGINT NOT NULL,
  latency_us_sum    BIGINT NOT NULL,
  latency_count     BIGINT NOT NULL,
  PRIMARY KEY (minute_us, model, provider)
);
INSERT INTO usage_by_minute
SELECT created_at_us / 60000000 * 60000000, CASE WHEN provider = '' THEN '' ELSE model END,
       provider, count(*), count(*) FILTER (WHERE status <> 'ok'), coalesce(sum(cache_read), 0),
       coalesce(sum(cache_write_5m), 0) + coalesce(sum(cache_write_1h), 0) +
         coalesce(sum(cache_write_no_ttl), 0),
       coalesce(sum(uncached), 0), coalesce(sum(output_tokens), 0), sum(cost_total),
       sum(cost_saved), 0,
       coalesce(sum(CASE WHEN cache_write_5m IS NOT NULL AND cache_write_1h IS NOT NULL AND
                              cache_write_no_ttl IS NOT NULL AND uncached IS NOT NULL
                         THEN cache_read END), 0),
       coalesce(sum(cache_read + cache_write_5m + cache_write_1h + cache_write_no_ttl +
                    uncached), 0),
       coalesce(sum(latency_us), 0), count(latency_us)
FROM requests GROUP BY 1, 2, 3;
)sql";

// Version 20, the built-in engine's cache tiers (versions 20-29 are the engine's):
// requests.cache_read_offload, the part of cache_read a provider served from a slower tier than
// its primary cache (Usage::cache_read_offload: the engine's disk offload tier). NULL where
// unknown: every older row, and every provider that does not report tiers.
constexpr std::string_view kEngineOffload = R"sql(
ALTER TABLE requests ADD COLUMN cache_read_offload INTEGER;
)sql";

// PostgreSQL's version 20: a 64-bit count.
constexpr std::string_view kEngineOffloadPostgres = R"sql(
ALTER TABLE requests ADD COLUMN cache_read_offload BIGINT;
)sql";

// Version 21, the kind of the engine's offload tier: requests.cache_read_offload_tier, "disk" or
// "host" (Usage::cache_read_offload_tier), '' when unknown (no tier, another provider, a row
// written before version 21, when "disk" was the only kind).
constexpr std::string_view kEngineOffloadTier = R"sql(
ALTER TABLE requests ADD COLUMN cache_read_offload_tier TEXT NOT NULL DEFAULT '';
)sql";

// Version 10, the API surface's cache helpers (versions 10-19 are the API surface's):
// requests.cache_helper, the helper that changed the request sent upstream ("prompt_cache_key",
// "anthropic_auto_cache"), '' when none did.
constexpr std::string_view kCacheHelpers = R"sql(
ALTER TABLE requests ADD COLUMN cache_helper TEXT NOT NULL DEFAULT '';
)sql";

// Version 11, gateway keys made through /api/keys (the API surface's range): one row per key,
// its name (NULL: none; names are unique), its secret only as a SHA-256 hash, its limits as the fields POST /api/keys takes; revoked keys
// stay (revoked_at_us set) so that their id keeps naming their requests. The index serves the
// spend a restarted gateway reads per key (the sum of cost_total since its budget period began)
// from the index alone: a key's lifetime spend is summed over all its rows at every start.
constexpr std::string_view kApiKeys = R"sql(
CREATE TABLE api_keys (
  id            TEXT    PRIMARY KEY,
  name          TEXT    UNIQUE,
  key_hash      TEXT    NOT NULL UNIQUE,
  limits        TEXT    NOT NULL,
  created_at_us INTEGER NOT NULL,
  rotated_at_us INTEGER,
  revoked_at_us INTEGER
);
CREATE INDEX requests_by_api_key ON requests (api_key_id, created_at_us, cost_total);
)sql";

// PostgreSQL's version 11: 64-bit times.
constexpr std::string_view kApiKeysPostgres = R"sql(
CREATE TABLE api_keys (
  id            TEXT    PRIMARY KEY,
  name          TEXT    UNIQUE,
  key_hash      TEXT    NOT NULL UNIQUE,
  limits        TEXT    NOT NULL,
  created_at_us BIGINT  NOT NULL,
  rotated_at_us BIGINT,
  revoked_at_us BIGINT
);
CREATE INDEX requests_by_api_key ON requests (api_key_id, created_at_us, cost_total);
)sql";

// Version 12, provider-reported cache diagnostics: requests.provider_cache_miss_reason, what the
// provider said of its own cache miss (RequestRecord::provider_cache_miss_reason), '' when it
// said nothing. (11 is the virtual keys'.)
constexpr std::string_view kProviderDiagnostics = R"sql(
ALTER TABLE requests ADD COLUMN provider_cache_miss_reason TEXT NOT NULL DEFAULT '';
)sql";

// Version 13, estimated usage: requests.usage_estimated, 1 when some of the row's token counts
// are kvgate's estimate rather than the provider's report (Usage::estimated: a stream the client
// left whose usage never came), 0 otherwise and in every older row.
constexpr std::string_view kUsageEstimated = R"sql(
ALTER TABLE requests ADD COLUMN usage_estimated INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 14, where a turn's thread came from: requests.thread_source ("body", "header",
// "response_chain", "auto"; '' without a thread, and in every older row) and
// requests.thread_parent, the thread an automatic thread forked from ('' otherwise).
constexpr std::string_view kThreadSource = R"sql(
ALTER TABLE requests ADD COLUMN thread_source TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN thread_parent TEXT NOT NULL DEFAULT '';
)sql";

// Version 15, keep-warm pings (gateway/keep_warm.h): requests.purpose, "client" for a client's
// request (every older row) or "keep_warm" for a ping kvgate sent to renew a thread's cached
// prefix; requests.keep_warm_saved, pico-USD a client turn saved because a ping had renewed its
// thread's cache (RequestRecord::keep_warm_saved). The indexes serve the overview's keep-warm sums
// (the pings, and the few turns a ping saved) and GET /api/requests?purpose=.
constexpr std::string_view kKeepWarm = R"sql(
ALTER TABLE requests ADD COLUMN purpose TEXT NOT NULL DEFAULT 'client';
ALTER TABLE requests ADD COLUMN keep_warm_saved BIGINT NOT NULL DEFAULT 0;
CREATE INDEX requests_by_purpose ON requests (purpose, created_at_us);
CREATE INDEX requests_kept_warm ON requests (created_at_us) WHERE keep_warm_saved <> 0;
)sql";

constexpr std::array<Migration, 12> kCoreMigrations = {{
    {1, "requests_and_threads", kRequestsAndThreads, kRequestsAndThreadsPostgres},
    {2, "thread_last_prompt", kThreadLastPrompt, {}},
    {3, "routing", kRouting, {}},
    {4, "dashboard", kDashboard, kDashboardPostgres},
    {10, "cache_helpers", kCacheHelpers, {}},
    {11, "api_keys", kApiKeys, kApiKeysPostgres},
    {12, "provider_cache_diagnostics", kProviderDiagnostics, {}},
    {13, "usage_estimated", kUsageEstimated, {}},
    {14, "thread_source", kThreadSource, {}},
    {15, "keep_warm", kKeepWarm, {}},
    {20, "engine_offload", kEngineOffload, kEngineOffloadPostgres},
    {21, "engine_offload_tier", kEngineOffloadTier, {}},
}};

// The version table (PostgreSQL's INTEGER is 32-bit: its times are BIGINT).
constexpr std::string_view kMigrationsTable = R"sql(
CREATE TABLE IF NOT EXISTS schema_migrations (
  version       INTEGER PRIMARY KEY,
  name          TEXT    NOT NULL,
  applied_at_us INTEGER NOT NULL
))sql";
constexpr std::string_view kMigrationsTablePostgres = R"sql(
CREATE TABLE IF NOT EXISTS schema_migrations (
  version       INTEGER PRIMARY KEY,
  name          TEXT    NOT NULL,
  applied_at_us BIGINT  NOT NULL
))sql";

}  // namespace

std::span<const Migration> CoreMigrations() { return kCoreMigrations; }

namespace internal {
std::string_view PostgresMigrationsTableSql() { return kMigrationsTablePostgres; }
}  // namespace internal

namespace internal {

Result<std::vector<Migration>> AllMigrations(std::span<const Migration> extra) {
  std::vector<Migration> all(kCoreMigrations.begin(), kCoreMigrations.end());
  all.insert(all.end(), extra.begin(), extra.end());
  std::sort(all.begin(), all.end(), [](const Migration& a, const Migration& b) { return a.version < b.version; });
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].version <= 0) {
      return MakeError(ErrorCode::kInternal, "migration versions must be positive: " + std::string(all[i].name));
    }
    if (i > 0 && all[i].version == all[i - 1].version) {
      return MakeError(ErrorCode::kInternal, "two migrations claim version " + std::to_string(all[i].version));
    }
  }
  return all;
}

Status CheckAppliedMigrations(const std::vector<Migration>& all,
                              const std::map<int, std::string>& applied) {
  // A core version this code does not have: a newer kvgate wrote this database, and this one
  // would write rows its schema no longer fits (or misread them).
  for (const auto& [version, name] : applied) {
    const bool known = std::any_of(all.begin(), all.end(),
                                   [v = version](const Migration& m) { return m.version == v; });
    if (version < 100 && !known) {
      return MakeError(ErrorCode::kCorruptData,
                       "the database was written by a newer kvgate: it has schema version " +
                           std::to_string(version) + " (\"" + name + "\"), this kvgate knows up to " +
                           std::to_string(kCoreMigrations.back().version) +
                           "; run the newer kvgate or start a new database");
    }
  }
  for (const Migration& m : all) {
    if (auto it = applied.find(m.version); it != applied.end() && it->second != m.name) {
      return MakeError(ErrorCode::kCorruptData, "schema_migrations has version " + std::to_string(m.version) +
                                                    " as \"" + it->second + "\", code calls it \"" +
                                                    std::string(m.name) + "\"");
    }
  }
  return {};
}

Status ApplyMigrations(Db& db, std::span<const Migration> extra, const Clock& clock) {
  Result<std::vector<Migration>> planned = AllMigrations(extra);
  if (!planned) return std::unexpected(planned.error());
  const std::vector<Migration>& all = *planned;
  if (Status s = db.Exec(kMigrationsTable); !s) return s;

  std::map<int, std::string> applied;
  {
    auto stmt = db.Prepare("SELECT version, name FROM schema_migrations");
    if (!stmt) return std::unexpected(stmt.error());
    for (;;) {
      Result<bool> row = (*stmt)->Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      applied[static_cast<int>((*stmt)->Int(0))] = (*stmt)->Text(1);
    }
  }
  if (Status s = CheckAppliedMigrations(all, applied); !s) return s;
  for (const Migration& m : all) {
    if (applied.contains(m.version)) continue;
    // BEGIN IMMEDIATE: a second process opening the same file waits instead of racing us.
    if (Status s = db.Exec("BEGIN IMMEDIATE"); !s) return s;
    Status applied_ok = db.Exec(m.sql);
    if (applied_ok) {
      auto stmt = db.Prepare("INSERT INTO schema_migrations (version, name, applied_at_us) VALUES (?, ?, ?)");
      if (!stmt) {
        applied_ok = std::unexpected(stmt.error());
      } else {
        (*stmt)->BindInt(1, m.version);
        (*stmt)->BindText(2, m.name);
        (*stmt)->BindInt(3, clock.NowUnixMicros());
        if (Result<bool> r = (*stmt)->Step(); !r) applied_ok = std::unexpected(r.error());
      }
    }
    if (!applied_ok) {
      if (db.InTransaction()) (void)db.Exec("ROLLBACK");
      return MakeError(ErrorCode::kInternal, "migration " + std::to_string(m.version) + " (" +
                                                 std::string(m.name) + "): " + applied_ok.error().message);
    }
    if (Status s = db.Exec("COMMIT"); !s) {
      if (db.InTransaction()) (void)db.Exec("ROLLBACK");
      return s;
    }
  }
  return {};
}

}  // namespace internal
}  // namespace kvgate::telemetry
