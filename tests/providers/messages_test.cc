// The Anthropic Messages API: the pass-through to Anthropic providers (the client's bytes, usage
// read exactly), the translation to OpenAI chat and back (golden samples), Anthropic-shaped
// errors, and the thread id sources.
#include "gateway/providers/messages.h"

#include <gtest/gtest.h>

#include <string>

#include "gateway/providers/provider.h"
#include "tests/providers/test_util.h"

namespace kvgate::providers {
namespace {

using testing_util::ExpectUsage;
using testing_util::ReadGolden;
using testing_util::RunSplit;
using testing_util::RunStream;

raw_json::Object ObjectOf(const std::string& text) {
  return raw_json::Object(raw_json::Parse(text).value());
}

CallOptions MessagesOptions(bool stream) {
  CallOptions o;
  o.endpoint = Endpoint::kMessages;
  o.upstream_model = "claude-sonnet-4-5-20250929";
  o.api_key = "sk-ant-upstream";
  o.stream = stream;
  return o;
}

std::string Header(const UpstreamCall& call, std::string_view name) {
  for (const auto& [k, v] : call.headers) {
    if (k == name) return v;
  }
  return "<absent>";
}

std::string Trimmed(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// ---- Pass-through to Anthropic ------------------------------------------------------------------

// The body as a client might format it: whitespace, key order Anthropic's cache sees through
// (tool schema keys not sorted), escapes, cache_control breakpoints with both TTLs.
constexpr std::string_view kClientBody = R"({
  "model" : "sonnet",
  "max_tokens": 1024,
  "tools": [{"name": "get_weather", "input_schema": {"type": "object", "required": ["location"],
             "properties": {"location": {"type": "string", "description": "City \u00e9"}}},
             "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
  "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
  "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?\n",
                "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}],
  "stream": false
})";

TEST(MessagesPassthroughTest, BodyIsTheClientsBytesWithOnlyTheModelSpliced) {
  const std::string text(kClientBody);
  auto call = BuildUpstreamCall(ProviderType::kAnthropic, ObjectOf(text), MessagesOptions(false));
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  std::string expected = text;
  expected.replace(expected.find("\"sonnet\""), 8, "\"claude-sonnet-4-5-20250929\"");
  EXPECT_EQ(call->body, expected);
  EXPECT_EQ(call->path, "/v1/messages");
  EXPECT_EQ(Header(*call, "x-api-key"), "sk-ant-upstream");
  EXPECT_EQ(Header(*call, "anthropic-version"), "2023-06-01");
  EXPECT_EQ(Header(*call, "anthropic-beta"), "<absent>");
  EXPECT_EQ(Header(*call, "accept"), "<absent>");
}

TEST(MessagesPassthroughTest, ClientVersionAndBetaHeadersGoUpstream) {
  CallOptions o = MessagesOptions(true);
  o.anthropic_version = "2023-06-01";
  o.anthropic_beta = "prompt-caching-2024-07-31,extended-cache-ttl-2025-04-11";
  const std::string text = R"({"model":"m","max_tokens":5,"messages":[],"stream":true})";
  auto call = BuildUpstreamCall(ProviderType::kAnthropic, ObjectOf(text), o);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(Header(*call, "anthropic-beta"), o.anthropic_beta);
  EXPECT_EQ(Header(*call, "accept"), "text/event-stream");
  EXPECT_EQ(call->body,
            R"({"model":"claude-sonnet-4-5-20250929","max_tokens":5,"messages":[],"stream":true})");
}

TEST(MessagesPassthroughTest, KvgateThreadFieldsAreCutOutWithTheirSeparators) {
  struct Case {
    std::string in, out;
  } cases[] = {
      {R"({"thread_identifier":"t1", "model":"m","max_tokens":5})",
       R"({"model":"claude-sonnet-4-5-20250929","max_tokens":5})"},
      {R"({"model":"m", "max_tokens":5 ,"thread_identifier":7 })",
       R"({"model":"claude-sonnet-4-5-20250929", "max_tokens":5 })"},
      {R"({"model":"m","metadata":{"thread_id":"t"},"max_tokens":5})",
       R"({"model":"claude-sonnet-4-5-20250929","max_tokens":5})"},
      {R"({"model":"m","metadata":{"user_id":"u", "thread_id":"t"},"thread_identifier":"x"})",
       R"({"model":"claude-sonnet-4-5-20250929","metadata":{"user_id":"u"}})"},
      {R"({"model":"m","metadata":{"thread_id":"t","user_id":"u"}})",
       R"({"model":"claude-sonnet-4-5-20250929","metadata":{"user_id":"u"}})"},
      {R"({"thread_identifier":"x","metadata":{"thread_id":"t"}})", R"({})"},
      {R"({ })", R"({ })"},
  };
  for (const Case& c : cases) {
    auto call = BuildUpstreamCall(ProviderType::kAnthropic, ObjectOf(c.in), MessagesOptions(false));
    ASSERT_TRUE(call.has_value()) << c.in;
    EXPECT_EQ(call->body, c.out) << c.in;
    EXPECT_TRUE(raw_json::Parse(call->body).has_value()) << call->body;
  }
}

TEST(MessagesPassthroughTest, OnlyAnthropicTypesTakeThePassThrough) {
  auto call = BuildUpstreamCall(ProviderType::kOpenAI, ObjectOf(R"({"model":"m"})"),
                                MessagesOptions(false));
  ASSERT_FALSE(call.has_value());
  EXPECT_EQ(call.error().code, ErrorCode::kInvalidArgument);
}

TEST(MessagesPassthroughTest, MessageComesBackUnchangedWithExactUsage) {
  const std::string body = ReadGolden("anthropic_message.json");
  auto t = TranslateResponse(ProviderType::kAnthropic, body, MessagesOptions(false));
  ASSERT_TRUE(t.has_value()) << t.error().ToString();
  EXPECT_EQ(t->body, body);
  EXPECT_EQ(t->finish_reason, "stop");
  // 5m and 1h writes split as reported; input_tokens is all uncached.
  ExpectUsage(t->usage, {12000, 600, 1200, 21, 87, std::nullopt});
  EXPECT_EQ(ResponseIdOf(t->body), "msg_01XFDUDYJgAACzvnptvVoYEL");
}

TEST(MessagesPassthroughTest, ErrorInA2xxBodyIsAnError) {
  auto t = TranslateResponse(ProviderType::kAnthropic,
                             R"({"type":"error","error":{"type":"api_error","message":"boom"}})",
                             MessagesOptions(false));
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, ErrorCode::kUnavailable);
}

TEST(MessagesPassthroughTest, StreamPassesThroughEventForEventWithUsage) {
  const std::string stream = ReadGolden("anthropic_stream.sse");
  auto t = NewStreamTranslator(ProviderType::kAnthropic, MessagesOptions(true));
  auto r = RunStream(*t, stream);
  EXPECT_EQ(r.bytes, stream);
  EXPECT_TRUE(r.any_content);
  EXPECT_TRUE(t->completed());
  EXPECT_EQ(t->finish_reason(), "tool_calls");
  ExpectUsage(t->usage(), {4096, 0, 0, 25, 89, std::nullopt});
  EXPECT_EQ(ResponseIdOfStream(r.bytes), "msg_014p7gG3wDgGV9EUtLvnow3U");
  for (size_t at = 0; at <= stream.size(); at += 7) {
    auto split = NewStreamTranslator(ProviderType::kAnthropic, MessagesOptions(true));
    ASSERT_EQ(RunSplit(*split, stream, at), stream) << "split at " << at;
    ASSERT_EQ(split->usage(), t->usage());
  }
}

TEST(MessagesPassthroughTest, StreamWith1hWritesInMessageStart) {
  const std::string stream =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","
      "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":"
      "{\"input_tokens\":9,\"cache_creation_input_tokens\":3000,\"cache_read_input_tokens\":0,"
      "\"cache_creation\":{\"ephemeral_5m_input_tokens\":1000,\"ephemeral_1h_input_tokens\":2000},"
      "\"output_tokens\":1}}}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
      "\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":16}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  auto t = NewStreamTranslator(ProviderType::kAnthropic, MessagesOptions(true));
  EXPECT_EQ(RunStream(*t, stream).bytes, stream);
  EXPECT_EQ(t->finish_reason(), "length");
  ExpectUsage(t->usage(), {0, 1000, 2000, 9, 16, std::nullopt});
}

TEST(MessagesPassthroughTest, UpstreamErrorEventPassesThroughAndEndsTheStream) {
  const std::string stream = ReadGolden("anthropic_stream_error.sse");
  auto t = NewStreamTranslator(ProviderType::kAnthropic, MessagesOptions(true));
  EXPECT_EQ(RunStream(*t, stream).bytes, stream);
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->upstream_error(), "Overloaded");
  ExpectUsage(t->usage(), {0, 2048, 0, 12, 1, std::nullopt});
}

