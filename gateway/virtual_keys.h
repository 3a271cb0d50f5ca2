// Gateway keys with limits ("virtual keys"): the keys of server.api_keys and those made through
// /api/keys, each with a model allow-list, a budget over recorded cost and rate limits (requests
// and tokens per minute, requests in flight), enforced at admission before any upstream call.
//
// Cost on the request path: one shared-lock hash lookup to find the key, then a few arithmetic
// operations under that key's own mutex; no database access. Spend is counted in memory as
// requests are recorded (OnRecord) and seeded from the store at startup (Load), so a budget holds
// across restarts; with replicas on one PostgreSQL it is re-read from there every refresh period,
// so a budget holds across replicas too (docs/deployment.md: how far it can overshoot). Owned by
// the Gateway; no global state.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "gateway/config.h"
#include "gateway/http/server.h"
#include "telemetry/key_store.h"
#include "telemetry/pricing.h"
#include "telemetry/record.h"

namespace kvgate::gateway {

// A bucket of `per_minute` tokens, refilled continuously at per_minute / 60 s, starting full. Its
// level may go below zero (tokens charged after the fact: a request's real usage), which delays
// the next admissions until it refills. Not thread safe: the owning key's lock guards it.
class TokenBucket {
 public:
  TokenBucket() = default;
  TokenBucket(int64_t per_minute, int64_t now_us);
  // The level at `now_us` (refilled up to the capacity).
  double Level(int64_t now_us);
  // Adds `n` (negative: takes), never above the capacity.
  void Add(double n, int64_t now_us);
  // Microseconds from the last Level() until the level reaches `n` (0 when it has).
  int64_t MicrosUntil(double n) const;
  int64_t capacity() const { return capacity_; }

 private:
  int64_t capacity_ = 0;
  double level_ = 0;
  int64_t last_us_ = 0;
};

// The start of the budget period holding `now_us`: periods of `duration_s` counted from the Unix
// epoch (a 1d budget resets at 00:00 UTC), or 0 (the beginning of time) without a duration.
int64_t BudgetPeriodStart(int64_t now_us, int64_t duration_s);

// Which limit refused a request (the `limit` label of kvgate_key_rate_limited_total).
enum class KeyLimit { kBudget, kParallel, kRpm, kTpm };
std::string_view KeyLimitName(KeyLimit limit);

// One key: who it is, its limits, and its counters.
class KeyState {
 public:
  KeyState(std::string id, std::string name, bool from_config, KeyLimits limits,
           int64_t created_at_us, int64_t now_us);

  const std::string& id() const { return id_; }
  // The name, or the id for a key without one (metric labels, messages).
  const std::string& label() const { return name_.empty() ? id_ : name_; }
  const KeyLimits& limits() const { return limits_; }
  bool AllowsModel(std::string_view model) const;

  // Spend in the current period, pico-USD (rolls the period over when it has ended).
  int64_t SpendPico(int64_t now_us);
  // The fraction of the budget spent in the current period; nullopt without a budget.
  std::optional<double> BudgetFraction(int64_t now_us);

 private:
  friend class VirtualKeys;
  friend class KeyAdmission;
  void RollPeriod(int64_t now_us) REQUIRES(mu_);

