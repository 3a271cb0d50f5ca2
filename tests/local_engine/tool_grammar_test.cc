// Keys in the schema's declared order, the tool-call grammar (calls, the tagged choice between
// functions, auto's response, the compact envelope, the call bound, errors naming the field), and
// random walks through it that always parse back (ToolOutputParser) into calls whose arguments
// match their function's schema.
#include <gtest/gtest.h>

#include <random>

#include "local_engine/json_grammar.h"
#include "local_engine/json_matcher.h"
#include "local_engine/tool_format.h"
#include "tests/local_engine/json_schema_check.h"

namespace kvgate::engine {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

bool Accepts(const std::shared_ptr<const JsonGrammar>& g, std::string_view text) {
  JsonMatcher m(g);
  return m.AdvanceBytes(text) && m.IsComplete();
}

TEST(JsonSchemaOrder, KeysComeInDeclaredOrder) {
  const ordered_json schema = ordered_json::parse(R"({"type":"object",
      "properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"},"mid":{"type":"boolean"}},
      "required":["zeta","alpha","mid"],"additionalProperties":false})");
  auto g = CompileJsonSchema(schema, "s");
  ASSERT_TRUE(g.has_value());
  EXPECT_TRUE(Accepts(*g, R"({"zeta":1,"alpha":"a","mid":true})"));
  EXPECT_FALSE(Accepts(*g, R"({"alpha":"a","mid":true,"zeta":1})"));  // sorted: not the order
  // Nested objects and $defs keep theirs too.
  const ordered_json nested = ordered_json::parse(R"({"$defs":{"P":{"type":"object",
      "properties":{"y":{"type":"integer"},"x":{"type":"integer"}},"required":["y","x"]}},
      "type":"object","properties":{"b":{"$ref":"#/$defs/P"},"a":{"type":"null"}},
      "required":["b","a"]})");
  auto n = CompileJsonSchema(nested, "s");
  ASSERT_TRUE(n.has_value());
  EXPECT_TRUE(Accepts(*n, R"({"b":{"y":1,"x":2},"a":null})"));
  EXPECT_FALSE(Accepts(*n, R"({"b":{"x":2,"y":1},"a":null})"));
  // A nlohmann::json has sorted its keys already: that order is what is left.
  auto sorted = CompileJsonSchema(json::parse(schema.dump()), "s");
  ASSERT_TRUE(sorted.has_value());
  EXPECT_TRUE(Accepts(*sorted, R"({"alpha":"a","mid":true,"zeta":1})"));
}

const ordered_json kWeather = ordered_json::parse(R"({"type":"object",
    "properties":{"city":{"type":"string","maxLength":20},"unit":{"enum":["c","f"]}},
    "required":["city","unit"],"additionalProperties":false})");
const ordered_json kTime = ordered_json::parse(R"({"type":"object",
    "properties":{"zone":{"type":"string","maxLength":10}},"required":["zone"]})");
const ordered_json kNone = ordered_json::parse(
    R"({"type":"object","properties":{},"additionalProperties":false})");

std::vector<ToolFunctionSchema> Functions() {
  return {{"get_weather", &kWeather, "tools[0].function.parameters"},
          {"get_time", &kTime, "tools[1].function.parameters"},
          {"ping", &kNone, "tools[2].function.parameters"}};
}

TEST(ToolCallGrammar, OneFunction) {
  auto g = CompileToolCallGrammar({Functions()[0]}, {});
  ASSERT_TRUE(g.has_value()) << g.error().path << ": " << g.error().message;
  EXPECT_TRUE(Accepts(*g, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}]})"));
  EXPECT_TRUE(Accepts(*g, R"({"tool_calls":[{"name":"get_weather","arguments":{ "city": "Paris", "unit":"c"}}]})"));
  for (std::string_view bad : {
           R"({"tool_calls":[{"name":"get_time","arguments":{"zone":"UTC"}}]})",
           R"({"tool_calls":[]})",
           R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]})",
           R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"P","unit":"c"}},{"name":"get_weather","arguments":{"city":"P","unit":"c"}}]})",
           R"({"response":"hi"})",
           R"( {"tool_calls":[{"name":"get_weather","arguments":{"city":"P","unit":"c"}}]})",
           R"({ "tool_calls":[{"name":"get_weather","arguments":{"city":"P","unit":"c"}}]})",
           R"({"tool_calls":[ {"name":"get_weather","arguments":{"city":"P","unit":"c"}}]})",
           R"({"tool_calls":[{"name": "get_weather","arguments":{"city":"P","unit":"c"}}]})",
           R"({"tool_calls":[{"name":"get_weather","arguments": {"city":"P","unit":"c"}}]})",
           R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"P","unit":"c"} }]})"}) {
    EXPECT_FALSE(Accepts(*g, bad)) << bad;
  }
}

