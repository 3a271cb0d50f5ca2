#include "local_engine/kv_size.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

namespace kvgate::engine {
namespace {

ModelConfig Builtin(std::string_view name) {
  auto c = FindBuiltinModelConfig(name);
  EXPECT_TRUE(c.has_value()) << name;
  return c.value_or(ModelConfig{});
}

// 2 (K, V) x layers x KV heads x head dim x 2 bytes: 2 x 80 x 8 x 128 x 2 for Llama 3.3 70B,
// 2 x 36 x 8 x 128 x 2 for Qwen3 8B.
TEST(KvSizeTest, BytesPerTokenMatchEngineDoc) {
  EXPECT_EQ(KvBytesPerToken(Builtin("llama-3.3-70b"), KvDtype::kBf16), 327680u);
  EXPECT_EQ(KvBytesPerToken(Builtin("qwen3-8b"), KvDtype::kBf16), 147456u);
  EXPECT_EQ(KvBytesPerToken(Builtin("deepseek-v3"), KvDtype::kBf16), 70272u);  // 61 x 576 x 2
  EXPECT_EQ(KvBytesPerToken(Builtin("smollm2-135m"), KvDtype::kBf16), 23040u);
  EXPECT_EQ(KvBytesPerToken(Builtin("llama-3.1-405b"), KvDtype::kBf16), 516096u);
  EXPECT_EQ(KvBytesPerToken(Builtin("qwen3-235b-a22b"), KvDtype::kBf16), 192512u);
}

TEST(KvSizeTest, DtypeScales) {
  const ModelConfig c = Builtin("llama-3.3-70b");
  EXPECT_EQ(KvBytesPerToken(c, KvDtype::kFp32), 655360u);
  EXPECT_EQ(KvBytesPerToken(c, KvDtype::kFp16), 327680u);
  // 8-bit: 1 byte a value plus kvgate's 2-byte scale per token and KV head (80 x 8 x 2 of them).
  EXPECT_EQ(KvBytesPerToken(c, KvDtype::kFp8), 163840u + 2 * 80 * 8 * 2);
  EXPECT_EQ(KvBytesPerToken(c, KvDtype::kInt8), 166400u);
  EXPECT_EQ(KvBytesPerToken(Builtin("smollm2-135m"), KvDtype::kInt8), 11880u);
  EXPECT_EQ(KvBytesPerToken(Builtin("deepseek-v3"), KvDtype::kFp8), 61u * (576 + 2));  // MLA
  EXPECT_EQ(ParseKvDtype("fp8"), KvDtype::kFp8);
  EXPECT_EQ(ParseKvDtype("int8"), KvDtype::kInt8);
  EXPECT_EQ(ParseKvDtype("f16"), KvDtype::kFp16);
  EXPECT_EQ(ParseKvDtype("f32"), KvDtype::kFp32);
  EXPECT_EQ(ParseKvDtype("int4").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(KvDtypeName(KvDtype::kBf16), "bf16");
}

TEST(KvSizeTest, SessionsAndCapacity) {
  const ModelConfig c = Builtin("qwen3-8b");
  // A 100K-token session of Qwen3-8B: 147,456 x 100,000 bytes (~13.7 GiB).
  EXPECT_EQ(KvBytesPerSession(c, KvDtype::kBf16, 100000), 14745600000ull);
  const uint64_t gib = 1ull << 30;
  // 80 GiB GPU, 16 GiB weights: 64 GiB left; 32K-token sessions of 4.5 GiB each -> 14.
  const uint64_t session = KvBytesPerSession(c, KvDtype::kBf16, 32768);
  EXPECT_EQ(session, 147456ull * 32768);
  EXPECT_EQ(SessionsThatFit(80 * gib, 16 * gib, session), 14u);
  EXPECT_EQ(SessionsThatFit(16 * gib, 16 * gib, session), 0u);
  EXPECT_EQ(SessionsThatFit(8 * gib, 16 * gib, session), 0u);
  // Saturates instead of wrapping.
  EXPECT_EQ(KvBytesPerSession(c, KvDtype::kFp32, ~uint64_t{0} / 2), ~uint64_t{0});
}

// Gemma 3 27B's KV geometry (62 layers, 16 KV heads of 128, a 1024-token window on 5 of every 6
// layers) and Mistral 7B v0.1's (32 layers, 8 KV heads of 128, a 4096-token window on all).
ModelConfig Sliding(uint32_t layers, uint32_t kv_heads, uint32_t window, uint32_t period) {
  ModelConfig c;
  c.name = "sliding";
  c.n_layers = layers;
  c.hidden = 4096;
  c.n_heads = 32;
  c.n_kv_heads = kv_heads;
  c.head_dim = 128;
  c.vocab_size = 32000;
  c.sliding_window = window;
  c.sliding_layers = SlidingLayersEvery(layers, period);
  EXPECT_TRUE(ValidateModelConfig(c).has_value());
  return c;
}

TEST(KvSizeSlidingTest, SlidingLayersAreCappedAtTheirWindow) {
  const ModelConfig gemma3 = Sliding(62, 16, 1024, 6);
  // One layer's token in bf16: 2 (K, V) x 16 heads x 128 x 2 bytes = 8192; all 62 layers 507,904.
  EXPECT_EQ(KvBytesPerToken(gemma3, KvDtype::kBf16), 507904u);
  // Within the window every layer holds every token.
  EXPECT_EQ(KvBytesPerSession(gemma3, KvDtype::kBf16, 1024), 507904ull * 1024);
  // 32K tokens: 10 global layers x 32768 + 52 local layers x 1024 = 380,928 layer-tokens x 8192,
  // against 62 x 32768 x 8192 = 16,642,998,272 bytes if every layer kept the whole context.
  EXPECT_EQ(KvBytesPerSession(gemma3, KvDtype::kBf16, 32768), 3120562176ull);
  // fp8: 2 x 16 x (128 + 2 scale bytes) = 4160 bytes a layer-token.
  EXPECT_EQ(KvBytesPerSession(gemma3, KvDtype::kFp8, 32768), 380928ull * 4160);

  const ModelConfig mistral = Sliding(32, 8, 4096, 0);
  // 2 x 8 x 128 x 2 = 4096 bytes a layer-token; past 4096 tokens a session stops growing.
  EXPECT_EQ(KvBytesPerSession(mistral, KvDtype::kBf16, 2048), 32ull * 2048 * 4096);
  EXPECT_EQ(KvBytesPerSession(mistral, KvDtype::kBf16, 32768), 536870912ull);  // 0.5 GiB
  EXPECT_EQ(KvBytesPerSession(mistral, KvDtype::kBf16, 1u << 30), 536870912ull);
  // Saturates, windows or not.
  EXPECT_EQ(KvBytesPerSession(Sliding(62, 16, UINT32_MAX, 6), KvDtype::kFp32, ~uint64_t{0} / 2),
            ~uint64_t{0});
}

TEST(KvSizeSizesTest, ParseByteSize) {
  EXPECT_EQ(ParseByteSize("80GB"), 80'000'000'000ull);
  EXPECT_EQ(ParseByteSize("141GiB"), 141ull << 30);
  EXPECT_EQ(ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(ParseByteSize("1.5GB"), 1'500'000'000ull);
  EXPECT_EQ(ParseByteSize("250 mb"), 250'000'000ull);  // case and one space are forgiven
  EXPECT_EQ(ParseByteSize("0GiB"), 0u);
  EXPECT_EQ(ParseByteSize("1048576GiB"), kMaxSizeBytes);
  auto message = [](std::string_view text) {
    auto r = ParseByteSize(text);
    if (r) {
      ADD_FAILURE() << text << " parsed as " << *r;
      return std::string();
    }
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    return r.error().message;
  };
  // A bare number names the accepted units instead of guessing one.
  EXPECT_EQ(message("80"), "needs a unit: GB, GiB, MB or MiB (as in 80GB or 141GiB), got '80'");
  EXPECT_EQ(message("80G"), "has an unknown unit 'G' in '80G': use GB, GiB, MB or MiB");
  EXPECT_NE(message("80TB").find("unknown unit 'TB'"), std::string::npos);
  EXPECT_NE(message("GB").find("needs a number and a unit"), std::string::npos);
  EXPECT_NE(message("").find("needs a number and a unit"), std::string::npos);
  EXPECT_NE(message("nanGB").find("needs a number and a unit"), std::string::npos);
  EXPECT_NE(message("-1GB").find("from 0 to 1 PiB"), std::string::npos);
  EXPECT_NE(message("1048577GiB").find("from 0 to 1 PiB"), std::string::npos);
  EXPECT_NE(message("80  GB").find("unknown unit"), std::string::npos);
}

TEST(KvSizeSizesTest, FormatGibGb) {
  EXPECT_EQ(FormatGibGb(16ull << 30), "16.00 GiB (17.18 GB)");
  EXPECT_EQ(FormatGibGb(80'000'000'000ull), "74.51 GiB (80.00 GB)");
  EXPECT_EQ(FormatGibGb(0, 3), "0.000 GiB (0.000 GB)");
}

TEST(KvSizeSizesTest, GpuMemoryUtilization) {
  EXPECT_EQ(ParseGpuMemoryUtilization("0.9"), 0.9);
  EXPECT_EQ(ParseGpuMemoryUtilization("1"), 1.0);
  EXPECT_EQ(ParseGpuMemoryUtilization("0.05"), 0.05);
  for (const char* bad : {"0", "-0.5", "1.01", "90", "90%", "", "nan", "inf", "0.9x"}) {
    auto r = ParseGpuMemoryUtilization(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().message,
              std::string("needs a fraction in (0, 1], as vLLM's gpu_memory_utilization (default "
                          "0.9), got '") +
                  bad + "'");
  }
}

TEST(KvSizeSizesTest, PlanKvPool) {
  const uint64_t gib = 1ull << 30;
  const uint64_t session = 147456ull * 32768;  // Qwen3 8B, 32K tokens: 4.5 GiB
  // 0.9 x 80 GiB = 72 GiB usable; 16 GiB of weights leave 56 GiB: 12 sessions.
  const KvPoolPlan p = PlanKvPool(80 * gib, 0.9, 16 * gib, session);
  EXPECT_EQ(p.usable_bytes, 72 * gib);
  EXPECT_EQ(p.pool_bytes, 56 * gib);
  EXPECT_EQ(p.sessions, 12u);
  EXPECT_TRUE(p.weights_fit);
  // Utilization 1 is the whole GPU (kv-size's figure before the reserve): 14.
  EXPECT_EQ(PlanKvPool(80 * gib, 1.0, 16 * gib, session).sessions, 14u);
  // Weights that fill the usable memory, or more: no pool, 0 sessions, flagged.
  for (uint64_t weights : {72 * gib, 75 * gib, 90 * gib}) {
    const KvPoolPlan none = PlanKvPool(80 * gib, 0.9, weights, session);
    EXPECT_FALSE(none.weights_fit) << weights;
    EXPECT_EQ(none.pool_bytes, 0u);
    EXPECT_EQ(none.sessions, 0u);
  }
  // A pool smaller than one session fits the weights but no session.
  const KvPoolPlan tight = PlanKvPool(80 * gib, 0.9, 70 * gib, session);
  EXPECT_TRUE(tight.weights_fit);
  EXPECT_EQ(tight.pool_bytes, 2 * gib);
  EXPECT_EQ(tight.sessions, 0u);
}

int RunCli(std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin(), "kv-size");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream o, e;
  const int rc = RunKvSizeCommand(static_cast<int>(argv.size()), argv.data(), o, e);
  *out = o.str();
  *err = e.str();
  return rc;
}

// The capacity section: the reserve it applied, weights and pool in GiB and GB, whole sessions.
TEST(KvSizeCliTest, SingleModelWithCapacity) {
  std::string out, err;
  ASSERT_EQ(RunCli({"--model", "qwen3-8b", "--context", "32768", "--gpu-mem-gib", "80",
                    "--weights-gib=16"},
                   &out, &err),
            0)
      << err;
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_NE(out.find("qwen3-8b"), std::string::npos) << out;
  EXPECT_NE(out.find("147456"), std::string::npos) << out;
  EXPECT_NE(out.find("4.500"), std::string::npos) << out;  // GiB per session
  EXPECT_NE(out.find("4.832"), std::string::npos) << out;  // GB per session
  EXPECT_NE(out.find("GPU memory: 80.00 GiB (85.90 GB)\n"
                     "reserve:    --gpu-memory-utilization 0.9 (the default, as vLLM's)\n"
                     "usable:     72.00 GiB (77.31 GB) for the weights and the KV pool; 8.00 GiB "
                     "(8.59 GB) held back\n"),
            std::string::npos)
      << out;
  // weights 16 GiB / 17.18 GB, pool 56 GiB / 60.13 GB, 12 sessions of 4.5 GiB.
  EXPECT_TRUE(out.ends_with("16.00       17.18        56.00       60.13        12\n")) << out;

  // The same in unit-suffixed sizes; utilization 1 gives kv-size's figure before the reserve.
  std::string out2;
  ASSERT_EQ(
      RunCli({"--model", "qwen3-8b", "--context", "32768", "--gpu-mem", "80GiB", "--weights=16GiB"},
             &out2, &err),
      0)
      << err;
  EXPECT_EQ(out2, out);
  ASSERT_EQ(RunCli({"--model", "qwen3-8b", "--context", "32768", "--gpu-mem", "80GiB", "--weights",
                    "16GiB", "--gpu-memory-utilization", "1"},
                   &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("reserve:    --gpu-memory-utilization 1\nusable:     80.00 GiB (85.90 GB) "),
            std::string::npos)
      << out;
  EXPECT_TRUE(out.ends_with(" 14\n")) << out;
  ASSERT_EQ(RunCli({"--model", "qwen3-8b", "--gpu-mem", "80GB"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("GPU memory: 74.51 GiB (80.00 GB)"), std::string::npos) << out;
}

// Weights that do not fit the usable memory: a plain warning on stderr and 0 sessions, not a
// negative pool; success, since the figures printed are right.
TEST(KvSizeCliTest, WeightsThatDoNotFitWarn) {
  std::string out, err;
  ASSERT_EQ(
      RunCli({"--model", "llama-3.3-70b", "--context", "8192", "--gpu-mem", "141GiB"}, &out, &err),
      0);
  EXPECT_EQ(err,
            "kv-size: warning: llama-3.3-70b: the weights, 131.40 GiB (141.09 GB), do not fit in "
            "the usable memory, 126.90 GiB (136.26 GB) = 0.9 x 141.00 GiB (151.40 GB): no room "
            "for a KV pool, 0 sessions\n");
  EXPECT_TRUE(out.ends_with("131.40      141.09         0.00        0.00         0\n")) << out;
  // A higher utilization leaves 2.55 GiB: one 8K-token session of 2.5 GiB, no warning.
  ASSERT_EQ(RunCli({"--model", "llama-3.3-70b", "--context", "8192", "--gpu-mem", "141GiB",
                    "--gpu-memory-utilization", "0.95"},
                   &out, &err),
            0);
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_TRUE(out.ends_with("         1\n")) << out;
  // Weights larger than the whole GPU: the same warning, never a wrapped-around pool.
  ASSERT_EQ(RunCli({"--model", "qwen3-8b", "--gpu-mem", "8GB", "--weights", "20GB"}, &out, &err),
            0);
  EXPECT_NE(err.find("warning: qwen3-8b: the weights, 18.63 GiB (20.00 GB), do not fit"),
            std::string::npos)
      << err;
  EXPECT_TRUE(out.ends_with("0.00        0.00         0\n")) << out;
}

// Sliding windows from an HF config (the shape of Gemma 3 27B's): the window and its layers are
// shown, the session is counted with them capped, and the output says so.
TEST(KvSizeCliTest, SlidingWindowModel) {
  const std::string config =
      std::string(KVGATE_SOURCE_DIR) + "/tests/engine_io/data/gemma3_27b_config.json";
  std::string out, err;
  ASSERT_EQ(RunCli({"--hf-config", config, "--context", "32768", "--gpu-mem", "80GB"}, &out, &err),
            0)
      << err;
  // window 1024 on 52 layers; 507,904 B/token within the window; 3,120,562,176 bytes a session.
  EXPECT_NE(out.find("1024         52      507904    32768"), std::string::npos) << out;
  EXPECT_NE(out.find("3.121"), std::string::npos) << out;  // GB per session
  EXPECT_NE(out.find("sliding windows: a model's swa_layers layers attend to, and cache, only "
                     "the last\n`window` tokens"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("min(context, window)"), std::string::npos) << out;
  // An HF config has no weights figure: counted as 0, and said so.
  EXPECT_NE(err.find("note: gemma3_text: the weights' size is unknown and counted as 0; give "
                     "--weights SIZE"),
            std::string::npos)
      << err;
  // Models without a window say "-" and print no note.
  ASSERT_EQ(RunCli({"--model", "qwen3-8b"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("bf16       -          -"), std::string::npos) << out;
  EXPECT_EQ(out.find("sliding windows"), std::string::npos) << out;
}

TEST(KvSizeCliTest, AllBuiltinsByDefault) {
  std::string out, err;
  ASSERT_EQ(RunCli({"--dtype", "fp8"}, &out, &err), 0) << err;
  for (const ModelConfig& c : BuiltinModelConfigs()) {
    EXPECT_NE(out.find(c.name), std::string::npos) << c.name;
  }
  EXPECT_NE(out.find("166400"), std::string::npos);  // Llama 3.3 70B in fp8, with its scales
  EXPECT_NE(out.find("MLA"), std::string::npos);
}

TEST(KvSizeCliTest, GgufInput) {
  const std::string model =
      std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "model not fetched";
  std::string out, err;
  ASSERT_EQ(RunCli({"--gguf", model, "--gpu-mem-gib", "1"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("23040"), std::string::npos) << out;
  EXPECT_NE(out.find("8192"), std::string::npos) << out;  // the model's own context length
}

// `kvgate kv-size --help` prints kv-size's own flags, --dtype with what each type costs, on
// stdout, and succeeds (it used to print the top-level usage).
TEST(KvSizeCliTest, HelpPrintsItsOwnFlags) {
  std::string out, err;
  EXPECT_EQ(RunCli({"--model", "qwen3-8b", "--help"}, &out, &err), 0);
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_TRUE(out.starts_with("usage: kvgate kv-size")) << out;
  for (const char* flag : {"--model NAME", "--gguf PATH", "--hf-config PATH", "--dtype T",
                           "--context N", "--gpu-mem SIZE", "--gpu-memory-utilization F",
                           "--weights SIZE", "--gpu-mem-gib G", "--weights-gib W"}) {
    EXPECT_NE(out.find(std::string("\n  ") + flag), std::string::npos) << flag << "\n" << out;
  }
  EXPECT_NE(out.find("bf16 or f16 (2 bytes a value), int8 or fp8"), std::string::npos) << out;
  EXPECT_NE(out.find("2-byte scale per token and KV head"), std::string::npos) << out;
  EXPECT_NE(out.find("GB (10^9\n                    bytes), GiB (2^30), MB or MiB"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("default 0.9"), std::string::npos) << out;
  EXPECT_EQ(RunCli({"-h"}, &out, &err), 0);
  EXPECT_TRUE(out.starts_with("usage: kvgate kv-size")) << out;
}

TEST(KvSizeCliTest, Errors) {
  std::string out, err;
  EXPECT_NE(RunCli({"--model", "gpt-5"}, &out, &err), 0);
  EXPECT_NE(err.find("unknown model 'gpt-5'"), std::string::npos) << err;
  EXPECT_NE(RunCli({"--dtype", "int3"}, &out, &err), 0);
  EXPECT_NE(err.find("unknown KV dtype"), std::string::npos) << err;
  EXPECT_NE(RunCli({"--context", "-5"}, &out, &err), 0);
  EXPECT_NE(err.find("--context needs an integer from 1"), std::string::npos) << err;
  // Values whose byte counts would overflow 64 bits are refused, not printed as garbage.
  EXPECT_NE(RunCli({"--context", "9999999999999"}, &out, &err), 0);
  EXPECT_NE(err.find("--context needs an integer from 1"), std::string::npos) << err;
  EXPECT_NE(RunCli({"--model", "qwen3-8b", "--gpu-mem-gib", "1e11"}, &out, &err), 0);
  EXPECT_NE(err.find("--gpu-mem-gib needs a number from 0 to 1048576"), std::string::npos) << err;
  EXPECT_NE(RunCli({"--gpu-mem-gib"}, &out, &err), 0);
  EXPECT_NE(err.find("needs a value"), std::string::npos) << err;
  EXPECT_NE(RunCli({"--bogus", "1"}, &out, &err), 0);
  EXPECT_NE(err.find("unknown flag --bogus"), std::string::npos) << err;
  EXPECT_NE(RunCli({"--model", "qwen3-8b", "--gguf", "x"}, &out, &err), 0);
  EXPECT_NE(RunCli({"--gguf", "/nonexistent.gguf"}, &out, &err), 0);
  EXPECT_NE(err.find("/nonexistent.gguf"), std::string::npos) << err;
  EXPECT_NE(RunCli({"--weights-gib", "3"}, &out, &err), 0);
  EXPECT_TRUE(out.empty());
}

TEST(KvSizeCliTest, SizeAndUtilizationErrors) {
  std::string out, err;
  auto fails = [&](std::vector<std::string> args, std::string_view message) {
    EXPECT_EQ(RunCli(args, &out, &err), 2) << message;
    EXPECT_TRUE(err.starts_with("kv-size: " + std::string(message) + "\n")) << err;
    EXPECT_TRUE(out.empty()) << out;
  };
  fails({"--model", "qwen3-8b", "--gpu-mem", "80"},
        "--gpu-mem needs a unit: GB, GiB, MB or MiB (as in 80GB or 141GiB), got '80'");
  fails({"--model", "qwen3-8b", "--gpu-mem", "80GB", "--weights", "16"},
        "--weights needs a unit: GB, GiB, MB or MiB (as in 80GB or 141GiB), got '16'");
  fails({"--model", "qwen3-8b", "--gpu-mem", "80Gb!"},
        "--gpu-mem has an unknown unit 'Gb!' in '80Gb!': use GB, GiB, MB or MiB");
  fails({"--model", "qwen3-8b", "--gpu-mem", "80GB", "--gpu-mem-gib", "80"},
        "give --gpu-mem or --gpu-mem-gib, not both (they set the same size)");
  fails({"--model", "qwen3-8b", "--weights-gib", "8", "--weights", "8GiB"},
        "give --weights-gib or --weights, not both (they set the same size)");
  for (const char* bad : {"0", "1.5", "90", "-0.1", "0.9.1"}) {
    fails({"--model", "qwen3-8b", "--gpu-mem", "80GB", "--gpu-memory-utilization", bad},
          std::string("--gpu-memory-utilization needs a fraction in (0, 1], as vLLM's "
                      "gpu_memory_utilization (default 0.9), got '") +
              bad + "'");
  }
  fails({"--model", "qwen3-8b", "--gpu-memory-utilization", "0.8"},
        "--gpu-memory-utilization applies to --gpu-mem; give --gpu-mem SIZE too");
  fails({"--bogus"}, "unknown flag --bogus");
}

}  // namespace
}  // namespace kvgate::engine
