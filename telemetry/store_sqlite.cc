// The SQLite store: opening and the batched transactions the shared writer (store_writer.h) runs.
#include <algorithm>
#include <cstdio>
#include <chrono>
#include <thread>
#include <tuple>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/json_writer.h"
#include "telemetry/diagnosis.h"
#include "telemetry/store.h"
#include "telemetry/store_batch.h"
#include "telemetry/store_sqlite.h"

namespace kvgate::telemetry {
namespace internal {
namespace {

// Transaction attempts per batch before its records are given up (an error that is not an
// outage: a schema that does not match, a corrupt file). Outages are retried by the writer.
constexpr int kBatchAttempts = 3;

constexpr const char* kInsertRequest = R"sql(
INSERT INTO requests (
  request_id, thread_id, created_at_us, endpoint, model, provider, provider_type, upstream_model,
  api_key_id, stream, status, http_status, upstream_status, latency_us, ttft_us,
  cache_read, cache_write_5m, cache_write_1h, uncached, output_tokens, reasoning_tokens,
  reported_input, usage_clamped, usage_raw,
  cost_cache_read, cost_cache_write, cost_uncached, cost_output, cost_total, cost_saved,
  cost_complete, cost_priced, error, upstream_request_id, finish_reason, cache_diagnosis,
  response_id, cache_write_no_ttl, cost_missed, target, key_index, system_fingerprint, route,
  attempts, cache_read_offload, cache_helper, provider_cache_miss_reason, cache_read_offload_tier,
  usage_estimated, thread_source, thread_parent, purpose, keep_warm_saved)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,
        ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36, ?37, ?38,
        ?39, ?40, ?41, ?42, ?43, ?44, ?45, ?46, ?47, ?48, ?49, ?50, ?51, ?52, ?53)
ON CONFLICT (request_id) DO NOTHING)sql";

// A batch's turns of one thread folded into its aggregates. Token sums count known values only;
// the hit ratio's numerator and denominator only turns whose total input is known.
constexpr const char* kUpsertThread = R"sql(
INSERT INTO threads (thread_id, turns, first_seen_us, last_seen_us, cache_read, cache_write,
                     uncached, output_tokens, cost_total, known_input_read, known_input_total,
                     cache_write_5m, cache_write_1h, cache_write_no_ttl, reasoning_tokens,
                     cost_saved, cost_missed)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
ON CONFLICT (thread_id) DO UPDATE SET
  turns = turns + excluded.turns,
  first_seen_us = min(first_seen_us, excluded.first_seen_us),
  last_seen_us = max(last_seen_us, excluded.last_seen_us),
  cache_read = cache_read + excluded.cache_read,
  cache_write = cache_write + excluded.cache_write,
  uncached = uncached + excluded.uncached,
  output_tokens = output_tokens + excluded.output_tokens,
  cost_total = cost_total + excluded.cost_total,
  known_input_read = known_input_read + excluded.known_input_read,
  known_input_total = known_input_total + excluded.known_input_total,
  cache_write_5m = cache_write_5m + excluded.cache_write_5m,
  cache_write_1h = cache_write_1h + excluded.cache_write_1h,
  cache_write_no_ttl = cache_write_no_ttl + excluded.cache_write_no_ttl,
  reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
  cost_saved = cost_saved + excluded.cost_saved,
  cost_missed = cost_missed + excluded.cost_missed)sql";

// A batch's requests of one minute, model and provider folded into the overview's sums (see the
// dashboard migration in store_schema.cc).
constexpr const char* kUpsertMinute = R"sql(
INSERT INTO usage_by_minute (minute_us, model, provider, requests, errors, cache_read, cache_write,
                             uncached, output_tokens, cost_total, cost_saved, cost_missed,
                             known_input_read, known_input_total, latency_us_sum, latency_count)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
