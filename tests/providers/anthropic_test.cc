// OpenAI chat -> Anthropic Messages requests, and Anthropic responses/streams beyond the goldens.
#include <gtest/gtest.h>

#include <map>

#include <string>

#include <random>

#include "gateway/providers/internal.h"
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

CallOptions Options(std::string key = "sk-ant-test") {
  CallOptions o;
  o.upstream_model = "claude-sonnet-4-5";
  o.api_key = std::move(key);
  o.default_max_tokens = 1000;
  return o;
}

Result<json> Translate(const json& client, const CallOptions& o = Options()) {
  auto call = BuildCall(ProviderType::kAnthropic, client, o);
  if (!call) return std::unexpected(call.error());
  return json::parse(call->body);
}

json Msg(std::string role, json content) {
  return {{"role", std::move(role)}, {"content", std::move(content)}};
}

TEST(AnthropicRequestTest, FullTranslation) {
  const json client = R"({
    "model": "my-claude",
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "system", "content": [{"type": "text", "text": "Long document", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
      {"role": "user", "content": "Hi"},
      {"role": "user", "content": [
        {"type": "text", "text": "Question?", "cache_control": {"type": "ephemeral"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}}]},
      {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"cats\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "3 cats"},
      {"role": "user", "content": "Thanks"}
    ],
    "tools": [{"type": "function", "function": {"name": "lookup", "description": "Search",
               "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
    "tool_choice": "required",
    "max_completion_tokens": 256, "max_tokens": 99,
    "temperature": 0.2, "top_p": 0.9, "top_k": 40, "stop": "END", "user": "u-42",
    "frequency_penalty": 0.5, "seed": 7, "thread_identifier": "t-secret",
    "metadata": {"thread_id": "t-secret-2"}, "stream": true
  })"_json;
  CallOptions o = Options();
  o.stream = true;
  auto call = BuildCall(ProviderType::kAnthropic, client, o);
  ASSERT_TRUE(call.has_value()) << call.error().ToString();
  EXPECT_EQ(call->path, "/v1/messages");
  EXPECT_EQ(HeaderValue(*call, "x-api-key"), "sk-ant-test");
  EXPECT_EQ(HeaderValue(*call, "anthropic-version"), "2023-06-01");
  EXPECT_EQ(HeaderValue(*call, "content-type"), "application/json");
  EXPECT_EQ(HeaderValue(*call, "authorization"), "<absent>");
  EXPECT_EQ(call->body.find("t-secret"), std::string::npos) << "kvgate fields never forwarded";
  EXPECT_EQ(call->body.find("thread"), std::string::npos);
  const json expected = R"({
    "model": "claude-sonnet-4-5",
    "max_tokens": 256,
    "system": [{"type": "text", "text": "You are terse."},
               {"type": "text", "text": "Long document", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    "messages": [
      {"role": "user", "content": [
        {"type": "text", "text": "Hi"},
        {"type": "text", "text": "Question?", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}]},
      {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "cats"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "3 cats"},
        {"type": "text", "text": "Thanks"}]}
    ],
    "tools": [{"name": "lookup", "description": "Search",
               "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}],
    "tool_choice": {"type": "any"},
    "stop_sequences": ["END"],
    "temperature": 0.2, "top_p": 0.9, "top_k": 40,
    "metadata": {"user_id": "u-42"},
    "stream": true
  })"_json;
  EXPECT_EQ(json::parse(call->body), expected) << json::parse(call->body).dump(2);
}

TEST(AnthropicRequestTest, MaxTokensDefaultAndFallback) {
  auto a = Translate({{"messages", {Msg("user", "x")}}});
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ((*a)["max_tokens"], 1000);
  auto b = Translate({{"messages", {Msg("user", "x")}}, {"max_tokens", 64}});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)["max_tokens"], 64);
  auto c = Translate({{"messages", {Msg("user", "x")}}, {"max_tokens", "lots"}});
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(b->contains("stream"));
  EXPECT_FALSE(b->contains("system"));
}

TEST(AnthropicRequestTest, ConsecutiveSameRoleMessagesMergeSoRolesAlternate) {
  auto out = Translate({{"messages",
                         {Msg("user", "a"), Msg("user", "b"), Msg("assistant", "c"),
                          Msg("assistant", "d"), Msg("tool", "r") /* no id -> error below */}}});
  ASSERT_FALSE(out.has_value());  // tool message without tool_call_id
  auto ok = Translate({{"messages",
                        {Msg("user", "a"), Msg("user", "b"), Msg("assistant", "c"),
                         Msg("assistant", "d"), Msg("user", ""), Msg("user", "e")}}});
  ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  const json expected = R"([
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]},
    {"role": "user", "content": [{"type": "text", "text": "e"}]}
  ])"_json;
  EXPECT_EQ((*ok)["messages"], expected);
}

