// The Responses API on chat-only targets: the request translated into a chat request (every
// mapped field, the stored history, the fields refused with a 400 naming them), the answer
// translated back into a response object, and a chat stream into the Responses event sequence
// (text, tool calls, errors, a stream cut short), whole and split at every byte.
#include "gateway/providers/responses_translate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvgate::providers {
namespace {

using nlohmann::json;

json ChatOf(const std::string& body, const std::string* history = nullptr) {
  ResponsesChat chat = ResponsesToChat(body, history);
  EXPECT_FALSE(chat.error.has_value()) << (chat.error ? chat.error->body.dump() : "");
  return json::parse(chat.chat_body);
}

json RefusalOf(const std::string& body) {
  ResponsesChat chat = ResponsesToChat(body, nullptr);
  EXPECT_TRUE(chat.error.has_value()) << body;
  if (!chat.error) return json();
  EXPECT_EQ(chat.error->status, 400);
  return chat.error->body["error"];
}

TEST(ResponsesToChatTest, InstructionsStringInputAndSamplingFields) {
  json chat = ChatOf(R"({"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":7,
    "temperature":0.5,"top_p":0.9,"user":"u1","store":true,"metadata":{"a":"b"},"stream":true})");
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["messages"], json::parse(R"([{"role":"system","content":"Be brief."},
                                              {"role":"user","content":"Hi"}])"));
  EXPECT_EQ(chat["max_tokens"], 7);
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["top_p"], 0.9);
  EXPECT_EQ(chat["user"], "u1");
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  EXPECT_FALSE(chat.contains("metadata"));
  EXPECT_FALSE(chat.contains("store"));
}

TEST(ResponsesToChatTest, ItemsWithToolCallsAndOutputs) {
  json chat = ChatOf(R"({"model":"m","input":[
    {"type":"message","role":"developer","content":"sys"},
    {"role":"user","content":[{"type":"input_text","text":"Weather "},{"type":"input_text","text":"in Paris?"}]},
    {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
    {"type":"function_call","call_id":"c2","name":"get_time","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"sunny"},
    {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"noon"}]},
    {"type":"reasoning","id":"rs_1","summary":[]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Sunny at noon."}]}
  ]})");
  EXPECT_EQ(chat["messages"], json::parse(R"([
    {"role":"system","content":"sys"},
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":null,"tool_calls":[
      {"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
      {"id":"c2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"sunny"},
    {"role":"tool","tool_call_id":"c2","content":"noon"},
    {"role":"assistant","content":"Sunny at noon."}])"));
}

TEST(ResponsesToChatTest, ToolsToolChoiceAndTextFormat) {
  json chat = ChatOf(R"({"model":"m","input":"x","tools":[{"type":"function","name":"f",
    "description":"d","parameters":{"type":"object","properties":{"b":{},"a":{}}},"strict":true}],
    "tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,
    "text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true}}})");
  EXPECT_EQ(chat["tools"], json::parse(R"([{"type":"function","function":{"name":"f",
    "description":"d","parameters":{"type":"object","properties":{"b":{},"a":{}}},"strict":true}}])"));
  EXPECT_EQ(chat["tool_choice"], json::parse(R"({"type":"function","function":{"name":"f"}})"));
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["response_format"], json::parse(R"({"type":"json_schema","json_schema":
    {"name":"out","schema":{"type":"object"},"strict":true}})"));
  // The schema's key order is the client's (guided decoding follows it).
  ResponsesChat raw = ResponsesToChat(R"({"model":"m","input":"x","tools":[{"type":"function",
    "name":"f","parameters":{"properties":{"zeta":{},"alpha":{}}}}]})", nullptr);
  EXPECT_LT(raw.chat_body.find("zeta"), raw.chat_body.find("alpha"));

  EXPECT_EQ(ChatOf(R"({"model":"m","input":"x","tool_choice":"required"})")["tool_choice"],
            "required");
  EXPECT_EQ(ChatOf(R"({"model":"m","input":"x","text":{"format":{"type":"json_object"}}})")
                ["response_format"], json::parse(R"({"type":"json_object"})"));
  EXPECT_FALSE(ChatOf(R"({"model":"m","input":"x","text":{"format":{"type":"text"}}})")
                   .contains("response_format"));
}

