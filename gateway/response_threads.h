// Which thread each Responses API response belongs to. A request that continues a response
// (`previous_response_id`) joins that response's thread even when it names no thread itself, so
// a conversation held by the provider (the client sends only its new input) is still one thread.
//
// Bounded memory: the oldest ids are forgotten beyond `capacity` (the gateway then asks the
// store). Thread safety: every method may be called from any thread; one mutex guards the map.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kvgate::gateway {

class ResponseThreads {
 public:
  explicit ResponseThreads(size_t capacity = 100'000) : capacity_(capacity) {}

  // `response_id` belongs to `thread_id`. Empty ids are ignored; a known id keeps its thread.
  void Remember(const std::string& response_id, const std::string& thread_id);
  // The thread of `response_id`, nullopt when it is not remembered.
  std::optional<std::string> Find(std::string_view response_id) const;

 private:
  const size_t capacity_;  // constant after construction
  mutable std::mutex mu_;
  std::list<std::string> order_;                         // GUARDED_BY(mu_); oldest first
  std::unordered_map<std::string, std::string> thread_;  // GUARDED_BY(mu_); response -> thread
};

}  // namespace kvgate::gateway
