// ModelRunner's whole-step contract with its Backend (backend.h BeginStep/EndStep), checked with a
// recording backend that computes nothing: which ops a step issues in each StepMode, that an eager
// step issues exactly the op stream the runner issued before the hooks existed, what StepKey the
// runner builds, and that the ops receive the very spans BeginStep staged (the CUDA backend finds
// its staged copies by address). No model file needed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "local_engine/backend.h"
#include "local_engine/model.h"
#include "local_engine/weights.h"

namespace kvgate::engine {
namespace {

constexpr int kLayers = 2;

// Dims of a toy Llama; the weights are never read (the recording backend does no math).
ModelWeights ToyWeights() {
  ModelWeights w;
  w.dims = LlamaDims{.n_layers = kLayers, .hidden = 8, .ffn = 16, .heads = 2, .kv_heads = 1,
                     .head_dim = 4, .vocab = 10, .context_length = 64};
  auto m = [](int64_t rows, int64_t cols) {
    return WeightMatrix{GgmlType::kQ8_0, nullptr, rows, cols};
  };
  w.token_embd = m(10, 8);
  w.output = w.token_embd;
  w.layers.resize(kLayers);
  for (auto& l : w.layers) {
    l.q = m(8, 8), l.k = m(4, 8), l.v = m(4, 8), l.o = m(8, 8);
    l.gate = m(16, 8), l.up = m(16, 8), l.down = m(8, 16);
  }
  return w;
}

class RecordingBackend : public Backend {
 public:
  // What BeginStep answers, and how many EndStep calls answer false first (abandoned captures).
  StepMode mode = StepMode::kEager;
  int abandon = 0;
  bool hooks = true;  // false: the default BeginStep/EndStep (the CPU backend's)
  // Sets *trip at the trip_at_rms_norm-th RmsNorm (a cancel arriving while a layer runs).
  std::atomic<bool>* trip = nullptr;
  int trip_at_rms_norm = 0, rms_norms = 0;

  std::vector<std::string> ops;
  std::vector<StepKey> keys;
  const BatchMetadata* staged_batch = nullptr;
  const int32_t* staged_rows = nullptr;
  int foreign_spans = 0;  // ops that received a batch or rows other than the staged ones

  std::string_view Name() const override { return "recording"; }
  Result<DeviceBuffer> Allocate(size_t bytes) override {
    ops.push_back("Allocate");
    return DeviceBuffer{std::shared_ptr<void>(std::calloc(bytes + 64, 1), std::free), bytes};
  }
  Result<const void*> UploadWeights(const void* host, size_t) override { return host; }
  void CopyToHost(const void*, void*, size_t) override { ops.push_back("CopyToHost"); }
  void Synchronize() override { ops.push_back("Synchronize"); }
  StepMode BeginStep(const BatchMetadata& batch, std::span<const int32_t> rows,
                     const StepKey& key) override {
    if (!hooks) return Backend::BeginStep(batch, rows, key);
    ops.push_back("BeginStep");
    keys.push_back(key);
    staged_batch = &batch;
    staged_rows = rows.data();
    return mode;
  }
  bool EndStep() override {
    if (!hooks) return Backend::EndStep();
    ops.push_back("EndStep");
    if (abandon > 0) {
      --abandon;
      return false;
    }
    return true;
  }
  void Embed(const WeightMatrix&, const BatchMetadata& b, float*) override { Op("Embed", &b); }
  void RmsNorm(const float*, const float*, int64_t, int64_t, float, float*) override {
    ops.push_back("RmsNorm");
    if (trip && ++rms_norms == trip_at_rms_norm) trip->store(true);
  }
  void MatMul(const float*, int64_t, int64_t, std::span<const MatMulOutput> outs) override {
    ops.push_back("MatMul" + std::to_string(outs.size()));
  }
  void Rope(float*, int64_t, int64_t, float, const BatchMetadata& b) override { Op("Rope", &b); }
  void WriteKv(const float*, const float*, int64_t, const BatchMetadata& b,
               const KvCacheLayer& cache) override {
    Op("WriteKv", &b);
    pool_blocks = cache.num_blocks;
  }
  void Attention(const float*, const KvCacheLayer&, const AttentionShape&, const BatchMetadata& b,
                 float*) override {
    Op("Attention", &b);
  }
  void SwiGlu(const float*, const float*, int64_t, float*) override { ops.push_back("SwiGlu"); }
  void Add(float*, const float*, int64_t) override { ops.push_back("Add"); }
  void GatherRows(const float*, int64_t, std::span<const int32_t> rows, float*) override {
    ops.push_back("GatherRows");
    if (hooks && rows.data() != staged_rows) ++foreign_spans;
  }
  int32_t pool_blocks = 0;

