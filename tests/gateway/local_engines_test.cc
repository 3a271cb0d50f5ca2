// LocalEngines::Start's device handling: `device: cuda` reaches the engine; without a GPU (or in a
// build without CUDA) startup fails with an error naming the provider and the fix. And an offload
// tier's view through Describe, Lookup and the metrics.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "gateway/config.h"
#include "gateway/local_provider.h"
#include "local_engine/device.h"
#include "local_engine/offload_tier.h"

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

// Gateway keys' prefix caches are kept apart by salt: none without keys, one per key otherwise,
// fixed for a key (the offload file outlives the process) and never the unsalted 0.
TEST(LocalEnginesTest, PrefixCacheSaltIsPerKeyStableAndNonZero) {
  EXPECT_EQ(PrefixCacheSalt(""), 0u);
  const uint64_t a = PrefixCacheSalt("key_aaaaaaaaaaaa");
  const uint64_t b = PrefixCacheSalt("key_bbbbbbbbbbbb");
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(PrefixCacheSalt("key_aaaaaaaaaaaa"), a);
  // The first 64 bits of SHA-256("kvgate prefix cache salt\nkey_aaaaaaaaaaaa"), as a replica
  // built elsewhere computes it.
  const std::string digest = HashApiKey("kvgate prefix cache salt\nkey_aaaaaaaaaaaa");
  EXPECT_EQ(a, std::stoull(digest.substr(0, 16), nullptr, 16));
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

TEST(LocalEnginesTest, AnOffloadTierShowsInDescribeLookupAndMetrics) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
  const std::filesystem::path tier =
      std::filesystem::temp_directory_path() / ("kvgate_local_engines_" + std::to_string(::getpid()));
  std::filesystem::remove(tier);
  GatewayConfig config = LocalConfig("cpu", 2048);
  config.providers[0].offload_disk = tier.string();
  config.providers[0].offload_bytes = 8 * engine::OffloadTier::SlotBytes(23040 * engine::kBlockSize);
  {
    auto started = LocalEngines::Start(config);
    ASSERT_TRUE(started.has_value()) << started.error().message;
    const auto described = (*started)->Describe()["engines"][0];
    const auto& offload = described["offload"];
    ASSERT_TRUE(offload.is_object()) << described.dump();
    EXPECT_EQ(offload["path"], tier.string());
    EXPECT_EQ(offload["capacity_blocks"], 8);
    EXPECT_EQ(offload["used_blocks"], 0);
    EXPECT_EQ(offload["hit_tokens"], 0);
    router::Target target;
    target.name = "m";
    target.provider = "loc";
    const std::string prompt = R"({"prompt": "Hello there, friend."})";
    Result<raw_json::Value> body = raw_json::Parse(prompt);
    ASSERT_TRUE(body.has_value());
    auto looked_up = (*started)->LookupPrefix(target, raw_json::Object(*body), "");
    ASSERT_TRUE(looked_up.has_value()) << looked_up.error().message;
    const nlohmann::json lookup = PrefixLookupJson(*looked_up);
    EXPECT_EQ(lookup["cached_tokens"], 0);
    EXPECT_EQ(lookup["cached_tokens_by_tier"], (nlohmann::json{{"pool", 0}, {"disk", 0}}));
    std::string metrics;
    (*started)->ExposeMetrics(metrics);
    for (const char* line :
         {"kvgate_engine_offload_hits_total{provider=\"loc\"} 0\n",
          "kvgate_engine_offload_restore_seconds_total{provider=\"loc\"} 0\n",
          "kvgate_engine_offload_used_bytes{provider=\"loc\"} 0\n",
          "# TYPE kvgate_engine_offload_capacity_bytes gauge\n",
          "kvgate_engine_prefix_cache_hits_total{provider=\"loc\"} 0\n"}) {
      EXPECT_NE(metrics.find(line), std::string::npos) << line << " in\n" << metrics;
    }
    (*started)->Stop();
  }
  // Without a tier: offload is null, and the tier's gauges read 0.
  auto plain = LocalEngines::Start(LocalConfig("cpu", 2048));
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE((*plain)->Describe()["engines"][0]["offload"].is_null());
  (*plain)->Stop();
  std::filesystem::remove(tier);
}

}  // namespace
}  // namespace kvgate::gateway
