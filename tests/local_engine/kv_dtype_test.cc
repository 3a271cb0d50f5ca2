// kv_cache_dtype on the real engine and the real model: the pool's size in each dtype for the
// same memory, kv-size's figure against the pool's, the offload tier with an 8-bit cache (the
// scales travel with the block; a file of another dtype is a miss) and greedy output with an
// int8 / fp8 cache against f16.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "local_engine/chat_template.h"
#include "local_engine/engine.h"
#include "local_engine/offload_tier.h"
#include "local_engine/kv_size.h"
#include "local_engine/model_config.h"

namespace kvgate::engine {
namespace {

namespace fs = std::filesystem;

const std::string kModel =
    std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

constexpr KvDtype kAll[] = {KvDtype::kFp16, KvDtype::kBf16, KvDtype::kInt8, KvDtype::kFp8};

std::unique_ptr<Engine> Make(KvDtype dtype, int32_t blocks = 0, const std::string& tier = "",
                             int64_t tier_bytes = 0) {
  EngineOptions o;
  o.model_path = kModel;
  o.kv_cache_dtype = dtype;
  o.num_kv_blocks = blocks;
  o.offload = {.disk_path = tier, .bytes = tier_bytes};
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.has_value()) << (e ? "" : e.error().ToString());
  return e ? std::move(*e) : nullptr;
}

struct Generation {
  std::vector<int32_t> tokens;
  Usage usage;
};

Generation Generate(Engine& e, std::vector<int32_t> prompt, int max_tokens) {
  Generation run;
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  auto id = e.AddRequest({std::move(prompt), p, [&run](const TokenEvent& ev) {
                            if (ev.token_id >= 0) run.tokens.push_back(ev.token_id);
                            run.usage = ev.usage;
                          }});
  EXPECT_TRUE(id.has_value());
  for (int guard = 0; e.HasWork() && guard < 10000; ++guard) EXPECT_TRUE(e.Step());
  return run;
}

std::vector<int32_t> Prompt(int n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

class KvDtypeEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
  }
};

// The cpu default pool is a memory budget (512 f16 blocks' worth): 8-bit caches get 1.94x the
// blocks, bf16 as many as f16.
TEST_F(KvDtypeEngineTest, TheDefaultPoolHoldsAboutTwiceTheBlocksInEightBits) {
  int32_t blocks[4];
  int64_t per_token[4];
  for (int i = 0; i < 4; ++i) {
    auto e = Make(kAll[i]);
    ASSERT_TRUE(e);
    blocks[i] = e->cache_stats().blocks.num_blocks;
    per_token[i] = e->kv_bytes_per_token();
    EXPECT_EQ(e->kv_cache_dtype(), kAll[i]);
  }
  EXPECT_EQ(blocks[0], 512);
  EXPECT_EQ(blocks[1], 512);
  EXPECT_EQ(per_token[0], 23040);        // 2 x 30 layers x 3 heads x 64 x 2 bytes
  EXPECT_EQ(per_token[2], 11880);        // 2 x 30 x 3 x (64 codes + a 2-byte scale)
  EXPECT_EQ(per_token[3], 11880);
  EXPECT_EQ(blocks[2], 992);             // floor(512 x 23040 / 11880)
  EXPECT_EQ(blocks[3], 992);
  for (int i = 0; i < 4; ++i) {          // and none of them over the budget
    EXPECT_LE(int64_t{blocks[i]} * kBlockSize * per_token[i], 512 * kBlockSize * per_token[0]);
  }
}

