// Threads and cache-drop diagnosis (docs/api.md lists the causes a user sees).
//
// A prompt fingerprint summarizes a request's prompt prefix at element boundaries (tools, then a
// top-level system, then each message: the order providers cache in) so that two turns of one
// conversation can be compared without keeping their text: how many leading elements they share,
// and where, down to a 64-byte chunk of the element's canonical JSON, the first difference lies.
// The ThreadTracker remembers, per thread, the previous turn and, when a turn's cache reads fall
// short of what the shared prefix should have given, names the cause.
//
// Pure logic: no I/O, no clock (times come from the records).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "common/raw_json.h"
#include "telemetry/prompt_excerpt.h"
#include "telemetry/record.h"

namespace kvgate::telemetry {

// Bytes of minified JSON per chunk hash. The character offset of a change is known to this many
// bytes: it lies in [char_offset, char_offset + kFingerprintChunkBytes).
inline constexpr size_t kFingerprintChunkBytes = 64;

struct FingerprintElement {
  enum class Kind { kTools, kSystem, kMessage };
  Kind kind = Kind::kMessage;
  int message_index = -1;        // index in "messages" for kMessage, -1 otherwise
  uint64_t prefix_hash = 0;      // rolling hash of this element and every element before it
  uint64_t length = 0;           // bytes of this element's minified JSON
  std::vector<uint32_t> chunks;  // hash of each 64-byte chunk of the minified JSON
  // kMessage: its role is system or developer (what a provider with a top-level system prompt,
  // Anthropic, receives as its system).
  bool system_role = false;
  // kMessage: its role as sent ("system", "developer", "user", "assistant", "tool"; a Responses
  // item without one: "tool" for a tool's output, "assistant" for a call), "" when unknown.
  std::string role;
  bool operator==(const FingerprintElement&) const = default;
};

struct PromptFingerprint {
  std::vector<FingerprintElement> elements;
  uint64_t TotalBytes() const;
  bool operator==(const PromptFingerprint&) const = default;
};

// Fingerprints an OpenAI-format (or Anthropic-format) request body: "tools" (whole array, one
// element), "system" (top-level, one element), then each entry of "messages". A Responses API
// body has "instructions" in place of "system" and "input" in place of "messages" (each item a
// message; a string input is one message). Each element is
// hashed as the client sent it, minified: whitespace between tokens does not matter, key order
// and string escaping do. (Hashing the client's bytes costs a few thousand instructions per
// request where a parse + sorted re-serialization cost ~70k; clients re-send earlier messages
// byte-identically, which is also what provider caches need.) `cache_control` members are left
// out: they are not prompt tokens, and clients move the breakpoint to the newest message each
// turn. Missing or malformed fields are skipped; never throws.
PromptFingerprint Fingerprint(const raw_json::Object& request_body);

// The elements Fingerprint hashes, in its order: fn(kind, message_index, value).
void ForEachPromptElement(
    const raw_json::Object& request_body,
    const std::function<void(FingerprintElement::Kind, int, raw_json::Value)>& fn);
// An element's bytes as Fingerprint hashes them: minified, cache_control members left out.
void AppendPromptBytes(raw_json::Value value, std::string& out);

// "tools" | "system" | "message": an element's kind as stored and in a diagnosis' `element`.
std::string_view ElementKindName(FingerprintElement::Kind kind);

// Storage form (RequestRecord.prompt_fingerprint): a JSON array, one object per element:
// {"k":"tools"|"system"|"message","i":message_index,"r":role,"h":"<16 hex>","n":length,"c":"<base64
// of little-endian u32 chunk hashes>"} ("r" only for a message with a role; older rows lack it).
std::string ToJsonText(const PromptFingerprint& fingerprint);
Result<PromptFingerprint> FromJson(const nlohmann::json& json);

// Where two fingerprints first differ.
struct PrefixComparison {
  size_t common_elements = 0;    // leading elements equal in both
  uint64_t common_bytes = 0;     // canonical bytes of those elements (plus the equal chunks of the
                                 // first differing element)
  bool previous_intact = false;  // every element of the previous prompt is in the current one
  // When !previous_intact: the first differing element of the current prompt (if it has one).
  std::optional<FingerprintElement::Kind> diverged_kind;
  int diverged_message_index = -1;
  bool diverged_system_role = false;  // that message's role is system / developer
  uint64_t diverged_char_offset = 0;  // chunk-aligned byte offset inside that element
};
PrefixComparison ComparePrefixes(const PromptFingerprint& previous,
                                 const PromptFingerprint& current);

// A provider's prompt-caching rules (the price catalog carries them per provider type).
struct CacheRules {
  int64_t min_tokens = 1024;  // shorter prompts are never cached
  int64_t granularity = 128;  // cache hits come in multiples of this many tokens
  // Idle time after which the cache is assumed gone; nullopt when entries only go under memory
  // pressure (vLLM, SGLang, llama.cpp, kvgate's engine): then a drop is never "expired".
  std::optional<int64_t> ttl_seconds = 300;
  // The TTL of entries written with the longer retention (Anthropic's 1h writes): a turn that
  // wrote such entries keeps its prefix this long.
  int64_t long_ttl_seconds = 3600;
  // True when the provider caches every prompt prefix by itself (OpenAI, DeepSeek, Gemini implicit,
  // vLLM, kvgate's engine). False when only marked prefixes are cached (Anthropic cache_control):
  // then the tracker expects back only what the previous turn read or wrote.
  bool automatic = true;
};

struct Diagnosis {
  // "expired" | "partial_eviction" | "prompt_changed" | "model_switch" | "routed_away" |
  // "engine_restarted" | "below_minimum"
  std::string cause;
  std::string detail;           // one human sentence
  int64_t expected_cached = 0;  // tokens the cache should have given this prompt
  int64_t cached = 0;           // tokens this turn read from the cache
  double idle_seconds = 0;      // since the previous turn of the thread arrived
  std::optional<int> message_index;     // prompt_changed on a message
  bool system_message = false;          // ...whose role is system or developer
  std::optional<std::string> element;   // prompt_changed: "tools" | "system" | "message"
  std::optional<uint64_t> char_offset;  // prompt_changed: chunk-aligned offset, see above
  std::optional<int64_t> lost_tokens;   // prompt_changed: cached tokens the change cost
  // prompt_changed: the changed element's role ("tools" for the tools, "system" for a top-level
  // system; a message's role, when known) and, for a message, its 1-based position.
  std::optional<std::string> role;
  std::optional<int> message_number;
  // prompt_changed: the text around the change (when the thread's texts are kept).
  std::optional<Excerpt> excerpt;
  // prompt_changed: the same element changed at about the same place on `turns_changed`
  // consecutive turns (>= kVolatileTurns), which cost `lost` (Cost::missed, pico-USD) together.
  bool volatile_prefix = false;
  int turns_changed = 0;
  int64_t lost = 0;
  std::optional<std::string> previous_model, previous_provider;  // model_switch, routed_away
  std::optional<std::string> router;                             // routed_away
  std::optional<int64_t> min_tokens;                             // below_minimum
  std::optional<int64_t> ttl_seconds;  // expired, partial_eviction: the TTL the idle gap met

