// Every golden sample through the translators: exact normalized usage and exact client bytes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/providers/provider.h"
#include "tests/providers/test_util.h"

namespace kvgate::providers {
namespace {

using testing_util::ExpectUsage;
using testing_util::ReadGolden;
using testing_util::RunSplit;
using testing_util::RunStream;
using testing_util::StreamOptions;
using testing_util::Without;

CallOptions Plain() {
  CallOptions o;
  o.created = 1754000000;
  return o;
}

// ---- Non-streaming responses --------------------------------------------------------------------

TEST(GoldenResponseTest, OpenAIChatPassesThroughWithCachedAndReasoningTokens) {
  const std::string body = ReadGolden("openai_chat.json");
  auto t = TranslateResponse(ProviderType::kOpenAI, body, Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  EXPECT_EQ(t->finish_reason, "stop");
  // prompt_tokens 2006 includes the 1920 cached: uncached = 86, not 2006.
  ExpectUsage(t->usage, {1920, 0, 0, 86, 300, 256});
  EXPECT_EQ(t->usage.TotalInput(), 2006);
}

TEST(GoldenResponseTest, DeepSeekHitAndMissTokens) {
  const std::string body = ReadGolden("deepseek_chat.json");
  auto t = TranslateResponse(ProviderType::kDeepSeek, body, Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  ExpectUsage(t->usage, {1600, 0, 0, 64, 10, std::nullopt});
}

TEST(GoldenResponseTest, VllmWithPromptTokensDetails) {
  const std::string body = ReadGolden("vllm_chat_with_details.json");
  auto t = TranslateResponse(ProviderType::kVllm, body, Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  ExpectUsage(t->usage, {1024, 0, 0, 176, 50, std::nullopt});
}

TEST(GoldenResponseTest, VllmWithoutPromptTokensDetailsIsUnknownNotZero) {
  const std::string body = ReadGolden("vllm_chat_without_details.json");
  auto t = TranslateResponse(ProviderType::kVllm, body, Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->finish_reason, "length");
  ExpectUsage(t->usage, {std::nullopt, 0, 0, std::nullopt, 50, std::nullopt});
}

TEST(GoldenResponseTest, SglangCachedTokens) {
  const std::string body = ReadGolden("sglang_chat.json");
  auto t = TranslateResponse(ProviderType::kSglang, body, Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  ExpectUsage(t->usage, {1920, 0, 0, 128, 50, std::nullopt});
}

TEST(GoldenResponseTest, LlamaCppReadsTimingsFromTheWholeResponse) {
  const std::string body = ReadGolden("llamacpp_chat.json");
  auto t = TranslateResponse(ProviderType::kLlamaCpp, body, Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  ExpectUsage(t->usage, {480, 0, 0, 32, 3, std::nullopt});
}

TEST(GoldenResponseTest, AnthropicMessageWithCacheWriteSplit) {
  auto t =
      TranslateResponse(ProviderType::kAnthropic, ReadGolden("anthropic_message.json"), Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(
      t->body,
      R"({"id":"msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","created":1754000000,)"
      R"("model":"claude-sonnet-4-5-20250929","choices":[{"index":0,"message":{"role":"assistant",)"
      R"("content":"Based on the contract, the notice period is 30 days."},"logprobs":null,)"
      R"("finish_reason":"stop"}],"usage":{"prompt_tokens":13821,"completion_tokens":87,)"
      R"("total_tokens":13908,"prompt_tokens_details":{"cached_tokens":12000,"cache_write_tokens":1800}}})");
  EXPECT_EQ(t->finish_reason, "stop");
  ExpectUsage(t->usage, {12000, 600, 1200, 21, 87, std::nullopt});
  // Never double counted: the normalized total equals the client's prompt_tokens.
  EXPECT_EQ(t->usage.TotalInput(), 13821);
}

TEST(GoldenResponseTest, AnthropicToolUseBecomesToolCalls) {
  auto t = TranslateResponse(ProviderType::kAnthropic,
                             ReadGolden("anthropic_message_tool_use.json"), Plain());
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(
      t->body,
      R"({"id":"msg_01Aq9w938a90dw8q","object":"chat.completion","created":1754000000,)"
      R"("model":"claude-haiku-4-5-20251001","choices":[{"index":0,"message":{"role":"assistant",)"
      R"("content":"I'll check the weather.","tool_calls":[{"id":"toolu_01A09q90qw90lq917835lq9",)"
      R"("type":"function","function":{"name":"get_weather",)"
      R"("arguments":"{\"location\":\"San Francisco, CA\",\"unit\":\"celsius\"}"}}]},)"
      R"("logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":472,)"
      R"("completion_tokens":91,"total_tokens":563,"prompt_tokens_details":{"cached_tokens":0,)"
      R"("cache_write_tokens":0}}})");
  EXPECT_EQ(t->finish_reason, "tool_calls");
  ExpectUsage(t->usage, {0, 0, 0, 472, 91, std::nullopt});
}

// ---- Streams ------------------------------------------------------------------------------------

constexpr std::string_view kOpenAIUsageEvent =
    R"(data: {"id":"chatcmpl-C1xk2pQ7","object":"chat.completion.chunk","created":1754000000,)"
    R"("model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_b3f1157249",)"
    R"("choices":[],"usage":{"prompt_tokens":1250,"completion_tokens":3,"total_tokens":1253,)"
    R"("prompt_tokens_details":{"cached_tokens":1152,"audio_tokens":0},"completion_tokens_details":)"
    R"({"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}})"
    "\n\n";

TEST(GoldenStreamTest, OpenAIUsageChunkStrippedWhenClientDidNotAsk) {
  const std::string stream = ReadGolden("openai_stream_include_usage.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(false));
  auto r = RunStream(*t, stream);
  // What OpenAI sends without include_usage: no usage chunk, and no "usage": null in the others.
  std::string expected = Without(stream, kOpenAIUsageEvent);
  for (size_t at; (at = expected.find(",\"usage\":null")) != std::string::npos;)
    expected.erase(at, std::string_view(",\"usage\":null").size());
  EXPECT_EQ(r.bytes, expected);
  EXPECT_TRUE(t->completed());
  EXPECT_EQ(t->finish_reason(), "stop");
  ExpectUsage(t->usage(), {1152, 0, 0, 98, 3, 0});
  EXPECT_FALSE(t->client_error().has_value());
}

TEST(GoldenStreamTest, OpenAIUsageChunkKeptWhenClientAsked) {
  const std::string stream = ReadGolden("openai_stream_include_usage.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(true));
  auto r = RunStream(*t, stream);
  EXPECT_EQ(r.bytes, stream);
  ExpectUsage(t->usage(), {1152, 0, 0, 98, 3, 0});
}

TEST(GoldenStreamTest, OpenAIFirstContentIsTheHelloChunk) {
  const std::string stream = ReadGolden("openai_stream_include_usage.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(false));
  auto r = RunStream(*t, stream, /*piece=*/1);
  ASSERT_TRUE(r.any_content);
  // The role chunk (content "") is not content; the chunk with "Hello" is.
  const std::string prefix = r.bytes.substr(0, r.first_content_end);
  EXPECT_NE(prefix.find("\"Hello\""), std::string::npos);
  EXPECT_EQ(prefix.find("\" there!\""), std::string::npos);
}

TEST(GoldenStreamTest, GeminiUsageOnChunkWithChoicesIsRemovedNotDropped) {
  const std::string stream = ReadGolden("gemini_openai_stream_usage_in_choices.sse");
  auto t = NewStreamTranslator(ProviderType::kGeminiOpenAI, StreamOptions(false));
  auto r = RunStream(*t, stream);
  const std::string first =
      R"(data: {"choices":[{"delta":{"content":"Paris is","role":"assistant"},"index":0}],)"
      R"("created":1754000000,"id":"x5yQaN2xLqGb7M8Pj9mz","model":"gemini-2.5-flash","object":"chat.completion.chunk"})"
      "\n\n";
  const std::string second =
      R"(data: {"choices":[{"delta":{"content":" the capital.","role":"assistant"},"finish_reason":"stop","index":0}],)"
      R"("created":1754000000,"id":"x5yQaN2xLqGb7M8Pj9mz","model":"gemini-2.5-flash","object":"chat.completion.chunk"})"
      "\n\n";
  EXPECT_EQ(r.bytes, first + second + "data: [DONE]\n\n");
  EXPECT_EQ(t->finish_reason(), "stop");
  // Gemini OpenAI-compat: output = total - prompt (thinking tokens included).
  ExpectUsage(t->usage(), {2048, 0, 0, 52, 40, std::nullopt});
}

TEST(GoldenStreamTest, GeminiUsageOnChunkWithChoicesKeptWhenClientAsked) {
  const std::string stream = ReadGolden("gemini_openai_stream_usage_in_choices.sse");
  auto t = NewStreamTranslator(ProviderType::kGeminiOpenAI, StreamOptions(true));
  EXPECT_EQ(RunStream(*t, stream).bytes, stream);
  ExpectUsage(t->usage(), {2048, 0, 0, 52, 40, std::nullopt});
}

TEST(GoldenStreamTest, LlamaCppStreamUsageAndTimings) {
  const std::string stream = ReadGolden("llamacpp_stream.sse");
  auto t = NewStreamTranslator(ProviderType::kLlamaCpp, StreamOptions(false));
  auto r = RunStream(*t, stream);
  const std::string last_in =
      R"(data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1754000000,)"
      R"("id":"chatcmpl-Qm7sLx0Vb2","model":"gpt-3.5-turbo","system_fingerprint":"b6100-5c0eb5ef",)"
      R"("object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":512,"total_tokens":514},)"
      R"("timings":{"cache_n":496,"prompt_n":16,"prompt_ms":11.2,"prompt_per_token_ms":0.7,"prompt_per_second":1428.5,)"
      R"("predicted_n":2,"predicted_ms":19.9,"predicted_per_token_ms":9.95,"predicted_per_second":100.5}})"
      "\n\n";
  // Without `usage`, every other byte as llama.cpp sent it (timings are kept for the client).
  const std::string last_out =
      R"(data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1754000000,)"
      R"("id":"chatcmpl-Qm7sLx0Vb2","model":"gpt-3.5-turbo","system_fingerprint":"b6100-5c0eb5ef",)"
      R"("object":"chat.completion.chunk",)"
      R"("timings":{"cache_n":496,"prompt_n":16,"prompt_ms":11.2,"prompt_per_token_ms":0.7,"prompt_per_second":1428.5,)"
      R"("predicted_n":2,"predicted_ms":19.9,"predicted_per_token_ms":9.95,"predicted_per_second":100.5}})"
      "\n\n";
  std::string expected = stream;
  const size_t pos = expected.find(last_in);
  ASSERT_NE(pos, std::string::npos);
  expected.replace(pos, last_in.size(), last_out);
  EXPECT_EQ(r.bytes, expected);
  EXPECT_EQ(t->finish_reason(), "stop");
  ExpectUsage(t->usage(), {496, 0, 0, 16, 2, std::nullopt});
}

TEST(GoldenStreamTest, OpenRouterCommentsPassAndUsageChunkDropped) {
  const std::string stream = ReadGolden("openrouter_stream.sse");
  auto t = NewStreamTranslator(ProviderType::kOpenRouter, StreamOptions(false));
  auto r = RunStream(*t, stream);
  const size_t start = stream.find(
      "data: {\"id\":\"gen-1754000000-AbCdEfGhIjKlMnOp\",\"provider\":\"OpenAI\","
      "\"model\":\"openai/gpt-4o-mini\",\"object\":\"chat.completion.chunk\","
      "\"created\":1754000000,\"choices\":[],");
  ASSERT_NE(start, std::string::npos);
  const size_t end = stream.find("\n\n", start) + 2;
  std::string expected = stream;
  expected.erase(start, end - start);
  EXPECT_EQ(r.bytes, expected);
  EXPECT_NE(r.bytes.find(": OPENROUTER PROCESSING\n\n"), std::string::npos);
  EXPECT_EQ(t->finish_reason(), "stop");
  ExpectUsage(t->usage(), {1280, 0, 0, 256, 2, 0});
}

TEST(GoldenStreamTest, AnthropicStreamExactBytesWithUsage) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(true));
  auto r = RunStream(*t, ReadGolden("anthropic_stream.sse"));
  EXPECT_EQ(r.bytes, ReadGolden("anthropic_stream.expected.sse"));
  EXPECT_TRUE(t->completed());
  EXPECT_EQ(t->finish_reason(), "tool_calls");
  // output_tokens is the last cumulative value (89), not 1 + 89.
  ExpectUsage(t->usage(), {4096, 0, 0, 25, 89, std::nullopt});
  EXPECT_FALSE(t->upstream_error().has_value());
}

TEST(GoldenStreamTest, AnthropicStreamWithoutUsageChunk) {
  const std::string expected_with = ReadGolden("anthropic_stream.expected.sse");
  const std::string usage_chunk =
      R"(data: {"id":"msg_014p7gG3wDgGV9EUtLvnow3U","object":"chat.completion.chunk","created":1754000000,)"
      R"("model":"claude-sonnet-4-5-20250929","choices":[],"usage":{"prompt_tokens":4121,"completion_tokens":89,)"
      R"("total_tokens":4210,"prompt_tokens_details":{"cached_tokens":4096,"cache_write_tokens":0}}})"
      "\n\n";
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(false));
  auto r = RunStream(*t, ReadGolden("anthropic_stream.sse"));
  EXPECT_EQ(r.bytes, Without(expected_with, usage_chunk));
  ExpectUsage(t->usage(), {4096, 0, 0, 25, 89, std::nullopt});
}

TEST(GoldenStreamTest, AnthropicErrorEventMidStream) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(true));
  auto r = RunStream(*t, ReadGolden("anthropic_stream_error.sse"));
  EXPECT_EQ(r.bytes, ReadGolden("anthropic_stream_error.expected.sse"));
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->upstream_error(), "Overloaded");
  EXPECT_EQ(t->client_error(), "Overloaded");
  // The usage seen before the error is kept (input side from message_start).
  ExpectUsage(t->usage(), {0, 2048, 0, 12, 1, std::nullopt});
}

