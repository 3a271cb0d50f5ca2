#include "telemetry/key_store.h"

#include "telemetry/sql_connection.h"

namespace kvgate::telemetry {

using internal::SqlInt;

KeyStore::KeyStore(std::unique_ptr<internal::SqlConnection> db) : db_(std::move(db)) {}
KeyStore::~KeyStore() = default;

Result<std::unique_ptr<KeyStore>> KeyStore::Open(const std::string& path) {
  auto db = internal::ConnectSqlite(path);
  if (!db) return std::unexpected(db.error());
  return std::unique_ptr<KeyStore>(new KeyStore(std::move(*db)));
}

Result<std::unique_ptr<KeyStore>> KeyStore::OpenPostgres(const std::string& conninfo) {
  auto db = internal::ConnectPostgres(conninfo);
  if (!db) return std::unexpected(db.error());
  return std::unique_ptr<KeyStore>(new KeyStore(std::move(*db)));
}

Result<std::vector<StoredKey>> KeyStore::List() const {
  MutexLock lock(&mu_);
  auto rows = db_->Query(
      "SELECT id, coalesce(name, ''), key_hash, limits, created_at_us, "
      "coalesce(rotated_at_us, -1), coalesce(revoked_at_us, -1) "
      "FROM api_keys ORDER BY created_at_us, id",
      {});
  if (!rows) return std::unexpected(rows.error());
  auto optional_time = [](const std::string& text) {
    const int64_t value = SqlInt(text);
    return value < 0 ? std::nullopt : std::optional<int64_t>(value);
  };
  std::vector<StoredKey> keys;
  for (const auto& r : *rows) {
    StoredKey k;
    k.id = r[0];
    k.name = r[1];
    k.key_hash = r[2];
    k.limits = nlohmann::json::parse(r[3], nullptr, false);
    // Passed on for the caller's validation to refuse, that key alone (null when not JSON).
    if (k.limits.is_discarded()) k.limits = nullptr;
    k.created_at_us = SqlInt(r[4]);
    k.rotated_at_us = optional_time(r[5]);
    k.revoked_at_us = optional_time(r[6]);
    keys.push_back(std::move(k));
  }
  return keys;
}

Status KeyStore::Insert(const StoredKey& key) {
  MutexLock lock(&mu_);
  if (!key.name.empty()) {
    auto taken =
        db_->Query("SELECT 1 FROM api_keys WHERE name = $1 OR key_hash = $2", {key.name, key.key_hash});
    if (!taken) return std::unexpected(taken.error());
    if (!taken->empty()) {
      return MakeError(ErrorCode::kInvalidArgument, "a key named \"" + key.name + "\" exists");
    }
  }
  using Value = internal::SqlConnection::Value;
  auto inserted = db_->Query(
      "INSERT INTO api_keys (id, name, key_hash, limits, created_at_us) "
      "VALUES ($1, $2, $3, $4, $5)",
      {key.id, key.name.empty() ? Value(nullptr) : Value(key.name), key.key_hash,
       key.limits.dump(), key.created_at_us});
  if (!inserted) return std::unexpected(inserted.error());
  return {};
}

Status KeyStore::Rotate(std::string_view id, std::string_view new_hash, int64_t at_us) {
  MutexLock lock(&mu_);
  auto changed = db_->Query(
      "UPDATE api_keys SET key_hash = $1, rotated_at_us = $2 "
      "WHERE id = $3 AND revoked_at_us IS NULL RETURNING id",
      {std::string(new_hash), at_us, std::string(id)});
  if (!changed) return std::unexpected(changed.error());
  if (changed->empty()) {
    return MakeError(ErrorCode::kNotFound, "no active key with id " + std::string(id));
  }
  return {};
}

Status KeyStore::Revoke(std::string_view id, int64_t at_us) {
  MutexLock lock(&mu_);
  auto changed = db_->Query(
      "UPDATE api_keys SET revoked_at_us = $1 WHERE id = $2 AND revoked_at_us IS NULL "
      "RETURNING id",
      {at_us, std::string(id)});
  if (!changed) return std::unexpected(changed.error());
  if (changed->empty()) {
    return MakeError(ErrorCode::kNotFound, "no active key with id " + std::string(id));
  }
  return {};
}

Result<int64_t> KeyStore::SpendSince(std::string_view api_key_id, int64_t since_us) const {
  MutexLock lock(&mu_);
  auto rows = db_->Query(
      "SELECT coalesce(sum(cost_total), 0) FROM requests WHERE api_key_id = $1 AND "
      "created_at_us >= $2",
      {std::string(api_key_id), since_us});
  if (!rows) return std::unexpected(rows.error());
  return rows->empty() ? 0 : SqlInt((*rows)[0][0]);
}

}  // namespace kvgate::telemetry
