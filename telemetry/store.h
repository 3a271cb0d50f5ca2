// The telemetry store: every RequestRecord persisted, and the queries the dashboard and the admin API
// run over them (threads, turns, requests).
//
// Two implementations share the writer (store_writer.h: the in-memory queue, the crash journal,
// one writer thread committing batched transactions) and the JSON of every query:
// - SQLite in WAL mode (synchronous=NORMAL), the embedded default; queries run on separate
//   read-only connections, so reads never wait for the writer.
// - PostgreSQL through libpq (OpenPostgres), for several gateway replicas; batches are multi-row
//   INSERTs.
// A database that cannot be written for now (an unreachable server; a full disk, a lock held by
// another process or an I/O error under SQLite) is waited out: records queue (within
// StoreOptions::max_queued_records) and are written once it is back.
// Schema changes are numbered migrations, the same list for both (with the SQL per dialect where
// it must differ), recorded in `schema_migrations`.
//
// Thread safety: every method of TelemetryStore is safe to call from any thread, concurrently.
// Record() never waits on disk (it takes one short lock to enqueue).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/error.h"
#include "telemetry/record.h"

namespace kvgate::telemetry {

// One numbered schema change. Migrations are applied in ascending `version`, each in its own
// transaction, exactly once per database (recorded in schema_migrations with its name). A version
// already recorded under a different name is kCorruptData (two modules claimed one number).
// Versions 1..99 belong to the core store (CoreMigrations()); other modules (alerts, ...) use
// 100 and up and pass theirs in StoreOptions::extra_migrations.
struct Migration {
  int version = 0;
  std::string_view name;  // short, stable, e.g. "requests_and_threads"
  std::string_view sql;   // one or more statements
  // The PostgreSQL statements where the dialects differ (types, collations, SQLite-only syntax);
  // empty: `sql` serves both.
  std::string_view postgres_sql;
};

// The core store's migrations, ascending.
std::span<const Migration> CoreMigrations();

struct StoreOptions {
  // Applied after (interleaved by version with) CoreMigrations(). The string_views must outlive
  // Open() (string literals in practice).
  std::vector<Migration> extra_migrations;
  // How many idle read-only connections are kept for queries (more are opened under load).
  int max_idle_readers = 4;
  // Group commit: the writer gathers records for up to this long (or until max_batch_records are
  // queued) before it commits them in one transaction. A commit's page writes and WAL frames cost
  // about as much as ten inserts, so one commit per request would make the writer the gateway's
  // biggest CPU consumer. Flush() and shutdown never wait for the interval. Queries see a record
  // at most this much later.
  std::chrono::milliseconds commit_interval{20};
  size_t max_batch_records = 1024;
  // The crash journal (`<path>-journal.<n>` files beside the database, each preallocated to
  // journal_segment_bytes and mapped): every record is copied into it before it waits for its
  // group commit, so a process killed with SIGKILL loses none (the page cache keeps the file; a
  // power loss is not covered). Read back at Open().
  bool journal = true;
  size_t journal_segment_bytes = 8 << 20;
  // Where the journal's files go: "" = beside the SQLite file (`<path>-journal`). The PostgreSQL
  // store has no local file and needs one (a path prefix on local disk, one per process).
  std::string journal_path;
  // While the database cannot be written (a PostgreSQL server restarting; a SQLite file on a
  // full disk, locked by another process, or failing I/O), records wait in memory and in the
  // journal, and the writer retries: up to this many recorded but not yet written. Beyond it the
  // OLDEST waiting records are dropped (counted in Stats::dropped and write_errors, logged, their
  // journal entries released), so an outage can exhaust neither memory nor disk while the newest
  // records, the ones an operator looks at first, are kept. The bound is checked whenever a
  // record arrives while the writer holds no batch and whenever a batch is handed back after a
  // failed attempt, so it can be passed by the records that arrive during one attempt.
  size_t max_queued_records = 200'000;
  // SQLite only: how long one write waits for a lock another connection holds before the
  // database counts as unavailable for this attempt (the batch is kept and offered again).
  std::chrono::milliseconds busy_timeout{5'000};
};

// Filters for ListThreads. Threads are conversations with a non-empty thread id.
struct ThreadQuery {
  enum class Sort { kLastSeen, kFirstSeen, kCost, kTurns, kHitRatio, kMissedCost };
  Sort sort = Sort::kLastSeen;
  bool descending = true;
  std::string model;                // "" = any; else threads with at least one turn on this model
  std::optional<int64_t> since_us;  // threads last seen at or after this time (unix micros)
  std::optional<int64_t> until_us;  // threads first seen at or before this time
  std::string id_prefix;            // "" = any; else threads whose id starts with it
  int limit = 50;                   // clamped to [1, 500]
  // Where to continue: the "next_cursor" of the previous page (takes precedence), else `offset`.
  std::string cursor;
  int64_t offset = 0;
};

// "last_seen" | "first_seen" | "cost" | "turns" | "hit_ratio" | "missed_cost"; kInvalidArgument
// otherwise.
Result<ThreadQuery::Sort> ParseThreadSort(std::string_view name);

inline constexpr int kRequestLimitMax = 1000;  // ListRequests' largest page

// Filters for ListRequests (all exact matches; "" = any).
struct RequestQuery {
  std::string thread_id;
  std::string model;
  std::string provider;
  std::string status;
  std::optional<int64_t> since_us;  // created at or after (unix micros)
  std::optional<int64_t> until_us;  // created at or before
  // Only requests whose provider reported on its own cache (provider_cache_diagnosis non-null).
  bool provider_diagnosed = false;
  // "client" or "keep_warm" (RequestRecord::purpose); "" for both. Other values match nothing.
  std::string purpose;
  int limit = 100;                  // clamped to [1, kRequestLimitMax]
  std::string cursor;               // "next_cursor" of the previous page; "" = newest first
};

// Abstract so that a PostgreSQL store can implement the same interface for several replicas.
class TelemetryStore {
 public:
  struct Stats {
    uint64_t recorded = 0;      // Record() calls
    uint64_t written = 0;       // records committed
    uint64_t batches = 0;       // transactions committed (or given up on)
    uint64_t queue_depth = 0;   // recorded but not yet committed or failed
    uint64_t write_errors = 0;  // records that could not be written (and were discarded)
    // Of write_errors, the records dropped because StoreOptions::max_queued_records were
    // waiting (oldest first).
    uint64_t dropped = 0;
    // How long the oldest record not yet committed has waited (by the store's Clock); 0 when
    // none waits. Beyond a group commit interval or so, the writer is stalled.
    int64_t oldest_queued_age_us = 0;
    // Whether the latest transaction failed (or the database is unreachable and records are
    // waiting), and why: the store is degraded until one succeeds.
    bool failing = false;
    std::string last_error;
  };