  // Tokens this turn should have read from the cache and did not (0 for below_minimum: the
  // provider could not have cached them).
  int64_t MissedTokens() const;

  // {"cause","detail","expected_cached","cached","idle_seconds", and the optional fields set;
  // "excerpt": {"before","after","beyond_kept"}; a volatile prefix: "volatile": true,
  // "turns_changed", "lost_usd"}.
  nlohmann::json ToJson() const;
};

// What the thread memory keeps of one turn (all the diagnosis and the router's cache model need).
struct TurnSummary {
  std::string model;     // what the client asked for
  std::string target;    // the configured model that served it (== model without a router)
  std::string provider;
  int key = 0;           // which of the provider's API keys served it
  std::string system_fingerprint;  // the serving backend's instance (engine restarts change it)
  std::string response_id;  // the provider's id of its answer (Anthropic's msg_...), "" unknown
  int64_t created_at_us = 0;
  std::shared_ptr<const PromptFingerprint> fingerprint;  // never null in a summary
  std::optional<int64_t> cache_read;
  std::optional<int64_t> cache_write;  // 5m + 1h + no TTL, when all known
  std::optional<int64_t> total_input;  // when every input component is known
  std::optional<int64_t> output;
  bool wrote_1h = false;               // the turn wrote with the long TTL
  // When a keep-warm ping last read this turn's cached prefix on the same target (renewing its
  // TTL), 0 when none did: its expiry counts from the later of this and created_at_us.
  int64_t renewed_at_us = 0;