TEST(AnthropicRequestTest, ParallelToolResultsMergeIntoOneUserMessage) {
  json assistant = {
      {"role", "assistant"},
      {"content", nullptr},
      {"tool_calls",
       {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", ""}}}},
        {{"id", "c2"}, {"type", "function"}, {"function", {{"name", "g"}, {"arguments", "{}"}}}}}}};
  auto out = Translate({{"messages",
                         {Msg("user", "go"),
                          assistant,
                          {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "one"}},
                          {{"role", "tool"},
                           {"tool_call_id", "c2"},
                           {"content", {{{"type", "text"}, {"text", "two"}}}}}}}});
  ASSERT_TRUE(out.has_value()) << out.error().ToString();
  const json expected = R"([
    {"role": "user", "content": [{"type": "text", "text": "go"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}},
                                      {"type": "tool_use", "id": "c2", "name": "g", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "one"},
                                 {"type": "tool_result", "tool_use_id": "c2", "content": [{"type": "text", "text": "two"}]}]}
  ])"_json;
  EXPECT_EQ((*out)["messages"], expected);
}

json CachedPart(std::string text) {
  return {{"type", "text"}, {"text", std::move(text)}, {"cache_control", {{"type", "ephemeral"}}}};
}

TEST(AnthropicRequestTest, FourBreakpointsAcceptedFifthRejected) {
  json tool = {{"type", "function"},
               {"function", {{"name", "f"}}},
               {"cache_control", {{"type", "ephemeral"}}}};
  json four = {
      {"tools", {tool}},
      {"messages",
       {Msg("system", {CachedPart("s")}), Msg("user", {CachedPart("a"), CachedPart("b")})}}};
  auto ok = Translate(four);
  ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  EXPECT_EQ((*ok)["tools"][0]["cache_control"], (json{{"type", "ephemeral"}}));
  EXPECT_EQ((*ok)["tools"][0]["input_schema"],
            (json{{"type", "object"}, {"properties", json::object()}}));

  json five = four;
  five["messages"].push_back(
      {{"role", "assistant"}, {"content", "c"}, {"cache_control", {{"type", "ephemeral"}}}});
  auto rejected = Translate(five);
  ASSERT_FALSE(rejected.has_value());
  EXPECT_EQ(rejected.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(rejected.error().message.find("at most 4 cache_control breakpoints"),
            std::string::npos);
  EXPECT_NE(rejected.error().message.find("has 5"), std::string::npos);
}

TEST(AnthropicRequestTest, MessageLevelCacheControlMarksLastBlock) {
  json message = {{"role", "user"},
                  {"content", "long prompt"},
                  {"cache_control", {{"type", "ephemeral"}, {"ttl", "1h"}}}};
  auto out = Translate({{"messages", {message}}});
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ((*out)["messages"][0]["content"],
            (json::array({{{"type", "text"},
                           {"text", "long prompt"},
                           {"cache_control", {{"type", "ephemeral"}, {"ttl", "1h"}}}}})));
}

TEST(AnthropicRequestTest, ToolChoiceFunctionAndParallelCallsOff) {
  json tools = {
      {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}};
  auto a = Translate({{"messages", {Msg("user", "x")}},
                      {"tools", tools},
                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}},
                      {"parallel_tool_calls", false}});
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ((*a)["tool_choice"],
            (json{{"type", "tool"}, {"name", "f"}, {"disable_parallel_tool_use", true}}));
  auto b = Translate({{"messages", {Msg("user", "x")}}, {"tools", tools}, {"tool_choice", "none"}});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)["tool_choice"], (json{{"type", "none"}}));
  auto c = Translate({{"messages", {Msg("user", "x")}}, {"stop", {"a", "b"}}});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ((*c)["stop_sequences"], (json{"a", "b"}));
}

