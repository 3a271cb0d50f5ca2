// Keep-warm: pings that renew a thread's cached prompt prefix shortly before its provider would
// let it expire, sent only when the next turn is likely enough to come in time to pay for them
// (keep_warm_policy.h has the rule; docs/keep-warm.md the whole story).
//
// The service learns from finished records (Recorder::SetKeepWarmObserver): each client turn of
// a thread on a model or router with keep_warm enabled leaves what a ping needs (the body sent
// to its target, staged by the attempt loop before the attempt: Stage), its idle gap (the
// thread's, its tenant's and the gateway's samples), and the cache it left (the turn's usage);
// each ping's record settles its cost against the day's cap. RunDue, driven by the gateway's
// timer, decides for each thread whose cache is about to expire and hands the pings to the
// sender (the gateway's, which sends them through the same target, provider and key as the
// thread's last turn, recorded with purpose "keep_warm").
//
// Memory is bounded: a body over kMaxBodyBytes is not kept (the thread is not kept warm), all
// bodies kept together stay under kMaxTotalBytes and at most kMaxThreads threads are tracked
// (the least recently active go first), and the gap samples are fixed-size.
//
// Thread safety: every method may be called from any thread; one mutex guards the state, never
// held while the sender or anything outside runs.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/raw_json.h"
#include "gateway/config.h"
#include "gateway/keep_warm_policy.h"
#include "gateway/providers/provider.h"
#include "router/router.h"
#include "telemetry/record.h"

namespace kvgate::gateway {

// What a ping resends: the thread's last turn as it went to its target.
struct PingTemplate {
  providers::Endpoint endpoint = providers::Endpoint::kChatCompletions;
  std::string body;             // PingBody of the body sent (the target's wire)
  size_t target = 0;            // index in router::Router::targets()
  int key_index = 0;            // the provider key that served the turn
  std::string model;            // what the client asked for (a model or a router)
  std::string record_endpoint;  // RequestRecord::endpoint of the turn
  std::string api_key_id;
  // The attempt's provider options worth keeping (the Messages pass-through's headers).
  std::string anthropic_version, anthropic_beta;
  int default_max_tokens = 4096;
};

// The smallest request with the same prompt as `body` (a chat completions or messages body):
// its members byte for byte, but `max_tokens` (or `max_completion_tokens`, when it was that) 1,
// `stream` false and no `stream_options` or `n`. nullopt when `body` is not an object.
std::optional<std::string> PingBody(const raw_json::Object& body);

class KeepWarm {
 public:
  static constexpr size_t kMaxBodyBytes = 1 << 20;        // 1 MiB per thread
  static constexpr size_t kMaxTotalBytes = 256ull << 20;  // 256 MiB of bodies in all
  static constexpr size_t kMaxThreads = 20'000;
  static constexpr size_t kThreadGaps = 16, kTenantGaps = 256, kGatewayGaps = 2048;
  static constexpr size_t kMaxTenants = 1000;

  // Sends one ping (the gateway's; must not call back into this object synchronously).
  using Sender = std::function<void(std::shared_ptr<const PingTemplate>, std::string thread_id)>;

  // `config`: keep_warm by model or router name (only the enabled ones matter). `router` must
  // outlive this.
  KeepWarm(const router::Router& router, std::map<std::string, KeepWarmConfig> config,
           Sender sender);

  // Whether any model or router has keep_warm enabled.
  bool any_enabled() const { return !configs_.empty(); }
  // Whether a turn of client model `model` served by `target` is kept warm (the endpoint must be
  // chat completions or messages, and the target's provider must have a TTL and a price).
  bool Wants(std::string_view model, const router::Target& target,
             providers::Endpoint endpoint) const;
  // The cache-write TTL for the next request of `thread_id` (client model `model`) on `target`:
  // "1h" when keep_warm's choose_write_ttl is on there, the target's caching rules have a longer
  // TTL priced apart, and the thread's gaps make long writes the cheaper (ExpectedWriteCosts);
  // "" otherwise (the request's breakpoints stay as they are). A "1h" is counted in
  // kvgate_keep_warm_long_writes_total.
  std::string WriteTtl(const std::string& thread_id, std::string_view model,
                       const router::Target& target);
  // Before an attempt of request `request_id` whose turn Wants: what a ping would send. The
  // record's Observe takes it (the last attempt's wins).
  void Stage(const std::string& request_id, PingTemplate ping);
  // Every finished record (Recorder's observer): a client turn updates its thread and may get
  // keep_warm_saved; a ping settles its cost.
  void Observe(telemetry::RequestRecord& record);
  // Decides for every thread due at `now_us` and sends the pings decided. Returns when the next
  // thread will be due (nullopt: none is waiting).
  std::optional<int64_t> RunDue(int64_t now_us);