TEST(ToolCallGrammar, SeveralFunctionsAreToldApartByName) {
  auto g = CompileToolCallGrammar(Functions(), {.max_calls = 2});
  ASSERT_TRUE(g.has_value()) << g.error().path << ": " << g.error().message;
  EXPECT_TRUE(Accepts(*g, R"({"tool_calls":[{"name":"get_time","arguments":{"zone":"UTC"}}]})"));
  EXPECT_TRUE(Accepts(*g, R"({"tool_calls":[{"name":"ping","arguments":{}},{"name":"get_weather","arguments":{"city":"x","unit":"f"}}]})"));
  EXPECT_FALSE(Accepts(*g, R"({"tool_calls":[{"name":"get_time","arguments":{"city":"x","unit":"f"}}]})"));
  EXPECT_FALSE(Accepts(*g, R"({"tool_calls":[{"name":"ping","arguments":{"a":1}}]})"));
  EXPECT_FALSE(Accepts(*g, R"({"tool_calls":[{"name":"pong","arguments":{}}]})"));
  EXPECT_FALSE(Accepts(*g, R"({"tool_calls":[{"arguments":{},"name":"ping"}]})"));
  EXPECT_FALSE(Accepts(*g, R"({"tool_calls":[{"name":"ping","arguments":{}},{"name":"ping","arguments":{}},{"name":"ping","arguments":{}}]})"));
  JsonMatcher m(*g);
  ASSERT_TRUE(m.AdvanceBytes(R"({"tool_calls":[{"name":"get_)"));
  EXPECT_TRUE(m.Allows('t'));
  EXPECT_TRUE(m.Allows('w'));
  EXPECT_FALSE(m.Allows('p'));
}

TEST(ToolCallGrammar, AutoAllowsExactlyOneOfCallsAndResponse) {
  auto g = CompileToolCallGrammar(Functions(), {.allow_response = true, .max_calls = 4});
  ASSERT_TRUE(g.has_value());
  EXPECT_TRUE(Accepts(*g, R"({"response":"Hello there"})"));
  EXPECT_TRUE(Accepts(*g, R"({"tool_calls":[{"name":"ping","arguments":{}}]})"));
  EXPECT_FALSE(Accepts(*g, R"({})"));
  EXPECT_FALSE(Accepts(*g, R"({"response":"a","tool_calls":[{"name":"ping","arguments":{}}]})"));
  EXPECT_FALSE(Accepts(*g, R"({"tool_calls":[{"name":"ping","arguments":{}}],"response":"a"})"));
  EXPECT_FALSE(Accepts(*g, R"({"response":1})"));
}

TEST(ToolCallGrammar, InvalidParametersNameTheField) {
  const ordered_json bad = ordered_json::parse(
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})");
  auto g = CompileToolCallGrammar({Functions()[0], {"f", &bad, "tools[1].function.parameters"}}, {});
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().path, "tools[1].function.parameters.properties.n.minimum");
}

TEST(ToolCallGrammar, ArgumentsMustFitTheDepthBoundInsideTheEnvelope) {
  // The arguments sit three containers deep ({"tool_calls":[{"arguments":...}]}): arguments whose
  // shallowest value nests kMaxJsonDepth - 3 objects fit, one more is an error naming that level,
  // even with auto, where a {"response"} answer alone would fit.
  auto nested = [](int levels) {
    ordered_json s = {{"type", "integer"}};
    for (int i = 0; i < levels; ++i) {
      s = {{"type", "object"}, {"properties", {{"a", s}}}, {"required", {"a"}}};
    }
    return s;
  };
  const ordered_json fits = nested(kMaxJsonDepth - 3);
  const ordered_json deep = nested(kMaxJsonDepth - 2);
  EXPECT_TRUE(
      CompileToolCallGrammar({{"f", &fits, "tools[0].function.parameters"}}, {}).has_value());
  for (bool allow_response : {false, true}) {
    auto g = CompileToolCallGrammar({Functions()[0], {"f", &deep, "tools[1].function.parameters"}},
                                    {.allow_response = allow_response});
    ASSERT_FALSE(g.has_value());
    std::string path = "tools[1].function.parameters";
    for (int i = 0; i < kMaxJsonDepth - 3; ++i) path += ".properties.a";
    EXPECT_EQ(g.error().path, path) << g.error().message;
  }
  // Arguments with no finite value at all.
  const ordered_json endless = ordered_json::parse(
      R"({"type":"object","properties":{"self":{"$ref":"#"}},"required":["self"]})");
  auto g = CompileToolCallGrammar({{"f", &endless, "tools[0].function.parameters"}}, {});
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().path, "tools[0].function.parameters.properties.self") << g.error().message;
}

// Random bytes the grammar allows until the value is complete (closing what is open after
// `patience` bytes), as json_matcher_test.cc does.
std::string Walk(JsonMatcher& m, std::mt19937_64& rng, size_t patience) {
  std::string out;
  for (size_t step = 0; step < 20000 && !(m.IsComplete() && !m.CanContinue()); ++step) {
    std::vector<uint8_t> allowed;
    for (int b = 0; b < 256; ++b) {
      if (m.Allows(static_cast<uint8_t>(b))) allowed.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) return out;
    uint8_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (step >= patience) {
      for (uint8_t pref : {'"', '}', ']'}) {
        if (std::find(allowed.begin(), allowed.end(), pref) != allowed.end()) {
          pick = pref;
          break;
        }
      }
    }
    EXPECT_TRUE(m.Advance(pick));
    m.Commit();
    out.push_back(static_cast<char>(pick));
  }
  return out;
}

