#include "telemetry/sql_connection.h"

#include <sqlite3.h>

#include <charconv>

#include "telemetry/pg_conn.h"

namespace kvgate::telemetry::internal {
namespace {

Error SqliteError(sqlite3* db, std::string_view what) {
  return Error{ErrorCode::kUnavailable,
               "sqlite " + std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "no database")};
}

class SqliteConnection final : public SqlConnection {
 public:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  ~SqliteConnection() override { sqlite3_close(db_); }

  Result<std::vector<Row>> Query(const std::string& sql,
                                 const std::vector<Value>& values) override {
    // PostgreSQL's $n is SQLite's ?n: the same numbered parameter.
    std::string text = sql;
    for (char& c : text) {
      if (c == '$') c = '?';
    }
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_, text.c_str(), int(text.size()), &raw, nullptr) != SQLITE_OK) {
      return std::unexpected(SqliteError(db_, "prepare"));
    }
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
    int i = 1;
    for (const Value& v : values) {
      int rc = SQLITE_OK;
      if (const auto* n = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(raw, i, *n);
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        rc = sqlite3_bind_text(raw, i, s->data(), int(s->size()), SQLITE_TRANSIENT);
      } else {
        rc = sqlite3_bind_null(raw, i);
      }
      if (rc != SQLITE_OK) return std::unexpected(SqliteError(db_, "bind"));
      ++i;
    }
    std::vector<Row> rows;
    while (true) {
      const int rc = sqlite3_step(raw);
      if (rc == SQLITE_DONE) return rows;
      if (rc != SQLITE_ROW) return std::unexpected(SqliteError(db_, "step"));
      Row row;
      for (int col = 0; col < sqlite3_column_count(raw); ++col) {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(raw, col));
        row.push_back(p ? std::string(p, size_t(sqlite3_column_bytes(raw, col))) : "");
      }
      rows.push_back(std::move(row));
    }
  }
  Status Exec(const std::string& sql) override {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string message = err ? err : "unknown";
      sqlite3_free(err);
      return MakeError(ErrorCode::kUnavailable, "sqlite: " + message);
    }
    return {};
  }
  Status Begin() override { return Exec("BEGIN IMMEDIATE"); }
  Status Commit() override { return Exec("COMMIT"); }
  void Rollback() override { (void)Exec("ROLLBACK"); }
  std::string_view InsertionOrder() const override { return "rowid"; }
  bool postgres() const override { return false; }

 private:
  sqlite3* db_;
};

class PostgresConnection final : public SqlConnection {
 public:
  PostgresConnection(std::string conninfo, std::unique_ptr<PgConnection> conn)
      : conninfo_(std::move(conninfo)), conn_(std::move(conn)) {}

  Result<std::vector<Row>> Query(const std::string& sql,
                                 const std::vector<Value>& values) override {
    PgParams params;
    for (const Value& v : values) {
      if (const auto* n = std::get_if<int64_t>(&v)) {
        params.Int(*n);
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        params.Text(*s);
      } else {
        params.TextOrNull("");
      }
    }
    // A connection lost between calls is replaced once; one lost inside a transaction is not
    // (the transaction is gone with it, and the caller's Commit reports that).
    for (int attempt = 0;; ++attempt) {
      if (Status s = Connected(); !s) return std::unexpected(s.error());
      auto result = conn_->Query(sql, params);
      if (!result) {
        if (attempt == 0 && !in_transaction_ && conn_->Broken()) continue;
        return std::unexpected(result.error());
      }
      std::vector<Row> rows(size_t(result->rows()));
      for (int r = 0; r < result->rows(); ++r) {
        for (int c = 0; c < result->columns(); ++c) rows[size_t(r)].emplace_back(result->Text(r, c));
      }
      return rows;
    }
  }
  Status Exec(const std::string& sql) override {
    if (Status s = Connected(); !s) return s;
    return conn_->Exec(sql);
  }
  Status Begin() override {
    if (Status s = Exec("BEGIN"); !s) return s;
    in_transaction_ = true;
    return {};
  }
  Status Commit() override {
    in_transaction_ = false;
    return conn_->Exec("COMMIT");
  }
  void Rollback() override {
    in_transaction_ = false;
    if (!conn_->Broken()) (void)conn_->Exec("ROLLBACK");
  }
  std::string_view InsertionOrder() const override { return "seq"; }
  bool postgres() const override { return true; }

 private:
  Status Connected() {
    if (!conn_->Broken()) return {};
    if (in_transaction_) {
      return MakeError(ErrorCode::kUnavailable, "PostgreSQL: connection lost in a transaction");
    }
    auto conn = PgConnection::Connect(conninfo_);
    if (!conn) return std::unexpected(conn.error());
    conn_ = std::move(*conn);
    return {};
  }

  const std::string conninfo_;
  std::unique_ptr<PgConnection> conn_;  // never null
  bool in_transaction_ = false;
};

}  // namespace

Result<std::unique_ptr<SqlConnection>> ConnectSqlite(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = SqliteError(db, "open " + path);
    sqlite3_close(db);
    return std::unexpected(e);
  }
  auto conn = std::make_unique<SqliteConnection>(db);
  sqlite3_busy_timeout(db, 5000);
  if (Status s =
          conn->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
      !s) {
    return std::unexpected(s.error());
  }
  return std::unique_ptr<SqlConnection>(std::move(conn));
}

Result<std::unique_ptr<SqlConnection>> ConnectPostgres(const std::string& conninfo) {
  auto conn = PgConnection::Connect(conninfo);
  if (!conn) return std::unexpected(conn.error());
  return std::unique_ptr<SqlConnection>(
      std::make_unique<PostgresConnection>(conninfo, std::move(*conn)));
}

int64_t SqlInt(const std::string& text) {
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

}  // namespace kvgate::telemetry::internal