TEST(MessagesPassthroughTest, StreamCutShortEndsWithAnAnthropicErrorEvent) {
  const std::string stream = ReadGolden("anthropic_stream.sse");
  const std::string cut = stream.substr(0, stream.find("event: message_delta"));
  auto t = NewStreamTranslator(ProviderType::kAnthropic, MessagesOptions(true));
  const std::string bytes = RunStream(*t, cut).bytes;
  ASSERT_TRUE(bytes.starts_with(cut));
  const std::string tail = bytes.substr(cut.size());
  EXPECT_TRUE(tail.starts_with("event: error\ndata: {")) << tail;
  EXPECT_NE(tail.find("\"type\":\"api_error\""), std::string::npos) << tail;
  EXPECT_NE(tail.find("ended before message_stop"), std::string::npos) << tail;
}

// ---- Messages -> chat ---------------------------------------------------------------------------

TEST(MessagesToChatTest, EveryMappedFieldFromTheClientsBytes) {
  const std::string body = R"({
    "model": "gpt-4o", "max_tokens": 300, "thread_identifier": "t", "stream": true,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
               {"type": "text", "text": "Answer in \"French\"."}],
    "messages": [
      {"role": "user", "content": [
        {"type": "text", "text": "What is here?", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0"}}]},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"z": 1, "a": [true]}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a cat"},
        {"type": "text", "text": "And now?"}]},
      {"role": "assistant", "content": "Plain."}],
    "tools": [{"name": "look", "description": "Looks.",
               "input_schema": {"type": "object", "properties": {"z": {"type": "integer"}}, "additionalProperties": false},
               "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "metadata": {"user_id": "u-42", "thread_id": "t"},
    "thinking": {"type": "enabled", "budget_tokens": 1024}, "service_tier": "auto"
  })";
  auto chat = MessagesToChat(ObjectOf(body), {.top_k = false});
  ASSERT_TRUE(chat.has_value()) << chat.error().ToString();
  EXPECT_EQ(
      *chat,
      R"({"model":"gpt-4o","messages":[)"
      R"({"role":"system","content":[{"type":"text","text":"Be brief."},{"type":"text","text":"Answer in \"French\"."}]},)"
      R"({"role":"user","content":[{"type":"text","text":"What is here?"},)"
      R"({"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0"}}]},)"
      R"({"role":"assistant","content":"Checking.","tool_calls":[{"id":"toolu_1","type":"function",)"
      R"("function":{"name":"look","arguments":"{\"z\":1,\"a\":[true]}"}}]},)"
      R"({"role":"tool","tool_call_id":"toolu_1","content":"a cat"},)"
      R"({"role":"user","content":"And now?"},)"
      R"({"role":"assistant","content":"Plain."}],)"
      R"("max_tokens":300,"stop":["END"],"temperature":0.5,"top_p":0.9,"stream":true,"user":"u-42",)"
      R"("tools":[{"type":"function","function":{"name":"look","description":"Looks.",)"
      R"("parameters":{"type": "object", "properties": {"z": {"type": "integer"}}, "additionalProperties": false}}}],)"
      R"("tool_choice":"required","parallel_tool_calls":false})");
  auto with_top_k = MessagesToChat(ObjectOf(body), {.top_k = true});
  ASSERT_TRUE(with_top_k.has_value());
  EXPECT_NE(with_top_k->find(R"("top_k":40)"), std::string::npos);
}

