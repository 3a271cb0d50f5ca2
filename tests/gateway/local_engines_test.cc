// LocalEngines::Start's device handling: `device: cuda` reaches the engine; without a GPU (or in a
// build without CUDA) startup fails with an error naming the provider and the fix.
#include <gtest/gtest.h>

#include <filesystem>

#include "gateway/config.h"
#include "gateway/local_provider.h"
#include "local_engine/device.h"

namespace kvgate::gateway {
namespace {

const std::string kModel =
    std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

GatewayConfig LocalConfig(std::string device, int64_t kv_cache_tokens) {
  GatewayConfig config;
  config.providers.push_back({.name = "loc",
                              .type = "local",
                              .model_path = kModel,
                              .kv_cache_tokens = kv_cache_tokens,
                              .device = std::move(device),
                              .gpu_memory_fraction = 0.2,
                              .threads = 1});
  config.models.push_back({.name = "m", .provider = "loc", .upstream_model = "m"});
  return config;
}

TEST(LocalEnginesTest, CudaWithoutDeviceFailsNamingTheProvider) {
  if (engine::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto started = LocalEngines::Start(LocalConfig("cuda", 0));
  ASSERT_FALSE(started.has_value());
  EXPECT_EQ(started.error().code, ErrorCode::kUnavailable);
  const std::string& m = started.error().message;
  const std::string why =
      engine::BuiltWithCuda()
          ? "provider loc: device cuda: no CUDA device found (cudaGetDeviceCount"
          : "provider loc: device cuda: this kvgate was built without CUDA";
  EXPECT_EQ(m.rfind(why, 0), 0u) << m;
  EXPECT_TRUE(m.ends_with("); use device: cpu")) << m;
}

TEST(LocalEnginesTest, StartsOnEitherDevice) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
  std::vector<std::pair<std::string, std::string>> runs = {{"cpu", "cpu-"}};
  if (engine::CudaDeviceCount() > 0) runs.push_back({"cuda", "cuda"});
  for (const auto& [device, backend] : runs) {
    auto started = LocalEngines::Start(LocalConfig(device, 2048));
    ASSERT_TRUE(started.has_value()) << device << ": " << started.error().message;
    const auto described = (*started)->Describe()["engines"];
    ASSERT_TRUE(described.is_array() && described.size() == 1) << described.dump();
    EXPECT_EQ(described[0]["provider"], "loc");
    EXPECT_EQ(described[0]["backend"].get<std::string>().rfind(backend, 0), 0u) << described.dump();
    EXPECT_EQ(described[0]["pool_blocks"], 128);  // kv_cache_tokens 2048 / 16, on both devices
    (*started)->Stop();
  }
}

}  // namespace
}  // namespace kvgate::gateway
