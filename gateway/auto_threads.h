// Automatic threads: most agent frameworks (pydantic-ai, LangChain, the OpenAI Agents SDK,
// instructor) send no thread id, so without inference their conversations would have no thread,
// no cache diagnosis and no place among the threads that lost the most. A request that names no
// thread joins the thread whose last turn it continues: its prompt starts with that turn's whole
// prompt and then the turn's answer (an assistant message, or a Responses output item).
//
// The match uses the prompt fingerprint's per-element prefix hashes (telemetry/diagnosis.h), which
// the diagnosis computes anyway: each turn is indexed under the hash of its whole prompt; a new
// request probes the hash at each of its element boundaries, longest first, where the next element
// came from the model. So the matching is exact to the byte (clients re-send earlier messages
// byte-identically; the cache needs that too) and costs a hash probe per element.
//
// - A system prompt or tools that change every turn (a timestamp, a request id: the most common
//   cause of a cache that never hits) would make every turn a thread of its own, and hide the
//   very miss the diagnosis should name. So each turn is also indexed by its conversation alone
//   (its messages without tools and system/developer messages); a request that continues no turn
//   exactly may continue one that way, and the diagnosis then sees the changed system prompt.
// - The longest match wins; of several turns with that same prompt (conversations that opened
//   alike), the most recent one that is still its thread's latest turn. Their prompts are equal
//   byte for byte, so for the cache either is the same conversation.
// - A fork (a request continuing a turn that another request already continued: a regenerated
//   answer, a branch) starts a new thread that names its parent.
// - Everything is scoped by tenant (a gateway key, or without keys the upstream credential the
//   client sent): two tenants with identical prompts never share a thread.
// - A request that fails is withdrawn (Settle), so that its retry continues the same turn.
// - Memory: bounded by `max_turns` indexed turns (oldest forgotten first), about 100 bytes each.
//   Nothing is stored: after a restart a conversation continues in a new thread.
//
// Thread safety: every method may be called from any thread; one mutex guards the index, held
// for a few hash probes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/raw_json.h"
#include "telemetry/diagnosis.h"
#include "telemetry/record.h"

namespace kvgate::gateway {

class AutoThreads {
 public:
  explicit AutoThreads(size_t max_turns = 200'000);

  struct Assignment {
    std::string thread_id;  // "auto-..." (a new one, or the thread continued)
    std::string parent;     // a fork's parent thread, "" otherwise
  };
  // The thread of `request_id`, a request of `tenant` (TenantOf) that names none, whose prompt is
  // `body` (fingerprinted as `fingerprint`). Indexes the request's prompt as its thread's newest
  // turn, until Settle withdraws it.
  Assignment Assign(std::string_view request_id, uint64_t tenant, const raw_json::Object& body,
                    const telemetry::PromptFingerprint& fingerprint);
  // A finished request: one assigned here that did not succeed is withdrawn (its retry then
  // continues the same turn instead of forking). Others are ignored.
  void Settle(const telemetry::RequestRecord& record);

  // Indexed turns (for tests and the bound).
  size_t size() const;

 private:
  struct Thread {
    std::string id;
    uint64_t latest = 0;    // the sequence number of its newest turn
    uint64_t next_seq = 1;  // the next turn's
  };
  struct Turn {
    std::shared_ptr<Thread> thread;  // shared by the thread's indexed turns
    uint64_t seq = 0;                // its place in the thread (1, 2, ...)
    uint64_t stamp = 0;              // when it was indexed (unique), for the bound
  };
  struct Key {
    uint64_t tenant = 0;
    uint64_t prompt = 0;  // the prefix hash of the turn's whole prompt
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const noexcept;
  };
  // Turns whose prompts hash alike (conversations that opened alike), most recent last.
  struct Slot {
    std::vector<Turn> turns;
  };
  struct InFlight {
    Key exact, conversation;  // the turn's keys in the index
    Turn turn;
    uint64_t previous_latest = 0;  // the thread's latest turn before this one
  };

  // The indexed turn that a prompt continues, if any: `prefixes[j]` is the key of the prompt's
  // first j + 1 elements (0: none), longest tried first.
  const Turn* FindContinued(uint64_t tenant, const raw_json::Object& body,
                            const telemetry::PromptFingerprint& fingerprint,
                            const std::vector<uint64_t>& prefixes) const REQUIRES(mu_);
  void Insert(const Key& key, Turn turn) REQUIRES(mu_);
  void Remove(const Key& key, const Turn& turn) REQUIRES(mu_);

  const size_t max_turns_;  // constant after construction
  mutable Mutex mu_;
  std::unordered_map<Key, Slot, KeyHash> index_ GUARDED_BY(mu_);
  // (key, stamp) in insertion order, for the bound; withdrawn turns leave stale entries.
  std::deque<std::pair<Key, uint64_t>> order_ GUARDED_BY(mu_);
  size_t turns_ GUARDED_BY(mu_) = 0;
  uint64_t next_stamp_ GUARDED_BY(mu_) = 1;
  std::unordered_map<std::string, InFlight> in_flight_ GUARDED_BY(mu_);  // by request id
};

// Whose conversations a request belongs to, for AutoThreads: its gateway key (`api_key_id`), or
// without keys a hash of the upstream credential it sent (Authorization, x-api-key, api-key,
// x-goog-api-key); 0 when it sent none.
uint64_t TenantOf(std::string_view api_key_id, std::string_view authorization,
                  std::string_view x_api_key, std::string_view api_key,
                  std::string_view goog_api_key);

}  // namespace kvgate::gateway
