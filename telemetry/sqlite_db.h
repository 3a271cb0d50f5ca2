// Internal to the telemetry module: a thin RAII layer over one sqlite3 connection with a cache of
// prepared statements. Not thread-safe: a Db is used by one thread at a time (the writer thread
// owns its Db; read connections are checked out of a pool).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kvgate::telemetry::internal {

// A prepared statement borrowed from a Db's cache; reset and unbound when the borrow ends.
class Stmt {
 public:
  // `failure_code`, when given, receives the result code of a failed Step() (Db::LastFailureCode).
  explicit Stmt(sqlite3_stmt* stmt, int* failure_code = nullptr)
      : stmt_(stmt), failure_code_(failure_code) {}
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();

  // Binders take 1-based parameter indexes. Text is copied (SQLITE_TRANSIENT).
  void BindText(int index, std::string_view text);
  // Binds text without copying it (SQLITE_STATIC), for the writer's hot insert.
  // REQUIRES: `text` outlives this Stmt (whose destructor resets and unbinds it).
  void BindTextNoCopy(int index, std::string_view text);
  void BindInt(int index, int64_t value);
  void BindOptInt(int index, std::optional<int64_t> value);
  void BindNull(int index);
  void BindDouble(int index, double value);

  // Steps once: true when a row is available, false when done; errors as kUnavailable.
  Result<bool> Step();

  bool IsNull(int column) const;
  int64_t Int(int column) const;
  std::optional<int64_t> OptInt(int column) const;
  std::string Text(int column) const;  // "" for NULL
  double Real(int column) const;

  sqlite3_stmt* raw() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
  int* failure_code_;
};

class Db {
 public:
  static constexpr int kDefaultBusyTimeoutMs = 5000;
  // Opens `path`; read_only connections are query_only. Sets busy_timeout
  // (kDefaultBusyTimeoutMs).
  static Result<std::unique_ptr<Db>> Open(const std::string& path, bool read_only);
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  // Runs SQL with no results (may hold several statements).
  Status Exec(std::string_view sql);
  // A cached prepared statement for `sql` (prepared on first use). Borrow one at a time per SQL.
  Result<std::unique_ptr<Stmt>> Prepare(std::string_view sql);
  // Rows changed by the last INSERT/UPDATE/DELETE on this connection.
  int64_t Changes() const;
  // The connection's last error message.
  std::string LastError() const;
  // True while inside a transaction (SQLite may roll back on its own after I/O errors).
  bool InTransaction() const;
  // The extended result code (SQLITE_FULL, SQLITE_BUSY_SNAPSHOT, ...) of the latest Exec(),
  // Prepare() or borrowed Stmt::Step() that failed on this connection; 0 (SQLITE_OK) when none
  // has. Kept until ClearLastFailure(), so that it survives the ROLLBACK that follows an error.
  int LastFailureCode() const { return last_failure_code_; }
  void ClearLastFailure() { last_failure_code_ = 0; }
  // How long a statement waits for another connection's lock before it fails with SQLITE_BUSY.
  void SetBusyTimeout(int milliseconds);

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  int last_failure_code_ = 0;
  std::map<std::string, sqlite3_stmt*, std::less<>> cache_;
};

// Whether a result code says the database cannot be written *now* rather than that the data is
// wrong: the disk is full (SQLITE_FULL), another connection holds a lock (SQLITE_BUSY,
// SQLITE_LOCKED, SQLITE_PROTOCOL), the disk failed an I/O (SQLITE_IOERR_*), or the file cannot be
// opened or written (SQLITE_CANTOPEN, SQLITE_READONLY: a read-only remount, a file moved away).
// Writing the same records again may succeed once the cause is gone, so they must be kept.
// Extended codes are accepted (compared by their primary code).
bool IsOutage(int sqlite_result_code);

}  // namespace kvgate::telemetry::internal