TEST(AnthropicRequestTest, UnsupportedInputsAreClearErrors) {
  struct Case {
    json body;
    std::string needle;
  };
  const Case cases[] = {
      {{{"messages", {Msg("user", "x")}}, {"n", 2}}, "'n'"},
      {{{"messages", {Msg("user", {{{"type", "input_audio"}, {"input_audio", {{"data", "x"}}}}})}}},
       "input_audio"},
      {{{"messages", {Msg("function", "x")}}}, "role 'function'"},
      {{{"messages",
         {Msg("user", {{{"type", "image_url"}, {"image_url", {{"url", "ftp://x"}}}}})}}},
       "image URL"},
      {{{"messages",
         {Msg("user", {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png,raw"}}}}})}}},
       "base64"},
      {{{"messages",
         {Msg("system", {{{"type", "image_url"}, {"image_url", {{"url", "https://x/y.png"}}}}})}}},
       "image_url"},
      {{{"messages",
         {{{"role", "assistant"},
           {"tool_calls", {{{"id", "c"}, {"function", {{"name", "f"}, {"arguments", "[1]"}}}}}}}}}},
       "arguments"},
      {{{"messages", {Msg("user", "x")}}, {"tools", {{{"type", "web_search"}}}}}, "function tools"},
      {{{"messages", {Msg("user", 42)}}}, "content"},
      {{{"messages", {Msg("user", "x")}}, {"stop", 3}}, "stop"},
      // Asked-for features Anthropic lacks are refused, not silently dropped.
      {{{"messages", {Msg("user", "x")}}, {"logprobs", true}}, "'logprobs' is not supported"},
      {{{"messages", {Msg("user", "x")}}, {"top_logprobs", 2}}, "'top_logprobs'"},
      {{{"messages", {Msg("user", "x")}},
        {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}}}}}},
       "'response_format' of type json_schema"},
      {{{"messages", {Msg("user", "x")}}, {"temperature", "hot"}}, "'temperature' must be a number"},
      // Empty texts are left out; a conversation of nothing else is kvgate's error, not Anthropic's.
      {{{"messages", {Msg("system", "be brief"), Msg("user", "")}}},
       "messages: no message with content"},
  };
  for (const Case& c : cases) {
    auto out = Translate(c.body);
    ASSERT_FALSE(out.has_value()) << c.body.dump();
    EXPECT_EQ(out.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(out.error().message.find(c.needle), std::string::npos) << out.error().message;
  }
}

TEST(AnthropicRequestTest, DefaultsOfUnsupportedFeaturesAreAccepted) {
  // What clients send by default must still pass: logprobs false, a text response_format.
  auto out = Translate({{"messages", {Msg("user", "x")}},
                        {"logprobs", false},
                        {"top_logprobs", nullptr},
                        {"response_format", {{"type", "text"}}},
                        {"temperature", nullptr}});
  ASSERT_TRUE(out.has_value()) << out.error().message;
  EXPECT_FALSE(out->contains("logprobs"));
  EXPECT_FALSE(out->contains("response_format"));
}

TEST(AnthropicRequestTest, CompletionsEndpointRejected) {
  CallOptions o = Options();
  o.endpoint = Endpoint::kCompletions;
  auto call = BuildCall(ProviderType::kAnthropic, json{{"model", "m"}, {"prompt", "x"}}, o);
  ASSERT_FALSE(call.has_value());
  EXPECT_EQ(call.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(call.error().message.find("/v1/completions"), std::string::npos);
}

TEST(AnthropicRequestTest, EmptyKeySendsNoApiKeyHeader) {
  auto call = BuildCall(ProviderType::kAnthropic, json{{"messages", {Msg("user", "x")}}},
                                Options(""));
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(HeaderValue(*call, "x-api-key"), "<absent>");
}

TEST(AnthropicResponseTest, MalformedAndErrorBodies) {
  for (std::string_view body :
       {"", "nope", "[]", R"({"type":"message"})", R"({"type":"completion","content":[]})"}) {
    auto t = TranslateResponse(ProviderType::kAnthropic, body, Options());
    ASSERT_FALSE(t.has_value()) << body;
    EXPECT_EQ(t.error().code, ErrorCode::kCorruptData);
  }
  auto e = TranslateResponse(
      ProviderType::kAnthropic,
      R"({"type":"error","error":{"type":"api_error","message":"Internal server error"}})",
      Options());
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(e.error().message.find("Internal server error"), std::string::npos);
}

TEST(AnthropicResponseTest, StopReasonMapping) {
  const std::pair<const char*, const char*> cases[] = {{"end_turn", "stop"},
                                                       {"stop_sequence", "stop"},
                                                       {"max_tokens", "length"},
                                                       {"tool_use", "tool_calls"}};
  for (const auto& [anthropic, openai] : cases) {
    json m = {{"type", "message"},
              {"id", "m"},
              {"model", "c"},
              {"content", {{{"type", "text"}, {"text", "x"}}}},
              {"stop_reason", anthropic},
              {"usage", {{"input_tokens", 1}, {"output_tokens", 1}}}};
    auto t = TranslateResponse(ProviderType::kAnthropic, m.dump(), Options());
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->finish_reason, openai);
    EXPECT_EQ(json::parse(t->body)["choices"][0]["finish_reason"], openai);
  }
}

// Long message texts skip the translation's tree (anthropic_texts.cc): the body sent upstream must
// equal what the tree-only translation gives, for texts in every place the translation copies
// them, with escapes as the client wrote them, next to short texts, and next to client text that
// imitates a placeholder.
TEST(AnthropicRequestTest, LongTextsSetAsideGiveTheSameBody) {
  auto text = [](size_t n, std::string_view flavor) {
    std::string t(flavor);
    while (t.size() < n) t += " filler";
    return "\"" + t + "\"";
  };
  const std::string tricky = R"(say \"hi\"\n\u00e9 é \ud83d\ude00 a\/b \\ \u0001kv0123456789abcdef.0\u0001)";
  std::mt19937 rng(11);
  for (int round = 0; round < 40; ++round) {
    auto len = [&] { return size_t{50} + rng() % 40; };  // around the 64-byte threshold
    const std::string doc =
        R"({"model":"claude","max_tokens":50,"stream":true,"messages":[)"
        R"({"role":"system","content":)" + text(len(), tricky) + "}," +
        R"({"role":"developer","content":[{"type":"text","text":)" + text(len(), "dev") + "}]}," +
        R"({"role":"user","content":)" + text(len(), "u1") + R"(,"content":)" + text(len(), tricky) + "}," +
        R"({"role":"assistant","content":)" + text(len(), "a1") +
        R"(,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},)" +
        R"({"role":"tool","tool_call_id":"c1","content":)" + text(len(), tricky) + "}," +
        R"({"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":)" + text(len(), "tr") + "}]}," +
        R"({"role":"user","content":[{"type":"text","text":)" + text(len(), tricky) +
        R"(,"cache_control":{"type":"ephemeral"}},{"type":"text","text":"short"}]},)" +
        R"({"role":"user","content":"x"}]})";
    const raw_json::Value parsed = raw_json::Parse(doc).value();
    auto fast = BuildUpstreamCall(ProviderType::kAnthropic, raw_json::Object(parsed), Options());
    auto slow = internal::BuildAnthropicCall(json::parse(doc), Options());
    ASSERT_TRUE(fast.has_value()) << fast.error().message;
    ASSERT_TRUE(slow.has_value()) << slow.error().message;
    ASSERT_EQ(json::parse(fast->body), json::parse(slow->body)) << doc << "\n" << fast->body;
    // The client's look-alike placeholder is client text: it reaches Anthropic as written.
    EXPECT_NE(fast->body.find(R"(\u0001kv0123456789abcdef.0\u0001)"), std::string::npos);
  }
  // Nothing set aside when every text is short: the same body byte for byte.
  const std::string small = R"({"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})";
  auto fast = BuildUpstreamCall(ProviderType::kAnthropic,
                                raw_json::Object(raw_json::Parse(small).value()), Options());
  auto slow = internal::BuildAnthropicCall(json::parse(small), Options());
  ASSERT_TRUE(fast && slow);
  EXPECT_EQ(fast->body, slow->body);
}

