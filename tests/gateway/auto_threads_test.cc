// AutoThreads: which thread a request that names none joins.
#include "gateway/auto_threads.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace kvgate::gateway {
namespace {

using nlohmann::json;

// A request body and its fingerprint, kept together (the fingerprint views nothing, the body's
// raw_json views `text`).
struct Prompt {
  std::string text;
  raw_json::Object body() const { return raw_json::Object(raw_json::Parse(text).value()); }
  telemetry::PromptFingerprint fingerprint() const { return telemetry::Fingerprint(body()); }
};

Prompt Chat(const json& messages, const json& tools = nullptr) {
  json body = {{"model", "m"}, {"messages", messages}};
  if (!tools.is_null()) body["tools"] = tools;
  return Prompt{body.dump()};
}

json User(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
json Assistant(const std::string& text) { return {{"role", "assistant"}, {"content", text}}; }

class AutoThreadsTest : public ::testing::Test {
 protected:
  // Assigns `prompt` for `tenant` and settles it with `status`.
  AutoThreads::Assignment Turn(const Prompt& prompt, uint64_t tenant = 1,
                               const std::string& status = "ok") {
    const std::string request_id = "req_" + std::to_string(++requests_);
    AutoThreads::Assignment a =
        threads_.Assign(request_id, tenant, prompt.body(), prompt.fingerprint());
    telemetry::RequestRecord record;
    record.request_id = request_id;
    record.thread_id = a.thread_id;
    record.thread_source = telemetry::kThreadFromAuto;
    record.status = status;
    threads_.Settle(record);
    return a;
  }

  AutoThreads threads_;
  int requests_ = 0;
};

TEST_F(AutoThreadsTest, AToolLoopIsOneThread) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "lookup"}}}}});
  json messages = json::array(
      {{{"role", "system"}, {"content", "You are an agent."}}, User("find the answer")});
  const AutoThreads::Assignment first = Turn(Chat(messages, tools));
  EXPECT_TRUE(first.thread_id.starts_with("auto-")) << first.thread_id;
  EXPECT_EQ(first.parent, "");
  for (int turn = 2; turn <= 12; ++turn) {
    const std::string call_id = "call_" + std::to_string(turn);
    messages.push_back(
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls", json::array({{{"id", call_id},
                                      {"type", "function"},
                                      {"function", {{"name", "lookup"}, {"arguments", "{}"}}}}})}});
    messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", "result"}});
    const AutoThreads::Assignment next = Turn(Chat(messages, tools));
    EXPECT_EQ(next.thread_id, first.thread_id) << "turn " << turn;
    EXPECT_EQ(next.parent, "");
  }
}

TEST_F(AutoThreadsTest, TenantsNeverShareAThread) {
  const json opening = json::array({User("hello")});
  const AutoThreads::Assignment a = Turn(Chat(opening), /*tenant=*/1);
  const AutoThreads::Assignment b = Turn(Chat(opening), /*tenant=*/2);
  EXPECT_NE(a.thread_id, b.thread_id);
  const json next = json::array({User("hello"), Assistant("hi"), User("more")});
  EXPECT_EQ(Turn(Chat(next), 1).thread_id, a.thread_id);
  EXPECT_EQ(Turn(Chat(next), 2).thread_id, b.thread_id);
  // A third tenant that sends the continuation first has no turn to continue.
  const AutoThreads::Assignment c = Turn(Chat(next), 3);
  EXPECT_NE(c.thread_id, a.thread_id);
  EXPECT_NE(c.thread_id, b.thread_id);
}

TEST_F(AutoThreadsTest, ASecondContinuationOfATurnForksAndNamesItsParent) {
  const AutoThreads::Assignment root = Turn(Chat(json::array({User("q")})));
  const AutoThreads::Assignment main =
      Turn(Chat(json::array({User("q"), Assistant("a1"), User("q2")})));
  EXPECT_EQ(main.thread_id, root.thread_id);
  // The same turn continued again (a regenerated answer): a branch of its own.
  const AutoThreads::Assignment branch =
      Turn(Chat(json::array({User("q"), Assistant("a1-other"), User("q2")})));
  EXPECT_NE(branch.thread_id, root.thread_id);
  EXPECT_EQ(branch.parent, root.thread_id);
  // Each goes on in its own thread.
  EXPECT_EQ(
      Turn(Chat(json::array({User("q"), Assistant("a1"), User("q2"), Assistant("a2"), User("q3")})))
          .thread_id,
      root.thread_id);
  EXPECT_EQ(Turn(Chat(json::array(
                     {User("q"), Assistant("a1-other"), User("q2"), Assistant("b2"), User("q3")})))
                .thread_id,
            branch.thread_id);
}

TEST_F(AutoThreadsTest, AFailedTurnIsWithdrawnSoItsRetryDoesNotFork) {
  const AutoThreads::Assignment root = Turn(Chat(json::array({User("q")})));
  const Prompt next = Chat(json::array({User("q"), Assistant("a"), User("q2")}));
  EXPECT_EQ(Turn(next, 1, "upstream_error").thread_id, root.thread_id);
  const AutoThreads::Assignment retry = Turn(next);
  EXPECT_EQ(retry.thread_id, root.thread_id);
  EXPECT_EQ(retry.parent, "");
}