  const std::string id_, name_;
  const bool from_config_;
  const KeyLimits limits_;
  const int64_t created_at_us_;
  Mutex mu_;
  TokenBucket requests_ GUARDED_BY(mu_);
  TokenBucket tokens_ GUARDED_BY(mu_);
  int64_t in_flight_ GUARDED_BY(mu_) = 0;
  int64_t period_start_us_ GUARDED_BY(mu_) = 0;
  int64_t spend_pico_ GUARDED_BY(mu_) = 0;
  // Recorded here since the last shared refresh began (VirtualKeys::Refresh).
  int64_t spend_since_refresh_pico_ GUARDED_BY(mu_) = 0;
  // What admitted requests still running may cost (their estimates, VirtualKeys::Admit): a budget
  // admits a request only while spend + reserved is under it, so parallel requests cannot all
  // pass on the same unspent balance.
  int64_t reserved_pico_ GUARDED_BY(mu_) = 0;
  std::array<uint64_t, 4> refused_ GUARDED_BY(mu_) = {};  // by KeyLimit
  // Mutable key facts (rotation, revocation): guarded by the owning VirtualKeys' mu_.
  std::optional<int64_t> rotated_at_us_, revoked_at_us_;
  std::string key_hash_;
};

// An admitted request's hold on its key: one request in flight, its reserved tokens and its
// reserved cost, given back when this is destroyed (the request's real usage and cost are
// charged by VirtualKeys::OnRecord, which the request's commit runs before the hold is released).
class KeyAdmission {
 public:
  KeyAdmission() = default;
  KeyAdmission(std::shared_ptr<KeyState> key, int64_t reserved_tokens, int64_t reserved_pico,
               const Clock* clock);
  KeyAdmission(KeyAdmission&& other) noexcept { *this = std::move(other); }
  KeyAdmission& operator=(KeyAdmission&& other) noexcept;
  ~KeyAdmission() { Release(); }
  void Release();

 private:
  std::shared_ptr<KeyState> key_;
  int64_t reserved_ = 0;
  int64_t reserved_pico_ = 0;
  const Clock* clock_ = nullptr;
};

// What a refused request is answered.
struct KeyRefusal {
  int status = 429;
  std::string message, type, code;
  KeyLimit limit = KeyLimit::kRpm;
  std::vector<http::Header> headers;  // Retry-After and the x-ratelimit-* headers
};

class VirtualKeys {
 public:
  // `store` may be null: then keys come only from the config, spend starts at zero, and the
  // admin API cannot make keys. A `refresh_period` > 0 says the store is shared by replicas
  // (PostgreSQL): from Load on, a thread of this object's re-reads it that often (Refresh).
  VirtualKeys(const Clock& clock, telemetry::KeyStore* store,
              std::chrono::milliseconds refresh_period = std::chrono::milliseconds(0));
  ~VirtualKeys();
  VirtualKeys(const VirtualKeys&) = delete;
  VirtualKeys& operator=(const VirtualKeys&) = delete;

  // The config's keys and the stored ones, with each key's spend in its current period read from
  // the store. A stored key that does not validate (an older kvgate's row, a hand edit) is left
  // out with a warning on stderr and listed under "invalid"; it still makes keys required.
  // Errors: the store's; a stored key whose name a config key also has.
  Status Load(const std::vector<ApiKeyConfig>& config_keys);

  // Whether requests must show a key: some key is configured or was ever made (a revoked last
  // key must not open the gateway).
  bool required() const;
  // The active key whose secret hashes to `key_hash`, or null.
  std::shared_ptr<KeyState> Find(const std::string& key_hash) const;

  // Admission: the budget, the requests in flight, rpm and tpm, in that order. `reserve_tokens`
  // is what the request may use (EstimateReservation: its prompt and the output it may produce)
  // and `reserve_pico` what that may cost; both are held until the request is over, so that
  // requests admitted together cannot overshoot a budget or a tpm by more than one request's
  // estimate (the budget admits while spend + reserved < budget). Returns the hold, or the
  // answer for a refused request (counted in the key's refusals).
  std::expected<KeyAdmission, KeyRefusal> Admit(const std::shared_ptr<KeyState>& key,
                                                int64_t reserve_tokens, int64_t reserve_pico = 0);
  // The x-ratelimit-* headers of an admitted request's answer (all six for a key with any limit,
  // "unlimited" for a dimension it does not limit; none for a key without limits).
  std::vector<http::Header> RateLimitHeaders(KeyState& key);