  // Opens (creating if needed) the SQLite database at `path` and applies pending migrations, then
  // starts the writer thread. REQUIRES: `path` names a file (not ":memory:": readers use their own
  // connections); `clock` outlives the store. Errors: kUnavailable when the file cannot be opened,
  // kCorruptData / kInternal when a migration fails.
  static Result<std::unique_ptr<TelemetryStore>> Open(const std::string& path, const Clock& clock);
  static Result<std::unique_ptr<TelemetryStore>> Open(const std::string& path, const Clock& clock,
                                                      StoreOptions options);

  // Connects to the PostgreSQL database named by `conninfo` (a libpq URI or key=value string,
  // "postgresql://user@host/db"), applies pending migrations (serialized across processes by an
  // advisory lock), replays the crash journal at options.journal_path and starts the writer.
  // REQUIRES: options.journal_path is set when options.journal; `clock` outlives the store.
  // Errors: kInvalidArgument for a bad conninfo or a missing journal path, kUnavailable when the
  // server cannot be reached, kCorruptData / kInternal when a migration fails.
  static Result<std::unique_ptr<TelemetryStore>> OpenPostgres(const std::string& conninfo,
                                                              const Clock& clock,
                                                              StoreOptions options);

  TelemetryStore() = default;
  TelemetryStore(const TelemetryStore&) = delete;
  TelemetryStore& operator=(const TelemetryStore&) = delete;
  virtual ~TelemetryStore() = default;  // implementations call Close()

