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
// Gateway keys: each response and conversation is kept with the key that made it ("" without
// keys, which is no key's). A conversation is found only by its own key: another key's id reads
// as unknown.
//
// Thread safety: every method may be called from any thread; one mutex guards the maps.
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/mutex.h"

namespace kvgate::gateway {

class ResponseThreads {
 public:
  static constexpr size_t kDefaultConversations = 1024;
  static constexpr size_t kDefaultConversationBytes = size_t{256} << 20;

  explicit ResponseThreads(size_t capacity = 100'000, size_t conversations = kDefaultConversations,
                           size_t conversation_bytes = kDefaultConversationBytes)
      : capacity_(capacity), max_conversations_(conversations),
        max_conversation_bytes_(conversation_bytes) {}

  // `response_id` belongs to `thread_id` and was made by gateway key `api_key_id`. Empty ids are
  // ignored; a known id keeps its thread and key.
  void Remember(const std::string& response_id, const std::string& thread_id,
                const std::string& api_key_id = "");
  // The thread of `response_id`, nullopt when it is not remembered.
  std::optional<std::string> Find(std::string_view response_id) const;
  // The key that made `response_id`, nullopt when it is not remembered.
  std::optional<std::string> KeyOf(std::string_view response_id) const;

  // Keeps the conversation (a JSON array of chat messages) that `response_id` of `api_key_id`
  // ended. One larger than the byte limit is not kept.
  void RememberConversation(const std::string& response_id, std::string conversation,
                            const std::string& api_key_id = "");
  // The conversation `response_id` ended (and marks it recently used); nullopt when unknown or
  // made by another key than `api_key_id` (the same answer: an id is no oracle).
  std::optional<std::string> FindConversation(std::string_view response_id,
                                              std::string_view api_key_id = "");

 private:
  struct Conversation {
    std::string id, messages, api_key_id;
  };
  struct Response {
    std::string thread_id, api_key_id;
  };
  void DropOldConversations() REQUIRES(mu_);

  const size_t capacity_;  // constant after construction
  const size_t max_conversations_;
  const size_t max_conversation_bytes_;
  mutable Mutex mu_;
  std::list<std::string> order_ GUARDED_BY(mu_);                      // oldest first
  std::unordered_map<std::string, Response> thread_ GUARDED_BY(mu_);  // by response id
  std::list<Conversation> lru_ GUARDED_BY(mu_);                       // most recent first
  std::unordered_map<std::string, std::list<Conversation>::iterator> conversations_ GUARDED_BY(mu_);
  size_t conversation_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvgate::gateway
