// The store tests that hold for every TelemetryStore implementation run once per store: SQLite
// always, PostgreSQL on a server the test process starts (pg_server.h). A PostgreSQL server that
// cannot be started fails those tests (it does not skip them): CI installs `postgresql`.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "telemetry/store.h"
#include "pg_server.h"
#include "store_test_util.h"

namespace kvgate::telemetry::testing {

enum class StoreKind { kSqlite, kPostgres };

inline void PrintTo(StoreKind kind, std::ostream* os) {
  *os << (kind == StoreKind::kSqlite ? "SQLite" : "PostgreSQL");
}

inline std::string StoreKindName(const ::testing::TestParamInfo<StoreKind>& info) {
  return info.param == StoreKind::kSqlite ? "Sqlite" : "Postgres";
}

// One server for the whole test binary (started on first use, stopped at exit): initdb takes
// about a second, a database per test a few milliseconds.
inline Result<PgServer*> SharedPgServer() {
  static Result<std::unique_ptr<PgServer>> server = PgServer::Start();
  if (!server) return std::unexpected(server.error());
  return server->get();
}

// One test's database: a file in a temp directory, or a new PostgreSQL database (with its crash
// journal in the temp directory). Open() may be called again to reopen the same database.
class StoreFactory {
 public:
  explicit StoreFactory(StoreKind kind) : kind_(kind) {}

  // Makes the database; false (with a test failure) when PostgreSQL is not available.
  bool Prepare() {
    if (kind_ == StoreKind::kSqlite) {
      location_ = dir_.File("store.db");
      return true;
    }
    Result<PgServer*> server = SharedPgServer();
    if (!server) {
      ADD_FAILURE() << "cannot start PostgreSQL for the store tests: " << server.error().ToString();
      return false;
    }
    server_ = *server;
    Result<std::string> uri = server_->NewDatabase();
    if (!uri) {
      ADD_FAILURE() << uri.error().ToString();
      return false;
    }
    location_ = *uri;
    return true;
  }

  Result<std::unique_ptr<TelemetryStore>> Open(const Clock& clock, StoreOptions options = {}) {
    if (kind_ == StoreKind::kSqlite) return TelemetryStore::Open(location_, clock, std::move(options));
    if (options.journal_path.empty()) options.journal_path = dir_.File("pg-journal");
    return TelemetryStore::OpenPostgres(location_, clock, std::move(options));
  }

  StoreKind kind() const { return kind_; }
  PgServer* server() const { return server_; }  // null for SQLite
  const TempDir& dir() const { return dir_; }
  const std::string& location() const { return location_; }

 private:
  const StoreKind kind_;
  TempDir dir_;
  std::string location_;
  PgServer* server_ = nullptr;
};

}  // namespace kvgate::telemetry::testing
