#include "gateway/response_threads.h"

namespace kvgate::gateway {

void ResponseThreads::Remember(const std::string& response_id, const std::string& thread_id,
                               const std::string& api_key_id) {
  if (response_id.empty() || thread_id.empty() || capacity_ == 0) return;
  MutexLock lock(&mu_);
  if (!thread_.emplace(response_id, Response{thread_id, api_key_id}).second) return;
  order_.push_back(response_id);
  while (order_.size() > capacity_) {
    thread_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<std::string> ResponseThreads::Find(std::string_view response_id) const {
  MutexLock lock(&mu_);
  auto it = thread_.find(std::string(response_id));
  if (it == thread_.end()) return std::nullopt;
  return it->second.thread_id;
}

std::optional<std::string> ResponseThreads::KeyOf(std::string_view response_id) const {
  MutexLock lock(&mu_);
  auto it = thread_.find(std::string(response_id));
  if (it == thread_.end()) return std::nullopt;
  return it->second.api_key_id;
}

}  // namespace kvgate::gateway

namespace kvgate::gateway {

void ResponseThreads::RememberConversation(const std::string& response_id, std::string conversation,
                                           const std::string& api_key_id) {
  if (response_id.empty() || max_conversations_ == 0) return;
  if (conversation.size() + response_id.size() > max_conversation_bytes_) return;
  MutexLock lock(&mu_);
  if (auto it = conversations_.find(response_id); it != conversations_.end()) {
    conversation_bytes_ -= it->second->id.size() + it->second->messages.size();
    lru_.erase(it->second);
    conversations_.erase(it);
  }
  conversation_bytes_ += response_id.size() + conversation.size();
  lru_.push_front({response_id, std::move(conversation), api_key_id});
  conversations_[response_id] = lru_.begin();
  DropOldConversations();
}

std::optional<std::string> ResponseThreads::FindConversation(std::string_view response_id,
                                                             std::string_view api_key_id) {
  MutexLock lock(&mu_);
  auto it = conversations_.find(std::string(response_id));
  if (it == conversations_.end()) return std::nullopt;
  // (One made before the gateway had keys is no key's.)
  const std::string& owner = it->second->api_key_id;
  if (!owner.empty() && owner != api_key_id) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->messages;
}

void ResponseThreads::DropOldConversations() {
  while (!lru_.empty() && (lru_.size() > max_conversations_ ||
                           conversation_bytes_ > max_conversation_bytes_)) {
    conversation_bytes_ -= lru_.back().id.size() + lru_.back().messages.size();
    conversations_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

}  // namespace kvgate::gateway