TEST(ResponsesToChatTest, HistoryComesBeforeTheNewInputAndInstructionsFirst) {
  const std::string history = R"([{"role":"user","content":"one"},{"role":"assistant","content":"1"}])";
  ResponsesChat chat = ResponsesToChat(
      R"({"model":"m","instructions":"sys","input":"two","previous_response_id":"resp_x"})", &history);
  ASSERT_FALSE(chat.error.has_value());
  EXPECT_EQ(json::parse(chat.chat_body)["messages"], json::parse(R"([{"role":"system","content":"sys"},
    {"role":"user","content":"one"},{"role":"assistant","content":"1"},{"role":"user","content":"two"}])"));
  // The stored conversation leaves the instructions out (they are not carried over).
  EXPECT_EQ(json::parse(chat.conversation), json::parse(R"([{"role":"user","content":"one"},
    {"role":"assistant","content":"1"},{"role":"user","content":"two"}])"));
  json echo = json::parse(chat.echo);
  EXPECT_EQ(echo["previous_response_id"], "resp_x");
  EXPECT_EQ(echo["instructions"], "sys");
}

TEST(ResponsesToChatTest, WhatTheTargetCannotHonourIsA400NamingTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const std::vector<Case> cases = {
      {R"({"model":"m","input":"x","tools":[{"type":"web_search"}]})", "tools[0].type"},
      {R"({"model":"m","input":"x","reasoning":{"effort":"high"}})", "reasoning"},
      {R"({"model":"m","input":"x","background":true})", "background"},
      {R"({"model":"m","input":"x","top_logprobs":2})", "top_logprobs"},
      {R"({"model":"m","input":"x","include":["message.output_text.logprobs"]})", "include"},
      {R"({"model":"m","input":"x","truncation":"auto"})", "truncation"},
      {R"({"model":"m","input":"x","text":{"verbosity":"low"}})", "text.verbosity"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"json_schema"}}})", "text.format.schema"},
      {R"({"model":"m","input":"x","tool_choice":{"type":"web_search_preview"}})", "tool_choice"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:"}]}]})",
       "input[0].content[0].type"},
      {R"({"model":"m","input":[{"type":"item_reference","id":"x"}]})", "input[0].type"},
      {R"({"model":"m","input":[{"role":"tool","content":"x"}]})", "input[0].role"},
      {R"({"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]})",
       "input[0].call_id"},
      {R"({"model":"m","input":[]})", "input"},
      {R"({"model":"m"})", "input"},
      {R"({"model":"m","input":"x","max_output_tokens":0})", "max_output_tokens"},
      {R"({"model":"m","input":"x","frequency_penalty":1})", "frequency_penalty"},
  };
  for (const Case& c : cases) {
    json error = RefusalOf(c.body);
    EXPECT_EQ(error["param"], c.param) << c.body;
    EXPECT_EQ(error["type"], "invalid_request_error") << c.body;
    EXPECT_FALSE(error["message"].get<std::string>().empty()) << c.body;
  }
  // A reasoning object without an effort asks for nothing the target lacks.
  EXPECT_FALSE(ResponsesToChat(R"({"model":"m","input":"x","reasoning":{}})", nullptr).error);
}

const char* kEcho = R"({"instructions":null,"max_output_tokens":16,"model":"smollm2",
  "parallel_tool_calls":true,"previous_response_id":null,"store":true,"temperature":1.0,
  "text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"user":null,
  "metadata":{"k":"v"}})";