std::string Event(std::string_view name, std::string_view data) {
  return "event: " + std::string(name) + "\ndata: " + std::string(data) + "\n\n";
}

const std::string kStart = Event(
    "message_start",
    R"({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",)"
    R"("content":[],"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,)"
    R"("cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":1}}})");

TEST(AnthropicStreamTest, CumulativeUsageTakesTheLastValueNeverTheSum) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(true));
  const std::string stream =
      kStart +
      Event(
          "content_block_delta",
          R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}})") +
      Event(
          "message_delta",
          R"({"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":10}})") +
      Event(
          "message_delta",
          R"({"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":25,)"
          R"("input_tokens":12,"cache_read_input_tokens":null}})") +
      Event("message_stop", R"({"type":"message_stop"})");
  auto r = RunStream(*t, stream);
  EXPECT_EQ(t->usage().output, 25);
  EXPECT_EQ(t->usage().uncached, 12);  // newer API: message_delta repeats input counts; last wins
  EXPECT_EQ(t->usage().cache_read, 1000);  // a null never erases a known value
  EXPECT_EQ(t->usage().cache_write_5m, 100);
  EXPECT_EQ(t->usage().cache_write_1h, 0);
  EXPECT_EQ(t->finish_reason(), "length");
  EXPECT_NE(r.bytes.find(R"("finish_reason":"length"}]})"), std::string::npos);
  EXPECT_NE(
      r.bytes.find(
          R"("choices":[],"usage":{"prompt_tokens":1112,"completion_tokens":25,"total_tokens":1137,)"
          R"("prompt_tokens_details":{"cached_tokens":1000,"cache_write_tokens":100}}})"),
      std::string::npos)
      << r.bytes;
  EXPECT_TRUE(r.bytes.ends_with("data: [DONE]\n\n"));
}

