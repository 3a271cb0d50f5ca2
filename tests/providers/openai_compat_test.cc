// Provider types, kvgate's fields, and the OpenAI-compatible request/response/stream rules.
#include <gtest/gtest.h>

#include <string>

#include "gateway/providers/provider.h"
#include "tests/providers/test_util.h"

namespace kvgate::providers {
namespace {

using nlohmann::json;
using testing_util::BuildCall;
using testing_util::WantsUsage;
using testing_util::RunStream;
using testing_util::StreamOptions;

std::string HeaderValue(const UpstreamCall& call, std::string_view name) {
  for (const auto& [k, v] : call.headers) {
    if (k == name) return v;
  }
  return "<absent>";
}

TEST(ProviderTypeTest, NamesRoundTripAndFlavors) {
  for (const char* name : {"openai", "anthropic", "deepseek", "vllm", "sglang", "llamacpp",
                           "openrouter", "gemini-openai", "local"}) {
    auto type = ProviderTypeFromName(name);
    ASSERT_TRUE(type.has_value()) << name;
    EXPECT_EQ(ProviderTypeName(*type), name);
  }
  EXPECT_FALSE(ProviderTypeFromName("OpenAI").has_value());
  EXPECT_FALSE(ProviderTypeFromName("gemini").has_value());
  EXPECT_EQ(UsageFlavorFor(ProviderType::kLocal), telemetry::UsageFlavor::kKvgateEngine);
  EXPECT_EQ(UsageFlavorFor(ProviderType::kOpenAI), telemetry::UsageFlavor::kOpenAIChat);
  EXPECT_EQ(UsageFlavorFor(ProviderType::kAnthropic), telemetry::UsageFlavor::kAnthropic);
  EXPECT_EQ(UsageFlavorFor(ProviderType::kGeminiOpenAI), telemetry::UsageFlavor::kGeminiOpenAI);
  EXPECT_EQ(UsageFlavorFor(ProviderType::kLlamaCpp), telemetry::UsageFlavor::kLlamaCpp);
  EXPECT_FALSE(IsOpenAICompatible(ProviderType::kAnthropic));
  EXPECT_TRUE(IsOpenAICompatible(ProviderType::kSglang));
}

TEST(KvgateFieldsTest, ThreadIdentifierTakenAndRemoved) {
  json body = {{"model", "m"}, {"thread_identifier", "thread-7"}, {"messages", json::array()}};
  EXPECT_EQ(TakeKvgateFields(body), "thread-7");
  EXPECT_FALSE(body.contains("thread_identifier"));
  EXPECT_EQ(body["model"], "m");
}

TEST(KvgateFieldsTest, MetadataThreadIdRemovedOtherMetadataKept) {
  json body = {{"metadata", {{"thread_id", 42}, {"team", "a"}}}};
  EXPECT_EQ(TakeKvgateFields(body), "42");
  EXPECT_EQ(body["metadata"], (json{{"team", "a"}}));
  json only = {{"metadata", {{"thread_id", "x"}}}};
  EXPECT_EQ(TakeKvgateFields(only), "x");
  EXPECT_FALSE(only.contains("metadata"));
}

TEST(KvgateFieldsTest, PrecedenceAndBadTypes) {
  json body = {{"thread_identifier", "first"}, {"metadata", {{"thread_id", "second"}}}};
  EXPECT_EQ(TakeKvgateFields(body), "first");
  EXPECT_FALSE(body.contains("metadata"));
  json bad = {{"thread_identifier", json::array()}};
  EXPECT_EQ(TakeKvgateFields(bad), std::nullopt);
  EXPECT_FALSE(bad.contains("thread_identifier"));
  json not_object = json::array();
  EXPECT_EQ(TakeKvgateFields(not_object), std::nullopt);
  json none = {{"model", "m"}};
  EXPECT_EQ(TakeKvgateFields(none), std::nullopt);
}

TEST(OpenAICompatRequestTest, UnknownFieldsPassModelReplacedKvgateFieldsNeverForwarded) {
  const json client = {
      {"model", "my-alias"},        {"messages", {{{"role", "user"}, {"content", "hi"}}}},
      {"prompt_cache_key", "k1"},   {"vendor_extension", {{"nested", {1, 2, 3}}}},
      {"thread_identifier", "t-1"}, {"metadata", {{"thread_id", "t-2"}, {"keep", "yes"}}}};
  CallOptions o;
  o.upstream_model = "gpt-4.1";
  o.api_key = "sk-test";
  auto call = BuildCall(ProviderType::kOpenAI, client, o);
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(call->path, "/chat/completions");
  EXPECT_EQ(HeaderValue(*call, "authorization"), "Bearer sk-test");
  EXPECT_EQ(HeaderValue(*call, "content-type"), "application/json");
  EXPECT_EQ(HeaderValue(*call, "accept"), "<absent>");
  const json sent = json::parse(call->body);
  json expected = client;
  expected["model"] = "gpt-4.1";
  expected.erase("thread_identifier");
  expected["metadata"].erase("thread_id");
  EXPECT_EQ(sent, expected);
  EXPECT_EQ(call->body.find("t-1"), std::string::npos);
  EXPECT_EQ(call->body.find("t-2"), std::string::npos);
}

TEST(OpenAICompatRequestTest, CompletionsPathNoKeyNoAuthorization) {
  const json client = {{"model", "m"}, {"prompt", "Once upon"}};
  CallOptions o;
  o.endpoint = Endpoint::kCompletions;
  auto call = BuildCall(ProviderType::kVllm, client, o);
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(call->path, "/completions");
  EXPECT_EQ(HeaderValue(*call, "authorization"), "<absent>");
  EXPECT_EQ(json::parse(call->body), client);  // empty upstream_model keeps the client's model
}

TEST(OpenAICompatRequestTest, StreamingInjectsIncludeUsageKeepingOtherStreamOptions) {
  const json client = {{"model", "m"},
                       {"messages", json::array()},
                       {"stream", true},
                       {"stream_options", {{"continuous_usage_stats", false}}}};
  EXPECT_FALSE(WantsUsage(client));
  auto call = BuildCall(ProviderType::kVllm, client, StreamOptions(false));
  ASSERT_TRUE(call.has_value());
  const json sent = json::parse(call->body);
  EXPECT_EQ(sent["stream"], true);
  EXPECT_EQ(sent["stream_options"],
            (json{{"continuous_usage_stats", false}, {"include_usage", true}}));
  EXPECT_EQ(HeaderValue(*call, "accept"), "text/event-stream");
}

TEST(OpenAICompatRequestTest, NonStreamingDropsStreamOptions) {
  const json client = {{"model", "m"},
                       {"messages", json::array()},
                       {"stream", false},
                       {"stream_options", {{"include_usage", true}}}};
  EXPECT_TRUE(WantsUsage(client));
  auto call = BuildCall(ProviderType::kOpenAI, client, CallOptions{});
  ASSERT_TRUE(call.has_value());
  const json sent = json::parse(call->body);
  EXPECT_EQ(sent["stream"], false);
  EXPECT_FALSE(sent.contains("stream_options"));
}

// The client's bytes reach the upstream as they were sent: number spellings, escapes and nested
// whitespace are not re-encoded (only the top level is re-joined without whitespace).
TEST(OpenAICompatRequestTest, ForwardsTheClientsOwnBytes) {
  const std::string client =
      "{ \"model\" : \"alias\",\n \"messages\": [ {\"role\":\"user\", \"content\":\"caf\\u00e9 \\/ 1\"} ],"
      " \"temperature\": 1.0, \"seed\": 1E2, \"logit_bias\": {\"50256\" : -100} }";
  CallOptions o;
  o.upstream_model = "gpt-4.1-\"quoted\"";
  auto call = BuildUpstreamCall(ProviderType::kOpenAI, raw_json::Object(raw_json::Parse(client).value()), o);
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(call->body,
            "{\"model\":\"gpt-4.1-\\\"quoted\\\"\",\"messages\":[ {\"role\":\"user\", "
            "\"content\":\"caf\\u00e9 \\/ 1\"} ],\"temperature\":1.0,\"seed\":1E2,"
            "\"logit_bias\":{\"50256\" : -100}}");
}

// Duplicate keys: a parser keeps the last one, so the last one is what is rewritten (once); escaped
// key spellings are recognized.
TEST(OpenAICompatRequestTest, DuplicateAndEscapedKeys) {
  const std::string client =
      R"({"model":"a","stream":false,"messages":[],"mod\u0065l":"b","thread_identifier":"t",)"
      R"("thread_identifier":"u","stream_options":{"x":1},"stream_options":{"include_usage":false,"y":2}})";
  CallOptions o = StreamOptions(false);
  o.upstream_model = "m";
  auto call = BuildUpstreamCall(ProviderType::kVllm, raw_json::Object(raw_json::Parse(client).value()), o);
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(call->body,
            R"({"stream":true,"messages":[],"mod\u0065l":"m","stream_options":{"y":2,"include_usage":true}})");
  // Appended when absent: model, stream, stream_options.
  auto bare = BuildUpstreamCall(ProviderType::kVllm, raw_json::Object(raw_json::Parse(R"({"messages":[]})").value()), o);
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->body,
            R"({"messages":[],"model":"m","stream":true,"stream_options":{"include_usage":true}})");
}

TEST(OpenAICompatRequestTest, DeepSeekGetsMaxTokensForMaxCompletionTokens) {
  auto body = [](ProviderType type, std::string_view client) {
    auto call = BuildUpstreamCall(type, raw_json::Object(raw_json::Parse(client).value()),
                                  CallOptions{});
    EXPECT_TRUE(call.has_value());
    return call ? call->body : std::string();
  };
  // DeepSeek knows only max_tokens: renamed in place, the value's bytes as sent.
  EXPECT_EQ(body(ProviderType::kDeepSeek, R"({"messages":[],"max_completion_tokens":4,"n":1})"),
            R"({"messages":[],"max_tokens":4,"n":1})");
  // Both given: max_tokens wins and is sent once (the last occurrence, as parsers keep).
  EXPECT_EQ(body(ProviderType::kDeepSeek,
                 R"({"max_tokens":2,"messages":[],"max_completion_tokens":4,"max_tokens":3})"),
            R"({"messages":[],"max_tokens":3})");
  // Other OpenAI-compatible upstreams get the field untouched.
  EXPECT_EQ(body(ProviderType::kOpenAI, R"({"messages":[],"max_completion_tokens":4})"),
            R"({"messages":[],"max_completion_tokens":4})");
}

TEST(UnsupportedFeatureTest, AskedForFeaturesAreNamedDefaultsAreNot) {
  EXPECT_EQ(UnsupportedFeature(json{{"logprobs", true}}, "X"), "'logprobs' is not supported by X");
  EXPECT_EQ(UnsupportedFeature(json{{"top_logprobs", 0}}, "X"), "'top_logprobs' is not supported by X");
  EXPECT_EQ(UnsupportedFeature(json{{"echo", true}}, "X"), "'echo' is not supported by X");
  EXPECT_EQ(UnsupportedFeature(json{{"response_format", {{"type", "json_object"}}}}, "X"),
            "'response_format' of type json_object is not supported by X");
  EXPECT_EQ(UnsupportedFeature(json{{"suffix", "tail"}}, "X"), "'suffix' is not supported by X");
  EXPECT_EQ(UnsupportedFeature(json{{"best_of", 3}}, "X"), "'best_of' > 1 is not supported by X");
  EXPECT_EQ(UnsupportedFeature(json{{"suffix", ""}, {"best_of", 1}}, "X"), std::nullopt);
  EXPECT_EQ(UnsupportedFeature(json{{"response_format", "json"}}, "X"),
            "'response_format' of type \"json\" is not supported by X");
  EXPECT_EQ(UnsupportedFeature(json{{"logprobs", false},
                                    {"top_logprobs", nullptr},
                                    {"echo", false},
                                    {"response_format", {{"type", "text"}}}},
                               "X"),
            std::nullopt);
  EXPECT_EQ(UnsupportedFeature(json::object(), "X"), std::nullopt);
}

TEST(OpenAICompatRequestTest, MetadataLeftEmptyIsDroppedOtherwiseKept) {
  auto only = BuildUpstreamCall(
      ProviderType::kOpenAI,
      raw_json::Object(raw_json::Parse(R"({"messages":[],"metadata":{"thread_id":"t"}})").value()), CallOptions{});
  ASSERT_TRUE(only.has_value());
  EXPECT_EQ(only->body, R"({"messages":[]})");
  auto kept = BuildUpstreamCall(
      ProviderType::kOpenAI,
      raw_json::Object(raw_json::Parse(R"({"messages":[],"metadata":{"a":1,"thread_id":"t","b":[2]}})").value()),
      CallOptions{});
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->body, R"({"messages":[],"metadata":{"a":1,"b":[2]}})");
  auto other = BuildUpstreamCall(
      ProviderType::kOpenAI, raw_json::Object(raw_json::Parse(R"({"messages":[],"metadata":"str"})").value()),
      CallOptions{});
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->body, R"({"messages":[],"metadata":"str"})");
}