TEST(ChatToResponseTest, TextAnswerWithCachedUsage) {
  ResponsesOutcome outcome;
  auto response = ChatToResponse(R"({"id":"chatcmpl-abc","object":"chat.completion","created":5,
    "model":"smollm2","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},
    "finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23,
    "prompt_tokens_details":{"cached_tokens":16}}})", kEcho, &outcome);
  ASSERT_TRUE(response.has_value());
  json r = json::parse(*response);
  EXPECT_EQ(r["id"], "resp_abc");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["created_at"], 5);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "smollm2");
  EXPECT_EQ(r["metadata"]["k"], "v");
  EXPECT_EQ(r["max_output_tokens"], 16);
  EXPECT_EQ(r["output"], json::parse(R"([{"id":"msg_abc","type":"message","status":"completed",
    "content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello"}],"role":"assistant"}])"));
  EXPECT_EQ(r["usage"], json::parse(R"({"input_tokens":20,
    "input_tokens_details":{"cached_tokens":16,"cache_write_tokens":0},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":23})"));
  EXPECT_EQ(outcome.response_id, "resp_abc");
  EXPECT_EQ(json::parse(outcome.assistant_message), json::parse(R"({"role":"assistant","content":"Hello"})"));
}

TEST(ChatToResponseTest, ToolCallsBecomeFunctionCallItemsAndLengthIsIncomplete) {
  ResponsesOutcome outcome;
  auto response = ChatToResponse(R"({"id":"chatcmpl-t","object":"chat.completion","created":1,
    "model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
    {"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
    "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":4,"completion_tokens":2}})", kEcho, &outcome);
  ASSERT_TRUE(response.has_value());
  json r = json::parse(*response);
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0], json::parse(R"({"id":"fc_t_0","type":"function_call","status":"completed",
    "arguments":"{\"a\":1}","call_id":"call_1","name":"f"})"));
  EXPECT_EQ(json::parse(outcome.assistant_message)["tool_calls"][0]["id"], "call_1");

  auto cut = ChatToResponse(R"({"id":"chatcmpl-l","choices":[{"message":{"content":"abc"},
    "finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":16}})", kEcho, nullptr);
  ASSERT_TRUE(cut.has_value());
  json c = json::parse(*cut);
  EXPECT_EQ(c["status"], "incomplete");
  EXPECT_EQ(c["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_FALSE(ChatToResponse(R"({"object":"list"})", kEcho, nullptr).has_value());
}

// The events of a translated stream: (type, data) pairs, with their sequence numbers checked.
std::vector<json> EventsOf(const std::string& sse) {
  std::vector<json> events;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find("\n\n", at);
    const size_t line = sse.rfind("event: ", at);
    json data = json::parse(sse.substr(at + 6, end - at - 6));
    EXPECT_EQ(sse.substr(line + 7, sse.find('\n', line) - line - 7), data["type"].get<std::string>());
    events.push_back(std::move(data));
    at = end;
  }
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], events[0]["sequence_number"].get<int64_t>() + int64_t(i));
  }
  return events;
}

std::vector<std::string> TypesOf(const std::vector<json>& events) {
  std::vector<std::string> types;
  for (const json& e : events) types.push_back(e["type"]);
  return types;
}

std::string Chunk(const std::string& delta_and_finish) {
  return "data: {\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"created\":9,"
         "\"model\":\"smollm2\",\"choices\":[{\"index\":0," + delta_and_finish + "}]}\n\n";
}

const std::string kUsage =
    "data: {\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":"
    "\"smollm2\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,"
    "\"total_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n";

