// The PostgreSQL store: opening, migrations and the writer's batched transactions. The SQL sits
// beside its SQLite counterpart's meaning (store_sqlite.cc); where they differ, it says why.
#include "telemetry/store_pg.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>
#include <utility>

#include "common/json_writer.h"
#include "telemetry/diagnosis.h"
#include "telemetry/store_batch.h"
#include "telemetry/store_schema.h"

namespace kvgate::telemetry {
namespace internal {
namespace {

// Transaction attempts per batch before its records are given up (a statement the server
// refuses); an unreachable server is not counted here, the writer waits it out.
constexpr int kBatchAttempts = 3;
// Rows per INSERT statement: 49 parameters a row stays under the protocol's 65,535.
constexpr size_t kRowsPerStatement = 500;
// Any 64-bit number the other users of the database do not take: the migrations' lock.
constexpr int64_t kMigrationLockKey = 0x6b76676174650001;  // "kvgate", 1

constexpr std::string_view kRequestColumns =
    "request_id, thread_id, created_at_us, endpoint, model, provider, provider_type, "
    "upstream_model, api_key_id, stream, status, http_status, upstream_status, latency_us, "
    "ttft_us, cache_read, cache_write_5m, cache_write_1h, uncached, output_tokens, "
    "reasoning_tokens, reported_input, usage_clamped, usage_raw, cost_cache_read, "
    "cost_cache_write, cost_uncached, cost_output, cost_total, cost_saved, cost_complete, "
    "cost_priced, error, upstream_request_id, finish_reason, cache_diagnosis, response_id, "
    "cache_write_no_ttl, cost_missed, target, key_index, system_fingerprint, route, attempts, "
    "cache_read_offload, cache_helper, provider_cache_miss_reason, cache_read_offload_tier, "
    "usage_estimated, thread_source, thread_parent, purpose, keep_warm_saved";
constexpr int kRequestParams = 53;

// SQLite's upserts (store_sqlite.cc) with PostgreSQL's names: least/greatest for min/max, and
// the existing row named by its table (an unqualified column would be ambiguous with excluded).
constexpr std::string_view kThreadColumns =
    "thread_id, turns, first_seen_us, last_seen_us, cache_read, cache_write, uncached, "
    "output_tokens, cost_total, known_input_read, known_input_total, cache_write_5m, "
    "cache_write_1h, cache_write_no_ttl, reasoning_tokens, cost_saved, cost_missed";
constexpr int kThreadParams = 17;
constexpr std::string_view kThreadConflict = R"sql(
ON CONFLICT (thread_id) DO UPDATE SET
  turns = threads.turns + excluded.turns,
  first_seen_us = least(threads.first_seen_us, excluded.first_seen_us),
  last_seen_us = greatest(threads.last_seen_us, excluded.last_seen_us),
  cache_read = threads.cache_read + excluded.cache_read,
  cache_write = threads.cache_write + excluded.cache_write,
  uncached = threads.uncached + excluded.uncached,
  output_tokens = threads.output_tokens + excluded.output_tokens,
  cost_total = threads.cost_total + excluded.cost_total,
  known_input_read = threads.known_input_read + excluded.known_input_read,
  known_input_total = threads.known_input_total + excluded.known_input_total,
  cache_write_5m = threads.cache_write_5m + excluded.cache_write_5m,
  cache_write_1h = threads.cache_write_1h + excluded.cache_write_1h,
  cache_write_no_ttl = threads.cache_write_no_ttl + excluded.cache_write_no_ttl,
  reasoning_tokens = threads.reasoning_tokens + excluded.reasoning_tokens,
  cost_saved = threads.cost_saved + excluded.cost_saved,
  cost_missed = threads.cost_missed + excluded.cost_missed)sql";

constexpr std::string_view kMinuteColumns =
    "minute_us, model, provider, requests, errors, cache_read, cache_write, uncached, "
    "output_tokens, cost_total, cost_saved, cost_missed, known_input_read, known_input_total, "
    "latency_us_sum, latency_count";
constexpr int kMinuteParams = 16;
constexpr std::string_view kMinuteConflict = R"sql(
ON CONFLICT (minute_us, model, provider) DO UPDATE SET
  requests = usage_by_minute.requests + excluded.requests,
  errors = usage_by_minute.errors + excluded.errors,
  cache_read = usage_by_minute.cache_read + excluded.cache_read,
  cache_write = usage_by_minute.cache_write + excluded.cache_write,
  uncached = usage_by_minute.uncached + excluded.uncached,
  output_tokens = usage_by_minute.output_tokens + excluded.output_tokens,
  cost_total = usage_by_minute.cost_total + excluded.cost_total,
  cost_saved = usage_by_minute.cost_saved + excluded.cost_saved,
  cost_missed = usage_by_minute.cost_missed + excluded.cost_missed,
  known_input_read = usage_by_minute.known_input_read + excluded.known_input_read,
  known_input_total = usage_by_minute.known_input_total + excluded.known_input_total,
  latency_us_sum = usage_by_minute.latency_us_sum + excluded.latency_us_sum,
  latency_count = usage_by_minute.latency_count + excluded.latency_count)sql";

// "INSERT INTO table (columns) VALUES ($1, ...), (...)" for `rows` rows of `width` parameters:
// the placeholders are the only thing put into the text; the values travel as parameters.
std::string MultiRowInsert(std::string_view table, std::string_view columns, int width,
                           size_t rows) {
  std::string sql = "INSERT INTO " + std::string(table) + " (" + std::string(columns) + ") VALUES ";
  int n = 0;
  for (size_t r = 0; r < rows; ++r) {
    sql += r == 0 ? "(" : ", (";
    for (int c = 0; c < width; ++c) {
      if (c > 0) sql += ", ";
      sql += "$" + std::to_string(++n);
    }
    sql += ")";
  }
  return sql;
}

// The parameters of one request row, in kRequestColumns' order, as SQLite's InsertRequest binds
// them (NULL where it binds NULL).
Status AddRequestParams(const RequestRecord& r, PgParams& p) {
  std::string diagnosis, attempts;
  try {
    if (!r.cache_diagnosis.is_null()) diagnosis = WriteJson(r.cache_diagnosis);
    if (r.attempts.is_array() && !r.attempts.empty()) attempts = WriteJson(r.attempts);
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal, std::string("json: ") + e.what());
  }
  const Usage& u = r.usage;
  const Cost& c = r.cost;
  p.Text(r.request_id);
  p.Text(r.thread_id);
  p.Int(r.created_at_us);
  p.Text(r.endpoint);
  p.Text(r.model);
  p.Text(r.provider);
  p.Text(r.provider_type);
  p.Text(r.upstream_model);
  p.Text(r.api_key_id);
  p.Int(r.stream ? 1 : 0);
  p.Text(r.status);
  p.Int(r.http_status);
  p.Int(r.upstream_status);
  p.OptInt(r.latency_us);
  p.OptInt(r.ttft_us);
  p.OptInt(u.cache_read);
  p.OptInt(u.cache_write_5m);
  p.OptInt(u.cache_write_1h);
  p.OptInt(u.uncached);
  p.OptInt(u.output);
  p.OptInt(u.reasoning);
  p.OptInt(u.reported_input);
  p.Int(u.clamped ? 1 : 0);
  p.TextOrNull(u.raw);
  p.Int(c.cache_read);
  p.Int(c.cache_write);
  p.Int(c.uncached);
  p.Int(c.output);
  p.Int(c.total);
  p.Int(c.saved);
  p.Int(c.complete ? 1 : 0);
  p.Int(c.priced ? 1 : 0);
  p.Text(r.error);
  p.Text(r.upstream_request_id);
  p.Text(r.finish_reason);
  p.TextOrNull(diagnosis);
  p.Text(r.response_id);
  p.OptInt(u.cache_write_no_ttl);
  p.Int(c.missed);
  p.Text(r.target);
  p.Int(r.key_index);
  p.Text(r.system_fingerprint);
  p.TextOrNull(r.route);
  p.TextOrNull(attempts);
  p.OptInt(u.cache_read_offload);
  p.Text(r.cache_helper);
  p.Text(r.provider_cache_miss_reason);
  p.Text(u.cache_read_offload_tier);
  p.Int(u.estimated ? 1 : 0);
  p.Text(r.thread_source);
  p.Text(r.thread_parent);
  p.Text(r.purpose);
  p.Int(r.keep_warm_saved);
  return {};
}