// Text and thinking deltas are read from their bytes; each becomes one OpenAI chunk whose delta
// decodes to the upstream's text, escapes and non-ASCII included. Deltas this reader does not
// vouch for (an escaped type name, a text that is not a string, an empty text) take the parsed
// path and give what it gives.
TEST(AnthropicStreamTest, TextAndThinkingDeltasKeepTheirText) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(false));
  auto delta = [](std::string_view type, std::string_view field, std::string_view text) {
    return Event("content_block_delta", R"({"type":"content_block_delta","index":0,"delta":{"type":")" +
                                            std::string(type) + R"(",")" + std::string(field) +
                                            R"(":)" + std::string(text) + "}}");
  };
  const std::string stream =
      kStart + delta("text_delta", "text", R"("say \"hi\"\n\u00e9 é \ud83d\ude00")") +
      delta("thinking_delta", "thinking", R"("hmm")") + delta("text_delta", "text", R"("")") +
      delta("text_delta", "text", "7") +
      Event("content_block_delta",
            R"({"type":"content_block_d\u0065lta","index":0,"delta":{"type":"text_delta","text":"esc"}})") +
      Event("content_block_delta",
            R"({ "index" : 0 , "delta" : { "text" : "spaced" , "type" : "text_delta" } , "type" : "content_block_delta" })") +
      Event("message_stop", R"({"type":"message_stop"})");
  auto r = RunStream(*t, stream);
  std::vector<json> deltas;
  size_t pos = 0;
  while ((pos = r.bytes.find("data: {", pos)) != std::string::npos) {
    const size_t end = r.bytes.find("\n\n", pos);
    const json chunk = json::parse(r.bytes.substr(pos + 6, end - pos - 6));
    deltas.push_back(chunk["choices"][0]["delta"]);
    pos = end;
  }
  ASSERT_EQ(deltas.size(), 5u) << r.bytes;  // role, text, thinking, the escaped type, spaced
  EXPECT_EQ(deltas[1], json({{"content", "say \"hi\"\n\xc3\xa9 \xc3\xa9 \xf0\x9f\x98\x80"}}));
  EXPECT_EQ(deltas[2], json({{"reasoning_content", "hmm"}}));
  EXPECT_EQ(deltas[3], json({{"content", "esc"}}));  // parsed path: the decoded type matches
  EXPECT_EQ(deltas[4], json({{"content", "spaced"}}));
  EXPECT_TRUE(r.bytes.ends_with("data: [DONE]\n\n"));
}

// The tool_calls[].function.arguments a client accumulates from a translated stream, by index.
std::map<int, std::string> ToolArguments(const std::string& bytes) {
  std::map<int, std::string> args;
  size_t at = 0;
  while ((at = bytes.find("data: {", at)) != std::string::npos) {
    const size_t end = bytes.find("\n\n", at);
    const json chunk = json::parse(bytes.substr(at + 6, end - at - 6));
    at = end;
    if (!chunk.contains("choices")) continue;
    for (const json& choice : chunk["choices"]) {
      const json& delta = choice["delta"];
      if (!delta.contains("tool_calls")) continue;
      for (const json& call : delta["tool_calls"]) {
        std::string& a = args[call["index"].get<int>()];
        if (call.contains("function") && call["function"].contains("arguments")) {
          a += call["function"]["arguments"].get<std::string>();
        }
      }
    }
  }
  return args;
}