TEST(ResponsesAnswerStreamTest, TextStreamIsTheResponsesEventSequenceWholeOrSplit) {
  const std::string chat = Chunk(R"("delta":{"role":"assistant","content":""},"finish_reason":null)") +
                           Chunk(R"("delta":{"content":"Hel"},"finish_reason":null)") +
                           Chunk(R"("delta":{"content":"lo"},"finish_reason":null)") +
                           Chunk(R"("delta":{},"finish_reason":"stop")") + kUsage;
  auto whole = NewResponsesAnswerStream(kEcho);
  const std::string out = whole->Feed(chat);
  EXPECT_EQ(whole->Finish(), "");
  std::vector<json> events = EventsOf(out);
  EXPECT_EQ(TypesOf(events), (std::vector<std::string>{
      "response.created", "response.in_progress", "response.output_item.added",
      "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.completed"}));
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  EXPECT_EQ(events[0]["response"]["id"], "resp_s");
  EXPECT_TRUE(events[0]["response"]["usage"].is_null());
  EXPECT_EQ(events[2]["item"]["id"], "msg_s");
  EXPECT_EQ(events[4]["delta"], "Hel");
  EXPECT_EQ(events[6]["text"], "Hello");
  const json& done = events.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["usage"]["input_tokens"], 10);
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(done["usage"]["output_tokens"], 2);
  EXPECT_EQ(whole->response_id(), "resp_s");
  ASSERT_TRUE(whole->outcome().has_value());
  EXPECT_EQ(json::parse(whole->outcome()->assistant_message)["content"], "Hello");

  for (size_t cut = 1; cut < chat.size(); ++cut) {
    auto split = NewResponsesAnswerStream(kEcho);
    std::string pieces = split->Feed(chat.substr(0, cut));  // (in order: not one expression)
    pieces += split->Feed(chat.substr(cut));
    EXPECT_EQ(pieces, out) << cut;
  }
}

TEST(ResponsesAnswerStreamTest, ToolCallStreamIsFunctionCallItems) {
  const std::string chat =
      Chunk(R"("delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null)") +
      Chunk(R"("delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]},"finish_reason":null)") +
      Chunk(R"("delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":null)") +
      Chunk(R"("delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":null)") +
      Chunk(R"("delta":{},"finish_reason":"tool_calls")") + kUsage;
  auto t = NewResponsesAnswerStream(kEcho);
  std::vector<json> events = EventsOf(t->Feed(chat));
  EXPECT_EQ(TypesOf(events), (std::vector<std::string>{
      "response.created", "response.in_progress",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"}));
  EXPECT_EQ(events[2]["item"]["type"], "function_call");
  EXPECT_EQ(events[2]["item"]["call_id"], "call_a");
  EXPECT_EQ(events[2]["item"]["name"], "f");
  EXPECT_EQ(events[5]["arguments"], "{\"x\":1}");
  EXPECT_EQ(events[7]["output_index"], 1);
  const json& output = events.back()["response"]["output"];
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0]["arguments"], "{\"x\":1}");
  EXPECT_EQ(output[1]["call_id"], "call_b");
  json message = json::parse(t->outcome()->assistant_message);
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"].size(), 2u);
}

TEST(ResponsesAnswerStreamTest, LengthEndsIncomplete) {
  auto t = NewResponsesAnswerStream(kEcho);
  std::vector<json> events = EventsOf(
      t->Feed(Chunk(R"("delta":{"content":"a"},"finish_reason":"length")") + kUsage));
  EXPECT_EQ(events.back()["type"], "response.incomplete");
  EXPECT_EQ(events.back()["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(ResponsesAnswerStreamTest, ChatErrorAndEarlyEndBecomeErrorEvents) {
  auto t = NewResponsesAnswerStream(kEcho);
  std::vector<json> events = EventsOf(
      t->Feed(Chunk(R"("delta":{"content":"a"},"finish_reason":null)") +
              "data: {\"error\":{\"message\":\"engine failed\",\"code\":\"server_error\"}}\n\n"));
  EXPECT_EQ(events.back()["type"], "error");
  EXPECT_EQ(events.back()["message"], "engine failed");
  EXPECT_EQ(t->Feed(kUsage), "");  // nothing after the error
  EXPECT_EQ(t->Finish(), "");
  EXPECT_FALSE(t->outcome().has_value());

  auto cut = NewResponsesAnswerStream(kEcho);
  cut->Feed(Chunk(R"("delta":{"content":"a"},"finish_reason":null)"));
  std::vector<json> tail = EventsOf(cut->Finish());
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0]["type"], "error");
  EXPECT_FALSE(cut->outcome().has_value());
}

}  // namespace
}  // namespace kvgate::providers
