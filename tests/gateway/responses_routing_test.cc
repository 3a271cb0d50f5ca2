// What each target serves of the Responses API and embeddings (targets.cc, from the provider
// type and `supports`), and the response-id -> thread memory that chains Responses turns.
#include <gtest/gtest.h>

#include "gateway/config.h"
#include "gateway/response_threads.h"
#include "gateway/targets.h"

namespace kvgate::gateway {
namespace {

Result<std::vector<router::Target>> TargetsOf(const std::string& yaml) {
  auto config = ParseConfig(yaml, [](const std::string&) { return std::nullopt; });
  if (!config) return std::unexpected(config.error());
  return BuildTargets(*config, telemetry::PriceCatalog::BuiltIn(), nullptr);
}

constexpr char kProviders[] = R"(
providers:
  - {name: oa, type: openai, base_url: "http://127.0.0.1:9/v1"}
  - {name: vl, type: vllm, base_url: "http://127.0.0.1:9/v1"}
  - {name: ds, type: deepseek, base_url: "http://127.0.0.1:9/v1"}
  - {name: gm, type: gemini-openai, base_url: "http://127.0.0.1:9/v1"}
  - {name: an, type: anthropic, base_url: "http://127.0.0.1:9"}
)";

TEST(ResponsesCapabilitiesTest, DefaultsByProviderTypeAndOverrides) {
  auto targets = TargetsOf(std::string(kProviders) + R"(
models:
  - {name: a, provider: oa}
  - {name: b, provider: vl}
  - {name: c, provider: ds}
  - {name: d, provider: gm}
  - {name: e, provider: an}
  - {name: f, provider: vl, supports: {responses: false, embeddings: false}}
  - {name: g, provider: ds, supports: {responses: true}}
  - {name: h, provider: an, supports: {responses: false}}
)");
  ASSERT_TRUE(targets.has_value()) << targets.error().message;
  std::vector<std::pair<bool, bool>> got;
  for (const router::Target& t : *targets) {
    got.emplace_back(t.capabilities.responses, t.capabilities.embeddings);
  }
  EXPECT_EQ(got, (std::vector<std::pair<bool, bool>>{
                     {true, true}, {true, true}, {false, false}, {false, true},
                     // Anthropic: the Responses API by translation to chat; it can be turned off.
                     {true, false}, {false, false}, {true, false}, {false, false}}));
}

TEST(ResponsesCapabilitiesTest, AnthropicEmbeddingsCannotBeTurnedOnButResponsesCan) {
  auto targets = TargetsOf(std::string(kProviders) + R"(
models:
  - {name: e, provider: an, supports: {embeddings: true}}
)");
  ASSERT_FALSE(targets.has_value());
  EXPECT_NE(targets.error().message.find("supports.embeddings"), std::string::npos)
      << targets.error().message;
  EXPECT_NE(targets.error().message.find("anthropic"), std::string::npos);
  auto on = TargetsOf(std::string(kProviders) + R"(
models:
  - {name: e, provider: an, supports: {responses: true}}
)");
  ASSERT_TRUE(on.has_value()) << on.error().message;
  EXPECT_TRUE((*on)[0].capabilities.responses);
}

TEST(ResponseConversationsTest, KeepsTheMostRecentlyUsedWithinCountAndBytes) {
  ResponseThreads threads(10, /*conversations=*/2, /*conversation_bytes=*/64);
  threads.RememberConversation("resp_1", "[1]");
  threads.RememberConversation("resp_2", "[2]");
  EXPECT_EQ(threads.FindConversation("resp_1"), "[1]");  // now the most recent
  threads.RememberConversation("resp_3", "[3]");         // drops resp_2, the least recent
  EXPECT_EQ(threads.FindConversation("resp_2"), std::nullopt);
  EXPECT_EQ(threads.FindConversation("resp_1"), "[1]");
  EXPECT_EQ(threads.FindConversation("resp_3"), "[3]");
  // Bytes: one that alone exceeds the limit is not kept; a big one pushes older ones out.
  threads.RememberConversation("resp_big", std::string(100, 'x'));
  EXPECT_EQ(threads.FindConversation("resp_big"), std::nullopt);
  threads.RememberConversation("resp_4", std::string(50, 'y'));
  EXPECT_EQ(threads.FindConversation("resp_4"), std::string(50, 'y'));
  EXPECT_EQ(threads.FindConversation("resp_1"), std::nullopt);
  EXPECT_EQ(threads.FindConversation("resp_3"), std::nullopt);
  // An id remembered again replaces its conversation.
  threads.RememberConversation("resp_4", "[4]");
  EXPECT_EQ(threads.FindConversation("resp_4"), "[4]");
  EXPECT_EQ(threads.FindConversation(""), std::nullopt);
}

TEST(ResponsesCapabilitiesTest, UnknownSupportsKeyIsAnError) {
  auto targets = TargetsOf(std::string(kProviders) + R"(
models:
  - {name: a, provider: oa, supports: {respones: true}}
)");
  ASSERT_FALSE(targets.has_value());
  EXPECT_NE(targets.error().message.find("respones"), std::string::npos) << targets.error().message;
}

TEST(ResponseThreadsTest, RemembersAndForgetsTheOldestBeyondCapacity) {
  ResponseThreads threads(2);
  threads.Remember("resp_1", "t1");
  threads.Remember("resp_2", "t1");
  threads.Remember("resp_2", "t-other");  // a known id keeps its thread
  EXPECT_EQ(threads.Find("resp_1"), "t1");
  EXPECT_EQ(threads.Find("resp_2"), "t1");
  threads.Remember("resp_3", "t3");
  EXPECT_EQ(threads.Find("resp_1"), std::nullopt);
  EXPECT_EQ(threads.Find("resp_3"), "t3");
  threads.Remember("", "t4");
  threads.Remember("resp_4", "");
  EXPECT_EQ(threads.Find(""), std::nullopt);
  EXPECT_EQ(threads.Find("resp_4"), std::nullopt);
}

}  // namespace
}  // namespace kvgate::gateway
