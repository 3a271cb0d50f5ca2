#include "gateway/keep_warm.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace kvgate::gateway {
namespace {

using keep_warm::Decision;
using keep_warm::GapSample;
using keep_warm::PingEconomics;

constexpr int64_t kMicrosPerDay = int64_t{86'400} * 1'000'000;

// The prompt cache a turn left, in tokens: `prefix` cached (what a ping reads), `tail` not.
struct CachedPrefix {
  int64_t prefix = 0, tail = 0;
};
CachedPrefix PrefixOf(const telemetry::Usage& u, const telemetry::CacheRules& rules) {
  const std::optional<int64_t> total = u.TotalInput();
  if (!total || *total <= 0) return {};
  int64_t prefix = 0;
  if (rules.automatic) {
    // The whole prompt is cached, in whole granularity steps, from the minimum up.
    const int64_t step = std::max<int64_t>(1, rules.granularity);
    if (*total >= rules.min_tokens) prefix = *total / step * step;
  } else {
    // Breakpoints: what the turn read and wrote is cached.
    prefix = u.cache_read.value_or(0) + u.cache_write_5m.value_or(0) +
             u.cache_write_1h.value_or(0) + u.cache_write_no_ttl.value_or(0);
  }
  prefix = std::min(prefix, *total);
  return {prefix, *total - prefix};
}

// The rates that apply to a prompt of `total` tokens (a long-context tier above its threshold).
telemetry::Rates RatesFor(const telemetry::Price& price, int64_t total) {
  if (price.tier_threshold_tokens && total > *price.tier_threshold_tokens) return price.above;
  return price.base;
}

void AppendLabelValue(std::string_view value, std::string& out) {
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
}

// Whether the thread's cache was written with its provider's longer TTL.
template <typename Thread>
bool LongWrites(const Thread& t, const router::Target& target) {
  const std::optional<int64_t> ttl = target.cache_rules.ttl_seconds;
  return ttl && t.ttl_us > *ttl * 1'000'000;
}

}  // namespace

std::optional<std::string> PingBody(const raw_json::Object& body) {
  if (!body.is_object()) return std::nullopt;
  std::string out = "{";
  bool completion_tokens = false;
  auto append = [&out](std::string_view raw_key, std::string_view value) {
    if (out.size() > 1) out += ',';
    out += '"';
    out += raw_key;
    out += "\":";
    out += value;
  };
  for (const raw_json::Member& m : body.members()) {
    if (m.KeyIs("max_completion_tokens")) {
      completion_tokens = true;
      continue;
    }
    if (m.KeyIs("max_tokens") || m.KeyIs("stream") || m.KeyIs("stream_options") || m.KeyIs("n")) {
      continue;
    }
    append(m.key, m.value.text);
  }
  append(completion_tokens ? "max_completion_tokens" : "max_tokens", "1");
  append("stream", "false");
  out += '}';
  return out;
}

int64_t KeepWarm::LeadMicros(int64_t ttl_seconds) {
  return std::min<int64_t>(ttl_seconds * 100'000, 30'000'000);
}

KeepWarm::KeepWarm(const router::Router& router, std::map<std::string, KeepWarmConfig> config,
                   Sender sender)
    : router_(router), sender_(std::move(sender)) {
  MutexLock lock(&mu_);
  for (auto& [name, c] : config) {
    if (!c.enabled) continue;
    configs_.emplace(name, c);
    Owner owner;
    owner.name = name;
    owner.config = c;
    owner.day_cap = keep_warm::UsdToPico(c.max_usd_per_day);
    owners_.emplace(name, std::move(owner));
  }
}

const std::string* KeepWarm::OwnerFor(std::string_view model, std::string_view target) const {
  if (auto it = configs_.find(model); it != configs_.end()) return &it->first;
  if (auto it = configs_.find(target); it != configs_.end()) return &it->first;
  return nullptr;
}

bool KeepWarm::Wants(std::string_view model, const router::Target& target,
                     providers::Endpoint endpoint) const {
  if (configs_.empty() || OwnerFor(model, target.name) == nullptr) return false;
  if (endpoint != providers::Endpoint::kChatCompletions &&
      endpoint != providers::Endpoint::kMessages) {
    return false;
  }
  return target.price.has_value() && target.cache_rules.ttl_seconds.has_value() &&
         *target.cache_rules.ttl_seconds > 0;
}

double KeepWarm::NextTurnWithinLocked(const Thread& t, double idle, double window) const {
  const auto tenant_it = tenants_.find(t.tenant);
  const keep_warm::SurvivalCounts tenant = tenant_it == tenants_.end()
                                               ? keep_warm::SurvivalCounts{}
                                               : tenant_it->second.Conditional(idle, window);
  return keep_warm::NextTurnProbability(t.gaps.Conditional(idle, window), tenant,
                                        gateway_gaps_.Conditional(idle, window));
}

std::string KeepWarm::WriteTtl(const std::string& thread_id, std::string_view model,
                               const router::Target& target) {
  if (configs_.empty() || thread_id.empty()) return {};
  const std::string* owner_name = OwnerFor(model, target.name);
  if (owner_name == nullptr || !configs_.find(*owner_name)->second.choose_write_ttl) return {};
  const telemetry::CacheRules& rules = target.cache_rules;
  if (!target.price || rules.automatic || !rules.ttl_seconds ||
      rules.long_ttl_seconds <= *rules.ttl_seconds) {
    return {};
  }
  MutexLock lock(&mu_);
  auto it = threads_.find(thread_id);
  if (it == threads_.end()) return {};
  const Thread& t = it->second;
  const int64_t cached = t.prefix_tokens + t.tail_tokens;
  const telemetry::Rates rates = RatesFor(*target.price, cached);
  if (rates.cache_write_1h <= 0) return {};
  const keep_warm::WriteTtlInput in{
      .p_short = NextTurnWithinLocked(t, 0, double(*rules.ttl_seconds)),
      .p_long = NextTurnWithinLocked(t, 0, double(rules.long_ttl_seconds)),
      .prefix_tokens = cached,
      .new_tokens = t.growth_tokens,
      .rates = rates};
  if (!keep_warm::ExpectedWriteCosts(in).PreferLong()) return {};
  ++owners_.at(*owner_name).long_writes;
  return "1h";
}

void KeepWarm::Stage(const std::string& request_id, PingTemplate ping) {
  MutexLock lock(&mu_);
  // Every staged request is recorded right after its attempt (Observe takes it out); the bound
  // is for a defect that would leak them.
  if (staged_.size() >= kMaxThreads && !staged_.contains(request_id)) return;
  staged_.insert_or_assign(request_id, std::move(ping));
}

void KeepWarm::Observe(telemetry::RequestRecord& record) {
  MutexLock lock(&mu_);
  std::optional<PingTemplate> staged;
  if (auto it = staged_.find(record.request_id); it != staged_.end()) {
    staged = std::move(it->second);
    staged_.erase(it);
  }
  if (record.thread_id.empty()) return;
  if (record.purpose == telemetry::kPurposeKeepWarm) {
    std::string owner_name;
    if (auto t = threads_.find(record.thread_id); t != threads_.end()) {
      owner_name = t->second.owner;
    } else if (const std::string* o = OwnerFor(record.model, record.target)) {
      owner_name = *o;
    }
    if (auto o = owners_.find(owner_name); o != owners_.end()) OnPingLocked(record, o->second);
    return;
  }
  const std::string* owner_name = OwnerFor(record.model, record.target);
  if (owner_name == nullptr) return;
  OnTurnLocked(record, owners_.at(*owner_name), std::move(staged));
}

void KeepWarm::RollDay(Owner& owner, int64_t now_us) {
  const int64_t day = now_us / kMicrosPerDay;
  if (day != owner.day) {
    owner.day = day;
    owner.day_spent = 0;
  }
}

keep_warm::GapSample* KeepWarm::TenantLocked(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return &it->second;
  // Beyond kMaxTenants, new tenants have the gateway's evidence only.
  if (tenants_.size() >= kMaxTenants) return nullptr;
  return &tenants_.emplace(tenant, GapSample(kTenantGaps)).first->second;
}

void KeepWarm::OnTurnLocked(telemetry::RequestRecord& record, Owner& owner,
                            std::optional<PingTemplate> staged) {
  if (record.status != "ok") return;  // a failed turn left the cache as it was
  std::optional<size_t> target_index = router_.FindTarget(record.target);
  if (!target_index) return;
  const router::Target& target = router_.targets()[*target_index];
  if (!target.price || !target.cache_rules.ttl_seconds) return;

  auto [it, inserted] = threads_.try_emplace(record.thread_id);
  Thread& t = it->second;
  if (inserted) {
    lru_.push_front(record.thread_id);
    t.lru_pos = lru_.begin();
    t.owner = owner.name;
    t.tenant = record.api_key_id;
  } else {
    lru_.splice(lru_.begin(), lru_, t.lru_pos);
  }
  const int64_t now = record.created_at_us;
  if (!inserted && t.last_turn_us > 0 && now > t.last_turn_us) {
    const int64_t gap_us = now - t.last_turn_us;
    const double gap = double(gap_us) / 1e6;
    t.gaps.Add(gap);
    GapSample* tenant = TenantLocked(t.tenant);
    if (t.retired) {
      // It was counted as a gap that never ended: it ended after all.
      if (tenant != nullptr && !tenant->Resolve(gap)) tenant->Add(gap);
      if (!gateway_gaps_.Resolve(gap)) gateway_gaps_.Add(gap);
    } else {
      if (tenant != nullptr) tenant->Add(gap);
      gateway_gaps_.Add(gap);
    }
    // The ping's worth: reads that would have been a re-write, had no ping renewed the cache.
    if (t.pings_since_turn > 0 && t.renewed_us > t.last_turn_us && gap_us >= t.ttl_us &&
        now - t.renewed_us < t.ttl_us) {
      const CachedPrefix before{t.prefix_tokens, t.tail_tokens};
      PingEconomics econ{.prefix_tokens = before.prefix,
                         .tail_tokens = before.tail,
                         .rates = RatesFor(*target.price, before.prefix + before.tail),
                         .automatic = target.cache_rules.automatic,
                         .long_writes = LongWrites(t, target)};
      const int64_t saved = econ.SavingFor(record.usage.cache_read.value_or(0));
      record.keep_warm_saved = saved;
      owner.saved += saved;
    }
  }
  t.retired = false;
  t.last_turn_us = now;
  t.renewed_us = now;
  t.pings_since_turn = 0;
  const CachedPrefix cached = PrefixOf(record.usage, target.cache_rules);
  t.written_tokens = record.usage.cache_write_5m.value_or(0) +
                     record.usage.cache_write_1h.value_or(0) +
                     record.usage.cache_write_no_ttl.value_or(0);
  // A turn after an expiry wrote its whole prompt again; the growth is what a warm turn writes.
  const int64_t before_total = t.prefix_tokens + t.tail_tokens;
  const int64_t total = cached.prefix + cached.tail;
  t.growth_tokens = !inserted && before_total > 0 && total >= before_total ? total - before_total
                                                                           : t.written_tokens;
  t.prefix_tokens = cached.prefix;
  t.tail_tokens = cached.tail;
  int64_t ttl_s = *target.cache_rules.ttl_seconds;
  // A turn that wrote with the long TTL keeps its prefix that long; so does one that only read
  // a prefix written that way (a read renews the entry for its own TTL).
  const bool read_only = t.written_tokens == 0 && record.usage.cache_read.value_or(0) > 0;
  if (record.usage.cache_write_1h.value_or(0) > 0 || (read_only && LongWrites(t, target))) {
    ttl_s = std::max(ttl_s, target.cache_rules.long_ttl_seconds);
  }
  t.ttl_us = ttl_s * 1'000'000;
  if (staged) {
    if (t.ping) body_bytes_ -= t.ping->body.size();
    t.ping.reset();
    if (staged->body.size() <= kMaxBodyBytes) {
      body_bytes_ += staged->body.size();
      t.ping = std::make_shared<const PingTemplate>(std::move(*staged));
    }
  } else if (t.ping) {
    // This turn's body was not kept: the old one is not this prompt.
    body_bytes_ -= t.ping->body.size();
    t.ping.reset();
  }
  ScheduleLocked(record.thread_id, t);
  // The bounds: the least recently active threads go first.
  while ((threads_.size() > kMaxThreads || body_bytes_ > kMaxTotalBytes) && lru_.size() > 1) {
    auto victim = threads_.find(lru_.back());
    if (victim == threads_.end() || victim->first == record.thread_id) break;
    EraseLocked(victim);
  }
}

void KeepWarm::OnPingLocked(const telemetry::RequestRecord& record, Owner& owner) {
  auto it = threads_.find(record.thread_id);
  if (it != threads_.end() && it->second.in_flight_hold >= 0) {
    owner.held -= it->second.in_flight_hold;
    it->second.in_flight_hold = -1;
  }
  RollDay(owner, record.created_at_us);
  owner.day_spent += record.cost.total;
  owner.cost += record.cost.total;
  ++owner.pings;
  if (it == threads_.end()) return;
  Thread& t = it->second;
  if (record.status == "ok") {
    t.renewed_us = std::max(t.renewed_us, record.created_at_us);
    ScheduleLocked(record.thread_id, t);
  } else {
    UnscheduleLocked(record.thread_id, t);
    RetireLocked(record.thread_id, t);
  }
}

void KeepWarm::ScheduleLocked(const std::string& thread_id, Thread& t) {
  UnscheduleLocked(thread_id, t);
  if (!t.ping || t.ttl_us <= 0) return;
  t.due_us = t.renewed_us + t.ttl_us - LeadMicros(t.ttl_us / 1'000'000);
  schedule_.emplace(t.due_us, thread_id);
}

void KeepWarm::UnscheduleLocked(const std::string& thread_id, Thread& t) {
  if (t.due_us == 0) return;
  auto [first, last] = schedule_.equal_range(t.due_us);
  for (auto s = first; s != last; ++s) {
    if (s->second == thread_id) {
      schedule_.erase(s);
      break;
    }
  }
  t.due_us = 0;
}

void KeepWarm::RetireLocked(const std::string& /*thread_id*/, Thread& t) {
  if (t.retired) return;
  t.retired = true;
  if (GapSample* tenant = TenantLocked(t.tenant)) tenant->Add(keep_warm::kNeverEnded);
  gateway_gaps_.Add(keep_warm::kNeverEnded);
}

void KeepWarm::EraseLocked(std::unordered_map<std::string, Thread>::iterator it) {
  Thread& t = it->second;
  UnscheduleLocked(it->first, t);
  if (t.ping) body_bytes_ -= t.ping->body.size();
  if (t.in_flight_hold >= 0) {
    if (auto o = owners_.find(t.owner); o != owners_.end()) o->second.held -= t.in_flight_hold;
  }
  lru_.erase(t.lru_pos);
  threads_.erase(it);
}

std::optional<int64_t> KeepWarm::RunDue(int64_t now_us) {
  std::vector<std::pair<std::shared_ptr<const PingTemplate>, std::string>> to_send;
  std::optional<int64_t> next;
  {
    MutexLock lock(&mu_);
    while (!schedule_.empty() && schedule_.begin()->first <= now_us) {
      const std::string thread_id = schedule_.begin()->second;
      schedule_.erase(schedule_.begin());
      auto it = threads_.find(thread_id);
      if (it == threads_.end()) continue;
      Thread& t = it->second;
      t.due_us = 0;
      auto o = owners_.find(t.owner);
      if (o == owners_.end() || !t.ping || t.in_flight_hold >= 0) continue;
      Owner& owner = o->second;
      RollDay(owner, now_us);
      const router::Target& target = router_.targets()[t.ping->target];
      const double idle = double(now_us - t.last_turn_us) / 1e6;
      const double p = NextTurnWithinLocked(t, idle, double(t.ttl_us) / 1e6);
      keep_warm::DecisionInput in{
          .probability = p,
          .economics = {.prefix_tokens = t.prefix_tokens,
                        .tail_tokens = t.tail_tokens,
                        .rates = RatesFor(*target.price, t.prefix_tokens + t.tail_tokens),
                        .automatic = target.cache_rules.automatic,
                        .long_writes = LongWrites(t, target)},
          .pings_since_turn = t.pings_since_turn,
          .max_pings_per_thread = owner.config.max_pings_per_thread,
          .day_committed = owner.day_spent + owner.held,
          .day_cap = owner.day_cap};
      const Decision decision = keep_warm::Decide(in);
      if (decision != Decision::kPing) {
        ++owner.skipped[std::string(keep_warm::ReasonName(decision))];
        RetireLocked(thread_id, t);  // its cache expires now
        continue;
      }
      t.in_flight_hold = in.economics.WorstCost();
      owner.held += t.in_flight_hold;
      ++t.pings_since_turn;
      to_send.emplace_back(t.ping, thread_id);
    }
    if (!schedule_.empty()) next = schedule_.begin()->first;
  }
  for (auto& [ping, thread_id] : to_send) sender_(std::move(ping), std::move(thread_id));
  return next;
}

void KeepWarm::ExposeMetrics(std::string& out) const {
  MutexLock lock(&mu_);
  auto family = [&out](const char* name, const char* help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += " counter\n";
  };
  auto sample = [&out](const char* name, const std::string& model, const char* reason,
                       const std::string& value) {
    out += name;
    out += "{model=\"";
    AppendLabelValue(model, out);
    if (reason != nullptr) {
      out += "\",reason=\"";
      out += reason;
    }
    out += "\"} ";
    out += value;
    out += '\n';
  };
  auto usd = [](int64_t pico) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%.12g", telemetry::PicoUsdToUsd(pico));
    return std::string(buf);
  };
  family("kvgate_keep_warm_pings_total", "Keep-warm pings sent, by model or router.");
  for (const auto& [name, o] : owners_) {
    sample("kvgate_keep_warm_pings_total", name, nullptr, std::to_string(o.pings));
  }
  family("kvgate_keep_warm_cost_usd_total", "What keep-warm pings cost (USD).");
  for (const auto& [name, o] : owners_)
    sample("kvgate_keep_warm_cost_usd_total", name, nullptr, usd(o.cost));
  family("kvgate_keep_warm_saved_usd_total",
         "What pinged caches saved the turns after them (re-writes avoided, USD); minus the cost: "
         "the net saving.");
  for (const auto& [name, o] : owners_) {
    sample("kvgate_keep_warm_saved_usd_total", name, nullptr, usd(o.saved));
  }
  family("kvgate_keep_warm_skipped_total",
         "Threads whose cache was let expire, by reason (unlikely, thread_cap, daily_cap, "
         "not_cached).");
  for (const auto& [name, o] : owners_) {
    for (const char* reason : {"unlikely", "thread_cap", "daily_cap", "not_cached"}) {
      auto it = o.skipped.find(reason);
      sample("kvgate_keep_warm_skipped_total", name, reason,
             std::to_string(it == o.skipped.end() ? 0 : it->second));
    }
  }
  family("kvgate_keep_warm_long_writes_total",
         "Requests (turns and pings) sent with 1-hour cache writes because the thread's gaps made "
         "them cheaper than 5-minute ones.");
  for (const auto& [name, o] : owners_) {
    sample("kvgate_keep_warm_long_writes_total", name, nullptr, std::to_string(o.long_writes));
  }
}

}  // namespace kvgate::gateway
