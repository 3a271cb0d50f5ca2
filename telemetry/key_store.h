// Gateway keys made through the admin API (/api/keys), kept in the telemetry database's api_keys
// table (migration 11, which TelemetryStore::Open and OpenPostgres apply), and the per-key spend
// read back from the requests table: at startup, and on PostgreSQL periodically, since every
// replica's requests land there. Secrets are never stored: only their SHA-256 hash.
//
// Thread safety: every method may be called from any thread (one connection behind a lock; the
// callers are the admin API, startup and the shared-key refresh, never the request path).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"

namespace kvgate::telemetry {

namespace internal {
class SqlConnection;
}

struct StoredKey {
  std::string id;        // "key_..." (what requests.api_key_id holds)
  std::string name;      // unique; "" for none (stored as NULL)
  std::string key_hash;  // SHA-256 hex of the current secret
  nlohmann::json limits = nlohmann::json::object();  // the limit fields as POST /api/keys took them
  int64_t created_at_us = 0;
  std::optional<int64_t> rotated_at_us, revoked_at_us;
};

class KeyStore {
 public:
  // Opens the database at `path`, whose schema TelemetryStore::Open has brought up to date.
  // Errors: kUnavailable when it cannot be opened.
  static Result<std::unique_ptr<KeyStore>> Open(const std::string& path);
  // The same on the PostgreSQL database that TelemetryStore::OpenPostgres migrated, shared by
  // every replica on it.
  static Result<std::unique_ptr<KeyStore>> OpenPostgres(const std::string& conninfo);
  ~KeyStore();

  // Every key, revoked ones too, oldest first. Limits are as stored, unchecked: null where the
  // column is not JSON.
  Result<std::vector<StoredKey>> List() const;
  // kInvalidArgument when the name is taken.
  Status Insert(const StoredKey& key);
  // Replaces the secret's hash of a key that is not revoked; kNotFound otherwise.
  Status Rotate(std::string_view id, std::string_view new_hash, int64_t at_us);
  // Marks the key revoked; kNotFound when there is no such key or it is already revoked.
  Status Revoke(std::string_view id, int64_t at_us);
  // The recorded cost (pico-USD) of the requests of `api_key_id` created at or after `since_us`.
  Result<int64_t> SpendSince(std::string_view api_key_id, int64_t since_us) const;

 private:
  explicit KeyStore(std::unique_ptr<internal::SqlConnection> db);
  mutable Mutex mu_;
  std::unique_ptr<internal::SqlConnection> db_ GUARDED_BY(mu_);
};

}  // namespace kvgate::telemetry
