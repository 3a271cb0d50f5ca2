// The cache helpers BuildUpstreamCall applies when the gateway turns them on (CacheHelpers):
// OpenAI's prompt_cache_key from the thread, and breakpoints for an Anthropic request that has
// none, on the Messages pass-through (the client's other bytes kept) and on the chat translation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gateway/providers/provider.h"

namespace kvgate::providers {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

Result<UpstreamCall> Build(ProviderType type, const std::string& text, CallOptions o) {
  return BuildUpstreamCall(type, raw_json::Object(raw_json::Parse(text).value()), o);
}

CallOptions Keyed(Endpoint endpoint) {
  CallOptions o;
  o.endpoint = endpoint;
  o.cache_helpers.prompt_cache_key = "kvgate-abc";
  return o;
}

CallOptions AutoCache(Endpoint endpoint, std::string ttl = "5m") {
  CallOptions o;
  o.endpoint = endpoint;
  o.upstream_model = "claude-sonnet-4-5";
  o.cache_helpers.anthropic_auto_cache_ttl = std::move(ttl);
  return o;
}

TEST(PromptCacheKeyHelperTest, AddedWhenTheClientSentNone) {
  const std::string body = R"({"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]})";
  for (Endpoint e : {Endpoint::kChatCompletions, Endpoint::kResponses}) {
    const std::string text = e == Endpoint::kResponses ? R"({"model":"gpt-4o","input":"hi"})" : body;
    auto call = Build(ProviderType::kOpenAI, text, Keyed(e));
    ASSERT_TRUE(call.has_value()) << call.error().message;
    EXPECT_EQ(json::parse(call->body)["prompt_cache_key"], "kvgate-abc");
    EXPECT_EQ(call->cache_helper, "prompt_cache_key");
  }
}

TEST(PromptCacheKeyHelperTest, TheClientsOwnKeyWins) {
  auto call = Build(ProviderType::kOpenAI,
                    R"({"model":"m","prompt_cache_key":"mine","messages":[]})",
                    Keyed(Endpoint::kChatCompletions));
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(json::parse(call->body)["prompt_cache_key"], "mine");
  EXPECT_EQ(call->cache_helper, "");
}

TEST(PromptCacheKeyHelperTest, NotForEmbeddingsNorWhenOff) {
  auto embed = Build(ProviderType::kOpenAI, R"({"model":"e","input":"x"})",
                     Keyed(Endpoint::kEmbeddings));
  ASSERT_TRUE(embed.has_value());
  EXPECT_FALSE(json::parse(embed->body).contains("prompt_cache_key"));
  CallOptions off;
  auto chat = Build(ProviderType::kOpenAI, R"({"model":"m","messages":[]})", off);
  ASSERT_TRUE(chat.has_value());
  EXPECT_FALSE(json::parse(chat->body).contains("prompt_cache_key"));
  EXPECT_EQ(chat->cache_helper, "");
}

// The pass-through: breakpoints at the end of the system prompt (a string becomes one text
// block) and on the last message's last block; every other byte is the client's, the tools'
// unsorted keys and the earlier messages' escapes included.
TEST(AnthropicAutoCacheTest, MessagesPassThroughGetsTwoBreakpointsAndKeepsTheRest) {
  const std::string tools =
      R"([{"name":"f","input_schema":{"type":"object","required":["b"],"properties":{"z":{},"a":{}}}}])";
  const std::string first = R"({"role":"user","content":"caf\u00e9  first"})";
  const std::string body = R"({"model":"sonnet", "tools":)" + tools +
                           R"(, "system":"You help.", "max_tokens":8, "messages":[)" + first +
                           R"(,{"role":"assistant","content":"ok"},)" +
                           R"({"role":"user","content":[{"type":"text","text":"now"}]}]})";
  auto call = Build(ProviderType::kAnthropic, body, AutoCache(Endpoint::kMessages));
  ASSERT_TRUE(call.has_value()) << call.error().message;
  EXPECT_EQ(call->cache_helper, "anthropic_auto_cache");
  EXPECT_NE(call->body.find(R"("tools":)" + tools), std::string::npos) << call->body;
  EXPECT_NE(call->body.find("[" + first + ","), std::string::npos) << call->body;
  const ordered_json sent = ordered_json::parse(call->body);
  EXPECT_EQ(sent["model"], "claude-sonnet-4-5");
  const ordered_json ephemeral = {{"type", "ephemeral"}};
  EXPECT_EQ(sent["system"], ordered_json::parse(
                                R"([{"type":"text","text":"You help.","cache_control":{"type":"ephemeral"}}])"));
  EXPECT_EQ(sent["messages"][2]["content"][0]["cache_control"], ephemeral);
  EXPECT_FALSE(sent["messages"][0].contains("cache_control"));
  EXPECT_EQ(sent["messages"][1]["content"], "ok");
}

