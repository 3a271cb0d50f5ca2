// The endpoint table (gateway/providers/endpoint.h): one row per wire operation, in the enum's
// order, and the properties the adapters and the engine read instead of asking which endpoint it
// is.
#include "gateway/providers/endpoint.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kvgate::providers {
namespace {

TEST(EndpointTableTest, EveryEndpointHasItsOwnNameAndPath) {
  std::set<std::string_view> names, paths;
  for (int i = 0; i < kEndpointCount; ++i) {
    const Endpoint e = static_cast<Endpoint>(i);
    EXPECT_FALSE(EndpointName(e).empty());
    EXPECT_EQ(EndpointPath(e).rfind("/v1/", 0), 0u) << EndpointPath(e);
    names.insert(EndpointName(e));
    paths.insert(EndpointPath(e));
  }
  EXPECT_EQ(names.size(), size_t(kEndpointCount));
  EXPECT_EQ(paths.size(), size_t(kEndpointCount));
  EXPECT_EQ(EndpointName(Endpoint::kChatCompletions), "chat.completions");
  EXPECT_EQ(EndpointPath(Endpoint::kMessages), "/v1/messages");
  EXPECT_EQ(EndpointPath(Endpoint::kEmbeddings), "/v1/embeddings");
}

TEST(EndpointTableTest, TheRowsKeepTheDecisionsTheyReplaced) {
  // Only chat completions carry chat messages; chat and completions are OpenAI sampling.
  for (int i = 0; i < kEndpointCount; ++i) {
    const Endpoint e = static_cast<Endpoint>(i);
    const EndpointTraits& t = EndpointTraitsOf(e);
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(t.chat_messages, e == Endpoint::kChatCompletions);
    EXPECT_EQ(t.openai_sampling, e == Endpoint::kChatCompletions || e == Endpoint::kCompletions);
    EXPECT_EQ(t.streams, e != Endpoint::kEmbeddings);
    EXPECT_EQ(t.client_stream_flags, e == Endpoint::kResponses);
    EXPECT_EQ(t.prompt_cache_key, e == Endpoint::kChatCompletions || e == Endpoint::kResponses);
    EXPECT_EQ(t.anthropic_only, e == Endpoint::kMessages);
    EXPECT_EQ(t.openai_only, e == Endpoint::kResponses || e == Endpoint::kEmbeddings);
    EXPECT_FALSE(t.anthropic_only && t.openai_only);
  }
}

}  // namespace
}  // namespace kvgate::providers