ON CONFLICT (minute_us, model, provider) DO UPDATE SET
  requests = requests + excluded.requests,
  errors = errors + excluded.errors,
  cache_read = cache_read + excluded.cache_read,
  cache_write = cache_write + excluded.cache_write,
  uncached = uncached + excluded.uncached,
  output_tokens = output_tokens + excluded.output_tokens,
  cost_total = cost_total + excluded.cost_total,
  cost_saved = cost_saved + excluded.cost_saved,
  cost_missed = cost_missed + excluded.cost_missed,
  known_input_read = known_input_read + excluded.known_input_read,
  known_input_total = known_input_total + excluded.known_input_total,
  latency_us_sum = latency_us_sum + excluded.latency_us_sum,
  latency_count = latency_count + excluded.latency_count)sql";

// A thread's latest diagnosable turn: its request and prompt fingerprint (see RequestRecord).
constexpr const char* kUpsertThreadLastPrompt = R"sql(
INSERT INTO thread_last_prompt (thread_id, request_id, fingerprint) VALUES (?1, ?2, ?3)
ON CONFLICT (thread_id) DO UPDATE SET request_id = excluded.request_id,
                                      fingerprint = excluded.fingerprint)sql";

constexpr const char* kInsertThreadModel =
    "INSERT OR IGNORE INTO thread_models (thread_id, model) VALUES (?1, ?2)";

// JSON to text without throwing on invalid UTF-8 (it is replaced), written by hand: the writer
// stores a diagnosis and an attempts list per request.
std::string DumpJson(const nlohmann::json& value) { return WriteJson(value); }

}  // namespace

SqliteTelemetryStore::SqliteTelemetryStore(std::string path, const Clock& clock,
                                           const StoreOptions& options,
                                           std::unique_ptr<Db> writer_db)
    : path_(std::move(path)),
      max_idle_readers_(static_cast<size_t>(std::max(0, options.max_idle_readers))),
      writer_db_(std::move(writer_db)),
      writer_(*this, clock, options) {}

SqliteTelemetryStore::~SqliteTelemetryStore() { Close(); }

Status SqliteTelemetryStore::Start(const StoreOptions& options) {
  std::string journal_base;
  if (options.journal) {
    journal_base = options.journal_path.empty() ? path_ + "-journal" : options.journal_path;
  }
  return writer_.Start(journal_base, options.journal_segment_bytes);
}

void SqliteTelemetryStore::Record(RequestRecord record) {
  writer_.Record(std::move(record), std::nullopt);
}

std::optional<TelemetryStore::JournalMark> SqliteTelemetryStore::Checkpoint(
    const RequestRecord& record) {
  return writer_.Checkpoint(record);
}

void SqliteTelemetryStore::Record(RequestRecord record, std::optional<JournalMark> checkpoint) {
  writer_.Record(std::move(record), checkpoint);
}

Status SqliteTelemetryStore::Flush() { return writer_.Flush(); }

void SqliteTelemetryStore::Close() {
  writer_.Close();  // the writer drains the queue before it exits
  writer_db_.reset();
  MutexLock lock(&reader_mu_);
  readers_closed_ = true;
  idle_readers_.clear();
}

TelemetryStore::Stats SqliteTelemetryStore::stats() const { return writer_.stats(); }

