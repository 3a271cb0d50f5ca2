// The host halves of the CUDA backend's whole steps (step_staging.h): the one-buffer layout of a
// step's metadata and the per-key capture policy. No GPU needed.
#include "kernels/cuda/step_staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace kvgate::cuda {
namespace {

TEST(StepStagingTest, ArraysAreAlignedDisjointAndInOrder) {
  std::vector<int32_t> ids(3, 1), tables(5 * 64, 2), empty;
  std::vector<int64_t> slots(3, 4);
  StepSources src;
  src.data[kStepTokenIds] = ids.data(), src.bytes[kStepTokenIds] = ids.size() * 4;
  src.data[kStepSlots] = slots.data(), src.bytes[kStepSlots] = slots.size() * 8;
  src.data[kStepBlockTables] = tables.data(), src.bytes[kStepBlockTables] = tables.size() * 4;
  const StepLayout l = PlanStepLayout(src);
  size_t end = 0;
  for (int i = 0; i < kStepArrayCount; ++i) {
    EXPECT_EQ(l.offset[i] % kStepAlign, 0u) << i;
    EXPECT_GE(l.offset[i], end) << "array " << i << " overlaps the one before";
    end = l.offset[i] + l.bytes[i];
  }
  EXPECT_LE(end, l.total);
  EXPECT_EQ(l.bytes[kStepBlockTables], 1280u);
  EXPECT_EQ(l.total % kStepAlign, 0u);
  // 12 + 24 + 1280 bytes in three arrays, the rest empty: 256 + 256 + 1280.
  EXPECT_EQ(l.total, 1792u);
}

TEST(StepStagingTest, PackCopiesEveryArrayToItsOffset) {
  std::vector<int32_t> arrays[kStepArrayCount];
  StepSources src;
  for (int i = 0; i < kStepArrayCount; ++i) {
    arrays[i].resize(static_cast<size_t>(i * 37 + 1));
    std::iota(arrays[i].begin(), arrays[i].end(), i * 1000);
    src.data[i] = arrays[i].data();
    src.bytes[i] = arrays[i].size() * 4;
  }
  const StepLayout l = PlanStepLayout(src);
  std::vector<std::byte> buf(l.total, std::byte{0xee});
  ASSERT_TRUE(PackStep(src, l, buf));
  for (int i = 0; i < kStepArrayCount; ++i) {
    std::vector<int32_t> back(arrays[i].size());
    std::memcpy(back.data(), buf.data() + l.offset[i], l.bytes[i]);
    EXPECT_EQ(back, arrays[i]) << i;
  }
  std::vector<std::byte> small(l.total - 1);
  EXPECT_FALSE(PackStep(src, l, small));
}

std::shared_ptr<void> FakeExec(int* destroyed) {
  return std::shared_ptr<void>(new int(0), [destroyed](void* p) {
    ++*destroyed;
    delete static_cast<int*>(p);
  });
}

TEST(StepGraphCacheTest, EagerThenCaptureThenReplay) {
  using Cache = StepGraphCache<int>;
  Cache c;
  int destroyed = 0;
  EXPECT_EQ(c.Next(7), Cache::Action::kEager) << "the first step warms allocations and plans";
  EXPECT_EQ(c.Next(7), Cache::Action::kCapture);
  c.Captured(7, FakeExec(&destroyed));
  EXPECT_EQ(c.Next(7), Cache::Action::kReplay);
  EXPECT_NE(c.exec(7), nullptr);
  EXPECT_EQ(c.Next(8), Cache::Action::kEager) << "keys are independent";
  EXPECT_EQ(c.exec(8), nullptr);
  EXPECT_EQ(c.graphs(), 1u);
  c.Clear();
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(c.graphs(), 0u);
  EXPECT_EQ(c.Next(7), Cache::Action::kCapture) << "after Clear a warm key is captured again";
}

TEST(StepGraphCacheTest, AbandonedCapturesRetryThenStayEager) {
  using Cache = StepGraphCache<int>;
  Cache c;
  EXPECT_EQ(c.Next(1), Cache::Action::kEager);
  for (int i = 0; i < Cache::kMaxAbandons; ++i) {
    EXPECT_EQ(c.Next(1), Cache::Action::kCapture) << i;
    c.Abandoned(1);
  }
  EXPECT_EQ(c.Next(1), Cache::Action::kEager);
  EXPECT_EQ(c.Next(1), Cache::Action::kEager);
}

TEST(StepGraphCacheTest, AFailedKeyFallsBackToEagerForGood) {
  using Cache = StepGraphCache<int>;
  Cache c;
  int destroyed = 0;
  EXPECT_EQ(c.Next(3), Cache::Action::kEager);
  EXPECT_EQ(c.Next(3), Cache::Action::kCapture);
  c.Failed(3);  // e.g. cudaStreamEndCapture or cudaGraphInstantiate failed
  EXPECT_EQ(c.Next(3), Cache::Action::kEager);
  EXPECT_EQ(c.Next(3), Cache::Action::kEager);
  c.Clear();  // a new activation generation does not bring it back
  EXPECT_EQ(c.Next(3), Cache::Action::kEager);
  // A replay that fails drops that key's graph; the other keys keep theirs.
  EXPECT_EQ(c.Next(4), Cache::Action::kEager);
  EXPECT_EQ(c.Next(4), Cache::Action::kCapture);
  c.Captured(4, FakeExec(&destroyed));
  EXPECT_EQ(c.Next(5), Cache::Action::kEager);
  EXPECT_EQ(c.Next(5), Cache::Action::kCapture);
  c.Captured(5, FakeExec(&destroyed));
  EXPECT_EQ(c.Next(4), Cache::Action::kReplay);
  c.Failed(4);
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(c.exec(4), nullptr);
  EXPECT_EQ(c.Next(4), Cache::Action::kEager);
  EXPECT_EQ(c.Next(5), Cache::Action::kReplay);
  EXPECT_EQ(c.graphs(), 1u);
}

}  // namespace
}  // namespace kvgate::cuda
