// Internal to the telemetry module: a thin RAII layer over one libpq connection (PGconn) and its
// results (PGresult). Every value travels as a parameter of the extended query protocol, never
// inside the SQL text. Values go and come back in text format.
//
// Not thread-safe: a PgConnection is used by one thread at a time (the writer thread owns one;
// read connections are checked out of a pool).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

struct pg_conn;
struct pg_result;

namespace kvgate::telemetry::internal {

// The parameters of one statement, $1 ... $n in the order added, each with its type.
class PgParams {
 public:
  void Int(int64_t value);
  void OptInt(std::optional<int64_t> value);
  // Text. PostgreSQL's text cannot hold a NUL byte, which is valid UTF-8: it is stored as
  // U+FFFD, the replacement MakeTextValid uses for bytes that are not UTF-8.
  void Text(std::string_view value);
  // Text, or NULL when empty.
  void TextOrNull(std::string_view value);
  void Double(double value);  // float8, round-trip exact
  size_t size() const { return values_.size(); }

 private:
  friend class PgConnection;
  std::vector<std::string> values_;
  std::vector<bool> nulls_;
  std::vector<unsigned> types_;  // type OIDs
};

// A statement's result: rows of text values.
class PgResult {
 public:
  explicit PgResult(pg_result* result) : result_(result) {}
  PgResult(PgResult&& other) noexcept : result_(other.result_) { other.result_ = nullptr; }
  PgResult& operator=(PgResult&& other) noexcept;
  PgResult(const PgResult&) = delete;
  PgResult& operator=(const PgResult&) = delete;
  ~PgResult();

  int rows() const;
  int columns() const;
  bool IsNull(int row, int column) const;
  std::string_view Text(int row, int column) const;  // "" for NULL
  int64_t Int(int row, int column) const;           // 0 for NULL
  double Real(int row, int column) const;           // 0 for NULL

 private:
  pg_result* result_;
};

class PgConnection {
 public:
  // Connects with `conninfo` (a "postgresql://" URI or "key=value" pairs); a connect_timeout of
  // 5 s unless conninfo names one. Errors: kInvalidArgument for conninfo that does not parse,
  // kUnavailable when the server cannot be reached or refuses the login.
  static Result<std::unique_ptr<PgConnection>> Connect(const std::string& conninfo);
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;
  ~PgConnection();

  // Runs SQL without parameters or rows (may hold several statements).
  Status Exec(std::string_view sql);
  // Runs one statement with parameters and returns its rows (none for a command).
  Result<PgResult> Query(std::string_view sql, const PgParams& params);
  // The connection is lost (the server went away): it must be replaced, not reused.
  bool Broken() const;

 private:
  explicit PgConnection(pg_conn* conn) : conn_(conn) {}
  // The error of a failed call: the server's message (with its SQLSTATE) or libpq's.
  Error ErrorOf(pg_result* result, std::string_view what) const;

  pg_conn* conn_;
};

}  // namespace kvgate::telemetry::internal