  // REQUIRES: fingerprint != nullptr.
  static TurnSummary Of(const RequestRecord& record,
                        std::shared_ptr<const PromptFingerprint> fingerprint);
};

// What a provider's cache should give `current` (a prompt of `current_input_tokens` tokens when
// known) if `last` is the thread's last turn on that same cache: the prefix the two prompts share
// (in tokens, at the last turn's bytes-per-token ratio), bounded by what the last turn left
// cached (its whole prompt with automatic caching, its reads and writes with breakpoints), in
// whole granularity steps, nothing below the minimum. Both the cache-miss diagnosis and the
// router's cost planner use it, so what kvgate predicts and what it explains afterwards agree.
struct CacheExpectation {
  int64_t tokens = 0;          // expected cache reads, ignoring expiry
  int64_t shared_tokens = 0;   // tokens of the shared prefix
  int64_t left_cached = 0;     // what the last turn left in the cache (before expiry)
  double idle_seconds = 0;     // now - the last turn (or the keep-warm ping that renewed it)
  std::optional<int64_t> ttl_seconds;  // the TTL that applies to the last turn's entries
  bool expired = false;        // idle >= ttl: the cache is expected gone
  PrefixComparison comparison;
  // Expected reads at `now_us`: 0 once expired.
  int64_t Live() const { return expired ? 0 : tokens; }
};
// nullopt when the last turn's input size is unknown (nothing to convert bytes with).
std::optional<CacheExpectation> ExpectCached(const TurnSummary& last,
                                             const PromptFingerprint& current,
                                             std::optional<int64_t> current_input_tokens,
                                             const CacheRules& rules, int64_t now_us);

// What kvgate knows about a turn beyond its usage when it diagnoses it: whether a router moved
// the thread (and why), for "routed_away".
struct TurnContext {
  std::string router;        // the router that chose this turn's target, "" without one
  std::string route_reason;  // its reason in words
  // This turn's prompt text (CapturePromptTexts), for the excerpt of a change and for the next
  // turn to compare with; null keeps no text (excerpts off).
  std::shared_ptr<const PromptTexts> texts;
  // What a diagnosed miss cost (Cost::missed, pico-USD; MissCost), so that the tracker can sum a
  // volatile prefix's turns; null counts 0.
  std::function<int64_t(const Diagnosis&)> missed_cost;
};

// A prompt that changes in the same element at about the same place (within
// kVolatileOffsetSlack bytes) on this many consecutive turns has a volatile prefix: a timestamp,
// a request id or a counter that re-writes the cache after it on every turn.
inline constexpr int kVolatileTurns = 3;
inline constexpr uint64_t kVolatileOffsetSlack = 2 * kFingerprintChunkBytes;

// The diagnosis itself, without state: `previous` and `current` are consecutive turns of a thread,
// `rules` those of the target `current` went to. Returns nullopt when there is nothing to say:
// usage unknown (this turn's cache_read or total input; for automatic caching the previous turn's
// total input, otherwise its reads and writes), or reads as the shared prefix allows within
// max(granularity, 2% of the expected count).
//
// The expected reads are ExpectCached's: the prefix this prompt shares with the previous one, not
// the whole previous prompt (a turn that replaces its last message expects only what precedes
// it). Decision order when reads fell short of that: routed_away (a router moved the thread to
// another target) or model_switch (another model or provider), engine_restarted (same
// self-hosted target, a new backend instance), expired (reads ~0, idle >= ttl; the long TTL when
// the previous turn wrote long-TTL entries), partial_eviction (otherwise). When reads were as
// allowed: below_minimum (no reads, the prompt shares a prefix with the previous turn but is
// shorter than min_tokens), prompt_changed (the client changed the prompt before the previous
// turn's last message, which cost reads the previous turn had cached).
std::optional<Diagnosis> DiagnoseTurn(const TurnSummary& previous, const TurnSummary& current,
                                      const CacheRules& rules, const TurnContext& context = {});

// Whether a provider's own cache-miss reason (RequestRecord::provider_cache_miss_reason:
// Anthropic's model_changed, system_changed, tools_changed, messages_changed, or "none") agrees
// with kvgate's diagnosis of the same turn (Diagnosis::ToJson, null: the cache read what it
// should). The provider compares request structure only, so a kvgate cause it cannot see
// (expired, partial_eviction, below_minimum, engine_restarted) agrees with "none"; a structural
// cause agrees with the matching reason only (model_switch and routed_away with model_changed,
// prompt_changed at the system, the tools or a message with system_changed, tools_changed,
// messages_changed). nullopt when they cannot be compared: no reason, or one that says the
// provider did not compare (previous_message_not_found, unavailable, anything unknown).
std::optional<bool> ProviderDiagnosisAgrees(const nlohmann::json& kvgate_diagnosis,
                                            std::string_view provider_reason);

// A thread as the router sees it before a turn: its last turn, the last turn each target it used
// served (the caches those targets may still hold for it), and how its turns go.
struct ThreadView {
  std::optional<TurnSummary> latest;
  std::vector<TurnSummary> by_target;  // most recent first, at most ThreadTracker::kTargetsKept
  int turns = 0;                       // diagnosed turns remembered for this thread
  double mean_output_tokens = 0;       // over recent turns (exponentially weighted)
  double mean_growth_tokens = 0;       // input tokens added per turn
  double mean_gap_seconds = 0;         // idle time between turns
  std::vector<double> recent_gaps;     // the last kRecentGaps gaps, oldest first (seconds)
  static constexpr size_t kRecentGaps = 8;
  // The share of recent gaps shorter than `ttl_seconds` (1 without gaps yet): how likely the
  // next turn is to find a cache of that TTL still warm.
  double WarmShare(double ttl_seconds) const;
  const TurnSummary* OnTarget(std::string_view target) const;
};

struct ThreadTrackerOptions {
  size_t max_threads = 10'000;  // least recently used threads are forgotten beyond this
  size_t shards = 16;           // independent locks; max_threads is split evenly across them
};

// Keeps the previous turn of each thread and diagnoses each new turn against it.
//
// Thread safety: Diagnose and Forget may be called from any thread. Threads are spread over
// `shards` shards by hash of the thread id, each with its own mutex held only to swap the stored
// previous turn for this one and update the LRU; the comparison runs after the lock is released.
// Two turns of the same thread recorded concurrently are compared in whichever order they take the
// lock. Memory: per remembered thread, about prompt_bytes / 16 bytes of chunk hashes.
class ThreadTracker {
 public:
  explicit ThreadTracker(ThreadTrackerOptions options = {});