  // kvgate_keep_warm_{pings,cost_usd,saved_usd,skipped,long_writes}_total{model[,reason]}
  // (Prometheus text).
  void ExposeMetrics(std::string& out) const;

  // How long before the expected expiry a ping goes: a tenth of the TTL, at most 30 s.
  static int64_t LeadMicros(int64_t ttl_seconds);

 private:
  struct Owner {
    std::string name;
    KeepWarmConfig config;
    int64_t day_cap = 0;    // pico-USD
    int64_t day = -1;       // UTC day number of day_spent
    int64_t day_spent = 0;  // settled pings today
    int64_t held = 0;       // worst cases of pings in flight
    // Metrics.
    uint64_t pings = 0, long_writes = 0;
    int64_t cost = 0, saved = 0;
    std::map<std::string, uint64_t> skipped;  // by reason
  };
  struct Thread {
    std::string owner;
    std::string tenant;
    std::shared_ptr<const PingTemplate> ping;  // null: nothing to resend
    int64_t ttl_us = 0;
    int64_t last_turn_us = 0;  // the last client turn's arrival
    int64_t renewed_us = 0;    // the latest cache use: that turn or a successful ping
    int64_t prefix_tokens = 0, tail_tokens = 0;
    int64_t written_tokens = 0;  // what the last turn wrote to the cache
    // How much the prompt grew from the turn before (what a turn newly writes when its cache
    // held); the first turn's writes until there is a turn before.
    int64_t growth_tokens = 0;
    int pings_since_turn = 0;
    int64_t in_flight_hold = -1;  // >= 0: a ping is out, holding this much of the day's cap
    int64_t due_us = 0;           // 0: not scheduled
    keep_warm::GapSample gaps{kThreadGaps};
    bool retired = false;  // counted as a gap that never ended (RetireLocked)
    std::list<std::string>::iterator lru_pos;
  };

  // The enabled model or router that keeps a turn of client model `model` on `target` warm: the
  // router the client named, else the model that served it. nullptr when neither is enabled.
  const std::string* OwnerFor(std::string_view model, std::string_view target) const;
  void ScheduleLocked(const std::string& thread_id, Thread& t) REQUIRES(mu_);
  void UnscheduleLocked(const std::string& thread_id, Thread& t) REQUIRES(mu_);
  // The thread went silent with its cache: a gap that never ended, for its tenant and gateway.
  void RetireLocked(const std::string& thread_id, Thread& t) REQUIRES(mu_);
  void EraseLocked(std::unordered_map<std::string, Thread>::iterator it) REQUIRES(mu_);
  // The probability that the thread's next turn comes within `window` seconds of its last one.
  double NextTurnWithinLocked(const Thread& t, double idle, double window) const REQUIRES(mu_);
  // The tenant's sample (created on first use); nullptr beyond kMaxTenants.
  keep_warm::GapSample* TenantLocked(const std::string& tenant) REQUIRES(mu_);
  void OnTurnLocked(telemetry::RequestRecord& record, Owner& owner,
                    std::optional<PingTemplate> staged) REQUIRES(mu_);
  void OnPingLocked(const telemetry::RequestRecord& record, Owner& owner) REQUIRES(mu_);
  static void RollDay(Owner& owner, int64_t now_us);

  // Constant after construction.
  const router::Router& router_;
  const Sender sender_;
  std::map<std::string, KeepWarmConfig, std::less<>> configs_;  // the enabled ones

  mutable Mutex mu_;
  std::map<std::string, Owner, std::less<>> owners_ GUARDED_BY(mu_);  // one per configs_ entry
  std::unordered_map<std::string, PingTemplate> staged_ GUARDED_BY(mu_);
  std::unordered_map<std::string, Thread> threads_ GUARDED_BY(mu_);
  std::list<std::string> lru_ GUARDED_BY(mu_);                    // front: most recently active
  std::multimap<int64_t, std::string> schedule_ GUARDED_BY(mu_);  // due time -> thread
  size_t body_bytes_ GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, keep_warm::GapSample> tenants_ GUARDED_BY(mu_);
  keep_warm::GapSample gateway_gaps_ GUARDED_BY(mu_){kGatewayGaps};
};

}  // namespace kvgate::gateway