// `kvgate kv-size --gguf` prints the bytes per token the engine's pool allocates, per dtype.
TEST_F(KvDtypeEngineTest, KvSizeAgreesWithThePool) {
  auto file = GgufFile::Open(kModel);
  ASSERT_TRUE(file);
  auto config = ModelConfigFromGguf(**file);
  ASSERT_TRUE(config) << config.error().ToString();
  for (KvDtype dtype : kAll) {
    auto e = Make(dtype, 4);
    ASSERT_TRUE(e);
    EXPECT_EQ(KvBytesPerToken(*config, dtype), static_cast<uint64_t>(e->kv_bytes_per_token()))
        << KvDtypeName(dtype);
    std::string name(KvDtypeName(dtype));
    std::vector<std::string> args = {"kv-size", "--gguf", kModel, "--dtype", name};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::ostringstream out, err;
    ASSERT_EQ(RunKvSizeCommand(static_cast<int>(argv.size()), argv.data(), out, err), 0)
        << err.str();
    EXPECT_NE(out.str().find(" " + std::to_string(e->kv_bytes_per_token()) + " "),
              std::string::npos)
        << out.str();
  }
}

// Greedy tokens of every prompt of bench/kv_quant/prompts.txt (a user message each), all batched
// in one engine, as bench/kv_quant/kv_quant_eval.cc generates them.
std::vector<std::vector<int32_t>> GreedyOverBenchPrompts(KvDtype dtype, int max_tokens) {
  std::ifstream in(std::string(KVGATE_SOURCE_DIR) + "/bench/kv_quant/prompts.txt");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) prompts.push_back(line);
  }
  EXPECT_EQ(prompts.size(), 20u);
  EngineOptions o;
  o.model_path = kModel;
  o.kv_cache_dtype = dtype;
  o.max_running = static_cast<int32_t>(prompts.size());
  auto created = Engine::Create(o);
  EXPECT_TRUE(created.has_value());
  if (!created) return {};
  Engine& e = **created;
  auto tmpl = ChatTemplateFromGguf(e.gguf());
  EXPECT_TRUE(tmpl.has_value());
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto text = ApplyChatTemplate(*tmpl, {ChatMessage{"user", prompts[i]}}, true);
    EXPECT_TRUE(text.has_value());
    std::vector<int32_t> ids;
    if (e.tokenizer().add_bos() && e.tokenizer().bos_id()) ids.push_back(*e.tokenizer().bos_id());
    const auto body = e.tokenizer().Encode(*text, /*parse_special=*/true);
    ids.insert(ids.end(), body.begin(), body.end());
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    EXPECT_TRUE(e.AddRequest({std::move(ids), p, [&out, i](const TokenEvent& ev) {
                                if (ev.token_id >= 0) out[i].push_back(ev.token_id);
                              }}));
  }
  for (int guard = 0; e.HasWork() && guard < 10000; ++guard) EXPECT_TRUE(e.Step());
  return out;
}

// An 8-bit cache does not reproduce f16's greedy output token for token, and this test does not
// pretend it does: greedy decoding amplifies any perturbation (a bf16 cache, not quantized at
// all, also diverges), and on these 20 prompts the first difference from f16 comes after 0 to 64
// tokens. What is asserted is the measured agreement with a margin: of the first 16 greedy tokens
// per prompt, int8 gave 65.9% and fp8 80.3% identical to f16 (bf16: 85.9%), and the first token
// (decided by the prefill alone) agreed on 19 / 20 and 20 / 20 prompts. docs/engine.md has the
// 64-token figures, the KL divergence and the perplexity (bench/kv_quant).
TEST_F(KvDtypeEngineTest, GreedyOutputAgreesWithF16AboveTheMeasuredFloor) {
  constexpr int kTokens = 16;
  const auto ref = GreedyOverBenchPrompts(KvDtype::kFp16, kTokens);
  ASSERT_EQ(ref.size(), 20u);
  for (auto [dtype, floor, first_floor] : {std::tuple{KvDtype::kInt8, 0.55, 18},
                                          std::tuple{KvDtype::kFp8, 0.65, 18}}) {
    const auto got = GreedyOverBenchPrompts(dtype, kTokens);
    ASSERT_EQ(got.size(), ref.size());
    int same = 0, total = 0, first = 0;
    for (size_t p = 0; p < ref.size(); ++p) {
      ASSERT_EQ(got[p].size(), static_cast<size_t>(kTokens));
      for (int i = 0; i < kTokens; ++i) same += got[p][i] == ref[p][i];
      total += kTokens;
      first += got[p][0] == ref[p][0];
    }
    const double agreement = static_cast<double>(same) / total;
    std::printf("%s: %.1f%% of greedy tokens identical to f16, first token on %d / 20 prompts\n",
                std::string(KvDtypeName(dtype)).c_str(), 100 * agreement, first);
    EXPECT_GE(agreement, floor) << KvDtypeName(dtype);
    EXPECT_GE(first, first_floor) << KvDtypeName(dtype);
  }
}

