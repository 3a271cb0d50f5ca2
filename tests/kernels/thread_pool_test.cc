#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

namespace kvgate::kernels::cpu {
namespace {

TEST(ThreadPoolTest, RunCallsEveryThreadIndexOnce) {
  for (int n : {1, 2, 4}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.size(), n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(n);
      pool.Run([&](int i, int total) {
        EXPECT_EQ(total, n);
        hits[i].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, ParallelForCoversEachIndexExactlyOnce) {
  ThreadPool pool(3);
  for (size_t n : {0, 1, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 5, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1);
  }
}

TEST(ThreadPoolTest, WorkersWakeAfterSleeping) {
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin phase
  std::atomic<int> sum{0};
  pool.Run([&](int i, int) { sum.fetch_add(i + 1); });
  EXPECT_EQ(sum.load(), 3);
}

}  // namespace
}  // namespace kvgate::kernels::cpu