 private:
  void Op(const char* name, const BatchMetadata* b) {
    ops.push_back(name);
    if (hooks && b != staged_batch) ++foreign_spans;
  }
};

// The op stream of one forward pass as the runner issued it before BeginStep/EndStep existed.
std::vector<std::string> ForwardOps() {
  std::vector<std::string> v{"Embed"};
  for (int l = 0; l < kLayers; ++l) {
    for (const char* op : {"RmsNorm", "MatMul3", "Rope", "Rope", "WriteKv", "Attention", "MatMul1",
                           "Add", "RmsNorm", "MatMul2", "SwiGlu", "MatMul1", "Add"}) {
      v.emplace_back(op);
    }
  }
  for (const char* op : {"GatherRows", "RmsNorm", "MatMul1"}) v.emplace_back(op);
  return v;
}

// The ops of layer 0 alone, after Embed.
std::vector<std::string> FirstLayerOps() {
  const std::vector<std::string> all = ForwardOps();
  return {all.begin() + 1, all.begin() + 14};  // after Embed, the 13 ops of one layer
}

std::vector<std::string> Concat(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A batch of `seqs` sequences of `q` new tokens each, sequence i on block i, contexts q.
struct Batch {
  std::vector<int32_t> ids, pos, qs{0}, ctx, tables;
  std::vector<int64_t> slots;
  int32_t width;
  Batch(int seqs, int q, int32_t width_) : width(width_) {
    for (int s = 0; s < seqs; ++s) {
      for (int j = 0; j < q; ++j) {
        ids.push_back(1);
        pos.push_back(j);
        slots.push_back(static_cast<int64_t>(s) * 16 + j);
      }
      qs.push_back(static_cast<int32_t>(ids.size()));
      ctx.push_back(q);
      tables.push_back(s);
      tables.resize(tables.size() + width - 1, -1);
    }
  }
  BatchMetadata view() const { return {ids, pos, slots, qs, ctx, tables, width, 16}; }
};

struct Fixture {
  ModelWeights weights = ToyWeights();
  RecordingBackend backend;
  std::unique_ptr<ModelRunner> runner;
  explicit Fixture(bool graphs) {
    auto r = ModelRunner::Create(weights, backend, {8, 16}, RunnerOptions{.decode_graphs = graphs});
    EXPECT_TRUE(r.has_value());
    runner = std::move(*r);
  }
  // Runs one step and returns the ops it issued (allocations left out).
  std::vector<std::string> Step(const Batch& b, LogitsMode mode = LogitsMode::kLastPerSequence) {
    backend.ops.clear();
    std::vector<float> logits;
    EXPECT_TRUE(runner->Forward(b.view(), mode, logits));
    std::erase(backend.ops, "Allocate");
    return backend.ops;
  }
};

// A backend serves the f16 cache unless it says otherwise (the CUDA backend does not): a runner
// for another dtype is refused at creation, naming the dtype, instead of reading its bytes as f16.
TEST(RunnerStepTest, RefusesACacheDtypeTheBackendDoesNotServe) {
  const ModelWeights weights = ToyWeights();
  RecordingBackend backend;
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kInt8, KvDtype::kFp8}) {
    auto r = ModelRunner::Create(weights, backend, {8, 16, dtype});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("kv_cache_dtype " + std::string(KvDtypeName(dtype))),
              std::string::npos)
        << r.error().message;
  }
  EXPECT_TRUE(ModelRunner::Create(weights, backend, {8, 16, KvDtype::kFp16}).has_value());
}

TEST(RunnerStepTest, DefaultHooksLeaveTheOpStreamAsItWas) {
  Fixture f(/*graphs=*/true);
  f.backend.hooks = false;
  EXPECT_EQ(f.Step(Batch(3, 1, 1)), Concat({ForwardOps(), {"Synchronize", "CopyToHost"}}));
  EXPECT_EQ(f.Step(Batch(2, 5, 1)), Concat({ForwardOps(), {"Synchronize", "CopyToHost"}}));
}

TEST(RunnerStepTest, EagerAndCaptureIssueTheOpsOnceBetweenTheHooks) {
  for (StepMode mode : {StepMode::kEager, StepMode::kCapture}) {
    Fixture f(true);
    f.backend.mode = mode;
    EXPECT_EQ(f.Step(Batch(3, 1, 1)),
              Concat({{"BeginStep"}, ForwardOps(), {"EndStep", "Synchronize", "CopyToHost"}}));
    EXPECT_EQ(f.backend.foreign_spans, 0) << "ops must get the spans BeginStep staged";
    EXPECT_EQ(f.backend.pool_blocks, 8) << "KvCacheLayer.num_blocks is the pool size";
  }
}