TEST(MessagesToChatTest, StringSystemToolChoiceAndToolResultBlocks) {
  auto chat = MessagesToChat(ObjectOf(R"({"model":"m","max_tokens":5,"system":"S",
      "messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x",
        "content":[{"type":"text","text":"r1"},{"type":"text","text":"r2"}]}]}],
      "tools":[{"name":"f","input_schema":{"type":"object"}}],
      "tool_choice":{"type":"tool","name":"f"}})"));
  ASSERT_TRUE(chat.has_value()) << chat.error().ToString();
  EXPECT_EQ(
      *chat,
      R"({"model":"m","messages":[{"role":"system","content":"S"},)"
      R"({"role":"tool","tool_call_id":"x","content":[{"type":"text","text":"r1"},)"
      R"({"type":"text","text":"r2"}]}],"max_tokens":5,)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],)"
      R"("tool_choice":{"type":"function","function":{"name":"f"}}})");
}

// A count_tokens body has no max_tokens: with prompt_only it translates all the same (and an
// invalid one is still refused).
TEST(MessagesToChatTest, PromptOnlyNeedsNoMaxTokens) {
  auto body = raw_json::Parse(R"({"model":"m","system":"be brief","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(body.has_value());
  EXPECT_FALSE(MessagesToChat(raw_json::Object(*body)).has_value());
  auto chat = MessagesToChat(raw_json::Object(*body), {.prompt_only = true});
  ASSERT_TRUE(chat.has_value()) << chat.error().ToString();
  EXPECT_EQ(*chat, R"({"model":"m","messages":[{"role":"system","content":"be brief"},)"
                   R"({"role":"user","content":"hi"}]})");
  auto bad = raw_json::Parse(R"({"model":"m","max_tokens":0,"messages":[]})");
  ASSERT_TRUE(bad.has_value());
  EXPECT_FALSE(MessagesToChat(raw_json::Object(*bad), {.prompt_only = true}).has_value());
}

TEST(MessagesToChatTest, WhatChatCannotCarryIsA400) {
  const char* bodies[] = {
      R"({"model":"m","messages":[]})",                   // no max_tokens
      R"({"model":"m","max_tokens":0,"messages":[]})",    // not positive
      R"({"model":"m","max_tokens":1.5,"messages":[]})",  // not an integer
      R"({"model":"m","max_tokens":5})",                  // no messages
      R"({"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]})",
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]})",
      R"({"model":"m","max_tokens":5,"messages":[],"tools":[{"type":"web_search_20250305","name":"web_search"}]})",
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"image","source":{}}]}]}]})",
  };
  for (const char* body : bodies) {
    auto chat = MessagesToChat(ObjectOf(body));
    ASSERT_FALSE(chat.has_value()) << body;
    EXPECT_EQ(chat.error().code, ErrorCode::kInvalidArgument) << body;
  }
}

