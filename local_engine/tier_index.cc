#include "local_engine/tier_index.h"

#include <algorithm>

namespace kvgate::engine {

TierIndex::TierIndex(int32_t slots) : slots_(static_cast<size_t>(std::max(slots, 0))) {
  for (int32_t s = this->slots() - 1; s >= 0; --s) free_.push_back(s);
}

int32_t TierIndex::FindHash(uint64_t hash) const {
  auto it = index_.find(hash);
  return it == index_.end() ? -1 : it->second;
}

int32_t TierIndex::Find(const TierKey& key) const {
  const int32_t s = FindHash(key.hash);
  if (s < 0) return -1;
  const Slot& slot = at(s);
  if (slot.salt != key.salt ||
      !std::equal(slot.tokens.begin(), slot.tokens.end(), key.tokens.begin(), key.tokens.end())) {
    return -1;
  }
  return s;
}

void TierIndex::Touch(int32_t s) {
  if (!at(s).used) return;
  Unlink(s);
  PushTail(s);
}

void TierIndex::Pin(int32_t s) {
  Touch(s);
  if (!at(s).pinned) {
    at(s).pinned = true;
    pinned_.push_back(s);
  }
}

void TierIndex::UnpinAll() {
  for (int32_t s : pinned_) at(s).pinned = false;
  pinned_.clear();
}

int32_t TierIndex::Take(bool* evicted) {
  *evicted = false;
  if (free_.empty()) {
    int32_t victim = head_;
    while (victim >= 0 && at(victim).pinned) victim = at(victim).next;
    if (victim < 0) return -1;
    Drop(victim);
    *evicted = true;
  }
  const int32_t s = free_.back();
  free_.pop_back();
  return s;
}

void TierIndex::Commit(int32_t s, const TierKey& key, uint64_t stamp) {
  if (const int32_t other = FindHash(key.hash); other >= 0 && other != s) Drop(other);
  Slot& slot = at(s);
  slot.used = true;
  slot.hash = key.hash;
  slot.salt = key.salt;
  slot.stamp = stamp;
  slot.tokens.assign(key.tokens.begin(), key.tokens.end());
  index_[key.hash] = s;
  PushTail(s);
}

void TierIndex::Restore(std::span<const Held> held) {
  for (const Held& h : held) Commit(h.slot, {h.hash, h.salt, h.tokens}, h.stamp);
  free_.clear();
  for (int32_t s = slots() - 1; s >= 0; --s) {
    if (!at(s).used) free_.push_back(s);
  }
}

void TierIndex::Release(int32_t s) { free_.push_back(s); }

void TierIndex::Drop(int32_t s) {
  Slot& slot = at(s);
  if (!slot.used) return;
  Unlink(s);
  if (auto it = index_.find(slot.hash); it != index_.end() && it->second == s) index_.erase(it);
  slot.used = false;
  slot.tokens.clear();
  if (slot.pinned) {
    slot.pinned = false;
    std::erase(pinned_, s);
  }
  free_.push_back(s);
}

void TierIndex::PushTail(int32_t s) {
  Slot& slot = at(s);
  slot.prev = tail_;
  slot.next = -1;
  if (tail_ >= 0) {
    at(tail_).next = s;
  } else {
    head_ = s;
  }
  tail_ = s;
}

void TierIndex::Unlink(int32_t s) {
  Slot& slot = at(s);
  if (slot.prev >= 0) {
    at(slot.prev).next = slot.next;
  } else if (head_ == s) {
    head_ = slot.next;
  }
  if (slot.next >= 0) {
    at(slot.next).prev = slot.prev;
  } else if (tail_ == s) {
    tail_ = slot.prev;
  }
  slot.prev = slot.next = -1;
}

}  // namespace kvgate::engine