TEST(RunnerStepTest, ReplayedStepIssuesNoOps) {
  Fixture f(true);
  f.backend.mode = StepMode::kReplayed;
  EXPECT_EQ(f.Step(Batch(2, 1, 1)),
            (std::vector<std::string>{"BeginStep", "EndStep", "Synchronize", "CopyToHost"}));
}

TEST(RunnerStepTest, AbandonedCaptureReissuesTheOpsEagerly) {
  Fixture f(true);
  f.backend.mode = StepMode::kCapture;
  f.backend.abandon = 1;
  EXPECT_EQ(f.Step(Batch(2, 1, 1)),
            Concat({{"BeginStep"}, ForwardOps(), {"EndStep"}, ForwardOps(),
                    {"EndStep", "Synchronize", "CopyToHost"}}));
  EXPECT_EQ(f.backend.foreign_spans, 0);
}

// A cancel during a layer stops an eager step before the next layer: no further op, no logits
// copied, kCancelled. A flag set before the step stops it before its first layer.
TEST(RunnerStepTest, AbortStopsAnEagerStepBetweenLayers) {
  for (bool hooks : {true, false}) {
    Fixture f(false);
    f.backend.hooks = hooks;
    std::atomic<bool> abort{false};
    f.backend.trip = &abort;
    f.backend.trip_at_rms_norm = 1;  // the first layer's attention norm
    std::vector<float> logits;
    auto st = f.runner->Forward(Batch(1, 7, 1).view(), LogitsMode::kLastPerSequence, logits, &abort);
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error().code, ErrorCode::kCancelled);
    std::erase(f.backend.ops, "Allocate");
    const std::vector<std::string> body = Concat({{"Embed"}, FirstLayerOps()});
    EXPECT_EQ(f.backend.ops, hooks ? Concat({{"BeginStep"}, body, {"EndStep", "Synchronize"}})
                                   : Concat({body, {"Synchronize"}}));
  }
  Fixture f(false);
  f.backend.hooks = false;
  std::atomic<bool> abort{true};
  std::vector<float> logits;
  auto st = f.runner->Forward(Batch(1, 3, 1).view(), LogitsMode::kLastPerSequence, logits, &abort);
  ASSERT_FALSE(st.has_value());
  std::erase(f.backend.ops, "Allocate");
  EXPECT_EQ(f.backend.ops, (std::vector<std::string>{"Embed", "Synchronize"}));
  abort = false;  // the same runner serves the next step whole
  EXPECT_TRUE(f.runner->Forward(Batch(1, 3, 1).view(), LogitsMode::kLastPerSequence, logits, &abort));
}

// A recorded step must hold every op: the flag is not read while capturing.
TEST(RunnerStepTest, AbortDoesNotCutACapture) {
  Fixture f(true);
  f.backend.mode = StepMode::kCapture;
  std::atomic<bool> abort{false};
  f.backend.trip = &abort;
  f.backend.trip_at_rms_norm = 1;
  std::vector<float> logits;
  f.backend.ops.clear();
  EXPECT_TRUE(f.runner->Forward(Batch(2, 1, 1).view(), LogitsMode::kLastPerSequence, logits, &abort));
  std::erase(f.backend.ops, "Allocate");
  EXPECT_EQ(f.backend.ops,
            Concat({{"BeginStep"}, ForwardOps(), {"EndStep", "Synchronize", "CopyToHost"}}));
}

TEST(RunnerStepTest, KeysNameTheShapeAndTheActivationGeneration) {
  Fixture f(true);
  f.Step(Batch(2, 1, 4));  // decode: 2 tokens, table width 4
  f.Step(Batch(2, 1, 4));
  f.Step(Batch(1, 6, 1));  // prefill of 6 tokens: activations grow
  f.Step(Batch(2, 1, 4));
  f.Step(Batch(2, 3, 1), LogitsMode::kAllTokens);
  const auto& k = f.backend.keys;
  ASSERT_EQ(k.size(), 5u);
  EXPECT_EQ(k[0], (StepKey{2, 2, 4, k[0].activations, true}));
  EXPECT_EQ(k[0], k[1]) << "same shape, no regrowth: same key";
  EXPECT_FALSE(k[2].graph) << "prefill steps are never recorded";
  EXPECT_GT(k[2].activations, k[0].activations);
  EXPECT_EQ(k[3].activations, k[2].activations);
  EXPECT_NE(k[3], k[0]) << "the decode shape after regrowth must be recorded again";
  EXPECT_EQ(k[4].rows_out, 6);
  EXPECT_FALSE(k[4].graph);

  Fixture off(false);
  off.Step(Batch(2, 1, 4));
  EXPECT_FALSE(off.backend.keys.at(0).graph) << "decode_graphs off: every step eager";
}

}  // namespace
}  // namespace kvgate::engine