TEST(AnthropicStreamTest, ToolCallWithoutArgumentsGetsAnEmptyObject) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(false));
  auto tool_start = [](int index, std::string_view id) {
    return Event("content_block_start",
                 R"({"type":"content_block_start","index":)" + std::to_string(index) +
                     R"(,"content_block":{"type":"tool_use","id":")" + std::string(id) +
                     R"(","name":"now","input":{}}})");
  };
  auto json_delta = [](int index, std::string_view partial) {
    return Event("content_block_delta",
                 R"({"type":"content_block_delta","index":)" + std::to_string(index) +
                     R"(,"delta":{"type":"input_json_delta","partial_json":)" +
                     json(std::string(partial)).dump() + "}}");
  };
  auto stop = [](int index) {
    return Event("content_block_stop",
                 R"({"type":"content_block_stop","index":)" + std::to_string(index) + "}");
  };
  // Block 0: a call with no arguments (Anthropic streams one empty partial_json); block 1: a
  // call with arguments, which must come out exactly as streamed, with nothing added.
  const std::string stream =
      kStart + tool_start(0, "toolu_a") + json_delta(0, "") + stop(0) + tool_start(1, "toolu_b") +
      json_delta(1, R"({"tz":)") + json_delta(1, R"("UTC"})") + stop(1) +
      Event("message_delta",
            R"({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}})") +
      Event("message_stop", R"({"type":"message_stop"})");
  auto r = RunStream(*t, stream);
  const std::map<int, std::string> args = ToolArguments(r.bytes);
  ASSERT_EQ(args.size(), 2u) << r.bytes;
  EXPECT_EQ(args.at(0), "{}");
  EXPECT_EQ(args.at(1), R"({"tz":"UTC"})");
  EXPECT_EQ(t->finish_reason(), "tool_calls");
}

TEST(AnthropicStreamTest, AnEmptyDataFieldIsSkipped) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(false));
  auto r = RunStream(*t, kStart + "data:\n\n" +
                             Event("content_block_delta",
                                   R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}})") +
                             Event("message_stop", R"({"type":"message_stop"})"));
  EXPECT_TRUE(t->completed());
  EXPECT_FALSE(t->client_error().has_value()) << r.bytes;
}

TEST(AnthropicStreamTest, CutBeforeMessageStopGivesErrorEvent) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(false));
  auto out = t->Feed(kStart);
  EXPECT_FALSE(out.has_content);
  EXPECT_EQ(
      t->Finish(true),
      "data: {\"error\":{\"code\":\"stream_incomplete\",\"message\":\"upstream stream ended before "
      "message_stop\",\"param\":null,\"type\":\"upstream_error\"}}\n\n");
  EXPECT_FALSE(t->completed());
  EXPECT_EQ(t->usage().uncached, 10);  // what was seen is kept for telemetry
}

TEST(AnthropicStreamTest, MalformedEventBecomesOneErrorEvent) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(false));
  auto out = t->Feed(
      kStart + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\n\n" + kStart);
  const size_t error_at = out.bytes.find("data: {\"error\":");
  ASSERT_NE(error_at, std::string::npos);
  EXPECT_NE(out.bytes.find("malformed JSON", error_at), std::string::npos);
  EXPECT_TRUE(out.bytes.ends_with("}}\n\n"));
  EXPECT_EQ(out.bytes.find("data: {\"error\":", error_at + 1), std::string::npos);
  EXPECT_EQ(t->Feed(kStart).bytes, "");
  EXPECT_EQ(t->Finish(true), "");
}

TEST(AnthropicStreamTest, ThinkingDeltaBecomesReasoningContent) {
  auto t = NewStreamTranslator(ProviderType::kAnthropic, StreamOptions(false));
  t->Feed(kStart);
  auto out = t->Feed(
      Event(
          "content_block_delta",
          R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}})") +
      Event("ping", R"({"type":"ping"})"));
  EXPECT_TRUE(out.has_content);
  EXPECT_EQ(out.bytes,
            "data: "
            "{\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1754000000,"
            "\"model\":\"claude-x\","
            "\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hmm\"},\"logprobs\":null,"
            "\"finish_reason\":null}]}\n\n");
}

}  // namespace
}  // namespace kvgate::providers