// ---- Every stream, split at every byte
// -----------------------------------------------------------

struct StreamCase {
  ProviderType type;
  const char* file;
};

TEST(GoldenStreamTest, SplitAtEveryByteGivesIdenticalOutput) {
  const std::vector<StreamCase> cases = {
      {ProviderType::kOpenAI, "openai_stream_include_usage.sse"},
      {ProviderType::kGeminiOpenAI, "gemini_openai_stream_usage_in_choices.sse"},
      {ProviderType::kLlamaCpp, "llamacpp_stream.sse"},
      {ProviderType::kOpenRouter, "openrouter_stream.sse"},
      {ProviderType::kAnthropic, "anthropic_stream.sse"},
      {ProviderType::kAnthropic, "anthropic_stream_error.sse"},
  };
  for (const auto& c : cases) {
    for (bool wants_usage : {false, true}) {
      const std::string stream = ReadGolden(c.file);
      auto whole = NewStreamTranslator(c.type, StreamOptions(wants_usage));
      const std::string expected = RunStream(*whole, stream).bytes;
      ASSERT_FALSE(expected.empty());
      for (size_t at = 0; at <= stream.size(); ++at) {
        auto t = NewStreamTranslator(c.type, StreamOptions(wants_usage));
        ASSERT_EQ(RunSplit(*t, stream, at), expected) << c.file << " split at " << at;
        ASSERT_EQ(t->usage(), whole->usage()) << c.file << " split at " << at;
        ASSERT_EQ(t->finish_reason(), whole->finish_reason());
      }
      auto bytewise = NewStreamTranslator(c.type, StreamOptions(wants_usage));
      EXPECT_EQ(RunStream(*bytewise, stream, /*piece=*/1).bytes, expected) << c.file;
      // The same stream with CRLF line endings: same translation where events are rebuilt, raw
      // pass-through keeps the CRLFs.
      std::string crlf;
      for (char ch : stream) {
        if (ch == '\n') crlf += '\r';
        crlf += ch;
      }
      auto t_crlf = NewStreamTranslator(c.type, StreamOptions(wants_usage));
      RunStream(*t_crlf, crlf, /*piece=*/3);
      EXPECT_EQ(t_crlf->usage(), whole->usage()) << c.file;
      EXPECT_EQ(t_crlf->completed(), whole->completed()) << c.file;
    }
  }
}

}  // namespace
}  // namespace kvgate::providers