BatchSink::Outcome SqliteTelemetryStore::WriteBatch(std::deque<RequestRecord>& batch) {
  Outcome outcome;
  for (int attempt = 0; attempt < kBatchAttempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50 << (2 * attempt)));
    writer_db_->ClearLastFailure();
    // The transaction could not be completed: with an outage's error, the records are kept for
    // the writer to offer again (not counted as lost); with any other, this attempt is over.
    auto lost = [&](const Error& e) {
      outcome.error = e.message;
      const int code = writer_db_->LastFailureCode();  // before a failing ROLLBACK replaces it
      if (writer_db_->InTransaction()) (void)writer_db_->Exec("ROLLBACK");
      return IsOutage(code);
    };
    if (Status s = writer_db_->Exec("BEGIN IMMEDIATE"); !s) {
      if (lost(s.error())) return Outcome{.unavailable = true, .error = outcome.error};
      continue;
    }
    // A record that violates a constraint (a duplicate request_id) fails alone; the transaction
    // survives unless SQLite rolled it back itself (I/O errors), which the retry handles.
    // Thread aggregates are summed per thread over the batch and written once per thread.
    uint64_t rejected = 0;
    std::optional<Error> transaction_error;
    std::map<std::string_view, ThreadDelta> threads;
    std::map<MinuteKey, MinuteDelta> minutes;
    for (const RequestRecord& record : batch) {
      if (Status s = InsertRequest(record); !s) {
        if (!writer_db_->InTransaction() || IsOutage(writer_db_->LastFailureCode())) {
          transaction_error = s.error();
          break;
        }
        outcome.error = s.error().message;
        ++rejected;
        continue;
      }
      if (!record.thread_id.empty()) threads[record.thread_id].Add(record);
      minutes[MinuteKeyOf(record)].Add(record);
    }
    // An aggregate that cannot be written fails the batch.
    for (const auto& [thread_id, delta] : threads) {
      if (transaction_error) break;
      if (Status s = UpsertThread(thread_id, delta); !s) transaction_error = s.error();
    }
    for (const auto& [key, delta] : minutes) {
      if (transaction_error) break;
      if (Status s = UpsertMinute(key, delta); !s) transaction_error = s.error();
    }
    if (!transaction_error) {
      if (Status s = writer_db_->Exec("COMMIT"); !s) transaction_error = s.error();
    }
    if (transaction_error) {
      if (lost(*transaction_error)) return Outcome{.unavailable = true, .error = outcome.error};
      continue;
    }
    outcome.failed = rejected;
    return outcome;
  }
  outcome.failed = batch.size();
  return outcome;
}

Status SqliteTelemetryStore::InsertRequest(const RequestRecord& r) {
  // No SAVEPOINT per record: a sub-journal costs ~20 page writes per record. A duplicate
  // request_id is detected by ON CONFLICT DO NOTHING, and its record is left out of the thread
  // aggregates; any other failure is an I/O-level error that loses the transaction, which
  // WriteBatch retries or reports as an outage.
  auto fail = [](Error e) -> Status { return std::unexpected(std::move(e)); };
  std::string diagnosis, attempts;
  const std::string& route = r.route;  // JSON text already
  try {
    if (!r.cache_diagnosis.is_null()) diagnosis = DumpJson(r.cache_diagnosis);
    if (r.attempts.is_array() && !r.attempts.empty()) attempts = DumpJson(r.attempts);
  } catch (const std::exception& e) {
    return fail(Error{ErrorCode::kInternal, std::string("json: ") + e.what()});
  }
  // Declared after `diagnosis`, so it is reset and unbound before the bound strings die.
  auto stmt = writer_db_->Prepare(kInsertRequest);
  if (!stmt) return fail(stmt.error());
  Stmt& s = **stmt;
  const Usage& u = r.usage;
  const Cost& c = r.cost;
  s.BindTextNoCopy(1, r.request_id);
  s.BindTextNoCopy(2, r.thread_id);
  s.BindInt(3, r.created_at_us);
  s.BindTextNoCopy(4, r.endpoint);
  s.BindTextNoCopy(5, r.model);
  s.BindTextNoCopy(6, r.provider);
  s.BindTextNoCopy(7, r.provider_type);
  s.BindTextNoCopy(8, r.upstream_model);
  s.BindTextNoCopy(9, r.api_key_id);
  s.BindInt(10, r.stream ? 1 : 0);
  s.BindTextNoCopy(11, r.status);
  s.BindInt(12, r.http_status);
  s.BindInt(13, r.upstream_status);
  s.BindOptInt(14, r.latency_us);
  s.BindOptInt(15, r.ttft_us);
  s.BindOptInt(16, u.cache_read);
  s.BindOptInt(17, u.cache_write_5m);
  s.BindOptInt(18, u.cache_write_1h);
  s.BindOptInt(19, u.uncached);
  s.BindOptInt(20, u.output);
  s.BindOptInt(21, u.reasoning);
  s.BindOptInt(22, u.reported_input);
  s.BindInt(23, u.clamped ? 1 : 0);
  if (u.raw.empty()) {
    s.BindNull(24);
  } else {
    s.BindTextNoCopy(24, u.raw);
  }
  s.BindInt(25, c.cache_read);
  s.BindInt(26, c.cache_write);
  s.BindInt(27, c.uncached);
  s.BindInt(28, c.output);
  s.BindInt(29, c.total);
  s.BindInt(30, c.saved);
  s.BindInt(31, c.complete ? 1 : 0);
  s.BindInt(32, c.priced ? 1 : 0);
  s.BindTextNoCopy(33, r.error);
  s.BindTextNoCopy(34, r.upstream_request_id);
  s.BindTextNoCopy(35, r.finish_reason);
  if (r.cache_diagnosis.is_null()) {
    s.BindNull(36);
  } else {
    s.BindTextNoCopy(36, diagnosis);
  }
  s.BindTextNoCopy(37, r.response_id);
  s.BindOptInt(38, u.cache_write_no_ttl);
  s.BindInt(39, c.missed);
  s.BindTextNoCopy(40, r.target);
  s.BindInt(41, r.key_index);
  s.BindTextNoCopy(42, r.system_fingerprint);
  if (route.empty()) {
    s.BindNull(43);
  } else {
    s.BindTextNoCopy(43, route);
  }
  if (attempts.empty()) {
    s.BindNull(44);
  } else {
    s.BindTextNoCopy(44, attempts);
  }
  s.BindOptInt(45, u.cache_read_offload);
  s.BindTextNoCopy(46, r.cache_helper);
  s.BindTextNoCopy(47, r.provider_cache_miss_reason);
  s.BindTextNoCopy(48, u.cache_read_offload_tier);
  s.BindInt(49, u.estimated ? 1 : 0);
  s.BindTextNoCopy(50, r.thread_source);
  s.BindTextNoCopy(51, r.thread_parent);
  s.BindTextNoCopy(52, r.purpose);
  s.BindInt(53, r.keep_warm_saved);
  if (Result<bool> step = s.Step(); !step) return fail(step.error());
  if (writer_db_->Changes() == 0) {
    return fail(Error{ErrorCode::kInvalidArgument, "duplicate request_id " + r.request_id});
  }
  return {};
}

