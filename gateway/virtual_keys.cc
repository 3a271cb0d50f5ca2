#include "gateway/virtual_keys.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/ids.h"
#include "common/thread_name.h"
#include "telemetry/metrics.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;

constexpr int64_t kMicrosPerMinute = 60'000'000;
// Refills add fractions of a token: a level that has refilled to a whole token may read a hair
// below it.
constexpr double kLevelSlack = 1e-9;
// A lifetime budget never resets: its refusals say "ask again in an hour" (the operator may have
// raised it by then) rather than nothing.
constexpr int64_t kLifetimeBudgetRetrySeconds = 3600;

int64_t CeilSeconds(int64_t micros) { return std::max<int64_t>(1, (micros + 999'999) / 1'000'000); }

// OpenAI's form of the x-ratelimit-reset-* headers: "6m0s", "20s", "350ms".
std::string ResetText(int64_t micros) {
  if (micros <= 0) return "0s";
  const int64_t ms = (micros + 999) / 1000;
  if (ms < 1000) return std::to_string(ms) + "ms";
  const int64_t s = (ms + 999) / 1000;
  if (s < 60) return std::to_string(s) + "s";
  return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
}

double Usd(int64_t pico) { return double(pico) / 1e12; }

// The tokens a finished request used, as far as its usage says.
int64_t TokensOf(const telemetry::Usage& u) {
  int64_t total = u.output.value_or(0);
  if (std::optional<int64_t> input = u.TotalInput()) {
    total += *input;
  } else {
    total += u.reported_input.value_or(0);
  }
  return std::max<int64_t>(0, total);
}

// A period in the form budget_duration takes: the largest whole unit ("30d", "90m").
std::string DurationText(int64_t seconds) {
  for (auto [unit, n] : {std::pair{'d', 86400}, {'h', 3600}, {'m', 60}}) {
    if (seconds % n == 0) return std::to_string(seconds / n) + unit;
  }
  return std::to_string(seconds) + "s";
}

// The limit fields as POST /api/keys and the config take them (null: no limit).
void AddLimits(const KeyLimits& l, json& j) {
  j["models"] = l.models;
  j["max_budget_usd"] = l.max_budget_pico ? json(Usd(*l.max_budget_pico)) : json(nullptr);
  j["budget_duration"] =
      l.budget_duration_s > 0 ? json(DurationText(l.budget_duration_s)) : json(nullptr);
  j["budget_duration_s"] = l.budget_duration_s > 0 ? json(l.budget_duration_s) : json(nullptr);
  j["rpm"] = l.rpm > 0 ? json(l.rpm) : json(nullptr);
  j["tpm"] = l.tpm > 0 ? json(l.tpm) : json(nullptr);
  j["max_parallel"] = l.max_parallel > 0 ? json(l.max_parallel) : json(nullptr);
}

Error Invalid(std::string message) { return Error{ErrorCode::kInvalidArgument, std::move(message)}; }

// A stored key read back with the checks POST /api/keys made, which an older kvgate or a hand
// edit may not have passed. Errors name the key's id and the field.
Result<KeyLimits> ValidStoredKey(const telemetry::StoredKey& s) {
  const std::string path = "api key " + s.id;
  if (!s.name.empty()) {
    if (Status named = ValidateKeyName(s.name, path + ".name"); !named) {
      return std::unexpected(named.error());
    }
  }
  return ParseKeyLimits(s.limits, path, {});
}

}  // namespace

TokenBucket::TokenBucket(int64_t per_minute, int64_t now_us)
    : capacity_(per_minute), level_(double(per_minute)), last_us_(now_us) {}

double TokenBucket::Level(int64_t now_us) {
  if (now_us > last_us_) {
    level_ = std::min(double(capacity_),
                      level_ + double(capacity_) * double(now_us - last_us_) / kMicrosPerMinute);
    last_us_ = now_us;
  }
  return level_;
}

void TokenBucket::Add(double n, int64_t now_us) {
  Level(now_us);
  level_ = std::min(double(capacity_), level_ + n);
}

int64_t TokenBucket::MicrosUntil(double n) const {
  if (level_ + kLevelSlack >= n || capacity_ <= 0) return 0;
  // (Less a nanosecond: the float error of the refills must not round a whole second up.)
  return int64_t(std::ceil((n - level_) * kMicrosPerMinute / double(capacity_) - 1e-3));
}

int64_t BudgetPeriodStart(int64_t now_us, int64_t duration_s) {
  if (duration_s <= 0) return 0;
  const int64_t d = duration_s * 1'000'000;
  return now_us / d * d;
}

std::string_view KeyLimitName(KeyLimit limit) {
  switch (limit) {
    case KeyLimit::kBudget: return "budget";
    case KeyLimit::kParallel: return "max_parallel";
    case KeyLimit::kRpm: return "rpm";
    case KeyLimit::kTpm: return "tpm";
  }
  return "?";
}

KeyState::KeyState(std::string id, std::string name, bool from_config, KeyLimits limits,
                   int64_t created_at_us, int64_t now_us)
    : id_(std::move(id)),
      name_(std::move(name)),
      from_config_(from_config),
      limits_(std::move(limits)),
      created_at_us_(created_at_us),
      requests_(limits_.rpm, now_us),
      tokens_(limits_.tpm, now_us),
      period_start_us_(BudgetPeriodStart(now_us, limits_.budget_duration_s)) {}

bool KeyState::AllowsModel(std::string_view model) const {
  return limits_.models.empty() ||
         std::find(limits_.models.begin(), limits_.models.end(), model) != limits_.models.end();
}

void KeyState::RollPeriod(int64_t now_us) {
  const int64_t start = BudgetPeriodStart(now_us, limits_.budget_duration_s);
  if (start > period_start_us_) {
    period_start_us_ = start;
    spend_pico_ = 0;
  }
}

int64_t KeyState::SpendPico(int64_t now_us) {
  MutexLock lock(&mu_);
  RollPeriod(now_us);
  return spend_pico_;
}

std::optional<double> KeyState::BudgetFraction(int64_t now_us) {
  if (!limits_.max_budget_pico) return std::nullopt;
  const int64_t spend = SpendPico(now_us);
  if (*limits_.max_budget_pico == 0) return spend > 0 ? 1.0 : 0.0;
  return double(spend) / double(*limits_.max_budget_pico);
}

KeyAdmission::KeyAdmission(std::shared_ptr<KeyState> key, int64_t reserved_tokens,
                           int64_t reserved_pico, const Clock* clock)
    : key_(std::move(key)), reserved_(reserved_tokens), reserved_pico_(reserved_pico),
      clock_(clock) {}

KeyAdmission& KeyAdmission::operator=(KeyAdmission&& other) noexcept {
  if (this != &other) {
    Release();
    key_ = std::move(other.key_);
    reserved_ = other.reserved_;
    reserved_pico_ = other.reserved_pico_;
    clock_ = other.clock_;
    other.key_ = nullptr;
  }
  return *this;
}

void KeyAdmission::Release() {
  if (!key_) return;
  {
    MutexLock lock(&key_->mu_);
    --key_->in_flight_;
    if (reserved_ > 0) key_->tokens_.Add(double(reserved_), clock_->NowUnixMicros());
    key_->reserved_pico_ -= reserved_pico_;
  }
  key_ = nullptr;
}

VirtualKeys::VirtualKeys(const Clock& clock, telemetry::KeyStore* store,
                         std::chrono::milliseconds refresh_period)
    : clock_(clock), store_(store), refresh_period_(refresh_period) {}

VirtualKeys::~VirtualKeys() {
  {
    MutexLock lock(&refresh_mu_);
    refresh_stop_ = true;
  }
  refresh_wake_.SignalAll();
  if (refresh_thread_.joinable()) refresh_thread_.join();
}

Status VirtualKeys::Refresh() {
  if (store_ == nullptr) return {};
  if (Status s = RefreshKeys(); !s) return s;
  RefreshSpend();
  return {};
}

Status VirtualKeys::RefreshKeys() {
  auto stored = store_->List();
  if (!stored) return std::unexpected(stored.error());
  const int64_t now = clock_.NowUnixMicros();
  std::vector<std::shared_ptr<KeyState>> added;
  {
    WriterMutexLock lock(&mu_);
    for (const telemetry::StoredKey& s : *stored) {
      auto it = by_id_.find(s.id);
      if (it == by_id_.end()) continue;
      KeyState& key = *it->second;
      if (key.from_config_) continue;
      if (key.key_hash_ != s.key_hash) {  // rotated through another replica
        by_hash_.erase(key.key_hash_);
        key.key_hash_ = s.key_hash;
        key.rotated_at_us_ = s.rotated_at_us;
        if (!key.revoked_at_us_) by_hash_[key.key_hash_] = it->second;
      }
      if (s.revoked_at_us && !key.revoked_at_us_) {
        key.revoked_at_us_ = s.revoked_at_us;
        by_hash_.erase(key.key_hash_);
      }
    }
  }
  for (const telemetry::StoredKey& s : *stored) {
    if (FindById(s.id) != nullptr) continue;
    auto limits = ValidStoredKey(s);
    if (!limits) continue;  // (validated by the replica that made it; else warned of at Load)
    auto key = std::make_shared<KeyState>(s.id, s.name, false, std::move(*limits),
                                          s.created_at_us, now);
    key->key_hash_ = s.key_hash;
    key->rotated_at_us_ = s.rotated_at_us;
    key->revoked_at_us_ = s.revoked_at_us;
    if (Status seeded = Seed(*key); !seeded) return seeded;
    added.push_back(std::move(key));
  }
  WriterMutexLock lock(&mu_);
  for (auto& key : added) {
    if (by_id_.contains(key->id_)) continue;  // made here meanwhile
    any_key_ = true;
    if (!key->revoked_at_us_) by_hash_[key->key_hash_] = key;
    by_id_[key->id_] = std::move(key);
  }
  return {};
}

void VirtualKeys::RefreshSpend() {
  std::vector<std::shared_ptr<KeyState>> budgeted;
  {
    ReaderMutexLock lock(&mu_);
    for (const auto& [id, key] : by_id_) {
      if (key->limits_.max_budget_pico && !key->revoked_at_us_) budgeted.push_back(key);
    }
  }
  const int64_t now = clock_.NowUnixMicros();
  for (const auto& key : budgeted) {
    int64_t period_start;
    {
      MutexLock lock(&key->mu_);
      key->RollPeriod(now);
      period_start = key->period_start_us_;
      key->spend_since_refresh_pico_ = 0;
    }
    auto stored = store_->SpendSince(key->id_, period_start);
    if (!stored) continue;  // this replica's own count stands until the next refresh
    MutexLock lock(&key->mu_);
    if (key->period_start_us_ != period_start) continue;  // rolled over meanwhile
    // Every replica's committed requests, and what this one recorded since the read began. The
    // larger of that and the local count: this replica's own records not yet committed when the
    // read ran are in the local count only.
    key->spend_pico_ = std::max(key->spend_pico_, *stored + key->spend_since_refresh_pico_);
  }
}

Status VirtualKeys::Seed(KeyState& key) {
  if (store_ == nullptr) return {};
  const int64_t now = clock_.NowUnixMicros();
  MutexLock lock(&key.mu_);
  key.RollPeriod(now);
  auto spend = store_->SpendSince(key.id_, key.period_start_us_);
  if (!spend) return std::unexpected(spend.error());
  key.spend_pico_ = *spend;
  return {};
}

Status VirtualKeys::Load(const std::vector<ApiKeyConfig>& config_keys) {
  const int64_t now = clock_.NowUnixMicros();
  std::vector<std::shared_ptr<KeyState>> keys;
  std::vector<InvalidKey> invalid;
  for (const ApiKeyConfig& c : config_keys) {
    // The id config keys always had (requests.api_key_id): derived from the secret.
    auto key = std::make_shared<KeyState>("key_" + c.key_hash.substr(0, 12), c.name, true,
                                          c.limits, 0, now);
    key->key_hash_ = c.key_hash;
    keys.push_back(std::move(key));
  }
  if (store_ != nullptr) {
    auto stored = store_->List();
    if (!stored) return std::unexpected(stored.error());
    for (const telemetry::StoredKey& s : *stored) {
      auto limits = ValidStoredKey(s);
      if (!limits) {
        // One bad row costs its key, not the gateway (on PostgreSQL, every replica's start).
        std::fprintf(stderr,
                     "kvgate: warning: stored key %s is disabled: %s (its requests get 401; "
                     "make a new key with POST /api/keys)\n",
                     s.id.c_str(), limits.error().message.c_str());
        invalid.push_back({.id = s.id, .name = s.name, .error = limits.error().message});
        continue;
      }
      for (const auto& c : config_keys) {
        if (!c.name.empty() && c.name == s.name) {
          return MakeError(ErrorCode::kInvalidArgument,
                           "server.api_keys names a key \"" + s.name + "\", as does key " + s.id +
                               " made through /api/keys; rename one");
        }
      }
      auto key = std::make_shared<KeyState>(s.id, s.name, false, std::move(*limits),
                                            s.created_at_us, now);
      key->key_hash_ = s.key_hash;
      key->rotated_at_us_ = s.rotated_at_us;
      key->revoked_at_us_ = s.revoked_at_us;
      keys.push_back(std::move(key));
    }
  }
  for (const auto& key : keys) {
    if (Status s = Seed(*key); !s) return s;
  }
  {
    WriterMutexLock lock(&mu_);
    // A disabled key still says that requests must show a key: losing the only one must not open
    // the gateway.
    if (!invalid.empty()) any_key_ = true;
    invalid_ = std::move(invalid);
    for (auto& key : keys) {
      if (by_id_.contains(key->id_)) {  // (two secrets whose hashes share 48 bits)
        return MakeError(ErrorCode::kInvalidArgument,
                         "two gateway keys have the same id " + key->id_ + "; replace one");
      }
      any_key_ = true;
      if (!key->revoked_at_us_) by_hash_[key->key_hash_] = key;
      by_id_[key->id_] = std::move(key);
    }
  }
  if (refresh_period_.count() > 0 && store_ != nullptr && !refresh_thread_.joinable()) {
    refresh_thread_ = std::thread([this] {
      NameThisThread("key-refresh");
      refresh_mu_.Lock();
      for (;;) {
        const auto deadline = std::chrono::steady_clock::now() + refresh_period_;
        while (!refresh_stop_ && refresh_wake_.WaitUntil(&refresh_mu_, deadline)) {
        }
        if (refresh_stop_) break;
        refresh_mu_.Unlock();
        (void)Refresh();  // a store that cannot answer now is asked again next period
        refresh_mu_.Lock();
      }
      refresh_mu_.Unlock();
    });
  }
  return {};
}

bool VirtualKeys::required() const {
  ReaderMutexLock lock(&mu_);
  return any_key_;
}

std::shared_ptr<KeyState> VirtualKeys::Find(const std::string& key_hash) const {
  ReaderMutexLock lock(&mu_);
  auto it = by_hash_.find(key_hash);
  return it == by_hash_.end() ? nullptr : it->second;
}

std::shared_ptr<KeyState> VirtualKeys::FindById(const std::string& id) const {
  ReaderMutexLock lock(&mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

namespace {

// The six x-ratelimit-* headers of a key, from its buckets as they stand: OpenAI's names, all of
// them on every answer of a limited key (clients look for the set), a dimension the key does not
// limit reading "unlimited". REQUIRES: the key's mu_ held.
void AppendRateHeaders(const KeyLimits& limits, TokenBucket& requests, TokenBucket& tokens,
                       int64_t now_us, std::vector<http::Header>& out) {
  auto dimension = [&](const char* what, int64_t limit, TokenBucket& bucket) {
    const std::string prefix = "x-ratelimit-";
    if (limit <= 0) {
      out.push_back({prefix + "limit-" + what, "unlimited"});
      out.push_back({prefix + "remaining-" + what, "unlimited"});
      out.push_back({prefix + "reset-" + what, "0s"});
      return;
    }
    const double level = bucket.Level(now_us);
    out.push_back({prefix + "limit-" + what, std::to_string(limit)});
    out.push_back({prefix + "remaining-" + what,
                   std::to_string(std::max<int64_t>(0, int64_t(std::floor(level + kLevelSlack))))});
    out.push_back({prefix + "reset-" + what, ResetText(bucket.MicrosUntil(double(limit)))});
  };
  dimension("requests", limits.rpm, requests);
  dimension("tokens", limits.tpm, tokens);
}

}  // namespace

std::expected<KeyAdmission, KeyRefusal> VirtualKeys::Admit(const std::shared_ptr<KeyState>& key,
                                                           int64_t reserve_tokens,
                                                           int64_t reserve_pico) {
  const KeyLimits& limits = key->limits_;
  const int64_t now = clock_.NowUnixMicros();
  MutexLock lock(&key->mu_);
  key->RollPeriod(now);
  KeyRefusal refusal;
  int64_t retry_us = 0;
  // A reservation larger than the whole bucket could never be admitted: it waits for a full one.
  const double reserve = double(std::clamp<int64_t>(reserve_tokens, 0, limits.tpm));
  const double needed_tokens = std::max(1.0, reserve);
  // (Messages are built only for refusals: admission allocates nothing but the hold.)
  auto who = [&key] { return "key " + key->label(); };
  // Only a budgeted key holds cost: an unbudgeted one has nothing to protect.
  const int64_t hold_pico = limits.max_budget_pico ? std::max<int64_t>(0, reserve_pico) : 0;
  if (limits.max_budget_pico &&
      key->spend_pico_ + key->reserved_pico_ >= *limits.max_budget_pico) {
    refusal.limit = KeyLimit::kBudget;
    refusal.type = "insufficient_quota";
    refusal.code = "budget_exceeded";
    char spent[64];
    std::snprintf(spent, sizeof spent, "%.6f of its %.6f USD", Usd(key->spend_pico_),
                  Usd(*limits.max_budget_pico));
    refusal.message = who() + " has spent " + spent + " budget" +
                      (limits.budget_duration_s > 0 ? " for this period" : "");
    if (key->reserved_pico_ > 0 && key->spend_pico_ < *limits.max_budget_pico) {
      char held[64];
      std::snprintf(held, sizeof held, "%.6f USD", Usd(key->reserved_pico_));
      refusal.message += std::string(", and its requests in flight may cost ") + held;
      // Not spent yet: those requests end soon and give back what they did not use, so this is
      // a wait (retryable), not an exhausted quota.
      refusal.type = "rate_limit_error";
      refusal.code = "budget_in_flight";
      retry_us = 1'000'000;
    }
    if (retry_us == 0) {
      retry_us = limits.budget_duration_s > 0
                     ? key->period_start_us_ + limits.budget_duration_s * 1'000'000 - now
                     : kLifetimeBudgetRetrySeconds * 1'000'000;
    }
  } else if (limits.max_parallel > 0 && key->in_flight_ >= limits.max_parallel) {
    refusal.limit = KeyLimit::kParallel;
    refusal.message = who() + " already has " + std::to_string(key->in_flight_) +
                      " requests in flight, its max_parallel";
    retry_us = 1'000'000;
  } else if (limits.rpm > 0 && key->requests_.Level(now) + kLevelSlack < 1.0) {
    refusal.limit = KeyLimit::kRpm;
    refusal.message = who() + " is over its limit of " + std::to_string(limits.rpm) +
                      " requests per minute";
    retry_us = key->requests_.MicrosUntil(1.0);
  } else if (limits.tpm > 0 && key->tokens_.Level(now) + kLevelSlack < needed_tokens) {
    refusal.limit = KeyLimit::kTpm;
    refusal.message = who() + " is over its limit of " + std::to_string(limits.tpm) +
                      " tokens per minute (this request reserves " +
                      std::to_string(int64_t(needed_tokens)) + ")";
    retry_us = key->tokens_.MicrosUntil(needed_tokens);
  } else {
    if (limits.rpm > 0) key->requests_.Add(-1.0, now);
    if (limits.tpm > 0) key->tokens_.Add(-reserve, now);
    ++key->in_flight_;
    key->reserved_pico_ += hold_pico;
    return KeyAdmission(key, limits.tpm > 0 ? int64_t(reserve) : 0, hold_pico, &clock_);
  }
  if (refusal.type.empty()) {
    refusal.type = "rate_limit_error";
    refusal.code = "rate_limit_exceeded";
  }
  ++key->refused_[size_t(refusal.limit)];
  refusal.headers.push_back({"retry-after", std::to_string(CeilSeconds(retry_us))});
  AppendRateHeaders(limits, key->requests_, key->tokens_, now, refusal.headers);
  return std::unexpected(std::move(refusal));
}

KeyReservation EstimateReservation(size_t body_bytes, int64_t max_output_tokens,
                                   const std::optional<telemetry::Price>& price) {
  // Bounded so that tokens x rate stays inside int64: 2^30 tokens (far beyond any context
  // window) x 2^30 micro-USD per 1M tokens (about $1,000 per 1M: beyond any real price), twice.
  constexpr int64_t kMaxEstimate = int64_t{1} << 30;
  constexpr int64_t kMaxRate = int64_t{1} << 30;
  const int64_t input = std::min<int64_t>(kMaxEstimate, int64_t((body_bytes + 3) / 4));
  const int64_t output = std::min<int64_t>(
      kMaxEstimate, max_output_tokens > 0 ? max_output_tokens : kDefaultReservedOutputTokens);
  KeyReservation r{.tokens = input + output};
  if (!price) return r;
  // The dearest rates either tier may apply: the estimate must not be the cheap case.
  auto dearest_input = [](const telemetry::Rates& rates) {
    return std::max({rates.input, rates.cache_write_5m, rates.cache_write_1h,
                     rates.cache_write_no_ttl});
  };
  int64_t input_rate = dearest_input(price->base), output_rate = price->base.output;
  if (price->tier_threshold_tokens) {  // the estimate cannot tell which tier applies
    input_rate = std::max(input_rate, dearest_input(price->above));
    output_rate = std::max(output_rate, price->above.output);
  }
  r.pico = input * std::min(input_rate, kMaxRate) + output * std::min(output_rate, kMaxRate);
  return r;
}

std::vector<http::Header> VirtualKeys::RateLimitHeaders(KeyState& key) {
  std::vector<http::Header> headers;
  if (!key.limits_.limited()) return headers;
  MutexLock lock(&key.mu_);
  AppendRateHeaders(key.limits_, key.requests_, key.tokens_, clock_.NowUnixMicros(), headers);
  return headers;
}

void VirtualKeys::OnRecord(const telemetry::RequestRecord& record) {
  if (record.api_key_id.empty()) return;
  std::shared_ptr<KeyState> key = FindById(record.api_key_id);
  if (!key) return;
  const int64_t now = clock_.NowUnixMicros();
  const int64_t tokens = key->limits_.tpm > 0 ? TokensOf(record.usage) : 0;
  MutexLock lock(&key->mu_);
  key->RollPeriod(now);
  // A request that began in an earlier period is that period's (as the store seeds it).
  if (record.created_at_us >= key->period_start_us_) {
    key->spend_pico_ += record.cost.total;
    key->spend_since_refresh_pico_ += record.cost.total;
  }
  if (tokens > 0) key->tokens_.Add(-double(tokens), now);
}

json VirtualKeys::Describe(KeyState& key) const {
  const int64_t now = clock_.NowUnixMicros();
  json j = {{"id", key.id_},
            {"name", key.name_.empty() ? json(nullptr) : json(key.name_)},
            {"source", key.from_config_ ? "config" : "api"}};
  AddLimits(key.limits_, j);
  j["created_at"] = key.from_config_ ? json(nullptr)
                                     : json(telemetry::FormatRfc3339Micros(key.created_at_us_));
  j["rotated_at"] = key.rotated_at_us_ ? json(telemetry::FormatRfc3339Micros(*key.rotated_at_us_))
                                       : json(nullptr);
  j["revoked"] = key.revoked_at_us_.has_value();
  j["revoked_at"] = key.revoked_at_us_ ? json(telemetry::FormatRfc3339Micros(*key.revoked_at_us_))
                                       : json(nullptr);
  MutexLock lock(&key.mu_);
  key.RollPeriod(now);
  j["spend_usd"] = Usd(key.spend_pico_);
  j["spend_pico_usd"] = key.spend_pico_;
  j["budget_period_start"] =
      key.limits_.budget_duration_s > 0 ? json(telemetry::FormatRfc3339Micros(key.period_start_us_))
                                        : json(nullptr);
  if (key.limits_.max_budget_pico) {
    const int64_t left = std::max<int64_t>(0, *key.limits_.max_budget_pico - key.spend_pico_);
    j["budget_remaining_usd"] = Usd(left);
  } else {
    j["budget_remaining_usd"] = nullptr;
  }
  j["in_flight"] = key.in_flight_;
  json refused = json::object();
  for (KeyLimit l : {KeyLimit::kBudget, KeyLimit::kParallel, KeyLimit::kRpm, KeyLimit::kTpm}) {
    refused[std::string(KeyLimitName(l))] = key.refused_[size_t(l)];
  }
  j["rate_limited"] = std::move(refused);
  return j;
}

Result<json> VirtualKeys::List() const {
  ReaderMutexLock lock(&mu_);
  json keys = json::array();
  for (const auto& [_, key] : by_id_) keys.push_back(Describe(*key));
  json invalid = json::array();
  for (const InvalidKey& k : invalid_) {
    invalid.push_back({{"id", k.id},
                       {"name", k.name.empty() ? json(nullptr) : json(k.name)},
                       {"error", k.error}});
  }
  return json{{"keys", std::move(keys)}, {"invalid", std::move(invalid)}};
}

Result<json> VirtualKeys::Get(const std::string& id) const {
  ReaderMutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return MakeError(ErrorCode::kNotFound, "no key with id " + id);
  return Describe(*it->second);
}

Result<json> VirtualKeys::Create(const json& body, const std::vector<std::string>& models) {
  if (store_ == nullptr) {
    return MakeError(ErrorCode::kUnavailable, "this kvgate keeps no key store");
  }
  if (!body.is_object()) return std::unexpected(Invalid("the body must be a JSON object"));
  auto limits = ParseKeyLimits(body, "body", {"name"});
  if (!limits) return std::unexpected(limits.error());
  for (const std::string& m : limits->models) {
    if (std::find(models.begin(), models.end(), m) == models.end()) {
      return std::unexpected(Invalid("body.models: \"" + m + "\" is not a configured model or "
                                     "router"));
    }
  }
  std::string name;  // optional, as in the config: a key without one is shown by its id
  if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return std::unexpected(Invalid("body.name must be a string"));
    if (Status s = ValidateKeyName(it->get<std::string>(), "body.name"); !s) {
      return std::unexpected(s.error());
    }
    name = it->get<std::string>();
  }
  json stored_limits = body;
  stored_limits.erase("name");
  const std::string secret = NewKeySecret();
  telemetry::StoredKey stored{.id = NewId("key"),
                              .name = name,
                              .key_hash = HashApiKey(secret),
                              .limits = stored_limits,
                              .created_at_us = clock_.NowUnixMicros()};
  // The database is written outside mu_: requests look keys up under it meanwhile.
  MutexLock admin(&admin_mu_);
  {
    ReaderMutexLock lock(&mu_);
    for (const auto& [_, key] : by_id_) {
      if (!name.empty() && key->name_ == name) {
        return std::unexpected(Invalid("body.name: a key named \"" + name + "\" exists"));
      }
    }
  }
  if (Status s = store_->Insert(stored); !s) return std::unexpected(s.error());
  auto key = std::make_shared<KeyState>(stored.id, name, false, std::move(*limits),
                                        stored.created_at_us, stored.created_at_us);
  key->key_hash_ = stored.key_hash;
  WriterMutexLock lock(&mu_);
  by_hash_[stored.key_hash] = key;
  by_id_[stored.id] = key;
  any_key_ = true;
  json out = Describe(*key);
  out["key"] = secret;
  return out;
}

Result<std::shared_ptr<KeyState>> VirtualKeys::ChangeableKey(const std::string& id,
                                                             std::string_view change) const {
  ReaderMutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return MakeError(ErrorCode::kNotFound, "no key with id " + id);
  if (it->second->from_config_) {
    return MakeError(ErrorCode::kPermissionDenied,
                     "key " + id + " comes from the config file: " + std::string(change) +
                         " it there");
  }
  if (it->second->revoked_at_us_) {
    return MakeError(ErrorCode::kNotFound, "key " + id + " is revoked");
  }
  return it->second;
}

Result<json> VirtualKeys::Rotate(const std::string& id) {
  MutexLock admin(&admin_mu_);
  auto key = ChangeableKey(id, "change");
  if (!key) return std::unexpected(key.error());
  const std::string secret = NewKeySecret();
  const std::string hash = HashApiKey(secret);
  const int64_t now = clock_.NowUnixMicros();
  if (Status s = store_->Rotate(id, hash, now); !s) return std::unexpected(s.error());
  WriterMutexLock lock(&mu_);
  by_hash_.erase((*key)->key_hash_);
  (*key)->key_hash_ = hash;
  (*key)->rotated_at_us_ = now;
  by_hash_[hash] = *key;
  json out = Describe(**key);
  out["key"] = secret;
  return out;
}

Result<json> VirtualKeys::Revoke(const std::string& id) {
  MutexLock admin(&admin_mu_);
  auto key = ChangeableKey(id, "remove");
  if (!key) return std::unexpected(key.error());
  const int64_t now = clock_.NowUnixMicros();
  if (Status s = store_->Revoke(id, now); !s) return std::unexpected(s.error());
  WriterMutexLock lock(&mu_);
  by_hash_.erase((*key)->key_hash_);
  (*key)->revoked_at_us_ = now;
  return Describe(**key);
}

std::optional<double> VirtualKeys::BudgetFraction(const std::string& id) const {
  std::shared_ptr<KeyState> key = FindById(id);
  if (!key) return std::nullopt;
  return key->BudgetFraction(clock_.NowUnixMicros());
}

void VirtualKeys::ExposeMetrics(std::string& out) const {
  std::vector<std::shared_ptr<KeyState>> keys;
  {
    ReaderMutexLock lock(&mu_);
    for (const auto& [_, key] : by_id_) keys.push_back(key);
  }
  if (keys.empty()) return;
  const int64_t now = clock_.NowUnixMicros();
  struct Row {
    std::string label;
    int64_t spend;
    std::optional<int64_t> remaining;
    std::array<uint64_t, 4> refused;
  };
  std::vector<Row> rows;
  for (const auto& key : keys) {
    MutexLock lock(&key->mu_);
    key->RollPeriod(now);
    Row row{telemetry::EscapeLabelValue(key->label()), key->spend_pico_, std::nullopt,
            key->refused_};
    if (key->limits_.max_budget_pico) {
      row.remaining = std::max<int64_t>(0, *key->limits_.max_budget_pico - key->spend_pico_);
    }
    rows.push_back(std::move(row));
  }
  out += "# HELP kvgate_key_spend_usd Recorded cost of a gateway key's requests in its current "
         "budget period (since it was made, without a budget_duration)\n"
         "# TYPE kvgate_key_spend_usd gauge\n";
  for (const Row& r : rows) {
    out += "kvgate_key_spend_usd{key=\"" + r.label + "\"} " +
           telemetry::FormatMetricValue(Usd(r.spend)) + "\n";
  }
  out += "# HELP kvgate_key_budget_remaining_usd What is left of a gateway key's budget in its "
         "current period (keys with max_budget_usd)\n"
         "# TYPE kvgate_key_budget_remaining_usd gauge\n";
  for (const Row& r : rows) {
    if (!r.remaining) continue;
    out += "kvgate_key_budget_remaining_usd{key=\"" + r.label + "\"} " +
           telemetry::FormatMetricValue(Usd(*r.remaining)) + "\n";
  }
  out += "# HELP kvgate_key_rate_limited_total Requests a gateway key's limits refused, by limit "
         "(budget, max_parallel, rpm, tpm)\n"
         "# TYPE kvgate_key_rate_limited_total counter\n";
  for (const Row& r : rows) {
    for (KeyLimit l : {KeyLimit::kBudget, KeyLimit::kParallel, KeyLimit::kRpm, KeyLimit::kTpm}) {
      out += "kvgate_key_rate_limited_total{key=\"" + r.label + "\",limit=\"" +
             std::string(KeyLimitName(l)) + "\"} " + std::to_string(r.refused[size_t(l)]) + "\n";
    }
  }
}

std::string NewKeySecret() {
  unsigned char bytes[24];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // The system's generator failing is not something to paper over with a weaker one.
    throw std::runtime_error("RAND_bytes failed: cannot make a key secret");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret = "sk-kvgate-";
  for (unsigned char b : bytes) {
    secret.push_back(kHex[b >> 4]);
    secret.push_back(kHex[b & 0xf]);
  }
  return secret;
}

}  // namespace kvgate::gateway
