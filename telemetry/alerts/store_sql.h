// Internal to the alert store: one database connection as SqlAlertStore speaks to it. The
// statements are written once, with PostgreSQL's $1 ... $n parameters (SQLite reads them as its
// numbered ?NNN), and rows come back as text, so both databases run the same SQL.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"

namespace kvgate::telemetry::alerts::internal {

class AlertSql {
 public:
  using Value = std::variant<int64_t, std::string>;
  using Row = std::vector<std::string>;  // one text per column; NULL reads as ""

  virtual ~AlertSql() = default;
  // One statement; its rows (none for a command without RETURNING).
  virtual Result<std::vector<Row>> Query(const std::string& sql,
                                         const std::vector<Value>& values) = 0;
  virtual Status Begin() = 0;  // a write transaction
  virtual Status Commit() = 0;
  virtual void Rollback() = 0;
  // The column that orders a table's rows by insertion: SQLite's rowid, PostgreSQL's seq.
  virtual std::string_view InsertionOrder() const = 0;
};

}  // namespace kvgate::telemetry::alerts::internal
