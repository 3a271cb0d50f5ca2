// Tool calls on the built-in engine, OpenAI side: the 400s for malformed tools naming the field,
// the prompt (the tool prompt in the system message, calls and results in the history rendered
// as the model writes them), and the output assembled from streamed deltas equal to the whole.
#include "gateway/local_tools.h"

#include <gtest/gtest.h>

#include "local_engine/json_matcher.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const char* kWeatherTool = R"({"type":"function","function":{"name":"get_weather",
    "description":"Current weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},
    "required":["city","unit"],"additionalProperties":false}}})";

ordered_json Body(const std::string& extra) {
  return ordered_json::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[)" +
                             std::string(kWeatherTool) + "]" + extra + "}");
}

TEST(LocalToolsTest, ParsesChoices) {
  auto r = ParseToolRequest(Body(""));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->choice, ToolChoice::kAuto);  // OpenAI's default with tools
  ASSERT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(r->tools[0].name, "get_weather");
  EXPECT_EQ(r->tools[0].parameters["properties"].begin().key(), "city");  // declared order
  EXPECT_EQ(ParseToolRequest(Body(R"(,"tool_choice":"none")"))->choice, ToolChoice::kNone);
  EXPECT_EQ(ParseToolRequest(Body(R"(,"tool_choice":"required")"))->choice, ToolChoice::kRequired);
  auto named = ParseToolRequest(
      Body(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false)"));
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->choice, ToolChoice::kNamed);
  EXPECT_EQ(named->named, "get_weather");
  EXPECT_FALSE(named->parallel);
  EXPECT_EQ(ParseToolRequest(ordered_json::parse(R"({"messages":[]})"))->choice, ToolChoice::kNone);
}

TEST(LocalToolsTest, EmptyPropertiesMeanNoArguments) {
  // `properties: {}` without additionalProperties (what many clients send for a function without
  // arguments) allows only {} as arguments, the same as no parameters at all: an undeclared key
  // is never written.
  for (const char* params : {R"(,"parameters":{"type":"object","properties":{}})", ""}) {
    auto r = ParseToolRequest(ordered_json::parse(
        std::string(R"({"messages":[],"tool_choice":"required","tools":[{"type":"function",)"
                    R"("function":{"name":"ping")") +
        params + "}}]}"));
    ASSERT_TRUE(r.has_value()) << params;
    auto g = ToolGrammar(*r);
    ASSERT_TRUE(g.has_value()) << params << ": " << g.error().message;
    auto accepts = [&](std::string_view text) {
      engine::JsonMatcher m(*g);
      return m.AdvanceBytes(text) && m.IsComplete();
    };
    EXPECT_TRUE(accepts(R"({"tool_calls":[{"name":"ping","arguments":{}}]})")) << params;
    EXPECT_FALSE(accepts(R"({"tool_calls":[{"name":"ping","arguments":{"x":1}}]})")) << params;
    engine::JsonMatcher m(*g);
    ASSERT_TRUE(m.AdvanceBytes(R"({"tool_calls":[{"name":"ping","arguments":{)"));
    EXPECT_FALSE(m.Allows('"')) << params;  // no key can even begin
  }
}

TEST(LocalToolsTest, MalformedToolsNameTheField) {
  struct Case {
    std::string body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {R"({"tools":{"type":"function"}})", "tools"},
      {R"({"tools":[3]})", "tools[0]"},
      {R"({"tools":[{"type":"retrieval"}]})", "tools[0].type"},
      {R"({"tools":[{"type":"function"}]})", "tools[0].function"},
      {R"({"tools":[{"type":"function","function":{"description":"x"}}]})", "tools[0].function.name"},
      {R"({"tools":[{"type":"function","function":{"name":"has space"}}]})", "tools[0].function.name"},
      {R"({"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}]})",
       "tools[1].function.name"},
      {R"({"tools":[{"type":"function","function":{"name":"a","parameters":"x"}}]})",
       "tools[0].function.parameters"},
      {R"({"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"b"}}})",
       "tool_choice.function.name"},
      {R"({"tool_choice":"required"})", "tool_choice"},
      {R"({"tools":[{"type":"function","function":{"name":"a"}}],"parallel_tool_calls":1})", "parallel_tool_calls"},
  };
  for (const Case& c : cases) {
    auto r = ParseToolRequest(ordered_json::parse(c.body));
    ASSERT_FALSE(r.has_value()) << c.body;
    EXPECT_EQ(r.error().param, c.param) << c.body << ": " << r.error().message;
  }
  // A parameters schema the constrained decoder cannot serve: its JSON path.
  auto r = ParseToolRequest(ordered_json::parse(R"({"tools":[{"type":"function","function":{"name":"a",
      "parameters":{"type":"object","properties":{"n":{"type":"integer","minimum":1}}}}}]})"));
  ASSERT_TRUE(r.has_value());
  auto g = ToolGrammar(*r);
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().param, "tools[0].function.parameters.properties.n.minimum");
  EXPECT_EQ(g.error().code, "invalid_function_parameters");
}

