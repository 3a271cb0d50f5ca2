// Each client API (gateway/api/) against a fake Upstream behind a real gateway (gateway_harness.h):
// what the upstream is asked on each wire (the client's body passed through, or its chat
// translation), what the client gets back (as sent, or told in its own API), streamed and not,
// and what is recorded.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "tests/gateway/gateway_harness.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

// What one attempt was asked.
struct Asked {
  std::string target;
  providers::Endpoint endpoint;  // on the upstream's wire
  std::string body;              // the bytes the upstream got
  bool stream = false;
  std::string anthropic_version;
};

// The chat answer of the fake ("Hello there"), whole or as a chat.completion.chunk stream.
std::string ChatAnswer() {
  return R"({"id":"chatcmpl-fake1","object":"chat.completion","created":1,"model":"m",)"
         R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},)"
         R"("finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,)"
         R"("total_tokens":11}})";
}
std::vector<std::string> ChatEvents() {
  auto chunk = [](const std::string& delta, const std::string& finish) {
    return R"(data: {"id":"chatcmpl-fake1","object":"chat.completion.chunk","created":1,)"
           R"("model":"m","choices":[{"index":0,"delta":)" +
           delta + R"(,"finish_reason":)" + finish + "}]}\n\n";
  };
  return {chunk(R"({"role":"assistant","content":"Hello"})", "null"),
          chunk(R"({"content":" there"})", "null"), chunk("{}", "\"stop\""),
          R"(data: {"id":"chatcmpl-fake1","object":"chat.completion.chunk","created":1,)"
          R"("model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,)"
          R"("total_tokens":11}})"
          "\n\n",
          "data: [DONE]\n\n"};
}

// Answers in the wire's own format what the attempt asks for: chat (whole or streamed), or the
// pass-through APIs' native answers; the id a remote upstream would read is set on the record.
class WireFake final : public Upstream {
 public:
  std::vector<Asked> asked() const {
    std::lock_guard lock(mu_);
    return asked_;
  }

  asio::awaitable<AttemptResult> Attempt(const InferenceCall& call, const AttemptPlan& plan,
                                         ClientStream& client) override {
    {
      std::lock_guard lock(mu_);
      asked_.push_back({plan.target->name, plan.options.endpoint,
                        std::string(call.body.value().text), call.stream,
                        plan.options.anthropic_version});
    }
    AttemptResult answered;
    answered.answered = true;
    client.record().usage.uncached = 9;
    client.record().usage.output = 2;
    client.record().usage.cache_read = 0;
    client.record().usage.cache_write_5m = 0;
    client.record().usage.cache_write_1h = 0;
    client.record().usage.cache_write_no_ttl = 0;
    std::vector<std::string> events;
    std::string whole;
    switch (plan.options.endpoint) {
      case providers::Endpoint::kChatCompletions:
      case providers::Endpoint::kCompletions:
        whole = ChatAnswer();
        events = ChatEvents();
        client.record().response_id = "chatcmpl-fake1";
        break;
      case providers::Endpoint::kEmbeddings:
        whole = R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}]})";
        break;
      case providers::Endpoint::kResponses:
        whole = R"({"id":"resp_native1","object":"response","status":"completed","output":[]})";
        events = {
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":"
            "{\"id\":\"resp_native1\"}}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n"};
        client.record().response_id = "resp_native1";
        break;
      case providers::Endpoint::kMessages:
        whole = R"({"id":"msg_native1","type":"message","role":"assistant","content":[]})";
        events = {"event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
                  "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"};
        client.record().response_id = "msg_native1";
        break;
    }
    if (!call.stream) {
      co_await client.SendAnswer(std::move(whole));
      co_return answered;
    }
    if (!co_await client.BeginStream()) co_return answered;
    for (const std::string& e : events) {
      if (!co_await client.Write(e)) co_return answered;
    }
    co_await client.EndStream();
    co_return answered;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Asked> asked_;
};

constexpr char kConfig[] = R"(
server: {listen: 127.0.0.1:0}
providers:
  - {name: po, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: a}
  - {name: pa, type: anthropic, base_url: "http://127.0.0.1:9", api_key: b}
models:
  - {name: gpt, provider: po, upstream_model: gpt-4o-mini}
  - {name: claude, provider: pa, upstream_model: claude-sonnet-4-5}
)";

class ClientApisTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(gateway_.Start(kConfig, fake_)); }

  ::kvgate::testing::RawResponse Post(const std::string& path, const json& body,
                                      const std::string& headers = "") {
    return gateway_.Post(path, body.dump(), headers);
  }
  Asked LastAsked() {
    auto asked = fake_.asked();
    EXPECT_FALSE(asked.empty());
    return asked.empty() ? Asked{} : asked.back();
  }

  WireFake fake_;
  gateway::testing::GatewayHarness gateway_;
};