  // Compares `turn` with the previous turn of turn.thread_id, then remembers `turn` as the latest.
  // Returns nullopt for a turn without thread id (not remembered) and for the first turn of a
  // thread; otherwise DiagnoseTurn(previous, this turn, rules), and for prompt_changed the
  // excerpt (context.texts against the previous turn's) and the volatile-prefix run. The
  // thread keeps context.texts (not the previous turn's) for its next turn.
  // REQUIRES: fingerprint != nullptr.
  std::optional<Diagnosis> Diagnose(const RequestRecord& turn,
                                    std::shared_ptr<const PromptFingerprint> fingerprint,
                                    const CacheRules& rules, const TurnContext& context = {});
  // The thread's memory (an empty view for an unknown thread): a copy, fingerprints shared.
  ThreadView View(const std::string& thread_id) const;
  // How many targets' last turns a thread keeps (the caches it may return to).
  static constexpr size_t kTargetsKept = 4;
  // Remembers `turn` (a stored turn, with its prompt_fingerprint) as its thread's latest without
  // diagnosing it, so that the thread's next turn is compared with it: how a restarted gateway
  // picks up threads from the store. Does nothing, returning false, for a turn without thread id
  // or fingerprint, and for a thread the tracker already knows (its remembered turn is newer).
  // Restore the oldest first: each one becomes the most recently used thread.
  bool Restore(const RequestRecord& turn) { return Take(turn, /*newer_replaces=*/false); }
  // Takes `turn` (a stored turn, with its prompt_fingerprint) as its thread's latest when it is
  // newer than the one remembered, or the thread is unknown: how a replica on a shared database
  // picks up the turns another replica served before it diagnoses the next one. The thread's
  // running means are updated as for a diagnosed turn. Returns whether it was taken (false, too,
  // without thread id or fingerprint).
  bool Absorb(const RequestRecord& turn) { return Take(turn, /*newer_replaces=*/true); }
  // A keep-warm ping read the thread's cached prefix on `target` at `at_us`: the cache the turn
  // that target served last left is renewed from then (TurnSummary::renewed_at_us), so the next
  // turn is not diagnosed "expired" for an idle gap the ping bridged. The ping is not a turn: the
  // thread's latest turn, gaps and means do not change. Returns false for an unknown thread.
  bool Renew(const std::string& thread_id, std::string_view target, int64_t at_us);
  void Forget(const std::string& thread_id);
  size_t Size() const;
  // The most threads it remembers (max_threads rounded down to a multiple of the shard count).
  size_t capacity() const { return per_shard_cap_ * shards_.size(); }