  // Enqueues a record; never blocks on disk, never drops while open unless
  // StoreOptions::max_queued_records are waiting (then the oldest go). A record with created_at_us
  // == 0 is stamped with the clock. Text that is not UTF-8 is stored with U+FFFD in place of the
  // bad bytes (MakeTextValid), so every stored row serializes. After Close() the record is
  // discarded and counted in write_errors.
  virtual void Record(RequestRecord record) = 0;

  // Crash durability for a record whose answer is about to complete. The record's answer leaves
  // the process after Record() would be called by its request path, so a crash in between would
  // lose an answered request: Checkpoint journals `record` as it stands (a copy into a mapped
  // file: no system call, no disk wait) before the last bytes go out, and Record(final, mark) later replaces it (journaling the
  // final record again only when its outcome changed: a client that left during the last write).
  // Returns nullopt when the store keeps no journal (then Record journals nothing either).
  using JournalMark = uint64_t;
  virtual std::optional<JournalMark> Checkpoint(const RequestRecord& record) {
    (void)record;
    return std::nullopt;
  }
  virtual void Record(RequestRecord record, std::optional<JournalMark> checkpoint) {
    (void)checkpoint;
    Record(std::move(record));
  }

  // Blocks until everything recorded before the call is committed (or given up on after retries).
  // Errors: kUnavailable when a record recorded before the call could not be written (reported
  // once), or when the store is closed with records pending.
  virtual Status Flush() = 0;

  // Flushes and stops the writer; further queries return kUnavailable. Idempotent.
  virtual void Close() = 0;

