// Threads under gateway keys: which key a client's thread id belongs to, so that two keys that name
// their conversations alike (X-Thread-Id "t1") never share a thread: its stored turns, its cache
// diagnosis, the router's memory of it, the prompt_cache_key derived from it.
//
// The first key to use a thread id owns it, and that key's turns are stored under the id as sent
// (so a gateway with one key, or none, stores exactly what clients send). Any other key sending the
// same id gets a thread of its own, stored as ScopedThreadId(key, id) = "<key id>:<id>"; the admin
// API shows it under that name (docs/api.md, "Threads and gateway keys"). A client id of that form
// ("key_...:...") is always scoped, never owned, so that no key can take in advance the name under
// which another key's thread would be stored: stored names are one-to-one with (key, client id).
//
// Owners are remembered here (the most recent `capacity`); one not remembered is read from the
// store by the gateway (the key of the thread's newest stored turn) and remembered.
//
// Thread safety: every method may be called from any thread; one mutex guards the map.
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/mutex.h"

namespace kvgate::gateway {

// "<api_key_id>:<thread_id>": the stored id of a thread of a key that does not own the client id.
std::string ScopedThreadId(std::string_view api_key_id, std::string_view thread_id);
// Whether `thread_id` has ScopedThreadId's form (a gateway key's id, then ':'): never owned.
bool IsScopedThreadId(std::string_view thread_id);
// The id under which a turn of `api_key_id` naming `thread_id` is stored, given the client id's
// owner: the id itself without keys ("" key) or for its owner, else ScopedThreadId.
std::string StoredThreadId(std::string_view thread_id, std::string_view api_key_id,
                           std::string_view owner);

class ThreadOwners {
 public:
  explicit ThreadOwners(size_t capacity = 100'000) : capacity_(capacity) {}

  // The key that owns `thread_id`, nullopt when not remembered.
  std::optional<std::string> Find(std::string_view thread_id) const;
  // Makes `api_key_id` the owner of `thread_id` unless it has one; returns the owner. Atomic: of
  // two keys claiming a new id at once, one owns it and the other learns so.
  std::string Claim(const std::string& thread_id, const std::string& api_key_id);

 private:
  const size_t capacity_;  // constant after construction
  mutable Mutex mu_;
  std::list<std::string> order_ GUARDED_BY(mu_);                        // oldest first
  std::unordered_map<std::string, std::string> owner_ GUARDED_BY(mu_);  // thread -> key id
};

}  // namespace kvgate::gateway
