// The Bedrock adapter: chat to Converse (cache_control -> cachePoint) and to InvokeModel, the
// answers and streams back, usage read exactly, and bad frames and exceptions as errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gateway/providers/event_stream.h"
#include "gateway/providers/provider.h"

namespace kvgate::providers {
namespace {

using nlohmann::json;

constexpr char kModel[] = "anthropic.claude-sonnet-4-5-20250929-v1:0";

CallOptions Options(BedrockApi api, bool stream = false) {
  CallOptions o;
  o.upstream_model = kModel;
  o.bedrock_api = api;
  o.stream = stream;
  o.created = 1700000000;
  return o;
}

Result<UpstreamCall> Build(const std::string& text, const CallOptions& o) {
  return BuildUpstreamCall(ProviderType::kBedrock, raw_json::Object(raw_json::Parse(text).value()),
                           o);
}

std::string Event(std::string_view type, const json& payload) {
  return EncodeEventStreamMessage(
      {StringHeader(":event-type", std::string(type)),
       StringHeader(":content-type", "application/json"), StringHeader(":message-type", "event")},
      payload.dump());
}

TEST(BedrockBuildTest, ChatToConverseWithCachePoints) {
  const std::string body = R"({"model":"claude-br","max_tokens":100,"temperature":0.5,
    "top_p":0.9,"stop":["END"],"thread_identifier":"t1",
    "messages":[{"role":"system","content":[{"type":"text","text":"You are terse.",
                  "cache_control":{"type":"ephemeral","ttl":"1h"}}]},
                {"role":"user","content":[{"type":"text","text":"Hello",
                  "cache_control":{"type":"ephemeral"}}]},
                {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
                  "function":{"name":"get","arguments":"{\"q\":1}"}}]},
                {"role":"tool","tool_call_id":"call_1","content":"42"}],
    "tools":[{"type":"function","function":{"name":"get","description":"d",
              "parameters":{"type":"object"}}}]})";
  auto call = Build(body, Options(BedrockApi::kConverse));
  ASSERT_TRUE(call.has_value()) << call.error().message;
  EXPECT_EQ(call->path, "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse");
  const json c = json::parse(call->body);
  EXPECT_EQ(c["system"], json::parse(R"([{"text":"You are terse."},
                                          {"cachePoint":{"type":"default","ttl":"1h"}}])"));
  EXPECT_EQ(c["messages"][0], json::parse(R"({"role":"user","content":[{"text":"Hello"},
                                               {"cachePoint":{"type":"default"}}]})"));
  EXPECT_EQ(c["messages"][1]["content"][0]["toolUse"],
            json::parse(R"({"toolUseId":"call_1","name":"get","input":{"q":1}})"));
  EXPECT_EQ(c["messages"][2]["content"][0]["toolResult"],
            json::parse(R"({"toolUseId":"call_1","content":[{"text":"42"}]})"));
  EXPECT_EQ(
      c["inferenceConfig"],
      json::parse(R"({"maxTokens":100,"temperature":0.5,"topP":0.9,"stopSequences":["END"]})"));
  EXPECT_EQ(c["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"],
            json::parse(R"({"type":"object"})"));
  EXPECT_FALSE(c.contains("model"));
  EXPECT_EQ(call->body.find("thread_identifier"), std::string::npos);
  for (const auto& [name, value] : call->headers) EXPECT_NE(name, "x-api-key");
}

