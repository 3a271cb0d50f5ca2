// Internal to the telemetry module: the one migration list both stores apply (store_schema.cc),
// and the checks they share before applying it.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "telemetry/store.h"

namespace kvgate::telemetry::internal {

// Core + extra migrations in ascending version; kInternal for a version that is not positive or
// is claimed twice.
Result<std::vector<Migration>> AllMigrations(std::span<const Migration> extra);
// `applied` is schema_migrations as read (version -> name). kCorruptData when the database was
// written by a newer kvgate (a core version this code lacks) or a version's name differs.
Status CheckAppliedMigrations(const std::vector<Migration>& all,
                              const std::map<int, std::string>& applied);
// CREATE TABLE IF NOT EXISTS schema_migrations (version, name, applied_at_us) for PostgreSQL.
std::string_view PostgresMigrationsTableSql();
// The statements of `m` for PostgreSQL.
inline std::string_view PostgresSqlOf(const Migration& m) {
  return m.postgres_sql.empty() ? m.sql : m.postgres_sql;
}

}  // namespace kvgate::telemetry::internal