 private:
  struct Shard {
    mutable Mutex mu;
    // A segmented LRU, front = most recently used: threads seen once wait in `probation`, and
    // move to `lru` with their second turn. Eviction takes from probation first, so a burst of
    // one-turn threads (one-shot requests, each an automatic thread) cannot push out the
    // conversations; `lru` keeps at most 4/5 of the capacity, its oldest moving back to
    // probation, so that new threads always have room to reach their second turn.
    std::list<std::string> lru GUARDED_BY(mu);
    std::list<std::string> probation GUARDED_BY(mu);
    // Consecutive turns that changed the same element at about the same place.
    struct ChangeRun {
      FingerprintElement::Kind kind = FingerprintElement::Kind::kMessage;
      int message_index = -1;
      uint64_t offset = 0;
      int turns = 0;     // 0: the last turn changed nothing before the previous prompt's end
      int64_t lost = 0;  // their Cost::missed, summed (pico-USD)
    };
    struct Entry {
      ThreadView view;  // view.latest is always set
      std::list<std::string>::iterator lru_pos;  // in `lru`, or in `probation` when !kept
      bool kept = false;                          // in `lru`
      std::shared_ptr<const PromptTexts> texts;  // the latest turn's, null when not kept
      ChangeRun run;
    };
    std::unordered_map<std::string, Entry> threads GUARDED_BY(mu);
  };
  Shard& ShardFor(const std::string& thread_id);
  // Restore and Absorb: remembers `turn` for an unknown thread, and for a known one when
  // newer_replaces and it is newer than the remembered latest.
  bool Take(const RequestRecord& turn, bool newer_replaces);
  // Inserts a new thread at the front of its shard's LRU, evicting beyond the cap. REQUIRES:
  // thread_id not in the shard.
  void InsertLocked(Shard& shard, const std::string& thread_id, TurnSummary turn,
                    std::shared_ptr<const PromptTexts> texts) REQUIRES(shard.mu);
  // Marks `entry` (of `thread_id`) the most recently used: to the front of its segment, or into
  // `lru` once it has two turns (demoting `lru`'s oldest beyond its share).
  void TouchLocked(Shard& shard, Shard::Entry& entry) REQUIRES(shard.mu);
  // Makes `turn` the thread's latest: its target's entry replaced, the running means updated.
  static void Remember(ThreadView& view, TurnSummary turn);
  // Extends or restarts the thread's change run with this turn's comparison; returns it.
  Shard::ChangeRun ExtendRun(const std::string& thread_id, const PrefixComparison& comparison,
                             int64_t lost);

  // Constant after construction.
  const size_t per_shard_cap_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace kvgate::telemetry
