// Which f32 activation has a bf16 twin that the next op may read instead of converting it again.
//
// The engine's Backend interface passes f32 activations between ops, while the GEMMs take bf16.
// Converting a MatMul's input costs a launch and a pass over it, every MatMul. But every MatMul of
// the model follows the op that wrote its input (RMSNorm before Q/K/V and gate/up, attention
// before the output projection, SwiGLU before down), and those ops can write the bf16 copy as
// they write the f32 (attention already computes in bf16). So a producer records its output's
// twin here, and a MatMul of exactly that output, issued as the very next op, reads the twin.
//
// Why "the very next op": ops run in issue order on one stream, and an op in between could
// write the f32 buffer (Add in place, a later RMSNorm into the same buffer) and leave the twin
// stale. Counting ops makes that impossible without tracking who writes what. Plain C++ (no CUDA
// include), so the rule is tested on machines without a GPU.
#pragma once

#include <cstdint>

namespace kvgate::cuda {

class OpTwins {
 public:
  // Called at the start of every op, producer or not.
  void NextOp() { ++op_; }
  // The op now running wrote `elems` f32 values at `f32` and the same values rounded to bf16 at
  // `twin` (RNE, as the conversion kernel rounds them).
  void Wrote(const void* f32, int64_t elems, const void* twin) { last_ = {f32, twin, elems, op_}; }
  // The twin of `elems` values at `f32` if the previous op wrote it; null otherwise.
  const void* TwinOf(const void* f32, int64_t elems) const {
    const bool fresh = last_.twin != nullptr && last_.op + 1 == op_;
    return fresh && last_.f32 == f32 && last_.elems == elems ? last_.twin : nullptr;
  }

 private:
  struct Record {
    const void* f32 = nullptr;
    const void* twin = nullptr;
    int64_t elems = 0;
    uint64_t op = 0;
  };
  uint64_t op_ = 0;
  Record last_;
};

}  // namespace kvgate::cuda