TEST(ThreadIdTest, PrecedenceThreadIdentifierHeaderMetadata) {
  auto id = [](std::string_view body, std::string_view header) {
    return ThreadIdOf(raw_json::Object(raw_json::Parse(body).value()), header).value().id;
  };
  EXPECT_EQ(id(R"({"thread_identifier":"a","metadata":{"thread_id":"c"}})", "b"), "a");
  EXPECT_EQ(id(R"({"metadata":{"thread_id":"c"}})", "b"), "b");
  EXPECT_EQ(id(R"({"metadata":{"thread_id":"c"}})", ""), "c");
  EXPECT_EQ(id(R"({"thread_identifier":"","metadata":{"thread_id":7}})", ""), "7");
  EXPECT_EQ(id(R"({"thread_identifier":-0})", ""), "0");
  EXPECT_EQ(id(R"({"thread_identifier":18446744073709551615})", ""), "18446744073709551615");
  EXPECT_EQ(id(R"({"thread_identifier":18446744073709551616})", "h"), "h");  // a double: no id
  EXPECT_EQ(id(R"({"thread_identifier":1.5})", ""), "");
  EXPECT_EQ(id(R"({"thread_identifier":"caf\u00e9"})", ""), "caf\xc3\xa9");
  EXPECT_EQ(id(R"([1])", "h"), "h");
}

