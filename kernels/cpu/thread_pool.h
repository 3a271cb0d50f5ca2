// A small persistent thread pool for the CPU kernels. It is an object owned by whoever runs the
// model (no global pool): the caller's thread takes part as thread 0, so ThreadPool(1) spawns
// nothing. Workers spin briefly after each job (ops follow each other within microseconds during a
// forward pass) and then sleep on a futex, so an idle engine costs no CPU.
//
// On a loaded machine a worker may not get a core for milliseconds; ParallelFor therefore never
// waits for workers that have not started yet: once the caller has drained the work it closes the
// job, and only workers that already joined are waited for.
//
// Thread safety: Run / ParallelFor may be called from one thread at a time (the engine thread);
// they are not reentrant (a job must not call Run on the same pool).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace kvgate::kernels::cpu {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread; values < 1 are treated as 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Runs f(thread_index, num_threads) once on every thread and returns when all have returned.
  template <class F>
  void Run(F&& f) {
    RunImpl(&Invoke<std::remove_reference_t<F>>, &f, /*every_thread=*/true);
  }

  // Calls f(begin, end) over [0, n) in chunks of `grain` items, handed out dynamically (an atomic
  // counter), which balances load when other processes steal a core.
  template <class F>
  void ParallelFor(size_t n, size_t grain, F&& f) {
    if (grain == 0) grain = 1;
    if (num_threads_ == 1 || n <= grain) {
      if (n > 0) f(size_t{0}, n);
      return;
    }
    std::atomic<size_t> next{0};
    auto body = [&](int, int) {
      for (;;) {
        const size_t begin = next.fetch_add(grain, std::memory_order_relaxed);
        if (begin >= n) break;
        f(begin, begin + grain < n ? begin + grain : n);
      }
    };
    RunImpl(&Invoke<decltype(body)>, &body, /*every_thread=*/false);
  }

 private:
  using JobFn = void (*)(void* ctx, int thread_index, int num_threads);
  template <class F>
  static void Invoke(void* ctx, int i, int n) {
    (*static_cast<F*>(ctx))(i, n);
  }
  // every_thread: wait until every worker ran fn; otherwise only for those that joined before the
  // caller finished its own call.
  void RunImpl(JobFn fn, void* ctx, bool every_thread);
  void WorkerLoop(int index);

  // Constant after construction.
  int num_threads_;
  std::vector<std::thread> workers_;

  // Job hand-off: the caller writes fn_/ctx_, then bumps generation_ (release); workers read them
  // after observing the new generation (acquire).
  JobFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  // Admission to the current job: (generation & 0xffffffff) << 32 | kClosed? | workers joined.
  std::atomic<uint64_t> admit_{0};
  std::atomic<int> finished_{0};  // workers that joined and returned
  std::atomic<int> sleepers_{0};  // workers blocked in generation_.wait()
  std::atomic<bool> stop_{false};
};

}  // namespace kvgate::kernels::cpu
