#include "kernels/cpu/thread_pool.h"

namespace kvgate::kernels::cpu {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// About 50-100 microseconds of spinning before a worker sleeps.
constexpr int kSpinIterations = 20000;
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kClosed - 1;

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunImpl(JobFn fn, void* ctx, bool every_thread) {
  if (num_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  finished_.store(0, std::memory_order_relaxed);
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  admit_.store((gen & 0xffffffffu) << 32, std::memory_order_release);
  generation_.store(gen, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  fn(ctx, 0, num_threads_);
  const int joined = every_thread
                         ? num_threads_ - 1
                         : static_cast<int>(admit_.fetch_or(kClosed, std::memory_order_acq_rel) &
                                            kCountMask);
  for (int spins = 0; finished_.load(std::memory_order_acquire) != joined; ++spins) {
    if (spins < kSpinIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;  // the generation at construction: a job may start before this thread runs
  for (;;) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spins = 0; now == seen && spins < kSpinIterations; ++spins) {
      CpuRelax();
      now = generation_.load(std::memory_order_acquire);
    }
    while (now == seen) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      generation_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    // Join the job of generation `now` unless it is closed or already superseded.
    uint64_t v = admit_.load(std::memory_order_acquire);
    bool joined = false;
    while ((v >> 32) == (now & 0xffffffffu) && !(v & kClosed)) {
      if (admit_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    fn_(ctx_, index, num_threads_);
    finished_.fetch_add(1, std::memory_order_acq_rel);
  }
}

}  // namespace kvgate::kernels::cpu