TEST(ThreadIdTest, RejectsIdsThatAreNotUtf8TooLongOrHaveControlCharacters) {
  auto id = [](std::string body, std::string_view header) {
    return ThreadIdOf(raw_json::Object(raw_json::Parse(body).value()), header);
  };
  auto bad_header = id("{}", "poison\xff");
  ASSERT_FALSE(bad_header.has_value());
  EXPECT_EQ(bad_header.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad_header.error().message, "the X-Thread-Id header is not valid UTF-8");
  // Overlong encodings and lone surrogates are not UTF-8 either.
  EXPECT_FALSE(id("{}", "\xc0\xaf").has_value());
  EXPECT_FALSE(id("{}", "\xed\xa0\x80").has_value());
  EXPECT_FALSE(id("{}", "cut\xe2\x82").has_value());

  const std::string longest(kMaxThreadIdBytes, 'a');
  EXPECT_EQ(id(R"({"thread_identifier":")" + longest + "\"}", "")->id, longest);
  auto too_long = id(R"({"thread_identifier":")" + longest + "b\"}", "");
  ASSERT_FALSE(too_long.has_value());
  EXPECT_NE(too_long.error().message.find("thread_identifier is 513 bytes long"),
            std::string::npos);
  auto meta = id(R"({"metadata":{"thread_id":"a\u0000b"}})", "");
  ASSERT_FALSE(meta.has_value());
  EXPECT_EQ(meta.error().message, "metadata.thread_id contains a control character");
  // Only the id that wins is checked: a valid thread_identifier overrides a bad header.
  EXPECT_EQ(id(R"({"thread_identifier":"ok"})", "\xff").value().id, "ok");
}

