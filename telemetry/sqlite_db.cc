#include "telemetry/sqlite_db.h"

#include <memory>
#include <sqlite3.h>

namespace kvgate::telemetry::internal {

Stmt::~Stmt() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

void Stmt::BindText(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}
void Stmt::BindTextNoCopy(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_STATIC, SQLITE_UTF8);
}
void Stmt::BindInt(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
void Stmt::BindOptInt(int index, std::optional<int64_t> value) {
  if (value.has_value()) {
    sqlite3_bind_int64(stmt_, index, *value);
  } else {
    sqlite3_bind_null(stmt_, index);
  }
}
void Stmt::BindDouble(int index, double value) { sqlite3_bind_double(stmt_, index, value); }

void Stmt::BindNull(int index) { sqlite3_bind_null(stmt_, index); }

Result<bool> Stmt::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  if (failure_code_ != nullptr) *failure_code_ = sqlite3_extended_errcode(sqlite3_db_handle(stmt_));
  return MakeError(ErrorCode::kUnavailable,
                   std::string("sqlite: ") + sqlite3_errmsg(sqlite3_db_handle(stmt_)));
}

bool Stmt::IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
int64_t Stmt::Int(int column) const { return sqlite3_column_int64(stmt_, column); }
std::optional<int64_t> Stmt::OptInt(int column) const {
  if (IsNull(column)) return std::nullopt;
  return sqlite3_column_int64(stmt_, column);
}
std::string Stmt::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}
double Stmt::Real(int column) const { return sqlite3_column_double(stmt_, column); }

Result<std::unique_ptr<Db>> Db::Open(const std::string& path, bool read_only) {
  sqlite3* raw = nullptr;
  const int flags = (read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) |
                    SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close(raw);
    return MakeError(ErrorCode::kUnavailable, "sqlite open " + path + ": " + message);
  }
  std::unique_ptr<Db> db(new Db(raw));
  sqlite3_busy_timeout(raw, kDefaultBusyTimeoutMs);
  sqlite3_extended_result_codes(raw, 1);
  if (read_only) {
    if (Status s = db->Exec("PRAGMA query_only = ON"); !s) return std::unexpected(s.error());
  }
  return db;
}

Db::~Db() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

Status Db::Exec(std::string_view sql) {
  char* error = nullptr;
  const std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    last_failure_code_ = sqlite3_extended_errcode(db_);
    std::string message = error != nullptr ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    return MakeError(ErrorCode::kUnavailable, "sqlite: " + message);
  }
  return {};
}

Result<std::unique_ptr<Stmt>> Db::Prepare(std::string_view sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                           &stmt, nullptr) != SQLITE_OK) {
      last_failure_code_ = sqlite3_extended_errcode(db_);
      return MakeError(ErrorCode::kInternal, "sqlite prepare: " + std::string(sqlite3_errmsg(db_)));
    }
    it = cache_.emplace(std::string(sql), stmt).first;
  }
  return std::make_unique<Stmt>(it->second, &last_failure_code_);
}

int64_t Db::Changes() const { return sqlite3_changes64(db_); }

std::string Db::LastError() const { return sqlite3_errmsg(db_); }

bool Db::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

void Db::SetBusyTimeout(int milliseconds) { sqlite3_busy_timeout(db_, milliseconds); }

bool IsOutage(int sqlite_result_code) {
  switch (sqlite_result_code & 0xff) {
    case SQLITE_FULL:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
      return true;
    default:
      return false;
  }
}

}  // namespace kvgate::telemetry::internal