TEST(BedrockBuildTest, StreamPathsInvokeBodyAndBearer) {
  const std::string body =
      R"({"model":"x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]})";
  CallOptions o = Options(BedrockApi::kInvoke, /*stream=*/true);
  o.api_key = "bedrock-api-key";
  auto call = Build(body, o);
  ASSERT_TRUE(call.has_value()) << call.error().message;
  EXPECT_EQ(call->path,
            "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream");
  const json b = json::parse(call->body);
  EXPECT_EQ(b["anthropic_version"], "bedrock-2023-05-31");
  EXPECT_FALSE(b.contains("model"));
  EXPECT_FALSE(b.contains("stream"));
  EXPECT_EQ(b["messages"][0]["content"][0]["text"], "hi");
  bool bearer = false;
  for (const auto& [name, value] : call->headers) {
    bearer = bearer || (name == "authorization" && value == "Bearer bedrock-api-key");
    if (name == "accept") {
      EXPECT_EQ(value, "application/vnd.amazon.eventstream");
    }
  }
  EXPECT_TRUE(bearer);
  o.bedrock_api = BedrockApi::kConverse;
  o.upstream_model = "arn:aws:bedrock:us-east-1:1:inference-profile/us.x";
  auto converse = Build(body, o);
  ASSERT_TRUE(converse.has_value());
  EXPECT_EQ(
      converse->path,
      "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/converse-stream");
}

TEST(BedrockBuildTest, AutoCacheMarksConverse) {
  const std::string body = R"({"model":"x","messages":[{"role":"system","content":"S"},
                              {"role":"user","content":"hi"}]})";
  CallOptions o = Options(BedrockApi::kConverse);
  o.cache_helpers.anthropic_auto_cache_ttl = "5m";
  auto call = Build(body, o);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->cache_helper, "anthropic_auto_cache");
  const json c = json::parse(call->body);
  EXPECT_EQ(c["system"].back(), json::parse(R"({"cachePoint":{"type":"default"}})"));
  EXPECT_EQ(c["messages"].back()["content"].back(),
            json::parse(R"({"cachePoint":{"type":"default"}})"));
}

TEST(BedrockBuildTest, RefusesWhatBedrockCannotTake) {
  const std::string body = R"({"model":"x","prompt":"hi"})";
  CallOptions o = Options(BedrockApi::kConverse);
  o.endpoint = Endpoint::kCompletions;
  EXPECT_FALSE(Build(body, o).has_value());
  o.endpoint = Endpoint::kEmbeddings;
  EXPECT_FALSE(Build(R"({"model":"x","input":"hi"})", o).has_value());
}

TEST(BedrockAnswerTest, ConverseAnswerAndExactUsage) {
  const std::string answer =
      R"({"output":{"message":{"role":"assistant","content":[{"text":"Hi there"}]}},
    "stopReason":"max_tokens","usage":{"inputTokens":30,"outputTokens":8,"totalTokens":4138,
    "cacheReadInputTokens":4000,"cacheWriteInputTokens":100},"metrics":{"latencyMs":5}})";
  auto t = TranslateResponse(ProviderType::kBedrock, answer, Options(BedrockApi::kConverse));
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_EQ(t->usage.uncached, 30);
  EXPECT_EQ(t->usage.cache_read, 4000);
  EXPECT_EQ(t->usage.cache_write_5m, 100);
  EXPECT_EQ(t->usage.cache_write_1h, 0);
  EXPECT_EQ(t->usage.output, 8);
  EXPECT_EQ(t->finish_reason, "length");
  const json body = json::parse(t->body);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hi there");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4130);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 4000);
  EXPECT_EQ(body["model"], kModel);
}

TEST(BedrockAnswerTest, UnreportedCountsStayUnknown) {
  const std::string answer = R"({"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},
    "stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":1}})";
  auto t = TranslateResponse(ProviderType::kBedrock, answer, Options(BedrockApi::kConverse));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->usage.uncached, 3);
  EXPECT_FALSE(t->usage.cache_read.has_value());
  EXPECT_FALSE(t->usage.cache_write_5m.has_value());
}