TEST(OpenAICompatRequestTest, RejectsNonObjectBodyAndMissingMessages) {
  auto a = BuildCall(ProviderType::kOpenAI, json::array(), CallOptions{});
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kInvalidArgument);
  auto b = BuildCall(ProviderType::kOpenAI, json{{"model", "m"}}, CallOptions{});
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("messages"), std::string::npos);
}

TEST(OpenAICompatResponseTest, MalformedJsonIsACorruptDataError) {
  for (std::string_view body : {"", "{", "not json", "[1,2]", "{\"choices\":", "\xff\xfe"}) {
    auto t = TranslateResponse(ProviderType::kOpenAI, body, CallOptions{});
    ASSERT_FALSE(t.has_value()) << body;
    EXPECT_EQ(t.error().code, ErrorCode::kCorruptData);
  }
  auto no_choices = TranslateResponse(ProviderType::kDeepSeek, R"({"id":"x"})", CallOptions{});
  ASSERT_FALSE(no_choices.has_value());
  EXPECT_NE(no_choices.error().message.find("choices"), std::string::npos);
}

TEST(OpenAICompatResponseTest, ErrorObjectInA200IsReported) {
  auto t = TranslateResponse(ProviderType::kOpenRouter,
                             R"({"error":{"message":"Provider returned error","code":502}})",
                             CallOptions{});
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(t.error().message.find("Provider returned error"), std::string::npos);
}