// ---- chat -> Messages (golden samples) ----------------------------------------------------------

TEST(ChatToMessageTest, GoldenMessageWithTextToolUseAndCachedUsage) {
  auto message = ChatToMessage(ReadGolden("chat_for_messages.json"));
  ASSERT_TRUE(message.has_value()) << message.error().ToString();
  EXPECT_EQ(*message, Trimmed(ReadGolden("messages_from_chat.expected.json")));
}

TEST(ChatToMessageTest, StopReasonsAndEngineCacheWrites) {
  struct Case {
    const char* finish;
    const char* stop;
  } cases[] = {{"\"stop\"", "\"end_turn\""},
               {"\"length\"", "\"max_tokens\""},
               {"\"content_filter\"", "\"refusal\""},
               {"null", "null"}};
  for (const Case& c : cases) {
    const std::string chat =
        std::string(R"({"id":"chatcmpl_01","model":"smollm2","choices":[{"index":0,"message":)"
                    R"({"role":"assistant","content":"hi"},"finish_reason":)") +
        c.finish +
        R"(}],"usage":{"prompt_tokens":100,"completion_tokens":2,)"
        R"("prompt_tokens_details":{"cached_tokens":64,"cache_write_tokens":32}}})";
    auto message = ChatToMessage(chat);
    ASSERT_TRUE(message.has_value());
    EXPECT_NE(message->find(std::string("\"stop_reason\":") + c.stop), std::string::npos)
        << *message;
    EXPECT_NE(message->find(R"("usage":{"input_tokens":4,"cache_creation_input_tokens":32,)"
                            R"("cache_read_input_tokens":64,"output_tokens":2})"),
              std::string::npos)
        << *message;
    EXPECT_TRUE(message->starts_with(R"({"id":"msg_01",)")) << *message;
  }
  EXPECT_FALSE(ChatToMessage(R"({"object":"list"})").has_value());
}