// Whether a failed statement means the server is away (rather than refusing this batch):
// the connection is lost, or the server says it is shutting down or cannot connect.
bool ServerUnavailable(const PgConnection& conn, const Error& error) {
  return conn.Broken() || error.message.find("(SQLSTATE 57P") != std::string::npos ||
         error.message.find("(SQLSTATE 08") != std::string::npos;
}

}  // namespace

Status ApplyPostgresMigrations(PgConnection& db, std::span<const Migration> extra,
                               const Clock& clock) {
  Result<std::vector<Migration>> planned = AllMigrations(extra);
  if (!planned) return std::unexpected(planned.error());
  PgParams key;
  key.Int(kMigrationLockKey);
  if (auto locked = db.Query("SELECT pg_advisory_lock($1)", key); !locked) {
    return std::unexpected(locked.error());
  }
  auto apply = [&]() -> Status {
    if (Status s = db.Exec(PostgresMigrationsTableSql()); !s) return s;
    auto rows = db.Query("SELECT version, name FROM schema_migrations", PgParams{});
    if (!rows) return std::unexpected(rows.error());
    std::map<int, std::string> applied;
    for (int i = 0; i < rows->rows(); ++i) {
      applied[static_cast<int>(rows->Int(i, 0))] = std::string(rows->Text(i, 1));
    }
    if (Status s = CheckAppliedMigrations(*planned, applied); !s) return s;
    for (const Migration& m : *planned) {
      if (applied.contains(m.version)) continue;
      if (Status s = db.Exec("BEGIN"); !s) return s;
      Status done = db.Exec(PostgresSqlOf(m));
      if (done) {
        PgParams p;
        p.Int(m.version);
        p.Text(m.name);
        p.Int(clock.NowUnixMicros());
        auto inserted = db.Query(
            "INSERT INTO schema_migrations (version, name, applied_at_us) VALUES ($1::int4, $2, $3)",
            p);
        if (!inserted) done = std::unexpected(inserted.error());
      }
      if (done) done = db.Exec("COMMIT");
      if (!done) {
        (void)db.Exec("ROLLBACK");
        return MakeError(ErrorCode::kInternal, "migration " + std::to_string(m.version) + " (" +
                                                   std::string(m.name) + "): " + done.error().message);
      }
    }
    return {};
  };
  Status result = apply();
  (void)db.Query("SELECT pg_advisory_unlock($1)", key);
  return result;
}