json ChatBody(const std::string& model, bool stream) {
  return {
      {"model", model}, {"stream", stream}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
}

TEST_F(ClientApisTest, ChatPassesThroughOnEveryWireWholeAndStreamed) {
  for (const char* model : {"gpt", "claude"}) {
    SCOPED_TRACE(model);
    const json body = ChatBody(model, false);
    auto r = Post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, ChatAnswer());
    Asked asked = LastAsked();
    EXPECT_EQ(asked.endpoint, providers::Endpoint::kChatCompletions);
    EXPECT_EQ(asked.body, body.dump()) << "the client's bytes, passed through";
    json row = gateway_.Stored(r.header("x-request-id"));
    EXPECT_EQ(row["endpoint"], "chat.completions");
    EXPECT_EQ(row["status"], "ok");
    EXPECT_EQ(row["target"], model);

    auto s = Post("/v1/chat/completions", ChatBody(model, true));
    ASSERT_EQ(s.status, 200) << s.body;
    EXPECT_EQ(s.header("content-type"), "text/event-stream");
    std::string all;
    for (const std::string& e : ChatEvents()) all += e;
    EXPECT_EQ(s.body, all);
    EXPECT_TRUE(LastAsked().stream);
  }
}

TEST_F(ClientApisTest, CompletionsPassThroughAndStreamOptionsNeedAStream) {
  const json body = {{"model", "gpt"}, {"prompt", "Once"}};
  auto r = Post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(LastAsked().endpoint, providers::Endpoint::kCompletions);
  EXPECT_EQ(gateway_.Stored(r.header("x-request-id"))["endpoint"], "completions");
  const size_t before = fake_.asked().size();
  auto bad =
      Post("/v1/completions",
           {{"model", "gpt"}, {"prompt", "x"}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(json::parse(bad.body)["error"]["param"], "stream_options");
  EXPECT_EQ(fake_.asked().size(), before) << "refused before any attempt";
}

TEST_F(ClientApisTest, EmbeddingsPassThroughAndDoNotStream) {
  const json body = {{"model", "gpt"}, {"input", "hello"}};
  auto r = Post("/v1/embeddings", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(LastAsked().endpoint, providers::Endpoint::kEmbeddings);
  EXPECT_EQ(LastAsked().body, body.dump());
  const size_t before = fake_.asked().size();
  auto streamed = Post("/v1/embeddings", {{"model", "gpt"}, {"input", "x"}, {"stream", true}});
  EXPECT_EQ(streamed.status, 400) << streamed.body;
  // An Anthropic target cannot embed: the 400 names it, and nothing is asked.
  auto refused = Post("/v1/embeddings", {{"model", "claude"}, {"input", "x"}});
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"]["code"], "unsupported_endpoint");
  EXPECT_EQ(fake_.asked().size(), before);
}

TEST_F(ClientApisTest, ResponsesPassThroughAndAContinuationJoinsTheResponsesThread) {
  const json body = {{"model", "gpt"}, {"input", "hi"}};
  auto r = Post("/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(LastAsked().endpoint, providers::Endpoint::kResponses);
  EXPECT_EQ(LastAsked().body, body.dump());
  json first = gateway_.Stored(r.header("x-request-id"));
  EXPECT_EQ(first["response_id"], "resp_native1");
  // A stored response that starts a conversation names its thread; the next turn joins it.
  EXPECT_EQ(first["thread_id"], "resp_native1");
  auto next = Post("/v1/responses",
                   {{"model", "gpt"}, {"input", "more"}, {"previous_response_id", "resp_native1"}});
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(gateway_.Stored(next.header("x-request-id"))["thread_id"], "resp_native1");

  auto s = Post("/v1/responses", {{"model", "gpt"}, {"input", "hi"}, {"stream", true}});
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_NE(s.body.find("response.created"), std::string::npos) << s.body;
  EXPECT_EQ(LastAsked().endpoint, providers::Endpoint::kResponses);
}

TEST_F(ClientApisTest, ResponsesOnAChatOnlyWireAreToldAsChatAndTheConversationIsKept) {
  auto r = Post("/v1/responses", {{"model", "claude"}, {"input", "hi"}});
  ASSERT_EQ(r.status, 200) << r.body;
  Asked asked = LastAsked();
  EXPECT_EQ(asked.endpoint, providers::Endpoint::kChatCompletions);
  json chat = json::parse(asked.body);
  ASSERT_TRUE(chat["messages"].is_array()) << asked.body;
  EXPECT_EQ(chat["messages"].back()["content"], "hi");
  json response = json::parse(r.body);
  EXPECT_EQ(response["object"], "response");
  const std::string id = response["id"];
  EXPECT_EQ(id.rfind("resp_", 0), 0u) << id;
  EXPECT_NE(r.body.find("Hello there"), std::string::npos) << r.body;
  json row = gateway_.Stored(r.header("x-request-id"));
  EXPECT_EQ(row["response_id"], id) << "the client's answer's id, not the chat id";
  EXPECT_EQ(row["thread_id"], id);

  // The next turn carries the kept conversation (with the assistant's answer) to the chat wire.
  auto next = Post(
      "/v1/responses",
      {{"model", "claude"}, {"input", "more"}, {"previous_response_id", id}, {"stream", true}});
  ASSERT_EQ(next.status, 200) << next.body;
  json chat2 = json::parse(LastAsked().body);
  EXPECT_NE(chat2["messages"].dump().find("Hello there"), std::string::npos) << chat2.dump();
  EXPECT_NE(next.body.find("event: response.created"), std::string::npos) << next.body;
  EXPECT_NE(next.body.find("event: response.completed"), std::string::npos) << next.body;
  EXPECT_EQ(gateway_.Stored(next.header("x-request-id"))["thread_id"], id);

  // An unknown previous response is OpenAI's 400, with nothing sent upstream.
  const size_t before = fake_.asked().size();
  auto unknown = Post("/v1/responses",
                      {{"model", "claude"}, {"input", "x"}, {"previous_response_id", "resp_nope"}});
  EXPECT_EQ(unknown.status, 400) << unknown.body;
  EXPECT_EQ(json::parse(unknown.body)["error"]["code"], "previous_response_not_found");
  EXPECT_EQ(fake_.asked().size(), before);
}

TEST_F(ClientApisTest, MessagesPassThroughToAnthropicWithTheClientsVersionHeader) {
  const json body = {{"model", "claude"},
                     {"max_tokens", 16},
                     {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = Post("/v1/messages", body, "anthropic-version: 2023-06-01\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  Asked asked = LastAsked();
  EXPECT_EQ(asked.endpoint, providers::Endpoint::kMessages);
  EXPECT_EQ(asked.body, body.dump());
  EXPECT_EQ(asked.anthropic_version, "2023-06-01");
  EXPECT_EQ(json::parse(r.body)["id"], "msg_native1");
  json row = gateway_.Stored(r.header("x-request-id"));
  EXPECT_EQ(row["endpoint"], "messages");

  json streamed = body;
  streamed["stream"] = true;
  auto s = Post("/v1/messages", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_NE(s.body.find("event: message_stop"), std::string::npos) << s.body;
}

TEST_F(ClientApisTest, MessagesOnAChatWireAreToldAsChatAndAnsweredAsAMessage) {
  const json body = {{"model", "gpt"},
                     {"max_tokens", 16},
                     {"system", "Be brief."},
                     {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = Post("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  Asked asked = LastAsked();
  EXPECT_EQ(asked.endpoint, providers::Endpoint::kChatCompletions);
  json chat = json::parse(asked.body);
  EXPECT_EQ(chat["messages"][0]["role"], "system");
  EXPECT_EQ(chat["messages"][1]["content"], "hi");
  json message = json::parse(r.body);
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["content"][0]["text"], "Hello there");
  EXPECT_EQ(gateway_.Stored(r.header("x-request-id"))["response_id"], message["id"]);

  json streamed = body;
  streamed["stream"] = true;
  auto s = Post("/v1/messages", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_NE(s.body.find("event: message_start"), std::string::npos) << s.body;
  EXPECT_NE(s.body.find("\"text\":\"Hello\""), std::string::npos) << s.body;
  EXPECT_NE(s.body.find("event: message_stop"), std::string::npos) << s.body;
  EXPECT_EQ(s.body.find("data: [DONE]"), std::string::npos) << "no chat bytes reach the client";
}

TEST_F(ClientApisTest, EachApiAnswersKvgatesOwnErrorsInItsShape) {
  auto openai = Post("/v1/chat/completions", {{"messages", json::array()}});
  EXPECT_EQ(openai.status, 400);
  EXPECT_EQ(json::parse(openai.body)["error"]["code"], "missing_model");
  auto anthropic = Post("/v1/messages", {{"messages", json::array()}});
  EXPECT_EQ(anthropic.status, 400);
  json error = json::parse(anthropic.body);
  EXPECT_EQ(error["type"], "error") << anthropic.body;
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(fake_.asked().empty());
}

}  // namespace
}  // namespace kvgate::gateway