TEST(LocalToolsTest, HistoryIsRenderedAsTheModelWroteIt) {
  auto tools = ParseToolRequest(Body(""));
  ASSERT_TRUE(tools.has_value());
  const json messages = json::parse(R"([
    {"role":"system","content":"Be brief."},
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"18 C, sunny"},
    {"role":"assistant","content":"It is 18 C."}])");
  auto chat = ChatMessagesFor(messages, *tools, "default system");
  ASSERT_TRUE(chat.has_value()) << chat.error().message;
  ASSERT_EQ(chat->size(), 5u);
  EXPECT_EQ((*chat)[0].content.rfind("Be brief.\n\n", 0), 0u);
  EXPECT_NE((*chat)[0].content.find("get_weather"), std::string::npos);
  EXPECT_EQ((*chat)[2].content,
            R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}]})");
  EXPECT_EQ((*chat)[3].role, "tool");
  EXPECT_EQ((*chat)[3].content, "18 C, sunny");
  EXPECT_EQ((*chat)[4].content, R"({"response":"It is 18 C."})");
  // Without a system message the tool prompt follows the template's default one.
  auto plain = ChatMessagesFor(json::parse(R"([{"role":"user","content":"x"}])"), *tools, "default system");
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ((*plain)[0].role, "system");
  EXPECT_EQ((*plain)[0].content.rfind("default system\n\n", 0), 0u);
  // tool_choice none: no tool prompt, text as text; calls in the history are still rendered.
  ToolRequest none = *tools;
  none.choice = ToolChoice::kNone;
  auto off = ChatMessagesFor(messages, none, "");
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ((*off)[0].content, "Be brief.");
  EXPECT_EQ((*off)[4].content, "It is 18 C.");
  EXPECT_EQ((*off)[2].content, (*chat)[2].content);
  // Malformed history names the field.
  auto bad = ChatMessagesFor(json::parse(R"([{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}])"),
                             *tools, "");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().param, "messages[0].tool_calls[0].function.name");
  auto no_id = ChatMessagesFor(json::parse(R"([{"role":"tool","content":"x"}])"), *tools, "");
  ASSERT_FALSE(no_id.has_value());
  EXPECT_EQ(no_id.error().param, "messages[0].tool_call_id");
}

// Applies chat-chunk deltas the way the OpenAI SDK's stream helpers do.
json Accumulate(const std::vector<json>& deltas) {
  // refusal: a key every OpenAI message has (null here: no delta carries one).
  json message = {{"role", "assistant"}, {"content", nullptr}, {"refusal", nullptr}};
  std::string content;
  json calls = json::array();
  for (const json& d : deltas) {
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    for (const json& c : d["tool_calls"]) {
      const size_t i = c["index"].get<size_t>();
      if (i == calls.size()) {
        EXPECT_TRUE(c.contains("id") && c.contains("type") && c["function"].contains("name"));
        EXPECT_EQ(c["function"]["arguments"], "");
        calls.push_back({{"id", c["id"]}, {"type", c["type"]},
                         {"function", {{"name", c["function"]["name"]}, {"arguments", ""}}}});
      } else {
        EXPECT_FALSE(c.contains("id"));
        calls[i]["function"]["arguments"] =
            calls[i]["function"]["arguments"].get<std::string>() + c["function"]["arguments"].get<std::string>();
      }
    }
  }
  if (!content.empty() || calls.empty()) message["content"] = content;
  if (!calls.empty()) message["tool_calls"] = calls;
  return message;
}

TEST(LocalToolsTest, StreamedDeltasAssembleToTheWholeMessage) {
  const std::string out =
      R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}},)"
      R"({"name":"get_weather","arguments":{ "city":"Lyon","unit":"f"}}]})";
  for (size_t piece : {1, 3, 7, 1000}) {
    ToolCallAssembler a;
    std::vector<json> deltas;
    for (size_t at = 0; at < out.size(); at += piece) {
      for (json& d : a.Push(std::string_view(out).substr(at, piece))) deltas.push_back(std::move(d));
    }
    const json whole = a.Message();
    EXPECT_EQ(Accumulate(deltas), whole) << piece;
    ASSERT_EQ(whole["tool_calls"].size(), 2u);
    EXPECT_TRUE(whole["content"].is_null());
    EXPECT_EQ(whole["tool_calls"][1]["function"]["arguments"], R"({ "city":"Lyon","unit":"f"})");
    EXPECT_EQ(whole["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_NE(whole["tool_calls"][0]["id"], whole["tool_calls"][1]["id"]);
  }
  ToolCallAssembler text;
  std::vector<json> deltas = text.Push(R"({"response":"Hello \"x\""})");
  EXPECT_EQ(Accumulate(deltas), text.Message());
  EXPECT_EQ(text.Message()["content"], "Hello \"x\"");
  EXPECT_FALSE(text.has_calls());
}

}  // namespace
}  // namespace kvgate::gateway