PostgresTelemetryStore::PostgresTelemetryStore(std::string conninfo, const Clock& clock,
                                               const StoreOptions& options,
                                               std::unique_ptr<PgConnection> writer_conn)
    : conninfo_(std::move(conninfo)),
      described_("PostgreSQL " + RedactConninfo(conninfo_)),
      max_idle_readers_(static_cast<size_t>(std::max(0, options.max_idle_readers))),
      writer_conn_(std::move(writer_conn)),
      writer_(*this, clock, options) {}

PostgresTelemetryStore::~PostgresTelemetryStore() { Close(); }

Status PostgresTelemetryStore::Start(const StoreOptions& options) {
  return writer_.Start(options.journal ? options.journal_path : std::string(),
                       options.journal_segment_bytes);
}

void PostgresTelemetryStore::Record(RequestRecord record) {
  writer_.Record(std::move(record), std::nullopt);
}

std::optional<TelemetryStore::JournalMark> PostgresTelemetryStore::Checkpoint(
    const RequestRecord& record) {
  return writer_.Checkpoint(record);
}

void PostgresTelemetryStore::Record(RequestRecord record, std::optional<JournalMark> checkpoint) {
  writer_.Record(std::move(record), checkpoint);
}

Status PostgresTelemetryStore::Flush() { return writer_.Flush(); }