Status SqliteTelemetryStore::UpsertMinute(const MinuteKey& key, const MinuteDelta& d) {
  auto stmt = writer_db_->Prepare(kUpsertMinute);
  if (!stmt) return std::unexpected(stmt.error());
  Stmt& s = **stmt;
  s.BindInt(1, std::get<0>(key));
  s.BindText(2, std::get<1>(key));
  s.BindText(3, std::get<2>(key));
  int column = 4;
  for (int64_t v : {d.requests, d.errors, d.cache_read, d.cache_write, d.uncached, d.output,
                    d.cost_total, d.cost_saved, d.cost_missed, d.known_input_read,
                    d.known_input_total, d.latency_us_sum, d.latency_count}) {
    s.BindInt(column++, v);
  }
  if (Result<bool> step = s.Step(); !step) return std::unexpected(step.error());
  return {};
}

Status SqliteTelemetryStore::UpsertThread(std::string_view thread_id, const ThreadDelta& d) {
  auto fail = [](Error e) -> Status { return std::unexpected(std::move(e)); };
  auto stmt = writer_db_->Prepare(kUpsertThread);
  if (!stmt) return fail(stmt.error());
  Stmt& s = **stmt;
  s.BindText(1, thread_id);
  s.BindInt(2, d.turns);
  s.BindInt(3, d.first_seen_us);
  s.BindInt(4, d.last_seen_us);
  s.BindInt(5, d.cache_read);
  s.BindInt(6, d.cache_write);
  s.BindInt(7, d.uncached);
  s.BindInt(8, d.output);
  s.BindInt(9, d.cost_total);
  s.BindInt(10, d.known_input_read);
  s.BindInt(11, d.known_input_total);
  s.BindInt(12, d.cache_write_5m);
  s.BindInt(13, d.cache_write_1h);
  s.BindInt(14, d.cache_write_no_ttl);
  s.BindInt(15, d.reasoning);
  s.BindInt(16, d.cost_saved);
  s.BindInt(17, d.cost_missed);
  if (Result<bool> step = s.Step(); !step) return fail(step.error());
  for (const std::string& model : d.models) {
    auto model_stmt = writer_db_->Prepare(kInsertThreadModel);
    if (!model_stmt) return fail(model_stmt.error());
    (*model_stmt)->BindText(1, thread_id);
    (*model_stmt)->BindText(2, model);
    if (Result<bool> step = (*model_stmt)->Step(); !step) return fail(step.error());
  }
  if (d.last_prompt != nullptr) {
    std::string fingerprint;
    try {
      fingerprint = ToJsonText(*d.last_prompt->prompt_fingerprint);
    } catch (const std::exception& e) {
      return fail(Error{ErrorCode::kInternal, std::string("fingerprint: ") + e.what()});
    }
    auto prompt_stmt = writer_db_->Prepare(kUpsertThreadLastPrompt);
    if (!prompt_stmt) return fail(prompt_stmt.error());
    (*prompt_stmt)->BindText(1, thread_id);
    (*prompt_stmt)->BindText(2, d.last_prompt->request_id);
    (*prompt_stmt)->BindText(3, fingerprint);
    if (Result<bool> step = (*prompt_stmt)->Step(); !step) return fail(step.error());
  }
  return {};
}