TEST(ToolCallGrammar, RandomWalksParseIntoCallsThatMatchTheirSchemas) {
  std::mt19937_64 rng(20);
  for (int i = 0; i < 60; ++i) {
    std::vector<ordered_json> schemas;
    for (int f = 0; f < 3; ++f) {
      json s = testing::RandomSchema(rng);
      schemas.push_back(ordered_json(s));
    }
    std::vector<ToolFunctionSchema> fns;
    for (int f = 0; f < 3; ++f) {
      fns.push_back({"fn_" + std::to_string(f), &schemas[f], "p"});
    }
    auto g = CompileToolCallGrammar(fns, {.allow_response = i % 2 == 0, .max_calls = 3});
    ASSERT_TRUE(g.has_value()) << g.error().path << ": " << g.error().message;
    JsonMatcher m(*g);
    const std::string text = Walk(m, rng, 40);
    ASSERT_TRUE(m.IsComplete()) << text;
    // Streamed in uneven pieces, the parser finds the same calls as the JSON itself.
    ToolOutputParser parser;
    std::vector<ToolOutputParser::Event> events;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min<size_t>(text.size() - at, 1 + rng() % 7);
      parser.Push(std::string_view(text).substr(at, n), events);
      at += n;
    }
    EXPECT_TRUE(parser.done()) << text;
    const json value = json::parse(text);
    std::vector<std::string> names, args;
    std::string content;
    for (const auto& e : events) {
      if (e.kind == ToolOutputParser::Event::Kind::kCallStart) {
        names.push_back(e.text);
        args.emplace_back();
      } else if (e.kind == ToolOutputParser::Event::Kind::kArguments) {
        ASSERT_EQ(e.index + 1, static_cast<int>(args.size()));
        args.back() += e.text;
      } else {
        content += e.text;
      }
    }
    if (value.contains("response")) {
      EXPECT_EQ(content, value["response"].get<std::string>());
      EXPECT_TRUE(names.empty());
      continue;
    }
    ASSERT_EQ(names.size(), value["tool_calls"].size()) << text;
    for (size_t c = 0; c < names.size(); ++c) {
      EXPECT_EQ(names[c], value["tool_calls"][c]["name"]);
      const json parsed = json::parse(args[c]);
      EXPECT_EQ(parsed, value["tool_calls"][c]["arguments"]);
      const json schema = json(schemas[static_cast<size_t>(names[c].back() - '0')]);
      std::string why;
      EXPECT_TRUE(testing::MatchesSchema(parsed, schema, schema, &why)) << args[c] << ": " << why;
      // Rendered back, the calls are the bytes the model wrote.
    }
    std::vector<ToolCall> calls;
    for (size_t c = 0; c < names.size(); ++c) calls.push_back({names[c], args[c]});
    EXPECT_EQ(RenderToolCalls(calls), text);
  }
}

TEST(ToolOutputParser, ResponseTextIsUnescapedAcrossPieces) {
  ToolOutputParser p;
  std::vector<ToolOutputParser::Event> events;
  for (std::string_view piece : {"{\"res", "ponse\":\"Hi \\\"", "you\\\"\\n\\u00e9", "\\u2603!\"}"}) {
    p.Push(piece, events);
  }
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "Hi \"you\"\n\xc3\xa9\xe2\x98\x83!");
  EXPECT_TRUE(p.done());
  EXPECT_EQ(RenderToolResponse("Hi \"you\"\n"), R"({"response":"Hi \"you\"\n"})");
}

TEST(ToolOutputParser, TextOutsideTheFormatIsContent) {
  ToolOutputParser p;
  std::vector<ToolOutputParser::Event> events;
  p.Push("Sure! {\"a\":1}", events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ToolOutputParser::Event::Kind::kContent);
  EXPECT_EQ(events[0].text, "Sure! {\"a\":1}");
  EXPECT_FALSE(p.done());
}

TEST(ToolFormat, SystemPromptDescribesEveryFunctionInDeclaredOrder) {
  std::vector<ToolFunction> tools = {{"get_weather", "The weather now", kWeather},
                                     {"ping", "", kNone}};
  const std::string prompt = ToolSystemPrompt(tools);
  EXPECT_NE(prompt.find(R"({"name":"get_weather","description":"The weather now","parameters":{"type":"object","properties":{"city":)"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find(R"({"name":"ping","parameters":)"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find(R"({"tool_calls":[{"name":)"), std::string::npos);
  EXPECT_NE(prompt.find(R"({"response":)"), std::string::npos);
  // Arguments that are not JSON are written as a string, so the history stays JSON.
  EXPECT_EQ(RenderToolCalls({{"f", "{\"a\": 1}"}, {"g", "oops"}}),
            R"({"tool_calls":[{"name":"f","arguments":{"a": 1}},{"name":"g","arguments":"oops"}]})");
}

}  // namespace
}  // namespace kvgate::engine