void PostgresTelemetryStore::Close() {
  writer_.Close();
  writer_conn_.reset();
  MutexLock lock(&reader_mu_);
  readers_closed_ = true;
  idle_readers_.clear();
}

TelemetryStore::Stats PostgresTelemetryStore::stats() const { return writer_.stats(); }

BatchSink::Outcome PostgresTelemetryStore::WriteBatch(std::deque<RequestRecord>& batch) {
  Outcome outcome;
  for (int attempt = 0; attempt < kBatchAttempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50 << (2 * attempt)));
    if (writer_conn_ == nullptr || writer_conn_->Broken()) {
      writer_conn_.reset();
      auto conn = PgConnection::Connect(conninfo_);
      if (!conn) return Outcome{.unavailable = true, .error = conn.error().message};
      writer_conn_ = std::move(*conn);
    }
    uint64_t duplicates = 0;
    std::string duplicate_error;
    Status written = WriteTransaction(batch, &duplicates, &duplicate_error);
    if (written) return Outcome{.failed = duplicates, .error = duplicate_error};
    if (ServerUnavailable(*writer_conn_, written.error())) {
      // Lost mid-transaction: nothing of it was committed, unless the connection went after the
      // COMMIT reached the server; then the retry finds every request id stored and adds
      // nothing to the aggregates (they follow the rows that are new).
      writer_conn_.reset();
      return Outcome{.unavailable = true, .error = written.error().message};
    }
    outcome.error = written.error().message;
  }
  // The server refuses the batch (not a lost connection): an error aborts a PostgreSQL
  // transaction, so each record is tried alone, and a record it refuses costs only itself, as a
  // record SQLite refuses does.
  if (batch.size() == 1) {
    outcome.failed = 1;
    return outcome;
  }
  for (const RequestRecord& record : batch) {
    const std::deque<RequestRecord> one{record};
    uint64_t duplicates = 0;
    std::string duplicate_error;
    Status written = WriteTransaction(one, &duplicates, &duplicate_error);
    if (!written && ServerUnavailable(*writer_conn_, written.error())) {
      // Gone meanwhile: the records written alone are skipped by request id when the writer
      // offers the batch again.
      writer_conn_.reset();
      return Outcome{.unavailable = true, .error = written.error().message};
    }
    if (!written || duplicates > 0) {
      ++outcome.failed;
      if (!written) outcome.error = written.error().message;
    }
  }
  return outcome;
}

