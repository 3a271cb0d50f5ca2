#include "gateway/response_threads.h"

namespace kvgate::gateway {

void ResponseThreads::Remember(const std::string& response_id, const std::string& thread_id) {
  if (response_id.empty() || thread_id.empty() || capacity_ == 0) return;
  std::lock_guard lock(mu_);
  if (!thread_.emplace(response_id, thread_id).second) return;
  order_.push_back(response_id);
  while (order_.size() > capacity_) {
    thread_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<std::string> ResponseThreads::Find(std::string_view response_id) const {
  std::lock_guard lock(mu_);
  auto it = thread_.find(std::string(response_id));
  if (it == thread_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kvgate::gateway