TEST(AnthropicAutoCacheTest, OneHourTtlAndStringContentAndThinkingSkipped) {
  const std::string body =
      R"({"model":"m","max_tokens":8,"system":[{"type":"text","text":"a"},{"type":"text","text":""}],)"
      R"("messages":[{"role":"user","content":"q"},{"role":"assistant","content":[)"
      R"({"type":"text","text":"partial"},{"type":"thinking","thinking":"t","signature":"s"}]}]})";
  auto call = Build(ProviderType::kAnthropic, body, AutoCache(Endpoint::kMessages, "1h"));
  ASSERT_TRUE(call.has_value());
  const json sent = json::parse(call->body);
  const json hour = {{"type", "ephemeral"}, {"ttl", "1h"}};
  EXPECT_EQ(sent["system"][0]["cache_control"], hour) << "the empty block cannot hold one";
  EXPECT_FALSE(sent["system"][1].contains("cache_control"));
  EXPECT_EQ(sent["messages"][1]["content"][0]["cache_control"], hour) << "thinking is skipped";
  EXPECT_FALSE(sent["messages"][1]["content"][1].contains("cache_control"));

  auto plain = Build(ProviderType::kAnthropic,
                     R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}]})",
                     AutoCache(Endpoint::kMessages));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(json::parse(plain->body)["messages"][0]["content"],
            json::parse(R"([{"type":"text","text":"q","cache_control":{"type":"ephemeral"}}])"));
}

// A client that placed its own breakpoints knows best: its bytes go as they came.
TEST(AnthropicAutoCacheTest, ARequestWithItsOwnBreakpointIsLeftAlone) {
  const std::string body =
      R"({"model":"m","max_tokens":8,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],)"
      R"("messages":[{"role":"user","content":"q"}]})";
  CallOptions o = AutoCache(Endpoint::kMessages);
  o.upstream_model.clear();
  auto call = Build(ProviderType::kAnthropic, body, o);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->body, body);
  EXPECT_EQ(call->cache_helper, "");
}

// Chat translated to Messages gets the same breakpoints; an OpenAI content part with its own
// cache_control (which the translation keeps) turns the helper off.
TEST(AnthropicAutoCacheTest, TheChatTranslationToo) {
  const std::string chat =
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"q"}]})";
  auto call = Build(ProviderType::kAnthropic, chat, AutoCache(Endpoint::kChatCompletions));
  ASSERT_TRUE(call.has_value()) << call.error().message;
  EXPECT_EQ(call->cache_helper, "anthropic_auto_cache");
  const json sent = json::parse(call->body);
  ASSERT_TRUE(sent["system"].is_array()) << call->body;
  EXPECT_TRUE(sent["system"].back().contains("cache_control"));
  EXPECT_TRUE(sent["messages"].back()["content"].back().contains("cache_control")) << call->body;

  const std::string own =
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q",)"
      R"("cache_control":{"type":"ephemeral"}}]}]})";
  auto kept = Build(ProviderType::kAnthropic, own, AutoCache(Endpoint::kChatCompletions));
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->cache_helper, "");
}