Status PostgresTelemetryStore::WriteTransaction(const std::deque<RequestRecord>& batch,
                                                uint64_t* duplicates,
                                                std::string* duplicate_error) {
  PgConnection& db = *writer_conn_;
  auto fail = [&](Error e) -> Status {
    if (!db.Broken()) (void)db.Exec("ROLLBACK");
    return std::unexpected(std::move(e));
  };
  if (Status s = db.Exec("BEGIN"); !s) return fail(s.error());
  // Request rows, many per statement. RETURNING names the rows that were new: a duplicate
  // request id (ON CONFLICT DO NOTHING) adds nothing to the aggregates, as in SQLite.
  std::vector<const RequestRecord*> inserted;
  inserted.reserve(batch.size());
  for (size_t start = 0; start < batch.size(); start += kRowsPerStatement) {
    const size_t rows = std::min(kRowsPerStatement, batch.size() - start);
    PgParams params;
    for (size_t i = start; i < start + rows; ++i) {
      if (Status s = AddRequestParams(batch[i], params); !s) return fail(s.error());
    }
    auto result = db.Query(MultiRowInsert("requests", kRequestColumns, kRequestParams, rows) +
                               " ON CONFLICT (request_id) DO NOTHING RETURNING request_id",
                           params);
    if (!result) return fail(result.error());
    std::unordered_multiset<std::string_view> returned;
    for (int r = 0; r < result->rows(); ++r) returned.insert(result->Text(r, 0));
    // The first record of a request id is the row written (VALUES order), as SQLite keeps it.
    for (size_t i = start; i < start + rows; ++i) {
      if (auto it = returned.find(batch[i].request_id); it != returned.end()) {
        returned.erase(it);
        inserted.push_back(&batch[i]);
      } else {
        ++*duplicates;
        *duplicate_error = "duplicate request_id " + batch[i].request_id;
      }
    }
  }
  std::map<std::string_view, ThreadDelta> threads;
  std::map<MinuteKey, MinuteDelta> minutes;
  for (const RequestRecord* record : inserted) {
    if (!record->thread_id.empty()) threads[record->thread_id].Add(*record);
    minutes[MinuteKeyOf(*record)].Add(*record);
  }
  // Aggregates, one multi-row upsert per table (keys are unique within each: ON CONFLICT DO
  // UPDATE may touch a row once per statement), in key order so that replicas writing the same
  // threads lock them in the same order.
  std::vector<std::pair<std::string_view, const ThreadDelta*>> thread_rows;
  for (const auto& [id, delta] : threads) thread_rows.emplace_back(id, &delta);
  for (size_t start = 0; start < thread_rows.size(); start += kRowsPerStatement) {
    const size_t rows = std::min(kRowsPerStatement, thread_rows.size() - start);
    PgParams p, models, prompts;
    size_t model_rows = 0, prompt_rows = 0;
    for (size_t i = start; i < start + rows; ++i) {
      const auto& [id, d] = thread_rows[i];
      p.Text(id);
      for (int64_t v : {d->turns, d->first_seen_us, d->last_seen_us, d->cache_read, d->cache_write,
                        d->uncached, d->output, d->cost_total, d->known_input_read,
                        d->known_input_total, d->cache_write_5m, d->cache_write_1h,
                        d->cache_write_no_ttl, d->reasoning, d->cost_saved, d->cost_missed}) {
        p.Int(v);
      }
      for (const std::string& model : d->models) {
        models.Text(id);
        models.Text(model);
        ++model_rows;
      }
      if (d->last_prompt != nullptr) {
        std::string fingerprint;
        try {
          fingerprint = ToJsonText(*d->last_prompt->prompt_fingerprint);
        } catch (const std::exception& e) {
          return fail(Error{ErrorCode::kInternal, std::string("fingerprint: ") + e.what()});
        }
        prompts.Text(id);
        prompts.Text(d->last_prompt->request_id);
        prompts.Text(fingerprint);
        ++prompt_rows;
      }
    }
    auto upserted = db.Query(
        MultiRowInsert("threads", kThreadColumns, kThreadParams, rows) + std::string(kThreadConflict),
        p);
    if (!upserted) return fail(upserted.error());
    if (model_rows > 0) {
      auto added = db.Query(MultiRowInsert("thread_models", "thread_id, model", 2, model_rows) +
                                " ON CONFLICT DO NOTHING",
                            models);
      if (!added) return fail(added.error());
    }
    if (prompt_rows > 0) {
      auto saved = db.Query(
          MultiRowInsert("thread_last_prompt", "thread_id, request_id, fingerprint", 3,
                         prompt_rows) +
              " ON CONFLICT (thread_id) DO UPDATE SET request_id = excluded.request_id, "
              "fingerprint = excluded.fingerprint",
          prompts);
      if (!saved) return fail(saved.error());
    }
  }
  std::vector<std::pair<const MinuteKey*, const MinuteDelta*>> minute_rows;
  for (const auto& [key, delta] : minutes) minute_rows.emplace_back(&key, &delta);
  for (size_t start = 0; start < minute_rows.size(); start += kRowsPerStatement) {
    const size_t rows = std::min(kRowsPerStatement, minute_rows.size() - start);
    PgParams p;
    for (size_t i = start; i < start + rows; ++i) {
      const auto& [key, d] = minute_rows[i];
      p.Int(std::get<0>(*key));
      p.Text(std::get<1>(*key));
      p.Text(std::get<2>(*key));
      for (int64_t v : {d->requests, d->errors, d->cache_read, d->cache_write, d->uncached,
                        d->output, d->cost_total, d->cost_saved, d->cost_missed,
                        d->known_input_read, d->known_input_total, d->latency_us_sum,
                        d->latency_count}) {
        p.Int(v);
      }
    }
    auto upserted = db.Query(
        MultiRowInsert("usage_by_minute", kMinuteColumns, kMinuteParams, rows) +
            std::string(kMinuteConflict),
        p);
    if (!upserted) return fail(upserted.error());
  }
  if (Status s = db.Exec("COMMIT"); !s) return fail(s.error());
  return {};
}

