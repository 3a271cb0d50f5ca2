// The built-in engine's request adapter (engine_request.h): an OpenAI body -> sampling
// parameters, constraint, n, logprobs and prompt text, or the 400 naming the field; the context
// check and the default max_tokens.
#include "gateway/engine_request.h"

#include <gtest/gtest.h>

namespace kvgate::gateway {
namespace {

using nlohmann::json;
using providers::Endpoint;

const engine::ChatTemplate kChatMl{.kind = engine::ChatTemplateKind::kChatMl,
                                   .default_system = "You are helpful."};

std::expected<EngineCall, providers::ClientError> Chat(const std::string& extra,
                                                       int32_t max_choices = 4) {
  return EngineCallFrom(R"({"model":"m","messages":[{"role":"user","content":"hi"}])" + extra + "}",
                        Endpoint::kChatCompletions,
                        {.chat_template = &kChatMl, .max_choices = max_choices});
}

std::expected<EngineCall, providers::ClientError> Completion(const std::string& body) {
  return EngineCallFrom(body, Endpoint::kCompletions, {.chat_template = &kChatMl});
}

// The 400's error object, or null when the call succeeded.
json ErrorOf(const std::expected<EngineCall, providers::ClientError>& r) {
  if (r) return nullptr;
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().body["error"]["type"], "invalid_request_error");
  return r.error().body["error"];
}

TEST(EngineRequestTest, ChatDefaultsAndTheRenderedPrompt) {
  auto r = Chat("");
  ASSERT_TRUE(r.has_value()) << r.error().body.dump();
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.0f);  // OpenAI's default, not the engine's greedy
  EXPECT_EQ(r->sampling.logprobs, -1);
  EXPECT_EQ(r->sampling.json_grammar, nullptr);
  EXPECT_EQ(r->n, 1);
  EXPECT_FALSE(r->tools);
  EXPECT_FALSE(r->asked_max);
  // ChatML, the template's default system message first, the generation prompt last.
  EXPECT_EQ(r->prompt,
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(EngineRequestTest, ReadsSamplingFields) {
  auto r = Chat(R"(,"temperature":0.5,"top_p":0.9,"top_k":40,"seed":7,"stop":["x","y"],)"
                R"("max_tokens":12,"n":3,"logprobs":true,"top_logprobs":2,"kvgate_thread_id":"t")");
  ASSERT_TRUE(r.has_value()) << r.error().body.dump();
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_EQ(r->sampling.seed, 7u);
  EXPECT_EQ(r->sampling.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r->sampling.max_tokens, 12);
  EXPECT_TRUE(r->asked_max);
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->sampling.logprobs, 2);
}

TEST(EngineRequestTest, RefusesWhatTheEngineDoesNotDo) {
  json e = ErrorOf(Chat(R"(,"logit_bias":{"50256":-100})"));
  EXPECT_EQ(e["code"], "unsupported_parameter");
  EXPECT_EQ(e["param"], "logit_bias");
  EXPECT_EQ(e["message"], "'logit_bias' is not supported by the built-in engine");
  // Tools are for chat; on completions they are refused, and empty values ask for nothing.
  e = ErrorOf(Completion(R"({"prompt":"hi","tools":[{"type":"function"}]})"));
  EXPECT_EQ(e["param"], "tools");
  EXPECT_TRUE(Chat(R"(,"functions":[],"tool_choice":"none")").has_value());
}

TEST(EngineRequestTest, FieldErrorsNameTheField) {
  EXPECT_EQ(ErrorOf(Chat(R"(,"n":5)"))["param"], "n");  // above max_choices
  EXPECT_EQ(ErrorOf(Chat(R"(,"n":0)"))["param"], "n");
  EXPECT_EQ(ErrorOf(Chat(R"(,"top_logprobs":3)"))["param"], "top_logprobs");  // needs logprobs
  EXPECT_EQ(ErrorOf(Chat(R"(,"logprobs":"yes")"))["param"], "logprobs");
  EXPECT_EQ(ErrorOf(Chat(R"(,"response_format":{"type":"xml"})"))["param"], "response_format.type");
  EXPECT_EQ(ErrorOf(Chat(R"(,"response_format":{"type":"json_schema","json_schema":{}})"))["param"],
            "response_format.json_schema.name");
  // Sampling errors carry no param (the message names the field).
  json e = ErrorOf(Chat(R"(,"temperature":"hot")"));
  EXPECT_EQ(e["code"], "invalid_request");
  EXPECT_EQ(e["message"], "temperature must be a number");
  EXPECT_EQ(ErrorOf(Chat(R"(,"max_tokens":0)"))["message"], "max_tokens must be >= 1");
  EXPECT_EQ(ErrorOf(Chat(R"(,"presence_penalty":3)"))["message"],
            "presence_penalty must be between -2 and 2");
  EXPECT_EQ(ErrorOf(Completion(R"({"prompt":["a","b"]})"))["param"], "prompt");
  EXPECT_EQ(ErrorOf(EngineCallFrom("[1]", Endpoint::kChatCompletions,
                                   {.chat_template = &kChatMl}))["code"],
            "invalid_json");
}

TEST(EngineRequestTest, AConstraintFromResponseFormatOrTools) {
  auto object = Chat(R"(,"response_format":{"type":"json_object"})");
  ASSERT_TRUE(object.has_value());
  EXPECT_NE(object->sampling.json_grammar, nullptr);
  const std::string tool =
      R"(,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  auto tools = Chat(tool);
  ASSERT_TRUE(tools.has_value()) << tools.error().body.dump();
  EXPECT_TRUE(tools->tools);
  EXPECT_NE(tools->sampling.json_grammar, nullptr);
  EXPECT_NE(tools->prompt.find("\"f\""), std::string::npos) << tools->prompt;  // the tool prompt
  EXPECT_EQ(ErrorOf(Chat(tool + R"(,"response_format":{"type":"json_object"})"))["param"],
            "response_format");
  auto none = Chat(tool + R"(,"tool_choice":"none")");
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->tools);
  EXPECT_EQ(none->sampling.json_grammar, nullptr);
}