// Keep-warm chose 1-hour writes for the thread: the client's own breakpoints (none naming a
// TTL) get it wherever Anthropic takes one; every other byte of the body is the client's.
TEST(AnthropicLongWritesTest, TheClientsBreakpointsGetTheOneHourTtl) {
  const std::string body =
      R"({"model":"m", "max_tokens":8,"tools":[{"name":"t","input_schema":{"type":"object"},)"
      R"("cache_control":{"type":"ephemeral"}}],"system":[{"type":"text","text":"s",)"
      R"("cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[)"
      R"({"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"r",)"
      R"("cache_control":{"type":"ephemeral"}}]},{"type":"text","text":"q","cache_control":)"
      R"({"type":"ephemeral"}}]}],"metadata":{"user_id":"u"}})";
  CallOptions o;
  o.endpoint = Endpoint::kMessages;
  o.cache_helpers.anthropic_write_ttl = "1h";
  auto call = Build(ProviderType::kAnthropic, body, o);
  ASSERT_TRUE(call.has_value()) << call.error().message;
  const json sent = json::parse(call->body);
  const json hour = {{"type", "ephemeral"}, {"ttl", "1h"}};
  EXPECT_EQ(sent["tools"][0]["cache_control"], hour) << call->body;
  EXPECT_EQ(sent["system"][0]["cache_control"], hour);
  EXPECT_EQ(sent["messages"][0]["content"][0]["content"][0]["cache_control"], hour);
  EXPECT_EQ(sent["messages"][0]["content"][1]["cache_control"], hour);
  EXPECT_EQ(sent["metadata"], json({{"user_id", "u"}}));
  EXPECT_EQ(call->body.substr(0, 27), R"({"model":"m", "max_tokens":)") << "untouched bytes stay";

  // Off: the body goes as it came.
  auto plain = Build(ProviderType::kAnthropic, body, CallOptions{.endpoint = Endpoint::kMessages});
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->body, body);
}

// A client that names a TTL anywhere orders its TTLs itself (Anthropic wants the longer ones
// first): nothing is changed. A body with no breakpoint has nothing to lengthen.
TEST(AnthropicLongWritesTest, NamedTtlsAndBodiesWithoutBreakpointsAreLeftAlone) {
  CallOptions o;
  o.endpoint = Endpoint::kMessages;
  o.cache_helpers.anthropic_write_ttl = "1h";
  const std::string named =
      R"({"model":"m","max_tokens":8,"system":[{"type":"text","text":"s","cache_control":)"
      R"({"type":"ephemeral","ttl":"5m"}}],"messages":[{"role":"user","content":[{"type":"text",)"
      R"("text":"q","cache_control":{"type":"ephemeral"}}]}]})";
  auto call = Build(ProviderType::kAnthropic, named, o);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->body, named);
  const std::string none =
      R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"cache_control"}]})";
  auto bare = Build(ProviderType::kAnthropic, none, o);
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->body, none);
}

// With anthropic_auto_cache on, kvgate's own breakpoints take the chosen TTL.
TEST(AnthropicLongWritesTest, AutoCacheBreakpointsTakeTheChosenTtl) {
  CallOptions o = AutoCache(Endpoint::kMessages, "5m");
  o.cache_helpers.anthropic_write_ttl = "1h";
  auto call = Build(ProviderType::kAnthropic,
                    R"({"model":"m","max_tokens":8,"system":"s","messages":[{"role":"user","content":"q"}]})",
                    o);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->cache_helper, "anthropic_auto_cache");
  const json sent = json::parse(call->body);
  const json hour = {{"type", "ephemeral"}, {"ttl", "1h"}};
  EXPECT_EQ(sent["system"][0]["cache_control"], hour) << call->body;
  EXPECT_EQ(sent["messages"][0]["content"][0]["cache_control"], hour);
}

}  // namespace
}  // namespace kvgate::providers

