// The OpenAI Responses API and embeddings through the adapters: the upstream request, the golden
// answers (tests/providers/golden/openai_responses*, openai_embeddings.json) passed through byte
// for byte, and their exact normalized usage.
#include <gtest/gtest.h>

#include <string>

#include "gateway/providers/provider.h"
#include "tests/providers/test_util.h"

namespace kvgate::providers {
namespace {

using nlohmann::json;
using testing_util::BuildCall;
using testing_util::ExpectUsage;
using testing_util::ReadGolden;
using testing_util::RunSplit;
using testing_util::RunStream;

constexpr std::string_view kResponseId = "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b";

CallOptions Options(Endpoint endpoint, bool stream = false) {
  CallOptions o;
  o.endpoint = endpoint;
  o.stream = stream;
  o.upstream_model = "gpt-4.1";
  o.api_key = "sk-test";
  return o;
}

// ---- Requests -----------------------------------------------------------------------------------

TEST(ResponsesRequestTest, PassesThroughWithoutKvgateFieldsOrForcedStreamOptions) {
  const json body = {{"model", "my-alias"},
                     {"instructions", "Be brief."},
                     {"input", json::array({{{"role", "user"}, {"content", "hi"}}})},
                     {"previous_response_id", "resp_1"},
                     {"stream", true},
                     {"thread_identifier", "t-1"},
                     {"metadata", {{"thread_id", "t-1"}, {"team", "a"}}},
                     {"store", true}};
  auto call = BuildCall(ProviderType::kOpenAI, body, Options(Endpoint::kResponses, true));
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(call->path, "/responses");
  const json sent = json::parse(call->body);
  EXPECT_EQ(sent["model"], "gpt-4.1");
  EXPECT_EQ(sent["stream"], true);
  EXPECT_FALSE(sent.contains("stream_options"));  // usage comes in response.completed anyway
  EXPECT_FALSE(sent.contains("thread_identifier"));
  EXPECT_EQ(sent["metadata"], json({{"team", "a"}}));
  EXPECT_EQ(sent["previous_response_id"], "resp_1");
  EXPECT_EQ(sent["input"], body["input"]);
  EXPECT_EQ(sent["instructions"], "Be brief.");
  bool streams = false;
  for (const auto& [name, value] : call->headers) streams |= name == "accept" && value == "text/event-stream";
  EXPECT_TRUE(streams);
}

TEST(ResponsesRequestTest, ClientStreamOptionsAreItsOwn) {
  const json body = {{"model", "m"}, {"input", "hi"}, {"stream", true},
                     {"stream_options", {{"include_obfuscation", false}}}};
  auto call = BuildCall(ProviderType::kVllm, body, Options(Endpoint::kResponses, true));
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(json::parse(call->body)["stream_options"], json({{"include_obfuscation", false}}));
}

TEST(ResponsesRequestTest, AnthropicCannotServeIt) {
  const json body = {{"model", "m"}, {"input", "hi"}};
  auto call = BuildCall(ProviderType::kAnthropic, body, Options(Endpoint::kResponses));
  ASSERT_FALSE(call.has_value());
  EXPECT_EQ(call.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(call.error().message.find("/v1/responses"), std::string::npos);
  EXPECT_FALSE(BuildCall(ProviderType::kAnthropic, body, Options(Endpoint::kEmbeddings)));
}

TEST(EmbeddingsRequestTest, PassesThroughWithoutStream) {
  const json body = {{"model", "emb"}, {"input", json::array({"a", "b"})}, {"stream", false},
                     {"encoding_format", "float"}};
  auto call = BuildCall(ProviderType::kOpenAI, body, Options(Endpoint::kEmbeddings));
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(call->path, "/embeddings");
  EXPECT_EQ(json::parse(call->body),
            json({{"model", "gpt-4.1"}, {"input", json::array({"a", "b"})},
                  {"encoding_format", "float"}}));
}

TEST(EndpointTest, NamesAndPaths) {
  EXPECT_EQ(EndpointName(Endpoint::kResponses), "responses");
  EXPECT_EQ(EndpointName(Endpoint::kEmbeddings), "embeddings");
  EXPECT_EQ(EndpointPath(Endpoint::kResponses), "/v1/responses");
  EXPECT_EQ(EndpointPath(Endpoint::kEmbeddings), "/v1/embeddings");
  EXPECT_EQ(EndpointPath(Endpoint::kChatCompletions), "/v1/chat/completions");
}

// ---- Non-streaming answers ----------------------------------------------------------------------

TEST(ResponsesGoldenTest, ResponseObjectPassesThroughWithExactUsage) {
  const std::string body = ReadGolden("openai_responses.json");
  auto t = TranslateResponse(ProviderType::kOpenAI, body, Options(Endpoint::kResponses));
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  EXPECT_EQ(t->finish_reason, "stop");
  // input_tokens 2006 includes the 1920 cached: uncached = 86.
  ExpectUsage(t->usage, {1920, 0, 0, 86, 300, 256});
  EXPECT_EQ(t->usage.cache_write_no_ttl, 0);
  EXPECT_EQ(t->usage.TotalInput(), 2006);
  EXPECT_EQ(json::parse(t->usage.raw)["input_tokens"], 2006);
  EXPECT_EQ(ResponseIdOf(t->body), kResponseId);
}

TEST(ResponsesGoldenTest, FunctionCallIsToolCallsAndIncompleteIsLength) {
  json body = json::parse(ReadGolden("openai_responses.json"));
  body["output"] = json::array({{{"type", "function_call"}, {"id", "fc_1"}, {"call_id", "call_1"},
                                 {"name", "get_weather"}, {"arguments", "{}"},
                                 {"status", "completed"}}});
  auto t = TranslateResponse(ProviderType::kOpenAI, body.dump(), Options(Endpoint::kResponses));
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->finish_reason, "tool_calls");
  body["status"] = "incomplete";
  body["incomplete_details"] = {{"reason", "max_output_tokens"}};
  t = TranslateResponse(ProviderType::kOpenAI, body.dump(), Options(Endpoint::kResponses));
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->finish_reason, "length");
  body["incomplete_details"] = {{"reason", "content_filter"}};
  t = TranslateResponse(ProviderType::kOpenAI, body.dump(), Options(Endpoint::kResponses));
  EXPECT_EQ(t->finish_reason, "content_filter");
}

TEST(ResponsesGoldenTest, FailedOrMalformedResponsesAreErrors) {
  json body = json::parse(ReadGolden("openai_responses.json"));
  body["status"] = "failed";
  body["error"] = {{"code", "server_error"}, {"message", "the model broke"}};
  auto failed = TranslateResponse(ProviderType::kOpenAI, body.dump(), Options(Endpoint::kResponses));
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(failed.error().message.find("the model broke"), std::string::npos);
  // A chat.completion is no response object.
  auto chat = TranslateResponse(ProviderType::kOpenAI, ReadGolden("openai_chat.json"),
                                Options(Endpoint::kResponses));
  ASSERT_FALSE(chat.has_value());
  EXPECT_EQ(chat.error().code, ErrorCode::kCorruptData);
  EXPECT_FALSE(TranslateResponse(ProviderType::kOpenAI, "[1]", Options(Endpoint::kResponses)));
}

TEST(EmbeddingsGoldenTest, ListPassesThroughAsUncachedInput) {
  const std::string body = ReadGolden("openai_embeddings.json");
  auto t = TranslateResponse(ProviderType::kOpenAI, body, Options(Endpoint::kEmbeddings));
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  EXPECT_EQ(t->finish_reason, "");
  ExpectUsage(t->usage, {0, 0, 0, 8, 0, 0});
  EXPECT_EQ(t->usage.TotalInput(), 8);
  EXPECT_EQ(ResponseIdOf(t->body), "");
  auto bad = TranslateResponse(ProviderType::kOpenAI, R"({"object":"list"})",
                               Options(Endpoint::kEmbeddings));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kCorruptData);
}

