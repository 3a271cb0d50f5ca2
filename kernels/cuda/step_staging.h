// Host-side halves of a whole-step CUDA backend: where one step's metadata lives in the single
// buffer that is copied to the device once per step, and which steps are recorded as CUDA graphs.
// Plain C++20, no CUDA include: unit-tested by g++ on machines without a GPU.
//
// Why one buffer: a recorded step (CUDA graph) bakes in the device address of every array its
// kernels read, so the metadata of every step of that shape must land at the same addresses; one
// pinned host buffer and one H2D copy outside the graph give that, and replace the ~5 pageable
// copies per layer of an op-by-op backend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>

namespace kvgate::cuda {

// The arrays of one step, in the engine's BatchMetadata terms (S sequences, T tokens, W table
// width, R gather rows).
enum StepArray : int {
  kStepTokenIds,     // int32 [T]
  kStepPositions,    // int32 [T]
  kStepSlots,        // int64 [T]
  kStepQueryStart,   // int32 [S + 1]
  kStepContextLens,  // int32 [S]
  kStepBlockTables,  // int32 [S][W]
  kStepGatherRows,   // int32 [R]
  kStepPrefillTiles, // int32 [tiles][2] (BuildPrefillTiles; empty for a decode step)
  kStepArrayCount,
};

// Every array is placed at a multiple of this (cudaMalloc's own alignment, so a staged array is as
// aligned for any load as a buffer of its own).
inline constexpr size_t kStepAlign = 256;

struct StepLayout {
  std::array<size_t, kStepArrayCount> offset{};  // bytes from the buffer's start
  std::array<size_t, kStepArrayCount> bytes{};
  size_t total = 0;  // bytes the buffer must hold
};

// Host bytes of each array (a span's data() and size_bytes()).
struct StepSources {
  std::array<const void*, kStepArrayCount> data{};
  std::array<size_t, kStepArrayCount> bytes{};
};

StepLayout PlanStepLayout(const StepSources& sources);

// Copies every array to its offset in `dst`. False (nothing copied) when dst is shorter than
// layout.total.
bool PackStep(const StepSources& sources, const StepLayout& layout, std::span<std::byte> dst);

// The per-key capture policy: a key's first step runs eagerly, which performs every allocation,
// bf16 weight conversion and cuBLASLt plan the step needs (none of which can be recorded); the
// next step of that key is captured and later ones replay. A capture abandoned because the step
// still needed an allocation sends the key back to eager once; after kMaxAbandons the key stays
// eager for good (a shape that keeps growing its buffers gains nothing from a graph). A key whose
// capture, instantiation or replay failed in the CUDA runtime (Failed) runs eagerly from then on:
// the failure costs that key its graph, not the backend its life.
// `Exec` owns an instantiated graph (its deleter destroys it); Clear() drops every one, which
// callers do whenever an address a graph holds may have changed.
template <typename Key>
class StepGraphCache {
 public:
  enum class Action { kEager, kCapture, kReplay };
  using Exec = std::shared_ptr<void>;
  static constexpr int kMaxAbandons = 2;

  // What to do with the step of `key` now; kReplay: exec(key) is the graph.
  Action Next(const Key& key) {
    Entry& e = entries_[key];
    if (e.failed) return Action::kEager;
    if (e.exec) return Action::kReplay;
    if (e.abandons >= kMaxAbandons) return Action::kEager;
    if (!e.warm) {
      e.warm = true;
      return Action::kEager;
    }
    return Action::kCapture;
  }
  void Captured(const Key& key, Exec exec) { entries_[key].exec = std::move(exec); }
  // The capture of `key` needed an allocation; the step reruns eagerly, which warms it again.
  void Abandoned(const Key& key) { ++entries_[key].abandons; }
  // Recording or replaying `key` failed (begin/end capture, instantiate, launch): drops its graph;
  // the key stays eager, also across Clear().
  void Failed(const Key& key) {
    Entry& e = entries_[key];
    e.failed = true;
    e.exec.reset();
  }
  void* exec(const Key& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second.exec.get();
  }
  // Forgets the graphs but not which keys ran (their next step is captured again).
  void Clear() {
    for (auto& [key, e] : entries_) e.exec.reset();
  }
  size_t graphs() const {
    size_t n = 0;
    for (const auto& [key, e] : entries_) n += e.exec != nullptr;
    return n;
  }

 private:
  struct Entry {
    bool warm = false;
    bool failed = false;
    int abandons = 0;
    Exec exec;
  };
  std::map<Key, Entry> entries_;
};

}  // namespace kvgate::cuda