namespace kvgate::providers {
namespace {

CallOptions Diagnostics(Endpoint endpoint) {
  CallOptions o;
  o.endpoint = endpoint;
  o.upstream_model = "claude-sonnet-4-5";
  o.cache_helpers.anthropic_previous_message_id = "msg_prev";
  return o;
}

// anthropic_cache_diagnostics: the previous message id goes after everything else, on the
// pass-through without touching a byte of the client's, and on the chat translation.
TEST(AnthropicCacheDiagnosticsTest, ThePreviousMessageIsNamedAfterThePrompt) {
  const std::string body =
      R"({"model":"sonnet", "max_tokens":8,"messages":[{"role":"user","content":"hi"}]  })";
  auto call = Build(ProviderType::kAnthropic, body, Diagnostics(Endpoint::kMessages));
  ASSERT_TRUE(call) << call.error().message;
  const std::string tail = R"(,"diagnostics":{"previous_message_id":"msg_prev"}})";
  ASSERT_GE(call->body.size(), tail.size());
  EXPECT_EQ(call->body.substr(call->body.size() - tail.size()), tail);
  EXPECT_NE(call->body.find(R"("max_tokens":8,"messages":[{"role":"user","content":"hi"}])"),
            std::string::npos);
  EXPECT_EQ(call->cache_helper, "");  // it changes nothing the cache sees

  auto chat = Build(ProviderType::kAnthropic,
                    R"({"model":"sonnet","messages":[{"role":"user","content":"hi"}]})",
                    Diagnostics(Endpoint::kChatCompletions));
  ASSERT_TRUE(chat) << chat.error().message;
  EXPECT_EQ(json::parse(chat->body)["diagnostics"], json({{"previous_message_id", "msg_prev"}}));

  // The client's own diagnostics are kept as they are.
  const std::string own =
      R"({"model":"sonnet","max_tokens":8,"messages":[],"diagnostics":{"previous_message_id":"x"}})";
  auto kept = Build(ProviderType::kAnthropic, own, Diagnostics(Endpoint::kMessages));
  ASSERT_TRUE(kept);
  EXPECT_EQ(json::parse(kept->body)["diagnostics"]["previous_message_id"], "x");
}

TEST(AnthropicCacheDiagnosticsTest, TheProvidersReasonIsReadWholeAndStreamed) {
  CallOptions o;
  o.endpoint = Endpoint::kChatCompletions;
  for (auto [diagnostics, want] :
       {std::pair{R"(,"diagnostics":{"cache_miss_reason":"tools_changed"})", "tools_changed"},
        {R"(,"diagnostics":{"cache_miss_reason":null})", "none"},
        {R"(,"diagnostics":{"cache_miss_reason":"Bad Label\n"})", "unrecognized"},
        {"", ""}}) {
    const std::string message =
        std::string(R"({"id":"msg_1","type":"message","role":"assistant","model":"m",)"
                    R"("content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn",)"
                    R"("usage":{"input_tokens":3,"output_tokens":1})") +
        diagnostics + "}";
    for (Endpoint e : {Endpoint::kChatCompletions, Endpoint::kMessages}) {
      o.endpoint = e;
      auto whole = TranslateResponse(ProviderType::kAnthropic, message, o);
      ASSERT_TRUE(whole) << whole.error().message;
      EXPECT_EQ(whole->provider_cache_miss_reason, want) << message;
      o.stream = true;
      auto stream = NewStreamTranslator(ProviderType::kAnthropic, o);
      stream->Feed("event: message_start\ndata: {\"type\":\"message_start\",\"message\":" +
                   message + "}\n\n");
      EXPECT_EQ(stream->provider_cache_miss_reason(), want) << message;
      o.stream = false;
    }
  }
}

}  // namespace
}  // namespace kvgate::providers