TEST(EngineRequestTest, CompletionsTakeTheRawPrompt) {
  auto r = Completion(R"({"prompt":"Once upon","logprobs":3,"max_completion_tokens":5})");
  ASSERT_TRUE(r.has_value()) << r.error().body.dump();
  EXPECT_EQ(r->prompt, "Once upon");
  EXPECT_EQ(r->sampling.logprobs, 3);
  EXPECT_EQ(r->sampling.max_tokens, 5);
  EXPECT_EQ(ErrorOf(Completion(R"({"prompt":"x","top_logprobs":1})"))["param"], "top_logprobs");
}

TEST(EngineRequestTest, FitToContext) {
  auto unasked = Chat("");
  ASSERT_TRUE(unasked.has_value());
  ASSERT_TRUE(FitToContext(*unasked, Endpoint::kChatCompletions, 100, 2048, 0).has_value());
  EXPECT_EQ(unasked->sampling.max_tokens, 1948);  // to the end of the context
  ASSERT_TRUE(FitToContext(*unasked, Endpoint::kChatCompletions, 100, 2048, 64).has_value());
  EXPECT_EQ(unasked->sampling.max_tokens, 64);  // the provider's default bound
  auto full = FitToContext(*unasked, Endpoint::kChatCompletions, 2048, 2048, 0);
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().body["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(full.error().body["error"]["param"], "messages");
  EXPECT_EQ(full.error().body["error"]["message"],
            "This model's maximum context length is 2048 tokens. However, your messages resulted "
            "in 2048 tokens, which leaves no room for a completion. Please reduce the length of "
            "the messages.");
  auto asked = Completion(R"({"prompt":"x","max_tokens":100})");
  ASSERT_TRUE(asked.has_value());
  auto over = FitToContext(*asked, Endpoint::kCompletions, 2000, 2048, 0);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().body["error"]["param"], "prompt");
  EXPECT_NE(over.error().body["error"]["message"].get<std::string>().find(
                "you requested 2100 tokens (2000 in the prompt, 100 in the completion)"),
            std::string::npos);
  ASSERT_TRUE(FitToContext(*asked, Endpoint::kCompletions, 1948, 2048, 0).has_value());
  EXPECT_EQ(asked->sampling.max_tokens, 100);  // an explicit max_tokens is kept
}

TEST(EngineRequestTest, ThePromptAloneMatchesTheCall) {
  const json body = json::parse(R"({"messages":[{"role":"user","content":"hi"}],"n":99})");
  auto text = EnginePromptOf(body, /*chat=*/true, kChatMl);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, Chat("")->prompt);  // sampling fields (an n too large) do not matter
  EXPECT_EQ(*EnginePromptOf(json{{"prompt", "abc"}}, false, kChatMl), "abc");
  EXPECT_EQ(EnginePromptOf(json{{"prompt", 1}}, false, kChatMl).error().param, "prompt");
}

}  // namespace
}  // namespace kvgate::gateway