TEST(BedrockAnswerTest, ToolUseAnswer) {
  const std::string answer = R"({"output":{"message":{"role":"assistant","content":[
    {"toolUse":{"toolUseId":"tu1","name":"get","input":{"q":1}}}]}},"stopReason":"tool_use",
    "usage":{"inputTokens":3,"outputTokens":1,"cacheReadInputTokens":0,"cacheWriteInputTokens":0}})";
  auto t = TranslateResponse(ProviderType::kBedrock, answer, Options(BedrockApi::kConverse));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->finish_reason, "tool_calls");
  const json body = json::parse(t->body);
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get");
}

TEST(BedrockStreamTest, ConverseStreamToChunksWithUsage) {
  CallOptions o = Options(BedrockApi::kConverse, true);
  o.client_wants_usage = true;
  auto s = NewStreamTranslator(ProviderType::kBedrock, o);
  const std::string bytes =
      Event("messageStart", {{"role", "assistant"}, {"p", "abc"}}) +
      Event("contentBlockDelta", {{"contentBlockIndex", 0}, {"delta", {{"text", "Hel"}}}}) +
      Event("contentBlockDelta", {{"contentBlockIndex", 0}, {"delta", {{"text", "lo"}}}}) +
      Event("contentBlockStop", {{"contentBlockIndex", 0}}) +
      Event("messageStop", {{"stopReason", "end_turn"}}) +
      Event("metadata", {{"usage",
                          {{"inputTokens", 5},
                           {"outputTokens", 2},
                           {"totalTokens", 1207},
                           {"cacheReadInputTokens", 1200},
                           {"cacheWriteInputTokens", 0}}},
                         {"metrics", {{"latencyMs", 3}}}});
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 7) out += s->Feed(bytes.substr(i, 7)).bytes;
  out += s->Finish(true);
  EXPECT_TRUE(s->completed());
  EXPECT_FALSE(s->client_error().has_value());
  EXPECT_NE(out.find("\"content\":\"Hel\""), std::string::npos);
  EXPECT_NE(out.find("\"content\":\"lo\""), std::string::npos);
  EXPECT_NE(out.find("\"prompt_tokens\":1205"), std::string::npos);
  EXPECT_NE(out.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(s->usage().uncached, 5);
  EXPECT_EQ(s->usage().cache_read, 1200);
  EXPECT_EQ(s->usage().cache_write_5m, 0);
  EXPECT_EQ(s->usage().output, 2);
  EXPECT_EQ(s->finish_reason(), "stop");
}

TEST(BedrockStreamTest, InvokeStreamUnwrapsAnthropicEvents) {
  auto chunk = [](const json& event) {
    static constexpr char kB64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const std::string in = event.dump();
    std::string b64;
    for (size_t i = 0; i < in.size(); i += 3) {
      uint32_t n = uint32_t(uint8_t(in[i])) << 16;
      if (i + 1 < in.size()) n |= uint32_t(uint8_t(in[i + 1])) << 8;
      if (i + 2 < in.size()) n |= uint8_t(in[i + 2]);
      b64 += kB64[(n >> 18) & 63];
      b64 += kB64[(n >> 12) & 63];
      b64 += i + 1 < in.size() ? kB64[(n >> 6) & 63] : '=';
      b64 += i + 2 < in.size() ? kB64[n & 63] : '=';
    }
    return Event("chunk", {{"bytes", b64}});
  };
  auto s = NewStreamTranslator(ProviderType::kBedrock, Options(BedrockApi::kInvoke, true));
  std::string out =
      s->Feed(chunk({{"type", "message_start"},
                     {"message",
                      {{"id", "msg_1"},
                       {"type", "message"},
                       {"role", "assistant"},
                       {"model", "claude"},
                       {"content", json::array()},
                       {"usage",
                        {{"input_tokens", 7},
                         {"cache_read_input_tokens", 2000},
                         {"cache_creation_input_tokens", 50},
                         {"cache_creation",
                          {{"ephemeral_5m_input_tokens", 20}, {"ephemeral_1h_input_tokens", 30}}},
                         {"output_tokens", 1}}}}}}) +
              chunk({{"type", "content_block_start"},
                     {"index", 0},
                     {"content_block", {{"type", "text"}, {"text", ""}}}}) +
              chunk({{"type", "content_block_delta"},
                     {"index", 0},
                     {"delta", {{"type", "text_delta"}, {"text", "Yo"}}}}) +
              chunk({{"type", "message_delta"},
                     {"delta", {{"stop_reason", "end_turn"}}},
                     {"usage", {{"output_tokens", 3}}}}) +
              chunk({{"type", "message_stop"}}))
          .bytes;
  EXPECT_TRUE(s->completed());
  EXPECT_NE(out.find("\"content\":\"Yo\""), std::string::npos);
  EXPECT_EQ(s->usage().uncached, 7);
  EXPECT_EQ(s->usage().cache_read, 2000);
  EXPECT_EQ(s->usage().cache_write_5m, 20);
  EXPECT_EQ(s->usage().cache_write_1h, 30);
  EXPECT_EQ(s->usage().output, 3);
}