SqliteTelemetryStore::Reader::~Reader() {
  MutexLock lock(&store_->reader_mu_);
  if (!store_->readers_closed_ && store_->idle_readers_.size() < store_->max_idle_readers_) {
    store_->idle_readers_.push_back(std::move(db_));
  }
}

Result<std::unique_ptr<SqliteTelemetryStore::Reader>> SqliteTelemetryStore::AcquireReader() const {
  {
    MutexLock lock(&reader_mu_);
    if (readers_closed_) return MakeError(ErrorCode::kUnavailable, "telemetry store is closed");
    if (!idle_readers_.empty()) {
      std::unique_ptr<Db> db = std::move(idle_readers_.back());
      idle_readers_.pop_back();
      return std::make_unique<Reader>(this, std::move(db));
    }
  }
  Result<std::unique_ptr<Db>> db = Db::Open(path_, /*read_only=*/true);
  if (!db) return std::unexpected(db.error());
  return std::make_unique<Reader>(this, std::move(*db));
}

}  // namespace internal

Result<std::unique_ptr<TelemetryStore>> TelemetryStore::Open(const std::string& path, const Clock& clock) {
  return Open(path, clock, StoreOptions{});
}

Result<std::unique_ptr<TelemetryStore>> TelemetryStore::Open(const std::string& path, const Clock& clock,
                                                             StoreOptions options) {
  if (path.empty() || path == ":memory:" || path.starts_with("file::memory:")) {
    return MakeError(ErrorCode::kInvalidArgument, "the telemetry store needs a file path");
  }
  Result<std::unique_ptr<internal::Db>> db = internal::Db::Open(path, /*read_only=*/false);
  if (!db) return std::unexpected(db.error());
  (*db)->SetBusyTimeout(static_cast<int>(
      std::clamp<int64_t>(options.busy_timeout.count(), 0, std::numeric_limits<int>::max())));
  // WAL lets readers run while the writer commits; NORMAL sync is durable across process crashes
  // (an OS crash may lose the last transactions, never corrupt the file).
  // A 32 MiB page cache and an in-memory temp store keep big batches from spilling to disk mid-
  // transaction.
  if (Status s = (*db)->Exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; "
                             "PRAGMA cache_size = -32768; PRAGMA temp_store = MEMORY;");
      !s) {
    return std::unexpected(s.error());
  }
  if (Status s = internal::ApplyMigrations(**db, options.extra_migrations, clock); !s) {
    return std::unexpected(s.error());
  }
  auto store = std::make_unique<internal::SqliteTelemetryStore>(path, clock, options,
                                                                std::move(*db));
  if (Status s = store->Start(options); !s) return std::unexpected(s.error());
  return std::unique_ptr<TelemetryStore>(std::move(store));
}

}  // namespace kvgate::telemetry
