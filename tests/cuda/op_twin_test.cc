// OpTwins (op_twin.h): a MatMul reads a producer's bf16 twin only when it is the very next op and
// asks for exactly the values the producer wrote. No GPU needed.
#include "kernels/cuda/op_twin.h"

#include <gtest/gtest.h>

namespace kvgate::cuda {
namespace {

TEST(OpTwinsTest, TheNextOpReadsTheTwinOfExactlyWhatWasWritten) {
  float x[8], other[8];
  uint16_t twin[8];
  OpTwins t;
  t.NextOp();  // RMSNorm
  t.Wrote(x, 8, twin);
  t.NextOp();  // MatMul of its output
  EXPECT_EQ(t.TwinOf(x, 8), twin);
  EXPECT_EQ(t.TwinOf(x, 4), nullptr);      // a different view of the buffer
  EXPECT_EQ(t.TwinOf(other, 8), nullptr);  // another buffer
}

TEST(OpTwinsTest, AnyOpInBetweenMakesTheTwinStale) {
  float x[8];
  uint16_t twin[8];
  OpTwins t;
  t.NextOp();
  t.Wrote(x, 8, twin);
  t.NextOp();  // e.g. Add(x, ...) in place: x no longer equals its twin
  t.NextOp();  // the MatMul
  EXPECT_EQ(t.TwinOf(x, 8), nullptr);
}

TEST(OpTwinsTest, NothingWrittenNothingRead) {
  float x[8];
  OpTwins t;
  EXPECT_EQ(t.TwinOf(x, 8), nullptr);
  t.NextOp();
  EXPECT_EQ(t.TwinOf(x, 8), nullptr);
  // A null twin never counts, even if recorded.
  t.Wrote(x, 8, nullptr);
  t.NextOp();
  EXPECT_EQ(t.TwinOf(x, 8), nullptr);
}

// A second producer replaces the first: the next op sees only the newest twin.
TEST(OpTwinsTest, TheNewestProducerWins) {
  float a[8], b[8];
  uint16_t ta[8], tb[8];
  OpTwins t;
  t.NextOp();
  t.Wrote(a, 8, ta);
  t.NextOp();
  t.Wrote(b, 8, tb);
  t.NextOp();
  EXPECT_EQ(t.TwinOf(a, 8), nullptr);
  EXPECT_EQ(t.TwinOf(b, 8), tb);
}

}  // namespace
}  // namespace kvgate::cuda