TEST_F(AutoThreadsTest, ConversationsThatOpenedAlikeStaySeparate) {
  // Two conversations open with the same bytes; each continuation takes an open thread, and from
  // there on each continues its own.
  const json opening = json::array({User("hi")});
  const std::string t1 = Turn(Chat(opening)).thread_id;
  const std::string t2 = Turn(Chat(opening)).thread_id;
  EXPECT_NE(t1, t2);
  const std::string x = Turn(Chat(json::array({User("hi"), Assistant("x"), User("1")}))).thread_id;
  const std::string y = Turn(Chat(json::array({User("hi"), Assistant("y"), User("1")}))).thread_id;
  EXPECT_EQ(std::set<std::string>({x, y}), std::set<std::string>({t1, t2}));
  EXPECT_EQ(
      Turn(Chat(json::array({User("hi"), Assistant("x"), User("1"), Assistant("x2"), User("2")})))
          .thread_id,
      x);
  EXPECT_EQ(
      Turn(Chat(json::array({User("hi"), Assistant("y"), User("1"), Assistant("y2"), User("2")})))
          .thread_id,
      y);
}

TEST_F(AutoThreadsTest, ASystemPromptThatChangesEveryTurnStillContinuesTheThread) {
  auto system = [](int turn) {
    return json{{"role", "system"}, {"content", "Now: 2026-12-07T12:0" + std::to_string(turn)}};
  };
  json history = json::array({User("q1")});
  const std::string first = Turn(Chat(json::array({system(0), User("q1")}))).thread_id;
  for (int turn = 1; turn <= 4; ++turn) {
    history.push_back(Assistant("a" + std::to_string(turn)));
    history.push_back(User("q" + std::to_string(turn + 1)));
    json messages = json::array({system(turn)});
    for (const json& m : history) messages.push_back(m);
    EXPECT_EQ(Turn(Chat(messages)).thread_id, first) << "turn " << turn;
  }
}

TEST_F(AutoThreadsTest, OnlyAnAnswerContinuesATurn) {
  const std::string first = Turn(Chat(json::array({User("q")}))).thread_id;
  // The same prompt with another user message appended, no answer between: not a continuation.
  EXPECT_NE(Turn(Chat(json::array({User("q"), User("q2")}))).thread_id, first);
  // A prompt that only shares the opening is another conversation too.
  EXPECT_NE(Turn(Chat(json::array({User("other")}))).thread_id, first);
}

TEST_F(AutoThreadsTest, ResponsesInputItemsFromTheModelContinueATurn) {
  auto responses = [](const json& input) {
    return Prompt{json{{"model", "m"}, {"instructions", "be brief"}, {"input", input}}.dump()};
  };
  const json opening = json::array({{{"role", "user"}, {"content", "weather?"}}});
  const std::string first = Turn(responses(opening)).thread_id;
  json input = opening;
  input.push_back({{"type", "reasoning"}, {"id", "rs_1"}, {"summary", json::array()}});
  input.push_back(
      {{"type", "function_call"}, {"call_id", "c1"}, {"name", "weather"}, {"arguments", "{}"}});
  input.push_back({{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "sunny"}});
  EXPECT_EQ(Turn(responses(input)).thread_id, first);
}

TEST_F(AutoThreadsTest, MemoryIsBounded) {
  AutoThreads small(/*max_turns=*/16);
  std::vector<std::string> ids;
  auto opening = [](int i) {
    return Chat(json::array({User("conversation " + std::to_string(i))}));
  };
  auto next = [](int i) {
    return Chat(
        json::array({User("conversation " + std::to_string(i)), Assistant("a"), User("n")}));
  };
  for (int i = 0; i < 200; ++i) {
    const Prompt p = opening(i);
    ids.push_back(small.Assign("r" + std::to_string(i), 1, p.body(), p.fingerprint()).thread_id);
  }
  EXPECT_LE(small.size(), 16u);
  // The newest turns are the ones kept: the last conversation is continued, the first forgotten.
  const Prompt newest = next(199), oldest = next(0);
  EXPECT_EQ(small.Assign("x", 1, newest.body(), newest.fingerprint()).thread_id, ids[199]);
  EXPECT_NE(small.Assign("y", 1, oldest.body(), oldest.fingerprint()).thread_id, ids[0]);
  EXPECT_LE(small.size(), 16u);
}

TEST(TenantOfTest, AGatewayKeyOrElseTheCredentialNamesTheTenant) {
  EXPECT_EQ(TenantOf("", "", "", "", ""), 0u);
  EXPECT_NE(TenantOf("key_1", "", "", "", ""), TenantOf("key_2", "", "", "", ""));
  EXPECT_EQ(TenantOf("key_1", "Bearer a", "", "", ""), TenantOf("key_1", "Bearer b", "", "", ""));
  EXPECT_NE(TenantOf("", "Bearer a", "", "", ""), TenantOf("", "Bearer b", "", "", ""));
  EXPECT_NE(TenantOf("", "", "sk-ant-a", "", ""), TenantOf("", "", "sk-ant-b", "", ""));
  EXPECT_NE(TenantOf("", "Bearer a", "", "", ""), 0u);
}

}  // namespace
}  // namespace kvgate::gateway