class KvDtypeTierTest : public KvDtypeEngineTest {
 protected:
  void SetUp() override {
    KvDtypeEngineTest::SetUp();
    if (IsSkipped()) return;
    dir_ = fs::temp_directory_path() /
           ("kvgate_kvdtype_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tier_ = (dir_ / "kv.tier").string();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // 12 blocks of pool; prompt A (70 tokens) then B (170) evicts A's blocks 1..3 into the tier
  // (tests/local_engine/offload_test.cc has the arithmetic).
  std::unique_ptr<Engine> MakeTiered(KvDtype dtype) {
    const int64_t slot = OffloadTier::SlotBytes(static_cast<size_t>(11880) * kBlockSize);
    return Make(dtype, 12, tier_, 64 * slot);
  }
  fs::path dir_;
  std::string tier_;
};

// An int8 block restored from disk (codes and scales) gives the output it gave before eviction.
TEST_F(KvDtypeTierTest, AnInt8BlockComesBackFromDiskWithItsScales) {
  auto engine = MakeTiered(KvDtype::kInt8);
  ASSERT_TRUE(engine);
  const Generation first = Generate(*engine, Prompt(70, 1000), 8);
  Generate(*engine, Prompt(170, 5000), 4);
  EXPECT_EQ(engine->cache_stats().tier.stored_blocks, 3u);
  EXPECT_EQ(engine->cache_stats().tier.slot_bytes, 192512);  // 64 + 190,080 bytes, to 4 KiB
  const Generation again = Generate(*engine, Prompt(70, 1000), 8);
  EXPECT_EQ(again.usage.cached_offload_tokens, 48);
  EXPECT_EQ(again.tokens, first.tokens);
}

// int8 and fp8 blocks have the same size; a tier file written by one is started empty by the
// other (the dtype is in the layout key of the file header and of every slot), never read.
TEST_F(KvDtypeTierTest, ATierFileOfAnotherDtypeIsAMiss) {
  Generation first;
  {
    auto engine = MakeTiered(KvDtype::kInt8);
    ASSERT_TRUE(engine);
    Generate(*engine, Prompt(70, 1000), 4);
    Generate(*engine, Prompt(170, 5000), 4);
    Generate(*engine, Prompt(170, 20000), 4);  // all of A on disk now
    EXPECT_GT(engine->cache_stats().tier.stored_blocks, 4u);
  }
  {
    auto fp8 = MakeTiered(KvDtype::kFp8);
    ASSERT_TRUE(fp8);
    EXPECT_EQ(fp8->cache_stats().tier.reused_blocks, 0);
    const Generation a = Generate(*fp8, Prompt(70, 1000), 4);
    EXPECT_EQ(a.usage.cached_tokens, 0);
    EXPECT_EQ(fp8->cache_stats().tier.corrupt_blocks, 0u);
  }
  // The fp8 engine reinitialised the file: an int8 engine finds nothing of its own either.
  auto again = MakeTiered(KvDtype::kInt8);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->cache_stats().tier.reused_blocks, 0);
}

}  // namespace
}  // namespace kvgate::engine