  // A finished request (Recorder listener): its cost joins its key's spend, its tokens are
  // charged to its key's tpm bucket.
  void OnRecord(const telemetry::RequestRecord& record);

  // Brings this replica up to date with the shared store: keys made, rotated or revoked through
  // another replica, and each budgeted key's spend in its period, which the store sums over every
  // replica's recorded requests (plus what this one recorded since the read began). Blocking
  // (database reads, never under a key's lock): off the request path. The refresh thread calls it.
  Status Refresh();

  // The admin API (/api/keys). Bodies as docs/api.md describes; errors map to HTTP statuses
  // (kInvalidArgument 400, kNotFound 404, kPermissionDenied 403 for config keys, kUnavailable).
  Result<nlohmann::json> List() const;
  Result<nlohmann::json> Get(const std::string& id) const;
  Result<nlohmann::json> Create(const nlohmann::json& body, const std::vector<std::string>& models);
  Result<nlohmann::json> Rotate(const std::string& id);
  Result<nlohmann::json> Revoke(const std::string& id);

  // The fraction of the key's budget spent in its period (the monitors' `budget` metric).
  std::optional<double> BudgetFraction(const std::string& id) const;
  // kvgate_key_spend_usd, kvgate_key_budget_remaining_usd, kvgate_key_rate_limited_total.
  void ExposeMetrics(std::string& out) const;

 private:
  std::shared_ptr<KeyState> FindById(const std::string& id) const;
  // A key the admin API may rotate or revoke: made through it, not revoked.
  Result<std::shared_ptr<KeyState>> ChangeableKey(const std::string& id,
                                                  std::string_view change) const;
  nlohmann::json Describe(KeyState& key) const REQUIRES_SHARED(mu_);
  Status Seed(KeyState& key);
  Status RefreshKeys();   // the stored keys' list: new, rotated and revoked ones
  void RefreshSpend();    // each budgeted key's spend from the store


  const Clock& clock_;
  telemetry::KeyStore* const store_;
  // Serializes the admin API's changes (each a database write, then the maps), so that the
  // database and the maps see them in the same order. Never taken on the request path.
  Mutex admin_mu_;
  mutable SharedMutex mu_;
  std::unordered_map<std::string, std::shared_ptr<KeyState>> by_hash_ GUARDED_BY(mu_);  // active
  std::map<std::string, std::shared_ptr<KeyState>> by_id_ GUARDED_BY(mu_);  // all, revoked too
  bool any_key_ GUARDED_BY(mu_) = false;
  struct InvalidKey {
    std::string id, name, error;
  };
  std::vector<InvalidKey> invalid_ GUARDED_BY(mu_);  // stored keys left out at Load

  // The shared-store refresh (Refresh), with refresh_period > 0.
  const std::chrono::milliseconds refresh_period_;
  Mutex refresh_mu_;
  CondVar refresh_wake_;
  bool refresh_stop_ GUARDED_BY(refresh_mu_) = false;
  std::thread refresh_thread_;
};

// What a request is held to at admission: the tokens it may use and what they may cost.
struct KeyReservation {
  int64_t tokens = 0;
  int64_t pico = 0;  // 0 when no price is known
};
// The estimate for a request of `body_bytes` that asks for at most `max_output_tokens` (0: it
// names no limit, and kDefaultReservedOutputTokens are assumed), priced at the dearest input
// rate of `price` (a cache write costs more than plain input) and its output rate. The input is
// estimated as one token per 4 bytes of the body (JSON punctuation and field names included, so
// an overestimate for text).
inline constexpr int64_t kDefaultReservedOutputTokens = 512;
KeyReservation EstimateReservation(size_t body_bytes, int64_t max_output_tokens,
                                   const std::optional<telemetry::Price>& price);

// A new secret for a key made through the admin API: "sk-kvgate-" and 48 hex digits of the
// system's random generator.
std::string NewKeySecret();

}  // namespace kvgate::gateway