// ---- Streams ------------------------------------------------------------------------------------

TEST(ResponsesStreamTest, EventsPassThroughAndUsageComesFromResponseCompleted) {
  const std::string stream = ReadGolden("openai_responses_stream.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
  auto r = RunStream(*t, stream);
  EXPECT_EQ(r.bytes, stream);
  EXPECT_TRUE(t->completed());
  EXPECT_FALSE(t->client_error().has_value());
  EXPECT_EQ(t->finish_reason(), "stop");
  ExpectUsage(t->usage(), {1152, 0, 0, 98, 3, 0});
  EXPECT_EQ(ResponseIdOfStream(r.bytes), kResponseId);  // from response.created's response
}

TEST(ResponsesStreamTest, FirstContentIsTheFirstTextDelta) {
  const std::string stream = ReadGolden("openai_responses_stream.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
  auto r = RunStream(*t, stream, /*piece=*/1);
  EXPECT_EQ(r.bytes, stream);
  ASSERT_TRUE(r.any_content);
  const std::string prefix = r.bytes.substr(0, r.first_content_end);
  EXPECT_NE(prefix.find(R"("delta":"Hi")"), std::string::npos);
  EXPECT_EQ(prefix.find(R"("delta":" there")"), std::string::npos);
  ExpectUsage(t->usage(), {1152, 0, 0, 98, 3, 0});
}

TEST(ResponsesStreamTest, AnySplitGivesTheSameBytes) {
  const std::string stream = ReadGolden("openai_responses_stream.sse");
  for (size_t at = 1; at < stream.size(); at += 97) {
    auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
    ASSERT_EQ(RunSplit(*t, stream, at), stream) << "split at " << at;
    ASSERT_TRUE(t->completed());
  }
}

TEST(ResponsesStreamTest, IncompleteIsAWholeAnswerCutByLength) {
  const std::string stream = ReadGolden("openai_responses_stream_incomplete.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
  EXPECT_EQ(RunStream(*t, stream).bytes, stream);
  EXPECT_TRUE(t->completed());
  EXPECT_FALSE(t->client_error().has_value());
  EXPECT_EQ(t->finish_reason(), "length");
  ExpectUsage(t->usage(), {1152, 0, 0, 98, 3, 0});
}

TEST(ResponsesStreamTest, FailedIsAnUpstreamErrorWithItsUsage) {
  const std::string stream = ReadGolden("openai_responses_stream_failed.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
  // The client gets response.failed as it came (the SDK raises on it), and nothing after.
  EXPECT_EQ(RunStream(*t, stream).bytes, stream);
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->upstream_error(), "The model failed to generate a response.");
  EXPECT_EQ(t->client_error(), "The model failed to generate a response.");
  ExpectUsage(t->usage(), {0, 0, 0, 1250, 0, 0});
}

TEST(ResponsesStreamTest, ErrorEventEndsTheStream) {
  const std::string stream =
      "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,"
      "\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[]}}\n\n"
      "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\","
      "\"message\":\"Slow down\",\"param\":null,\"sequence_number\":1}\n\n";
  auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
  EXPECT_EQ(RunStream(*t, stream).bytes, stream);
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->upstream_error(), "Slow down");
}

TEST(ResponsesStreamTest, EndWithoutFinalEventGetsAnErrorEvent) {
  const std::string stream = ReadGolden("openai_responses_stream.sse");
  const std::string cut = stream.substr(0, stream.find("event: response.completed"));
  auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
  auto r = RunStream(*t, cut);
  ASSERT_EQ(r.bytes.substr(0, cut.size()), cut);
  const json error = json::parse(r.bytes.substr(cut.size() + 6));  // after "data: "
  EXPECT_EQ(error["error"]["code"], "stream_incomplete");
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->client_error(), "upstream stream ended before response.completed");
  EXPECT_EQ(t->usage().output, std::nullopt);  // no final event: nothing reported
}

TEST(ResponsesStreamTest, MalformedEventIsOneErrorEvent) {
  const std::string stream =
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\n\n";
  auto t = NewStreamTranslator(ProviderType::kOpenAI, Options(Endpoint::kResponses, true));
  auto r = RunStream(*t, stream);
  EXPECT_EQ(r.bytes.rfind("data: {\"error\"", 0), 0u) << r.bytes;
  EXPECT_TRUE(t->client_error().has_value());
}

}  // namespace
}  // namespace kvgate::providers