// vLLM and kvgate's engine name the stop string that ended a choice (a string stop_reason):
// Anthropic's client then gets stop_reason "stop_sequence" and the string. A token id there
// (vLLM's integer) or OpenAI's silence is an end_turn.
TEST(ChatToMessageTest, NamedStopStringIsAStopSequence) {
  auto with = [](const char* stop_reason) {
    return std::string(R"({"id":"chatcmpl-1","model":"m","choices":[{"index":0,"message":)"
                       R"({"role":"assistant","content":"1, 2"},"finish_reason":"stop","stop_reason":)") +
           stop_reason + R"(}],"usage":{"prompt_tokens":5,"completion_tokens":3}})";
  };
  auto named = ChatToMessage(with(R"("END")"));
  ASSERT_TRUE(named.has_value());
  EXPECT_NE(named->find(R"("stop_reason":"stop_sequence","stop_sequence":"END")"),
            std::string::npos)
      << *named;
  for (const char* other : {"null", "128001", R"("")"}) {
    auto message = ChatToMessage(with(other));
    ASSERT_TRUE(message.has_value());
    EXPECT_NE(message->find(R"("stop_reason":"end_turn","stop_sequence":null)"), std::string::npos)
        << other << ": " << *message;
  }
}

TEST(MessagesAnswerStreamTest, NamedStopStringEndsTheStreamAsAStopSequence) {
  auto t = NewMessagesAnswerStream();
  std::string bytes = t->Feed(
      R"(data: {"id":"chatcmpl-1","model":"m","choices":[{"index":0,"delta":)"
      R"({"content":"1, 2"},"finish_reason":null}]})" "\n\n"
      R"(data: {"id":"chatcmpl-1","model":"m","choices":[{"index":0,"delta":{},)"
      R"("finish_reason":"stop","stop_reason":"\n\n"}]})" "\n\n"
      R"(data: {"id":"chatcmpl-1","model":"m","choices":[],"usage":)"
      R"({"prompt_tokens":5,"completion_tokens":3}})" "\n\n"
      "data: [DONE]\n\n");
  const std::string head = "event: message_delta\ndata: ";
  const size_t at = bytes.find(head);
  ASSERT_NE(at, std::string::npos) << bytes;
  const size_t start = at + head.size();
  const nlohmann::json delta =
      nlohmann::json::parse(bytes.substr(start, bytes.find('\n', start) - start));
  EXPECT_EQ(delta["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(delta["delta"]["stop_sequence"], "\n\n");
}

TEST(MessagesAnswerStreamTest, GoldenEventSequence) {
  const std::string chat = ReadGolden("chat_stream_for_messages.sse");
  const std::string expected = ReadGolden("messages_from_chat_stream.expected.sse");
  auto whole = NewMessagesAnswerStream();
  std::string bytes = whole->Feed(chat);
  bytes += whole->Finish();
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(whole->message_id(), "msg_B9MHDbslfkBeAs8l4bebGdFOJ6PeG");
  for (size_t at = 0; at <= chat.size(); ++at) {
    auto split = NewMessagesAnswerStream();
    std::string pieces = split->Feed(chat.substr(0, at));
    pieces += split->Feed(chat.substr(at));
    pieces += split->Finish();
    ASSERT_EQ(pieces, expected) << "split at " << at;
  }
}

TEST(MessagesAnswerStreamTest, ChatErrorEventBecomesAnAnthropicErrorEvent) {
  auto t = NewMessagesAnswerStream();
  std::string bytes = t->Feed(
      "data: {\"id\":\"chatcmpl-1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":"
      "{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"
      "data: {\"error\":{\"message\":\"the built-in engine failed\",\"type\":\"server_error\","
      "\"code\":\"engine_error\"}}\n\n");
  EXPECT_NE(bytes.find("event: content_block_delta"), std::string::npos);
  const size_t error = bytes.find("event: error\ndata: ");
  ASSERT_NE(error, std::string::npos) << bytes;
  EXPECT_NE(bytes.find(R"("type":"api_error")", error), std::string::npos) << bytes;
  EXPECT_NE(bytes.find("the built-in engine failed", error), std::string::npos);
  EXPECT_EQ(t->Feed("data: [DONE]\n\n"), "");
  EXPECT_EQ(t->Finish(), "");
}

TEST(MessagesAnswerStreamTest, StreamThatEndsEarlyGetsAnErrorEvent) {
  auto t = NewMessagesAnswerStream();
  t->Feed("data: {\"id\":\"chatcmpl-1\",\"model\":\"m\",\"choices\":[]}\n\n");
  const std::string tail = t->Finish();
  EXPECT_TRUE(tail.starts_with("event: error\n")) << tail;
  EXPECT_EQ(t->Finish(), "");
}

// ---- Errors and thread ids ----------------------------------------------------------------------

std::string TypeOf(const ClientError& e) { return e.body["error"]["type"].get<std::string>(); }

TEST(AnthropicErrorTest, KvgateAndUpstreamErrorsInAnthropicShape) {
  ClientError auth = ToAnthropicError(MakeOpenAIError(401, "Incorrect API key provided",
                                                      "invalid_request_error", "invalid_api_key"));
  EXPECT_EQ(auth.status, 401);
  EXPECT_EQ(auth.body["type"], "error");
  EXPECT_EQ(TypeOf(auth), "authentication_error");
  EXPECT_EQ(auth.body["error"]["message"], "Incorrect API key provided");
  EXPECT_EQ(TypeOf(ToAnthropicError(MakeOpenAIError(400, "x", "invalid_request_error"))),
            "invalid_request_error");
  EXPECT_EQ(TypeOf(ToAnthropicError(
                MakeOpenAIError(404, "x", "invalid_request_error", "model_not_found"))),
            "not_found_error");
  EXPECT_EQ(TypeOf(ToAnthropicError(MakeOpenAIError(413, "x", "invalid_request_error"))),
            "request_too_large");
  EXPECT_EQ(TypeOf(ToAnthropicError(MakeOpenAIError(429, "x", "rate_limit_error"))),
            "rate_limit_error");
  EXPECT_EQ(TypeOf(ToAnthropicError(MakeOpenAIError(500, "x", "server_error"))), "api_error");
  EXPECT_EQ(TypeOf(ToAnthropicError(MakeOpenAIError(504, "x", "upstream_error"))), "timeout_error");
  // An upstream Anthropic 529 (kvgate's 503, the type kept as code) goes out as Anthropic's 529.
  ClientError overloaded = ToAnthropicError(TranslateUpstreamError(
      ProviderType::kAnthropic, 529,
      R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})"));
  EXPECT_EQ(overloaded.status, 529);
  EXPECT_EQ(TypeOf(overloaded), "overloaded_error");
  EXPECT_EQ(overloaded.body["error"]["message"], "Overloaded");
  // The provider rejecting kvgate's own key is the gateway's failure (502), not the client's.
  ClientError upstream_auth = ToAnthropicError(TranslateUpstreamError(
      ProviderType::kAnthropic, 401,
      R"({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}})"));
  EXPECT_EQ(upstream_auth.status, 502);
  EXPECT_EQ(TypeOf(upstream_auth), "api_error");
  // An upstream 400 keeps its type and message.
  ClientError bad = ToAnthropicError(TranslateUpstreamError(
      ProviderType::kAnthropic, 400,
      R"({"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}})"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(TypeOf(bad), "invalid_request_error");
  EXPECT_EQ(bad.body["error"]["message"], "max_tokens: Field required");
  EXPECT_TRUE(AnthropicShutdownCutEvent().starts_with("event: error\ndata: {"));
}

TEST(MessagesThreadIdTest, SourcesInOrder) {
  const AgentSession session{"x-claude-code-session-id", "d"};
  auto id = [](const std::string& body, std::string_view header, AgentSession s) {
    return MessagesThreadIdOf(ObjectOf(body), header, s).value();
  };
  const std::string all = R"({"thread_identifier":"a","metadata":{"thread_id":"c","user_id":"e"}})";
  EXPECT_EQ(id(all, "b", session).id, "a");
  EXPECT_EQ(id(all, "b", session).source, "body");
  const std::string no_ident = R"({"metadata":{"thread_id":"c","user_id":"e"}})";
  EXPECT_EQ(id(no_ident, "b", session).id, "b");
  EXPECT_EQ(id(no_ident, "b", session).source, "header");
  EXPECT_EQ(id(no_ident, "", session).id, "c");
  const std::string user_only = R"({"metadata":{"user_id":"e"}})";
  EXPECT_EQ(id(user_only, "", session).id, "d");
  EXPECT_EQ(id(user_only, "", session).source, "header");
  EXPECT_EQ(id(user_only, "", {}).id, "e");
  EXPECT_EQ(id(user_only, "", {}).source, "body");
  EXPECT_EQ(id("{}", "", {}).id, "");
  EXPECT_EQ(id("{}", "", {}).source, "");
  const std::string long_value(600, 'x');
  auto bad = MessagesThreadIdOf(ObjectOf("{}"), "", {"x-claude-code-session-id", long_value});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("x-claude-code-session-id"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::providers