TEST(OpenAICompatResponseTest, MissingUsageIsUnknown) {
  auto t = TranslateResponse(ProviderType::kVllm,
                             R"({"choices":[{"index":0,"finish_reason":"stop"}]})", CallOptions{});
  ASSERT_TRUE(t.has_value());
  EXPECT_FALSE(t->usage.output.has_value());
  EXPECT_FALSE(t->usage.cache_read.has_value());
  EXPECT_EQ(t->finish_reason, "stop");
}

constexpr std::string_view kChunkHi =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n";

TEST(OpenAICompatStreamTest, CutBeforeDoneGivesErrorEventFromFinish) {
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(false));
  auto out = t->Feed(kChunkHi);
  EXPECT_EQ(out.bytes, kChunkHi);
  EXPECT_TRUE(out.has_content);
  EXPECT_EQ(
      t->Finish(true),
      "data: {\"error\":{\"code\":\"stream_incomplete\",\"message\":\"upstream stream ended before "
      "[DONE]\",\"param\":null,\"type\":\"upstream_error\"}}\n\n");
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->client_error(), "upstream stream ended before [DONE]");
  EXPECT_FALSE(t->upstream_error().has_value());
  EXPECT_EQ(t->Finish(true), "");
}

TEST(OpenAICompatStreamTest, CleanEndAfterFinishReasonWithoutDoneIsComplete) {
  constexpr std::string_view kLast =
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],"
      "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n";
  auto t = NewStreamTranslator(ProviderType::kVllm, StreamOptions(true));
  std::string bytes = t->Feed(std::string(kChunkHi) + std::string(kLast)).bytes;
  bytes += t->Finish(true);
  EXPECT_EQ(bytes, std::string(kChunkHi) + std::string(kLast) + "data: [DONE]\n\n");
  EXPECT_TRUE(t->completed());
  EXPECT_FALSE(t->client_error().has_value());
  EXPECT_EQ(t->finish_reason(), "stop");
  EXPECT_EQ(t->usage().output, 1);
  // The same stream reset instead of ended: still a failure.
  auto reset = NewStreamTranslator(ProviderType::kVllm, StreamOptions(true));
  reset->Feed(std::string(kChunkHi) + std::string(kLast));
  EXPECT_NE(reset->Finish(false, "connection reset by peer").find("stream_failed"),
            std::string::npos);
  EXPECT_FALSE(reset->completed());
}

// WHATWG SSE: an empty data field dispatches nothing; a comment is forwarded (keep-alive), a
// block of other fields without data (retry:, id:) is dropped (the OpenAI SDK chokes on it).
TEST(OpenAICompatStreamTest, EmptyDataAndDatalessBlocksAreSkippedCommentsKept) {
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(true));
  std::string bytes = t->Feed(std::string(kChunkHi) + "data:\n\n" + ": keep-alive\n\n" +
                              "retry: 3000\n\n" + "id: 7\n\n" + std::string(kChunkHi) +
                              "data: [DONE]\n\n")
                          .bytes;
  bytes += t->Finish(true);
  EXPECT_EQ(bytes, std::string(kChunkHi) + ": keep-alive\n\n" + std::string(kChunkHi) +
                       "data: [DONE]\n\n");
  EXPECT_TRUE(t->completed());
  EXPECT_FALSE(t->client_error().has_value());
}

