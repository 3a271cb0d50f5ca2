// Internal to the telemetry module: one database connection as the small stores (alerts, keys)
// speak to it, on SQLite or PostgreSQL alike. Statements are written once, with PostgreSQL's
// $1 ... $n parameters (SQLite reads them as its numbered ?NNN), and rows come back as text, so
// both databases run the same SQL. (The telemetry store itself has its own, faster paths.)
//
// Not thread-safe: its owner serializes calls (a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"

namespace kvgate::telemetry::internal {

class SqlConnection {
 public:
  using Value = std::variant<int64_t, std::string, std::nullptr_t>;
  using Row = std::vector<std::string>;  // one text per column; NULL reads as ""

  virtual ~SqlConnection() = default;
  // One statement; its rows (none for a command without RETURNING).
  virtual Result<std::vector<Row>> Query(const std::string& sql,
                                         const std::vector<Value>& values) = 0;
  // Statements without parameters or rows (several, separated by semicolons).
  virtual Status Exec(const std::string& sql) = 0;
  virtual Status Begin() = 0;  // a write transaction
  virtual Status Commit() = 0;
  virtual void Rollback() = 0;
  // The column that orders a table's rows by insertion: SQLite's rowid, PostgreSQL's seq.
  virtual std::string_view InsertionOrder() const = 0;
  virtual bool postgres() const = 0;
};

// A SQLite file (created if absent): WAL mode, busy_timeout 5 s, foreign keys on. It may be the
// telemetry store's own file, through this separate connection.
Result<std::unique_ptr<SqlConnection>> ConnectSqlite(const std::string& path);
// A PostgreSQL database; a connection lost between calls is replaced at the next one.
// kUnavailable when the server cannot be reached now.
Result<std::unique_ptr<SqlConnection>> ConnectPostgres(const std::string& conninfo);

// "123" -> 123; 0 for text that is not a number (an empty NULL).
int64_t SqlInt(const std::string& text);

}  // namespace kvgate::telemetry::internal