  // Queries. They see what has been committed (call Flush() first to see your own records). Unknown
  // token counts are JSON null, never 0; money is given both as USD numbers ("cost_usd", for
  // display) and exact integer pico-USD ("cost_pico_usd"); times are RFC 3339 UTC with microseconds.
  // Errors: kInvalidArgument for a bad cursor, kUnavailable after Close() or on a database error.
  //
  // A turn:
  //   {"request_id", "created_at", "model", "provider", "status", "stream",
  //    "latency_ms", "ttft_ms" (fractional ms, null when unknown),
  //    "response_id" (the id in the response body, "" when none),
  //    "usage": {"cache_read", "cache_write_5m", "cache_write_1h", "cache_write_no_ttl",
  //              "uncached", "output", "reasoning"},
  //    "cost_usd": {"total", "cache_read", "cache_write", "uncached", "output", "saved", "missed"},
  //    "cost_pico_usd": {same keys, integers}, "cost_complete" (false: the total is a lower bound),
  //    "error" (null when none), "http_status", "cache_diagnosis" (null or the tracker's object),
  //    "usage_clamped", "target" (the configured model that served it), "route" (the router's
  //    decision, null without a router), "attempts" ([] when no upstream was tried)}
  //
  // Thread aggregates ("tokens", "cost", "hit_ratio") sum the known counts; "hit_ratio" is
  // cache_read / total input over the turns whose every input component is known, null if none.
  //
  // {"threads": [{"thread_id", "turns", "first_seen", "last_seen", "models": [...],
  //   "tokens": {"cache_read", "cache_write" (all writes), "cache_write_5m", "cache_write_1h",
  //              "cache_write_no_ttl", "uncached", "output", "reasoning"},
  //   "cost_usd", "cost_pico_usd", "saved_usd", "saved_pico_usd", "missed_usd", "missed_pico_usd",
  //   "hit_ratio"}], "next_cursor": string | null}. Every filter and sort is served by an index.
  virtual Result<nlohmann::json> ListThreads(const ThreadQuery& query) const = 0;
  // {"thread_id", "turns": [turn...] ordered by created_at then insertion order,
  //  "summary": {"turns", "first_seen", "last_seen", "models" (in order of first use),
  //              "tokens": {the keys of the list's "tokens", null when no turn reported one},
  //              "cost_usd": {...}, "cost_pico_usd": {...},
  //              "cost_complete", "hit_ratio"}};
  // kNotFound when the thread has no requests (or thread_id is empty).
  virtual Result<nlohmann::json> GetThread(std::string_view thread_id) const = 0;
  // {"requests": [turn + "thread_id", "endpoint", "upstream_status", "upstream_model"],
  //  "next_cursor": string | null}, newest first.
  virtual Result<nlohmann::json> ListRequests(const RequestQuery& query) const = 0;
  // One request with every stored field: the listed turn plus "provider_type", "api_key_id",
  // "upstream_request_id", "finish_reason", "usage_raw" (the provider's usage JSON),
  // "reported_input", "cost_priced", "key_index", "system_fingerprint". `id` is kvgate's request id or the response body's id
  // (response_id; the newest request with it). kNotFound when there is none.
  virtual Result<nlohmann::json> GetRequest(std::string_view id) const = 0;
  // The overview's time series (store_overview.cc), from per-minute sums: buckets of
  // `bucket_seconds` from since_us (inclusive) to until_us (exclusive), each
  //   {"start", "requests", "errors", "cost_usd", "saved_usd", "missed_usd",
  //    "tokens": {"cache_read", "cache_write", "uncached", "output"}, "hit_ratio",
  //    "latency_ms_avg"},
  // as {"since", "until", "bucket_seconds", "series": [...], "totals": {same keys but start},
  //     "by_model": [{"model", "provider", same keys, "series": [{"requests", "hit_ratio",
  //                   "cost_usd"}, one per bucket]}] (most requests first),
  //     "lost_by_cause": [{"cause", "requests", "cost_missed_usd"}] (the diagnosed requests of
  //                       the range by their diagnosis' cause, most dollars lost first),
  //     "volatile_prefixes": [{"thread_id", "model", "role", "message_number", "char_offset",
  //                           "turns_changed", "cost_missed_usd", "last_seen"}] (each thread
  //                           and model whose diagnosis saw a volatile prefix in the range, as
  //                           its latest such diagnosis says; most dollars lost first, 50 at
  //                           most)}.
  // kInvalidArgument when bucket_seconds is not a multiple of 60 or the range has over 2,000
  // buckets.
  virtual Result<nlohmann::json> Overview(int64_t since_us, int64_t until_us,
                                          int64_t bucket_seconds) const = 0;
  // What changed, cheaply (for the dashboard's polling): {"last_seq"} (the newest request's
  // insertion number, 0 when none) and, for a thread id, "thread": {"turns", "last_seq"}.
  virtual Result<nlohmann::json> Live(std::string_view thread_id) const = 0;
  // For each thread last seen at or after `since_us`, most recently seen first and at most
  // `max_threads` of them: the last turn recorded with a prompt_fingerprint (the Recorder keeps
  // one only on successful turns), as a record with thread_id, request_id, created_at_us, model,
  // provider, provider_type, upstream_model, target, key_index, system_fingerprint, status,
  // usage (token counts, not raw) and
  // prompt_fingerprint set. Only each thread's latest fingerprint is stored. Threads without one
  // are left out, as are fingerprints that do not parse (counted in *skipped_corrupt when given).
  // What a restarted gateway hands to its thread tracker (Recorder::RestoreThreads).
  virtual Result<std::vector<RequestRecord>> LatestThreadTurns(int64_t since_us, int max_threads,
                                                               int* skipped_corrupt) const = 0;
  // One thread's turn as LatestThreadTurns gives it: the last one recorded with a fingerprint,
  // nullopt when the store has none (or its fingerprint does not parse). How a replica on a
  // shared database learns of the turns other replicas served (Recorder, shared_threads).
  virtual Result<std::optional<RequestRecord>> LatestThreadTurn(std::string_view thread_id) const = 0;

  virtual Stats stats() const = 0;
};

// A PostgreSQL connection string with its password replaced by "***", for logs and errors.
std::string RedactConninfo(std::string_view conninfo);

// RFC 3339 UTC with microseconds: 1767225600000000 -> "2026-01-01T00:00:00.000000Z".
std::string FormatRfc3339Micros(int64_t unix_micros);
// The other way, for query parameters: "2026-01-01T00:00:00Z", with optional fractional seconds
// (up to 9 digits; beyond microseconds they are dropped) and a "Z" or +hh:mm / -hh:mm offset;
// 't' and 'z' as RFC 3339 allows. kInvalidArgument otherwise (the message quotes the text).
Result<int64_t> ParseRfc3339Micros(std::string_view text);

}  // namespace kvgate::telemetry