TEST(BedrockStreamTest, CorruptFrameIsAnUpstreamError) {
  auto s = NewStreamTranslator(ProviderType::kBedrock, Options(BedrockApi::kConverse, true));
  std::string bad =
      Event("contentBlockDelta", {{"contentBlockIndex", 0}, {"delta", {{"text", "x"}}}});
  bad[bad.size() - 1] ^= 0x40;
  std::string out = s->Feed(Event("messageStart", {{"role", "assistant"}}) + bad).bytes;
  out += s->Finish(true);
  ASSERT_TRUE(s->upstream_error().has_value());
  EXPECT_NE(s->upstream_error()->find("message CRC"), std::string::npos);
  EXPECT_NE(out.find("\"error\""), std::string::npos);
  EXPECT_FALSE(s->completed());
}

TEST(BedrockStreamTest, TruncatedFrameAtTheEnd) {
  auto s = NewStreamTranslator(ProviderType::kBedrock, Options(BedrockApi::kConverse, true));
  const std::string whole = Event("messageStop", {{"stopReason", "end_turn"}});
  s->Feed(Event("messageStart", {{"role", "assistant"}}) + whole.substr(0, 10));
  const std::string tail = s->Finish(true);
  ASSERT_TRUE(s->client_error().has_value());
  EXPECT_NE(s->client_error()->find("truncated"), std::string::npos);
  EXPECT_NE(tail.find("\"error\""), std::string::npos);
}

TEST(BedrockStreamTest, ExceptionIsAnUpstreamError) {
  auto s = NewStreamTranslator(ProviderType::kBedrock, Options(BedrockApi::kConverse, true));
  const std::string exception =
      EncodeEventStreamMessage({StringHeader(":exception-type", "throttlingException"),
                                StringHeader(":content-type", "application/json"),
                                StringHeader(":message-type", "exception")},
                               R"({"message":"Too many requests"})");
  std::string out = s->Feed(Event("messageStart", {{"role", "assistant"}}) + exception).bytes;
  ASSERT_TRUE(s->upstream_error().has_value());
  EXPECT_NE(s->upstream_error()->find("Too many requests"), std::string::npos);
  EXPECT_NE(out.find("rate_limit_error"), std::string::npos);
}

TEST(BedrockErrorTest, ErrorBodiesKeepTheirMessage) {
  ClientError e = TranslateUpstreamError(ProviderType::kBedrock, 429,
                                         R"({"message":"Too many requests, please wait"})");
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.message(), "Too many requests, please wait");
  EXPECT_EQ(TranslateUpstreamError(ProviderType::kBedrock, 400, R"({"message":"bad"})").status,
            400);
  EXPECT_EQ(TranslateUpstreamError(ProviderType::kBedrock, 404, R"({"message":"no"})").status, 404);
  EXPECT_EQ(TranslateUpstreamError(ProviderType::kBedrock, 503, R"({"message":"no"})").status, 503);
}

}  // namespace
}  // namespace kvgate::providers