TEST(OpenAICompatStreamTest, UpstreamReadFailureGivesErrorEvent) {
  auto t = NewStreamTranslator(ProviderType::kSglang, StreamOptions(true));
  t->Feed("data: {\"choices\":[{\"index\":0,\"del");  // cut mid-event
  const std::string tail = t->Finish(false, "connection reset by peer");
  EXPECT_NE(tail.find("upstream stream failed: connection reset by peer"), std::string::npos);
  EXPECT_NE(tail.find("\"code\":\"stream_failed\""), std::string::npos);
  EXPECT_TRUE(tail.starts_with("data: {\"error\":"));
  EXPECT_TRUE(tail.ends_with("}}\n\n"));
}

TEST(OpenAICompatStreamTest, TrailingDoneWithoutBlankLineCompletes) {
  auto t = NewStreamTranslator(ProviderType::kLlamaCpp, StreamOptions(false));
  std::string bytes = t->Feed(std::string(kChunkHi) + "data: [DONE]").bytes;
  bytes += t->Finish(true);
  EXPECT_EQ(bytes, std::string(kChunkHi) + "data: [DONE]\n\n");
  EXPECT_TRUE(t->completed());
  EXPECT_FALSE(t->client_error().has_value());
}

TEST(OpenAICompatStreamTest, MalformedJsonChunkBecomesOneErrorEvent) {
  for (std::string_view bad :
       {"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}\n\n",  // fast path
        "data: {\"usage\":{\"prompt_tokens\":1,}\n\n"}) {          // parsed path
    auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(false));
    auto out = t->Feed(std::string(kChunkHi) + std::string(bad) + std::string(kChunkHi));
    EXPECT_TRUE(out.bytes.starts_with(kChunkHi));
    const std::string rest = out.bytes.substr(kChunkHi.size());
    EXPECT_TRUE(rest.starts_with("data: {\"error\":{\"code\":\"malformed_upstream_stream\""))
        << rest;
    EXPECT_EQ(rest.find("\n\n"), rest.size() - 2) << "exactly one event after the good chunk";
    EXPECT_TRUE(t->client_error().has_value());
    EXPECT_EQ(t->Feed(kChunkHi).bytes, "");
    EXPECT_EQ(t->Finish(true), "");
  }
}

TEST(OpenAICompatStreamTest, UpstreamErrorEventForwardedAndRecorded) {
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(false));
  const std::string error =
      "data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n";
  auto out = t->Feed(std::string(kChunkHi) + error + "data: [DONE]\n\n");
  EXPECT_EQ(out.bytes, std::string(kChunkHi) + error);
  EXPECT_EQ(t->upstream_error(), "The server had an error");
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->Finish(true), "");
}

TEST(OpenAICompatStreamTest, NamedErrorEventWithBareMessage) {
  auto t = NewStreamTranslator(ProviderType::kVllm, StreamOptions(false));
  auto out = t->Feed("event: error\ndata: {\"message\":\"engine died\"}\n\n");
  EXPECT_TRUE(out.bytes.starts_with("data: {\"error\":{"));
  ASSERT_TRUE(t->upstream_error().has_value());
  EXPECT_NE(t->upstream_error()->find("engine died"), std::string::npos);
}

TEST(OpenAICompatStreamTest, LastUsageWinsAndEveryUsageStrippedFromChoicesChunks) {
  // vLLM with continuous usage stats: usage on every chunk, cumulative.
  const std::string c1 =
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":100,"
      "\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n";
  const std::string c2 =
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":2,\"prompt_tokens_details\":{"
      "\"cached_tokens\":64}}}\n\n";
  auto t = NewStreamTranslator(ProviderType::kVllm, StreamOptions(false));
  auto r = RunStream(*t, c1 + c2 + "data: [DONE]\n\n");
  EXPECT_EQ(
      r.bytes,
      // Only the usage member goes; every other byte is the upstream's.
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}]}\n\n"
      "data: [DONE]\n\n");
  EXPECT_EQ(t->usage().output, 2);
  EXPECT_EQ(t->usage().cache_read, 64);
  EXPECT_EQ(t->usage().uncached, 36);
  EXPECT_EQ(t->finish_reason(), "length");
}

