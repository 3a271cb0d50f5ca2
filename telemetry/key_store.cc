#include "telemetry/key_store.h"

#include "telemetry/sqlite_db.h"

namespace kvgate::telemetry {

KeyStore::KeyStore(std::unique_ptr<internal::Db> db) : db_(std::move(db)) {}
KeyStore::~KeyStore() = default;

Result<std::unique_ptr<KeyStore>> KeyStore::Open(const std::string& path) {
  auto db = internal::Db::Open(path, /*read_only=*/false);
  if (!db) return std::unexpected(db.error());
  return std::unique_ptr<KeyStore>(new KeyStore(std::move(*db)));
}

Result<std::vector<StoredKey>> KeyStore::List() const {
  std::lock_guard lock(mu_);
  auto stmt = db_->Prepare(
      "SELECT id, name, key_hash, limits, created_at_us, rotated_at_us, revoked_at_us "
      "FROM api_keys ORDER BY created_at_us, id");
  if (!stmt) return std::unexpected(stmt.error());
  std::vector<StoredKey> keys;
  for (;;) {
    Result<bool> row = (*stmt)->Step();
    if (!row) return std::unexpected(row.error());
    if (!*row) break;
    StoredKey k;
    k.id = (*stmt)->Text(0);
    k.name = (*stmt)->Text(1);
    k.key_hash = (*stmt)->Text(2);
    k.limits = nlohmann::json::parse((*stmt)->Text(3), nullptr, false);
    if (!k.limits.is_object()) {
      return MakeError(ErrorCode::kCorruptData, "api_keys row " + k.id + ": limits are not JSON");
    }
    k.created_at_us = (*stmt)->Int(4);
    k.rotated_at_us = (*stmt)->OptInt(5);
    k.revoked_at_us = (*stmt)->OptInt(6);
    keys.push_back(std::move(k));
  }
  return keys;
}

Status KeyStore::Insert(const StoredKey& key) {
  std::lock_guard lock(mu_);
  if (!key.name.empty()) {
    auto taken = db_->Prepare("SELECT 1 FROM api_keys WHERE name = ? OR key_hash = ?");
    if (!taken) return std::unexpected(taken.error());
    (*taken)->BindText(1, key.name);
    (*taken)->BindText(2, key.key_hash);
    Result<bool> row = (*taken)->Step();
    if (!row) return std::unexpected(row.error());
    if (*row) {
      return MakeError(ErrorCode::kInvalidArgument, "a key named \"" + key.name + "\" exists");
    }
  }
  auto stmt = db_->Prepare(
      "INSERT INTO api_keys (id, name, key_hash, limits, created_at_us) VALUES (?, ?, ?, ?, ?)");
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindText(1, key.id);
  if (key.name.empty()) {
    (*stmt)->BindNull(2);
  } else {
    (*stmt)->BindText(2, key.name);
  }
  (*stmt)->BindText(3, key.key_hash);
  (*stmt)->BindText(4, key.limits.dump());
  (*stmt)->BindInt(5, key.created_at_us);
  if (Result<bool> r = (*stmt)->Step(); !r) return std::unexpected(r.error());
  return {};
}

Status KeyStore::Rotate(std::string_view id, std::string_view new_hash, int64_t at_us) {
  std::lock_guard lock(mu_);
  auto stmt = db_->Prepare(
      "UPDATE api_keys SET key_hash = ?, rotated_at_us = ? WHERE id = ? AND revoked_at_us IS NULL");
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindText(1, new_hash);
  (*stmt)->BindInt(2, at_us);
  (*stmt)->BindText(3, id);
  if (Result<bool> r = (*stmt)->Step(); !r) return std::unexpected(r.error());
  if (db_->Changes() == 0) {
    return MakeError(ErrorCode::kNotFound, "no active key with id " + std::string(id));
  }
  return {};
}

Status KeyStore::Revoke(std::string_view id, int64_t at_us) {
  std::lock_guard lock(mu_);
  auto stmt =
      db_->Prepare("UPDATE api_keys SET revoked_at_us = ? WHERE id = ? AND revoked_at_us IS NULL");
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindInt(1, at_us);
  (*stmt)->BindText(2, id);
  if (Result<bool> r = (*stmt)->Step(); !r) return std::unexpected(r.error());
  if (db_->Changes() == 0) {
    return MakeError(ErrorCode::kNotFound, "no active key with id " + std::string(id));
  }
  return {};
}

Result<int64_t> KeyStore::SpendSince(std::string_view api_key_id, int64_t since_us) const {
  std::lock_guard lock(mu_);
  auto stmt = db_->Prepare(
      "SELECT coalesce(sum(cost_total), 0) FROM requests WHERE api_key_id = ? AND "
      "created_at_us >= ?");
  if (!stmt) return std::unexpected(stmt.error());
  (*stmt)->BindText(1, api_key_id);
  (*stmt)->BindInt(2, since_us);
  Result<bool> row = (*stmt)->Step();
  if (!row) return std::unexpected(row.error());
  return *row ? (*stmt)->Int(0) : 0;
}

}  // namespace kvgate::telemetry
