// Which thread each Responses API response belongs to, and, for responses kvgate translated
// itself (targets that do not speak the Responses API: the built-in engine, Anthropic), the
// conversation that a follow-up turn's `previous_response_id` continues.
//
// Threads: a request that continues a response (`previous_response_id`) joins that response's
// thread even when it names no thread itself, so a conversation held by the provider (the client
// sends only its new input) is still one thread. The oldest ids are forgotten beyond
// `capacity` (the gateway then asks the store).
//
// Conversations: the whole chat conversation of a translated response (every earlier turn's
// input and output, without instructions), so a follow-up turn rebuilds the same prompt (and
// reuses the engine's prefix cache). In-process only: per replica, lost on restart, least
// recently used dropped beyond `conversations` entries or `conversation_bytes` bytes in all
// (docs/api.md); a dropped id then answers previous_response_not_found.
//
// Thread safety: every method may be called from any thread; one mutex guards the maps.
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
  static constexpr size_t kDefaultConversations = 1024;
  static constexpr size_t kDefaultConversationBytes = size_t{256} << 20;

  explicit ResponseThreads(size_t capacity = 100'000, size_t conversations = kDefaultConversations,
                           size_t conversation_bytes = kDefaultConversationBytes)
      : capacity_(capacity), max_conversations_(conversations),
        max_conversation_bytes_(conversation_bytes) {}

  // `response_id` belongs to `thread_id`. Empty ids are ignored; a known id keeps its thread.
  void Remember(const std::string& response_id, const std::string& thread_id);
  // The thread of `response_id`, nullopt when it is not remembered.
  std::optional<std::string> Find(std::string_view response_id) const;

  // Keeps the conversation (a JSON array of chat messages) that `response_id` ended. One larger
  // than the byte limit is not kept.
  void RememberConversation(const std::string& response_id, std::string conversation);
  // The conversation `response_id` ended (and marks it recently used); nullopt when unknown.
  std::optional<std::string> FindConversation(std::string_view response_id);

 private:
  struct Conversation {
    std::string id, messages;
  };
  void DropOldConversations();  // REQUIRES: mu_ held

  const size_t capacity_;  // constant after construction
  const size_t max_conversations_;
  const size_t max_conversation_bytes_;
  mutable std::mutex mu_;
  std::list<std::string> order_;                         // GUARDED_BY(mu_); oldest first
  std::unordered_map<std::string, std::string> thread_;  // GUARDED_BY(mu_); response -> thread
  std::list<Conversation> lru_;                          // GUARDED_BY(mu_); most recent first
  std::unordered_map<std::string, std::list<Conversation>::iterator> conversations_;  // GUARDED_BY(mu_)
  size_t conversation_bytes_ = 0;                        // GUARDED_BY(mu_)
};

}  // namespace kvgate::gateway