// OpenAI puts "usage": null in every chunk once include_usage is set. When kvgate set it for its
// own telemetry, the client gets its chunks without it, as OpenAI sends them without the option;
// a client that asked for usage gets them unchanged.
TEST(OpenAICompatStreamTest, NullUsageAddedForKvgateIsStrippedForAClientThatDidNotAsk) {
  const std::string chunk =
      "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],"
      "\"usage\":null}\n\n";
  const std::string last =
      "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
      "\"completion_tokens\":1}}\n\n";
  auto stripped = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(false));
  auto r = RunStream(*stripped, chunk + last + "data: [DONE]\n\n");
  EXPECT_EQ(r.bytes,
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}"
            "\n\ndata: [DONE]\n\n");
  EXPECT_EQ(stripped->usage().output, 1);
  auto kept = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(true));
  EXPECT_EQ(RunStream(*kept, chunk + last + "data: [DONE]\n\n").bytes,
            chunk + last + "data: [DONE]\n\n");
  // Not last (other servers): the member goes all the same.
  auto first = NewStreamTranslator(ProviderType::kVllm, StreamOptions(false));
  EXPECT_EQ(RunStream(*first, "data: {\"usage\":null,\"choices\":[{\"index\":0}]}\n\n"
                             "data: [DONE]\n\n").bytes,
            "data: {\"choices\":[{\"index\":0}]}\n\ndata: [DONE]\n\n");
}

TEST(OpenAICompatStreamTest, RoleOnlyChunkIsNotContentToolCallIs) {
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(true));
  EXPECT_FALSE(
      t->Feed(
           "data: "
           "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
          .has_content);
  EXPECT_FALSE(
      t->Feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":null}}]}\n\n").has_content);
  EXPECT_TRUE(
      t->Feed(
           "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\","
           "\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n")
          .has_content);
  EXPECT_TRUE(
      t->Feed("data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":null}]}\n\n")
          .has_content);
}

// The chunk reader walks a chunk once (raw_json::WalkMembers): whitespace anywhere, several
// choices, escaped keys, members of unexpected kinds and duplicate keys read as a parser reads
// them (the last duplicate wins).
TEST(OpenAICompatStreamTest, ChunkReaderHandlesLayoutAndOddShapes) {
  auto feed = [](std::string_view data) {
    auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(true));
    const bool content = t->Feed("data: " + std::string(data) + "\n\n").has_content;
    return std::pair<bool, std::string>(content, t->finish_reason());
  };
  using R = std::pair<bool, std::string>;
  EXPECT_EQ(feed(" { \"id\" : \"x\" ,\t \"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" "
                 ": \"hi\" } , \"finish_reason\" : null } ] , \"usage\" : null } "),
            R(true, ""));
  EXPECT_EQ(feed(R"({"choices":[{"index":0,"delta":{"reasoning_content":"think"}},)"
                 R"({"index":1,"delta":{},"finish_reason":"stop"}]})"),
            R(true, "stop"));
  EXPECT_EQ(feed(R"({"choices":[{"index":0,"delta":{"c\u006fntent":"x"},"fin\u0069sh_reason":"length"}]})"),
            R(true, "length"));
  EXPECT_EQ(feed(R"({"choices":[{"delta":{"content":"x"}}],"choices":[{"delta":{"role":"assistant"}}]})"),
            R(false, ""));  // the second "choices" is the one a parser keeps
  EXPECT_EQ(feed(R"({"choices":{"delta":{"content":"x"}}})"), R(false, ""));  // not an array
  EXPECT_EQ(feed(R"({"choices":[{"delta":"content","finish_reason":["stop"]},7,null]})"),
            R(false, ""));  // delta not an object, finish_reason not a string, odd elements
  EXPECT_EQ(feed(R"({"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"a\":[1]}"}}]},)"
                 R"("finish_reason":"tool_calls"}],"x":[[{"y":"]}"}]]})"),
            R(true, "tool_calls"));
}

TEST(OpenAICompatStreamTest, BytesAfterDoneAreIgnored) {
  auto t = NewStreamTranslator(ProviderType::kOpenAI, StreamOptions(true));
  EXPECT_EQ(t->Feed("data: [DONE]\n\ndata: {\"x\":1}\n\n").bytes, "data: [DONE]\n\n");
  EXPECT_TRUE(t->completed());
  EXPECT_EQ(t->Feed("data: {\"x\":2}\n\n").bytes, "");
  EXPECT_EQ(t->Finish(true), "");
}

}  // namespace
}  // namespace kvgate::providers
