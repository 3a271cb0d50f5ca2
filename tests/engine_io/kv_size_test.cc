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

TEST(KvSizeCliTest, SingleModelWithCapacity) {
  std::string out, err;
  ASSERT_EQ(RunCli({"--model", "qwen3-8b", "--context", "32768", "--gpu-mem-gib", "80",
                    "--weights-gib=16"},
                   &out, &err),
            0)
      << err;
  EXPECT_TRUE(err.empty());
  EXPECT_NE(out.find("qwen3-8b"), std::string::npos) << out;
  EXPECT_NE(out.find("147456"), std::string::npos) << out;
  EXPECT_NE(out.find("4.500"), std::string::npos) << out;  // GiB per session
  EXPECT_NE(out.find("16.00"), std::string::npos) << out;
  EXPECT_TRUE(out.ends_with(" 14\n")) << out;
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
  EXPECT_TRUE(out.starts_with("usage: kv-size")) << out;
  for (const char* flag : {"--model", "--gguf", "--hf-config", "--dtype", "--context",
                           "--gpu-mem-gib", "--weights-gib"}) {
    EXPECT_NE(out.find(std::string("  ") + flag), std::string::npos) << flag << "\n" << out;
  }
  EXPECT_NE(out.find("int8 or fp8"), std::string::npos) << out;
  EXPECT_NE(out.find("2-byte scale per token and KV head"), std::string::npos) << out;
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

}  // namespace
}  // namespace kvgate::engine