PostgresTelemetryStore::Reader::~Reader() {
  if (conn_ == nullptr || conn_->Broken()) return;  // a lost connection is not pooled
  MutexLock lock(&store_->reader_mu_);
  if (!store_->readers_closed_ && store_->idle_readers_.size() < store_->max_idle_readers_) {
    store_->idle_readers_.push_back(std::move(conn_));
  }
}

Result<std::unique_ptr<PostgresTelemetryStore::Reader>> PostgresTelemetryStore::AcquireReader()
    const {
  {
    MutexLock lock(&reader_mu_);
    if (readers_closed_) return MakeError(ErrorCode::kUnavailable, "telemetry store is closed");
    if (!idle_readers_.empty()) {
      std::unique_ptr<PgConnection> conn = std::move(idle_readers_.back());
      idle_readers_.pop_back();
      return std::make_unique<Reader>(this, std::move(conn));
    }
  }
  auto conn = PgConnection::Connect(conninfo_);
  if (!conn) return std::unexpected(conn.error());
  return std::make_unique<Reader>(this, std::move(*conn));
}

Result<PgRows> PostgresTelemetryStore::Read(std::string_view sql, const PgParams& params) const {
  // A pooled connection may have been cut while idle (the server restarted): the query is tried
  // once more on a fresh one.
  for (int attempt = 0;; ++attempt) {
    auto reader = AcquireReader();
    if (!reader) return std::unexpected(reader.error());
    auto result = (*reader)->conn().Query(sql, params);
    if (result) return PgRows(std::move(*result));
    if (attempt > 0 || !(*reader)->conn().Broken()) return std::unexpected(result.error());
  }
}

}  // namespace internal

Result<std::unique_ptr<TelemetryStore>> TelemetryStore::OpenPostgres(const std::string& conninfo,
                                                                     const Clock& clock,
                                                                     StoreOptions options) {
  if (options.journal && options.journal_path.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the PostgreSQL store's crash journal needs a local path (journal_path)");
  }
  auto conn = internal::PgConnection::Connect(conninfo);
  if (!conn) return std::unexpected(conn.error());
  if (Status s = internal::ApplyPostgresMigrations(**conn, options.extra_migrations, clock); !s) {
    return std::unexpected(s.error());
  }
  auto store = std::make_unique<internal::PostgresTelemetryStore>(conninfo, clock, options,
                                                                  std::move(*conn));
  if (Status s = store->Start(options); !s) return std::unexpected(s.error());
  return std::unique_ptr<TelemetryStore>(std::move(store));
}

}  // namespace kvgate::telemetry
