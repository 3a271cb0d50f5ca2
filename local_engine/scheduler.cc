#include "local_engine/scheduler.h"

#include <algorithm>

namespace kvgate::engine {

std::vector<Admission> Scheduler::Admit(
    const std::function<int(const Sequence&)>& tier_blocks_for) {
  std::vector<Admission> admitted;
  while (!waiting_.empty()) {
    Sequence& s = *waiting_.front();
    if (num_running() + 1 + s.forks > config_.max_running) break;
    if (!blocks_.CanAllocate(s.tokens, s.blocks.salt)) break;
    // The tier's blocks need fresh pool blocks like computed ones: CanAllocate already counts them.
    const int tier_blocks = tier_blocks_for ? tier_blocks_for(s) : 0;
    blocks_.Allocate(s.tokens, s.blocks);
    s.num_computed = s.blocks.num_cached_tokens;
    admitted.push_back({&s, tier_blocks});
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return admitted;
}

Sequence& Scheduler::AddRunning(std::unique_ptr<Sequence> s) {
  running_.push_back(std::move(s));
  return *running_.back();
}

void Scheduler::PreemptYoungest() {
  Sequence& s = *running_.back();
  blocks_.Free(s.blocks);  // the blocks keep their hashes: readmission finds most of them cached
  s.num_computed = 0;
  ++preemptions_;
  waiting_.push_front(std::move(running_.back()));
  running_.pop_back();
}

StepPlan Scheduler::Plan() {
  StepPlan plan;
  if (running_.empty()) return plan;
  // Decodes need at most one new block each; preempt the youngest sequences until they fit.
  for (;;) {
    int64_t need = 0;
    for (const auto& s : running_) {
      if (s->decoding() && BlocksFor(s->num_tokens()) > std::ssize(s->blocks.block_ids)) ++need;
    }
    if (need <= blocks_.num_free_blocks()) break;
    if (running_.size() == 1) {
      plan.out_of_room = running_.front().get();
      return plan;
    }
    PreemptYoungest();
  }
  // Every decode first, then prefill chunks in admission order within the token budget.
  int64_t budget = config_.max_batch_tokens;
  for (const bool decodes : {true, false}) {
    for (const auto& sp : running_) {
      Sequence& s = *sp;
      if (s.decoding() != decodes || budget == 0) continue;
      const int64_t capacity =
          (std::ssize(s.blocks.block_ids) + blocks_.num_free_blocks()) * config_.block_size -
          s.num_computed;
      const int64_t n = std::min({s.num_remaining(), budget, capacity});
      if (n <= 0) continue;
      const int grown = static_cast<int>(s.num_computed + n);
      if (!blocks_.CanGrow(s.blocks, grown)) continue;
      blocks_.Grow(s.blocks, grown);
      plan.chunks.push_back({&s, n});
      budget -= n;
    }
  }
  return plan;
}

std::vector<Sequence*> Scheduler::Live() const {
  std::vector<Sequence*> out;
  for (const auto& s : waiting_) {
    if (!s->finished) out.push_back(s.get());
  }
  for (const auto& s : running_) {
    if (!s->finished) out.push_back(s.get());
  }
  return out;
}

void Scheduler::RemoveFinished() {
  std::erase_if(waiting_, [](const auto& s) { return s->finished; });
  std::erase_if(running_, [](const auto& s) { return s->finished; });
}

}  // namespace kvgate::engine
