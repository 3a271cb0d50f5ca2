// Scheduler: the policy of the engine's continuous batching (after nano-vllm's). It decides which
// sequences run in the next step and how many tokens each computes; the engine (engine.cc) runs
// them, samples and reports.
//
//   - Two queues: waiting (FCFS; preempted sequences go back to its head) and running (admission
//     order, at most max_running).
//   - Admission: the head of the waiting queue is admitted once its whole sequence fits in the
//     pool, prefix-cache hits included (a hit on a free block takes it out of the free pool), and
//     there are running places for it and the choices it will fork (n > 1); the rest wait behind
//     it, so a long prompt is not starved by short ones.
//   - Each step's plan: one decode token for every decoding sequence first, then prefill chunks in
//     admission order until max_batch_tokens (chunked prefill: a long prompt takes several steps
//     and never stalls the decodes).
//   - Preemption by recompute: when the decodes need more new blocks than are free, the youngest
//     running sequence gives its blocks back (they keep their hashes, so its recomputation mostly
//     hits the prefix cache) and returns to the head of the waiting queue.
//
// It owns the sequences and changes the block pool (allocation, growth, frees on preemption) and
// the sequences' block tables and num_computed; it never touches the model, the sampler or the
// callbacks. Finishing a sequence is the engine's: it marks it finished, RemoveFinished drops it.
// Thread safety: one thread (the engine's), under the lock that guards the BlockManager.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "local_engine/block_manager.h"
#include "local_engine/sequence.h"

namespace kvgate::engine {

struct SchedulerConfig {
  int32_t max_running = 16;       // sequences in a batch
  int64_t max_batch_tokens = 512;  // tokens computed per step, decodes and prefill chunks
  int32_t block_size = kBlockSize;
};

// A sequence admitted by this step, with the blocks the offload tier holds for it right after
// the pool's hits (Admit's tier_blocks_for; 0 without a tier).
struct Admission {
  Sequence* seq = nullptr;
  int tier_blocks = 0;
};

// One sequence's share of a step: its next num_tokens tokens from num_computed on.
struct Chunk {
  Sequence* seq = nullptr;
  int64_t num_tokens = 0;
};

struct StepPlan {
  std::vector<Chunk> chunks;  // decodes first, then prefill chunks; empty: nothing to run
  // A lone running sequence that filled the whole pool: nothing can be preempted for it, so the
  // engine ends it (length). Null otherwise.
  Sequence* out_of_room = nullptr;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {}

  void Enqueue(std::unique_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }
  // A fork (n > 1) that shares its first choice's blocks and has its prompt computed: it joins
  // the running sequences (admission reserved its place). Returns it.
  Sequence& AddRunning(std::unique_ptr<Sequence> s);
  // A fork that could not share blocks: it waits at the head of the queue, as a preempted
  // sequence does.
  void Requeue(std::unique_ptr<Sequence> s) { waiting_.push_front(std::move(s)); }

  // Admits waiting sequences while they fit (FCFS). `tier_blocks_for` is called for each one
  // just before its allocation (the offload tier pins what it holds for it there, so that the
  // allocation's own evictions cannot push those out); null: no tier. The admitted sequences'
  // num_computed counts their pool hits; the caller restores the tier's blocks, then calls
  // Sequence::NoteAdmitted.
  std::vector<Admission> Admit(const std::function<int(const Sequence&)>& tier_blocks_for);

  // Preempts until the decodes fit, then plans the step and grows the planned sequences' block
  // tables to hold their chunks.
  StepPlan Plan();

  // Every sequence not yet finished, waiting or running (cancellation looks them up here).
  std::vector<Sequence*> Live() const;
  // Drops the finished sequences from both queues (their blocks were freed when they finished).
  void RemoveFinished();

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  uint64_t preemptions() const { return preemptions_; }

 private:
  int64_t BlocksFor(int64_t tokens) const {
    return (tokens + config_.block_size - 1) / config_.block_size;
  }
  // Frees the youngest running sequence's blocks and moves it to the head of the waiting queue.
  void PreemptYoungest();

  const SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  uint64_t preemptions_ = 0;
};

}  // namespace kvgate::engine
