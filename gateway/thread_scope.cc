#include "gateway/thread_scope.h"

namespace kvgate::gateway {

std::string ScopedThreadId(std::string_view api_key_id, std::string_view thread_id) {
  std::string out;
  out.reserve(api_key_id.size() + 1 + thread_id.size());
  out.append(api_key_id).append(":").append(thread_id);
  return out;
}

bool IsScopedThreadId(std::string_view thread_id) {
  // Key ids are "key_" and hex (virtual_keys.cc): no ':' of their own.
  return thread_id.starts_with("key_") && thread_id.find(':') != std::string_view::npos;
}

std::string StoredThreadId(std::string_view thread_id, std::string_view api_key_id,
                           std::string_view owner) {
  if (api_key_id.empty() || thread_id.empty()) return std::string(thread_id);
  if (!IsScopedThreadId(thread_id) && owner == api_key_id) return std::string(thread_id);
  return ScopedThreadId(api_key_id, thread_id);
}

std::optional<std::string> ThreadOwners::Find(std::string_view thread_id) const {
  MutexLock lock(&mu_);
  auto it = owner_.find(std::string(thread_id));
  if (it == owner_.end()) return std::nullopt;
  return it->second;
}

std::string ThreadOwners::Claim(const std::string& thread_id, const std::string& api_key_id) {
  MutexLock lock(&mu_);
  auto [it, inserted] = owner_.emplace(thread_id, api_key_id);
  if (!inserted) return it->second;
  std::string owner = it->second;  // (copied before the eviction below may erase it)
  order_.push_back(thread_id);
  while (order_.size() > capacity_) {
    owner_.erase(order_.front());
    order_.pop_front();
  }
  return owner;
}

}  // namespace kvgate::gateway
