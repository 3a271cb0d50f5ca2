// Fuzz-ish robustness: mutated golden inputs and random JSON never crash or throw, and what the
// client receives is always well-formed (every SSE data payload is [DONE] or valid JSON, and a
// stream that did not complete ends with an error event).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "gateway/providers/provider.h"
#include "gateway/providers/sse.h"
#include "tests/providers/test_util.h"

namespace kvgate::providers {
namespace {

using nlohmann::json;
using testing_util::BuildCall;
using testing_util::WantsUsage;
using testing_util::ReadGolden;
using testing_util::StreamOptions;

std::string Mutate(std::string s, std::mt19937& rng) {
  static const std::vector<std::string> kInserts = {
      "\n\n", "\r", "\n",   "data: ", "event: error\n", "{",  "}",
      "\"",   ":",  "null", "[DONE]", "\xff",           "\\", "\"usage\":"};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !s.empty(); ++i) {
    const size_t at = rng() % s.size();
    switch (rng() % 4) {
      case 0:
        s[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
        s.erase(at, 1 + rng() % 16);
        break;
      case 2:
        s.insert(at, kInserts[rng() % kInserts.size()]);
        break;
      case 3:
        s.resize(at);
        break;
    }
  }
  return s;
}

// Checks what a client would parse out of `bytes`.
void ExpectWellFormedClientStream(const std::string& bytes, const StreamTranslator& t,
                                  const std::string& input) {
  SseParser parser;
  parser.Append(bytes);
  parser.EndOfInput();
  int errors = 0;
  while (true) {
    auto next = parser.Next();
    ASSERT_TRUE(next.has_value());
    if (!next->has_value()) break;
    const SseEvent& e = **next;
    if (!e.has_data) continue;
    if (e.data == "[DONE]") continue;
    const json parsed = json::parse(e.data, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded())
        << "client got invalid JSON: " << testing::PrintToString(std::string(e.data))
        << "\ninput: " << testing::PrintToString(input);
    if (parsed.is_object() && parsed.contains("error")) ++errors;
  }
  if (!bytes.empty()) {
    EXPECT_TRUE(bytes.ends_with("\n\n") || bytes.ends_with("\r\n\r\n") || bytes.ends_with("\r\r"))
        << testing::PrintToString(bytes);
  }
  if (t.completed()) {
    EXPECT_EQ(errors, 0);
  } else {
    EXPECT_EQ(errors, 1) << "an unfinished stream ends with exactly one error event; input: "
                         << testing::PrintToString(input)
                         << "\noutput: " << testing::PrintToString(bytes);
    EXPECT_TRUE(t.client_error().has_value());
  }
}

TEST(FuzzTest, MutatedStreamsInRandomPieces) {
  const std::vector<std::pair<ProviderType, const char*>> cases = {
      {ProviderType::kOpenAI, "openai_stream_include_usage.sse"},
      {ProviderType::kGeminiOpenAI, "gemini_openai_stream_usage_in_choices.sse"},
      {ProviderType::kLlamaCpp, "llamacpp_stream.sse"},
      {ProviderType::kOpenRouter, "openrouter_stream.sse"},
      {ProviderType::kAnthropic, "anthropic_stream.sse"},
      {ProviderType::kAnthropic, "anthropic_stream_error.sse"},
  };
  std::mt19937 rng(12345);
  for (const auto& [type, file] : cases) {
    const std::string golden = ReadGolden(file);
    for (int iter = 0; iter < 400; ++iter) {
      const std::string input = Mutate(golden, rng);
      auto t = NewStreamTranslator(type, StreamOptions(rng() % 2 == 0));
      std::string bytes;
      for (size_t i = 0; i < input.size();) {
        const size_t n = 1 + rng() % 64;
        bytes += t->Feed(std::string_view(input).substr(i, n)).bytes;
        i += n;
      }
      const bool eof = rng() % 4 != 0;
      bytes += t->Finish(eof, eof ? "" : "reset");
      ExpectWellFormedClientStream(bytes, *t, input);
      if (HasFatalFailure() || HasFailure()) return;
    }
  }
}

// Responses API streams pass events through: what ends one badly is a response.failed or error
// event from the upstream, or kvgate's own error event (a malformed or cut stream) — exactly one.
TEST(FuzzTest, MutatedResponsesApiStreamsInRandomPieces) {
  std::mt19937 rng(4242);
  CallOptions o;
  o.endpoint = Endpoint::kResponses;
  o.stream = true;
  for (const char* file : {"openai_responses_stream.sse", "openai_responses_stream_failed.sse",
                           "openai_responses_stream_incomplete.sse"}) {
    const std::string golden = ReadGolden(file);
    for (int iter = 0; iter < 400; ++iter) {
      const std::string input = Mutate(golden, rng);
      auto t = NewStreamTranslator(ProviderType::kOpenAI, o);
      std::string bytes;
      for (size_t i = 0; i < input.size();) {
        const size_t n = 1 + rng() % 64;
        bytes += t->Feed(std::string_view(input).substr(i, n)).bytes;
        i += n;
      }
      const bool eof = rng() % 4 != 0;
      bytes += t->Finish(eof, eof ? "" : "reset");
      SseParser parser;
      parser.Append(bytes);
      parser.EndOfInput();
      int errors = 0;
      while (true) {
        auto next = parser.Next();
        ASSERT_TRUE(next.has_value());
        if (!next->has_value()) break;
        const SseEvent& e = **next;
        if (!e.has_data) continue;
        const json parsed = json::parse(e.data, nullptr, false);
        ASSERT_FALSE(parsed.is_discarded()) << testing::PrintToString(input);
        if (!parsed.is_object()) continue;
        const auto error = parsed.find("error");
        std::string type = parsed.value("type", json()).is_string()
                               ? parsed["type"].get<std::string>() : "";
        if (type.empty()) type = std::string(e.event);  // as the translator names the event
        if ((error != parsed.end() && !error->is_null()) || type == "error" ||
            type == "response.failed") {
          ++errors;
        }
      }
      EXPECT_EQ(errors, t->completed() ? 0 : 1) << testing::PrintToString(input) << "\n"
                                                << testing::PrintToString(bytes);
      EXPECT_EQ(t->completed(), !t->client_error().has_value());
      if (HasFailure()) return;
    }
  }
}

TEST(FuzzTest, MutatedResponsesAndErrorBodies) {
  const std::vector<std::pair<ProviderType, const char*>> cases = {
      {ProviderType::kOpenAI, "openai_chat.json"},
      {ProviderType::kDeepSeek, "deepseek_chat.json"},
      {ProviderType::kVllm, "vllm_chat_with_details.json"},
      {ProviderType::kSglang, "sglang_chat.json"},
      {ProviderType::kLlamaCpp, "llamacpp_chat.json"},
      {ProviderType::kAnthropic, "anthropic_message.json"},
      {ProviderType::kAnthropic, "anthropic_message_tool_use.json"},
      {ProviderType::kOpenAI, "openai_responses.json"},
      {ProviderType::kOpenAI, "openai_embeddings.json"},
  };
  std::mt19937 rng(777);
  CallOptions o;
  o.created = 1;
  for (const auto& [type, file] : cases) {
    const std::string golden = ReadGolden(file);
    const std::string_view name(file);
    o.endpoint = name.find("responses") != name.npos    ? Endpoint::kResponses
                 : name.find("embeddings") != name.npos ? Endpoint::kEmbeddings
                                                        : Endpoint::kChatCompletions;
    for (int iter = 0; iter < 400; ++iter) {
      const std::string input = Mutate(golden, rng);
      auto t = TranslateResponse(type, input, o);
      if (t.has_value()) {
        EXPECT_FALSE(json::parse(t->body, nullptr, false).is_discarded()) << input;
      } else {
        EXPECT_FALSE(t.error().message.empty());
      }
      ClientError e = TranslateUpstreamError(type, 400 + static_cast<int>(rng() % 200), input);
      EXPECT_NO_THROW((void)e.body.dump()) << input;
    }
  }
}

// Random JSON built from the vocabulary of chat requests, so that the translators' type checks are
// hit.
json RandomValue(std::mt19937& rng, int depth);

json RandomObject(std::mt19937& rng, int depth) {
  static const std::vector<std::string> kKeys = {"model",
                                                 "messages",
                                                 "role",
                                                 "content",
                                                 "type",
                                                 "text",
                                                 "image_url",
                                                 "url",
                                                 "tool_calls",
                                                 "function",
                                                 "name",
                                                 "arguments",
                                                 "tool_call_id",
                                                 "tools",
                                                 "parameters",
                                                 "tool_choice",
                                                 "cache_control",
                                                 "stop",
                                                 "max_tokens",
                                                 "max_completion_tokens",
                                                 "n",
                                                 "user",
                                                 "metadata",
                                                 "thread_id",
                                                 "thread_identifier",
                                                 "stream_options",
                                                 "include_usage",
                                                 "temperature",
                                                 "refusal",
                                                 "id",
                                                 "parallel_tool_calls"};
  json obj = json::object();
  const int n = static_cast<int>(rng() % 5);
  for (int i = 0; i < n; ++i) obj[kKeys[rng() % kKeys.size()]] = RandomValue(rng, depth + 1);
  return obj;
}

json RandomValue(std::mt19937& rng, int depth) {
  static const std::vector<std::string> kStrings = {"user",
                                                    "assistant",
                                                    "system",
                                                    "tool",
                                                    "developer",
                                                    "text",
                                                    "image_url",
                                                    "function",
                                                    "auto",
                                                    "required",
                                                    "none",
                                                    "data:image/png;base64,AA==",
                                                    "https://x/y.png",
                                                    "{}",
                                                    "{\"a\":1}",
                                                    "",
                                                    "[1]",
                                                    "ephemeral"};
  switch (depth > 4 ? rng() % 4 : rng() % 7) {
    case 0:
      return nullptr;
    case 1:
      return static_cast<int>(rng() % 10) - 2;
    case 2:
      return kStrings[rng() % kStrings.size()];
    case 3:
      return rng() % 2 == 0;
    case 4:
    case 5:
      return RandomObject(rng, depth);
    default: {
      json arr = json::array();
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) arr.push_back(RandomValue(rng, depth + 1));
      return arr;
    }
  }
}

TEST(FuzzTest, RandomRequestsNeverThrowAndSucceedWithValidJson) {
  std::mt19937 rng(4242);
  const ProviderType types[] = {ProviderType::kAnthropic, ProviderType::kOpenAI,
                                ProviderType::kLlamaCpp};
  for (int iter = 0; iter < 3000; ++iter) {
    json body = RandomObject(rng, 0);
    if (rng() % 2 == 0) {
      json messages = json::array();
      const int n = static_cast<int>(rng() % 5);
      for (int i = 0; i < n; ++i) messages.push_back(RandomObject(rng, 1));
      body["messages"] = messages;
    }
    CallOptions o;
    o.stream = rng() % 2 == 0;
    const unsigned pick = rng() % 8;
    o.endpoint = pick == 0   ? Endpoint::kCompletions
                 : pick == 1 ? Endpoint::kResponses
                 : pick == 2 ? Endpoint::kEmbeddings
                             : Endpoint::kChatCompletions;
    for (ProviderType type : types) {
      auto call = BuildCall(type, body, o);
      if (call.has_value()) {
        const json sent = json::parse(call->body, nullptr, false);
        ASSERT_FALSE(sent.is_discarded());
        EXPECT_FALSE(sent.contains("thread_identifier")) << body.dump();
        if (sent.contains("metadata") && sent["metadata"].is_object()) {
          EXPECT_FALSE(sent["metadata"].contains("thread_id")) << body.dump();
        }
      } else {
        EXPECT_NE(call.error().code, ErrorCode::kInternal) << call.error().message;
      }
    }
  }
}

}  // namespace
}  // namespace kvgate::providers
