// The constrained decoder's automaton: accept/reject tables per schema feature, completion, the
// schema compiler's errors, and a randomized check (seeded) that random walks through the
// automaton always end in JSON that matches the schema, by an independent check.
#include "local_engine/json_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string_view>

#include "tests/local_engine/json_schema_check.h"

namespace kvgate::engine {
namespace {

using nlohmann::json;

std::shared_ptr<const JsonGrammar> Compile(const json& schema) {
  auto g = CompileJsonSchema(schema, "schema");
  EXPECT_TRUE(g.has_value()) << (g ? "" : g.error().path + ": " + g.error().message);
  return g ? *g : nullptr;
}

// The whole text is accepted and is a complete value.
bool Accepts(const std::shared_ptr<const JsonGrammar>& g, std::string_view text) {
  JsonMatcher m(g);
  return m.AdvanceBytes(text) && m.IsComplete();
}

void ExpectTable(const json& schema, std::initializer_list<std::string_view> good,
                 std::initializer_list<std::string_view> bad) {
  auto g = Compile(schema);
  ASSERT_TRUE(g);
  for (std::string_view s : good) EXPECT_TRUE(Accepts(g, s)) << schema.dump() << " should accept " << s;
  for (std::string_view s : bad) EXPECT_FALSE(Accepts(g, s)) << schema.dump() << " should reject " << s;
}

TEST(JsonMatcher, AnyObject) {
  auto g = JsonObjectGrammar();
  for (std::string_view s : {"{}", "{ }", "{\"a\":1}", "{\"a\": [1, 2.5e3, -0, true, null]}",
                             "{\"k\":{\"n\":{\"d\":\"x\\n\\u00e9\\\"\"}}}", " {\"a\":\"\xc3\xa9\xf0\x9f\x98\x80\"}",
                             "{\"a\":1,\"a\":2}", "{\"\":[]}", "{\"x\":-1.5E-2}"}) {
    EXPECT_TRUE(Accepts(g, s)) << s;
  }
  for (std::string_view s : {"", "[]", "1", "\"s\"", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}",
                             "{a:1}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":tru}",
                             "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\xc0\xaf\"}",
                             "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\\ud800\"}", "{} ", "{}{}",
                             "{\"a\":[1 2]}", "{\"a\":[,]}", "{\"a\":\"\xff\"}", "{   }",
                             "{\"a\":1e999}"}) {
    EXPECT_FALSE(Accepts(g, s)) << s;
  }
}

TEST(JsonMatcher, WhitespaceRunsAreBounded) {
  auto g = JsonObjectGrammar();
  EXPECT_TRUE(Accepts(g, "{\n \"a\" : 1 ,\n\t\"b\":2\r\n}"));
  EXPECT_FALSE(Accepts(g, "{\n   \"a\":1}"));  // three in a row
  auto tight = JsonObjectGrammar({.max_whitespace = 0});
  EXPECT_TRUE(Accepts(tight, "{\"a\":1}"));
  EXPECT_FALSE(Accepts(tight, "{ \"a\":1}"));
  JsonMatcher m(g);
  ASSERT_TRUE(m.AdvanceBytes("  "));
  EXPECT_FALSE(m.Allows(' '));  // a model cannot spin on spaces
  EXPECT_TRUE(m.Allows('{'));
}

TEST(JsonMatcher, Scalars) {
  ExpectTable({{"type", "string"}}, {"\"\"", "\"abc\"", "\"\\u0041\\/\"", "\"\xe6\x97\xa5\""},
              {"abc", "\"abc", "\"\t\"", "1", "\"\xe6\x97\""});
  ExpectTable({{"type", "string"}, {"minLength", 2}, {"maxLength", 3}},
              {"\"ab\"", "\"\xc3\xa9\\n\"", "\"\\u0041bc\""}, {"\"a\"", "\"abcd\"", "\"\""});
  ExpectTable({{"type", "integer"}}, {"0", "-7", "123456789012345678"},
              {"1.0", "1e3", "01", "-", "1234567890123456789", "\"1\""});
  ExpectTable({{"type", "number"}}, {"0", "-0.5", "1e10", "2.5E-3", "3e+07"},
              {"+1", ".5", "1.", "1e", "1e100", "NaN"});
  ExpectTable({{"type", "boolean"}}, {"true", "false"}, {"True", "tru", "null", "0"});
  ExpectTable({{"type", "null"}}, {"null"}, {"nul", "None", "{}"});
  ExpectTable({{"type", {"string", "null"}}}, {"\"x\"", "null"}, {"1", "nullx"});
  ExpectTable({{"type", {"integer", "number"}}}, {"1", "1.5"}, {"\"1\""});
}

TEST(JsonMatcher, EnumAndConst) {
  ExpectTable({{"enum", {"red", "green", 1, 12, nullptr, json::object({{"k", 1}})}}},
              {"\"red\"", "\"green\"", "1", "12", "null", "{\"k\":1}"},
              {"\"blue\"", "\"re\"", "2", "123", "{\"k\": 1}", "\"red\" "});
  ExpectTable({{"const", "only"}}, {"\"only\""}, {"\"onl\"", "\"only!\""});
  ExpectTable({{"type", "string"}, {"enum", {"a", "ab"}}}, {"\"a\"", "\"ab\""}, {"\"abc\""});
}

TEST(JsonMatcher, ObjectsInDeclaredOrder) {
  const json s = {{"type", "object"},
                  {"properties",
                   {{"age", {{"type", "integer"}}}, {"name", {{"type", "string"}}},
                    {"nick", {{"type", "string"}}}}},
                  {"required", {"age", "name"}},
                  {"additionalProperties", false}};
  ExpectTable(s,
              {"{\"age\":3,\"name\":\"x\"}", "{\"age\":3,\"name\":\"x\",\"nick\":\"y\"}",
               "{ \"age\" : 3 , \"name\" : \"x\" }"},
              {"{}", "{\"age\":3}", "{\"name\":\"x\",\"age\":3}", "{\"age\":3,\"name\":\"x\",\"z\":1}",
               "{\"age\":\"3\",\"name\":\"x\"}", "{\"age\":3,\"age\":3,\"name\":\"x\"}",
               "{\"age\":3,\"nam\":\"x\"}", "{\"age\":3,\"nick\":\"y\"}"});
  // Keys sharing a prefix; optional keys may be skipped.
  ExpectTable({{"type", "object"},
               {"properties", {{"a", {{"type", "null"}}}, {"ab", {{"type", "null"}}}, {"abc", {{"type", "null"}}}}}},
              {"{}", "{\"a\":null}", "{\"ab\":null}", "{\"abc\":null}", "{\"a\":null,\"abc\":null}"},
              {"{\"abcd\":null}", "{\"ab\":null,\"a\":null}"});
  ExpectTable({{"type", "object"}, {"additionalProperties", false}}, {"{}", "{ }"}, {"{\"a\":1}"});
  ExpectTable({{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}},
              {"{}", "{\"x\":1,\"y\":2}"}, {"{\"x\":\"1\"}"});
  // Keys that need escaping are matched in their escaped form.
  ExpectTable({{"type", "object"}, {"properties", {{"q\"t", {{"type", "null"}}}}}, {"required", {"q\"t"}}},
              {"{\"q\\\"t\":null}"}, {"{\"q\":null}"});
}

TEST(JsonMatcher, ArraysAndNesting) {
  ExpectTable({{"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", 1}, {"maxItems", 2}},
              {"[1]", "[1,2]", "[ 1 , 2 ]"}, {"[]", "[1,2,3]", "[1,]", "[\"a\"]"});
  ExpectTable({{"type", "array"}, {"items", {{"type", "array"}, {"items", {{"type", "boolean"}}}}}},
              {"[]", "[[]]", "[[true],[false,true]]"}, {"[[1]]", "[true]"});
  ExpectTable({{"type", "array"}, {"maxItems", 0}}, {"[]"}, {"[1]"});
}

TEST(JsonMatcher, AnyOfAndRefs) {
  ExpectTable({{"anyOf", {{{"type", "object"}, {"properties", {{"x", {{"type", "integer"}}}}},
                           {"required", {"x"}}},
                          {{"type", "null"}}}}},
              {"{\"x\":1}", "null"}, {"{}", "1"});
  const json tree = {{"$defs",
                      {{"Node",
                        {{"type", "object"},
                         {"properties", {{"kids", {{"type", "array"}, {"items", {{"$ref", "#/$defs/Node"}}}}},
                                         {"v", {{"type", "integer"}}}}},
                         {"required", {"v"}}}}}},
                     {"$ref", "#/$defs/Node"}};
  ExpectTable(tree, {"{\"v\":1}", "{\"kids\":[{\"v\":2},{\"kids\":[],\"v\":3}],\"v\":1}"},
              {"{\"kids\":[]}", "{\"kids\":[{}],\"v\":1}"});
  ExpectTable({{"type", "object"}, {"properties", {{"self", {{"$ref", "#"}}}}}},
              {"{}", "{\"self\":{\"self\":{}}}"}, {"{\"self\":1}"});
}

TEST(JsonMatcher, CompletionAndContinuation) {
  auto num = Compile({{"type", "number"}});
  JsonMatcher m(num);
  EXPECT_FALSE(m.IsComplete());
  ASSERT_TRUE(m.AdvanceBytes("12"));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.CanContinue());  // 123, 12.5, 12e3
  auto obj = JsonObjectGrammar();
  JsonMatcher o(obj);
  ASSERT_TRUE(o.AdvanceBytes("{\"a\":1"));
  EXPECT_FALSE(o.IsComplete());
  ASSERT_TRUE(o.Advance('}'));
  EXPECT_TRUE(o.IsComplete());
  EXPECT_FALSE(o.CanContinue());  // nothing after the value, not even whitespace
}

TEST(JsonMatcher, RollbackRestoresTheState) {
  auto g = JsonObjectGrammar();
  JsonMatcher m(g);
  ASSERT_TRUE(m.AdvanceBytes("{\"a\":[1,"));
  m.Commit();
  const size_t mark = m.Mark();
  ASSERT_TRUE(m.AdvanceBytes("{\"b\":\"x"));
  EXPECT_EQ(m.depth(), 5);
  m.Rollback(mark);
  EXPECT_EQ(m.depth(), 3);
  EXPECT_FALSE(m.Allows(']'));  // after a comma a value must come
  EXPECT_TRUE(m.AdvanceBytes("2]}"));
  EXPECT_TRUE(m.IsComplete());
}

TEST(JsonMatcher, DepthIsBounded) {
  auto g = Compile(json::object());
  JsonMatcher m(g);
  int opened = 0;
  while (m.Advance('[')) ++opened;
  EXPECT_EQ(opened, kMaxJsonDepth);
  EXPECT_TRUE(m.Allows('1'));  // a scalar still fits, so the value can be finished
  for (int i = 0; i < opened; ++i) ASSERT_TRUE(m.Advance(']'));
  EXPECT_TRUE(m.IsComplete());
}

// `levels` objects, each the required property "a" of the one around it, around an integer.
json NestedRequired(int levels) {
  json s = {{"type", "integer"}};
  for (int i = 0; i < levels; ++i) {
    s = {{"type", "object"}, {"properties", {{"a", s}}}, {"required", {"a"}}};
  }
  return s;
}

TEST(JsonSchemaCompile, ShallowestValueMustFitTheDepthBound) {
  // kMaxJsonDepth objects fit; one more is a 400 before anything runs, naming the level that
  // goes past the bound.
  auto fits = CompileJsonSchema(NestedRequired(kMaxJsonDepth), "s");
  ASSERT_TRUE(fits.has_value()) << fits.error().path << ": " << fits.error().message;
  std::string deep_text = "1";
  for (int i = 0; i < kMaxJsonDepth; ++i) deep_text = "{\"a\":" + deep_text + "}";
  EXPECT_TRUE(Accepts(*fits, deep_text));
  auto deep = CompileJsonSchema(NestedRequired(kMaxJsonDepth + 1), "s");
  ASSERT_FALSE(deep.has_value());
  std::string path = "s";
  for (int i = 0; i < kMaxJsonDepth; ++i) path += ".properties.a";
  EXPECT_EQ(deep.error().path, path) << deep.error().message;
  EXPECT_NE(deep.error().message.find("48"), std::string::npos) << deep.error().message;
  // Optional nesting is no minimum: the same depth without `required` compiles (the shallowest
  // value is {}), and so do arrays without minItems; with minItems 1 they count.
  json optional = {{"type", "integer"}};
  json arrays = {{"type", "integer"}};
  json full_arrays = {{"type", "integer"}};
  for (int i = 0; i <= kMaxJsonDepth; ++i) {
    optional = {{"type", "object"}, {"properties", {{"a", optional}}}};
    arrays = {{"type", "array"}, {"items", arrays}};
    full_arrays = {{"type", "array"}, {"items", full_arrays}, {"minItems", 1}};
  }
  EXPECT_TRUE(CompileJsonSchema(optional, "s").has_value());
  EXPECT_TRUE(CompileJsonSchema(arrays, "s").has_value());
  auto full = CompileJsonSchema(full_arrays, "s");
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().path.substr(0, 8), "s.items.");
}

TEST(JsonSchemaCompile, RecursionWithNoFiniteValueIsAnError) {
  struct Case {
    json schema;
    std::string path;  // where the endless recursion starts
  };
  const std::vector<Case> cases = {
      // The object's required property is the object itself.
      {{{"type", "object"}, {"properties", {{"next", {{"$ref", "#"}}}}}, {"required", {"next"}}},
       "s.properties.next"},
      // Through $defs, one level down.
      {{{"type", "object"},
        {"$defs",
         {{"Node",
           {{"type", "object"},
            {"properties", {{"child", {{"$ref", "#/$defs/Node"}}}}},
            {"required", {"child"}}}}}},
        {"properties", {{"root", {{"$ref", "#/$defs/Node"}}}}},
        {"required", {"root"}}},
       "s.properties.root"},
      // An array that must hold at least one of itself.
      {{{"type", "array"}, {"minItems", 1}, {"items", {{"$ref", "#"}}}}, "s.items"},
      // Two definitions that require each other.
      {{{"$defs",
         {{"A",
           {{"type", "object"},
            {"properties", {{"b", {{"$ref", "#/$defs/B"}}}}},
            {"required", {"b"}}}},
          {"B", {{"type", "array"}, {"minItems", 2}, {"items", {{"$ref", "#/$defs/A"}}}}}}},
        {"$ref", "#/$defs/A"}},
       "s"},
  };
  for (const Case& c : cases) {
    auto g = CompileJsonSchema(c.schema, "s");
    ASSERT_FALSE(g.has_value()) << c.schema.dump();
    EXPECT_EQ(g.error().path, c.path) << c.schema.dump() << ": " << g.error().message;
    EXPECT_NE(g.error().message.find("no finite value"), std::string::npos) << g.error().message;
  }
  // The same recursions with a way out are fine: an optional property, anyOf null, minItems 0
  // (an optional property that has no finite value is never written, see below).
  const char* const kWithAWayOut[] = {
      R"({"type":"object","properties":{"next":{"$ref":"#"}}})",
      R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},
          "required":["next"]})",
      R"({"type":"array","items":{"$ref":"#"}})",
      R"({"type":"object","properties":{"loop":{"$ref":"#/$defs/L"}},"$defs":{"L":{
          "type":"object","properties":{"l":{"$ref":"#/$defs/L"}},"required":["l"]}}})"};
  for (const char* text : kWithAWayOut) {
    auto g = CompileJsonSchema(json::parse(text), "s");
    EXPECT_TRUE(g.has_value()) << text << ": " << g.error().path << ": " << g.error().message;
  }
  // The optional property with no finite value: its key is never begun, only {} is written.
  auto loop = Compile(json::parse(R"({"type":"object","properties":{"loop":{"$ref":"#/$defs/L"}},
      "$defs":{"L":{"type":"object","properties":{"l":{"$ref":"#/$defs/L"}},"required":["l"]}}})"));
  ASSERT_TRUE(loop);
  JsonMatcher m(loop);
  ASSERT_TRUE(m.Advance('{'));
  EXPECT_FALSE(m.Allows('"'));
  EXPECT_TRUE(m.Advance('}'));
  EXPECT_TRUE(m.IsComplete());
}

// Always the byte that nests deepest (strings closed at once, then openers, keys, closers), as a
// model that keeps opening would: under a recursive schema it runs into the depth bound. Every
// state on the way must allow some byte until the value is complete, and the text must be a whole
// value.
void ExpectDeepWalkFinishes(const json& schema) {
  auto g = Compile(schema);
  ASSERT_TRUE(g);
  JsonMatcher m(g);
  std::string out;
  int max_depth = 0;
  for (int step = 0; step < 4000 && !(m.IsComplete() && !m.CanContinue()); ++step) {
    int pick = -1;
    for (uint8_t pref : std::string_view("\"[{c:n]}")) {
      if (m.Allows(pref)) {
        pick = pref;
        break;
      }
    }
    for (int b = 0; pick < 0 && b < 256; ++b) {
      if (m.Allows(static_cast<uint8_t>(b))) pick = b;
    }
    ASSERT_GE(pick, 0) << schema.dump() << ": stuck, nothing allowed after " << out;
    ASSERT_TRUE(m.Advance(static_cast<uint8_t>(pick)));
    m.Commit();
    out.push_back(static_cast<char>(pick));
    max_depth = std::max(max_depth, m.depth());
  }
  EXPECT_GE(max_depth, kMaxJsonDepth) << schema.dump() << ": the walk did not reach the bound";
  EXPECT_TRUE(m.IsComplete()) << schema.dump() << ": " << out;
  EXPECT_FALSE(json::parse(out, nullptr, false).is_discarded()) << out;
}

TEST(JsonMatcher, NoValueIsBegunThatCannotBeFinishedUnderTheDepthBound) {
  // An optional key whose value is an object: at the bound, the key is no longer offered.
  ExpectDeepWalkFinishes(json::parse(R"({"type":"object","properties":{"c":{"$ref":"#"}}})"));
  // A map whose values must be maps: at the bound, no key (it would need a value).
  ExpectDeepWalkFinishes(json::parse(R"({"type":"object","additionalProperties":{"$ref":"#"}})"));
  // An array whose items are objects holding an array: no item once an item would not fit.
  ExpectDeepWalkFinishes(json::parse(
      R"({"type":"array","maxItems":1,"items":{"type":"object","properties":{"c":{"$ref":"#"}},"required":["c"]}})"));
  // anyOf an object and null: at the bound only null.
  ExpectDeepWalkFinishes(json::parse(
      R"({"type":"object","properties":{"c":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["c"]})"));
}

TEST(JsonMatcher, EmptyPropertiesMeanNoKeys) {
  // `properties: {}` declares the keys there are: none (a tool without arguments), as an object
  // with properties takes only its declared keys.
  ExpectTable({{"type", "object"}, {"properties", json::object()}}, {"{}", "{ }"},
              {R"({"a":1})", R"({"":null})"});
  // additionalProperties true or a schema still asks for a map; no properties at all is any keys.
  ExpectTable({{"type", "object"}, {"properties", json::object()}, {"additionalProperties", true}},
              {"{}", R"({"a":1})"}, {});
  ExpectTable({{"type", "object"},
               {"properties", json::object()},
               {"additionalProperties", {{"type", "integer"}}}},
              {"{}", R"({"a":1})"}, {R"({"a":"x"})"});
  ExpectTable({{"type", "object"}}, {"{}", R"({"a":1})"}, {});
}

TEST(JsonSchemaCompile, ErrorsNameTheField) {
  struct Case {
    json schema;
    std::string path;
  };
  const std::vector<Case> cases = {
      {{{"type", "object"}, {"properties", {{"age", {{"type", "int"}}}}}}, "s.properties.age.type"},
      {{{"type", "string"}, {"pattern", "^a"}}, "s.pattern"},
      {{{"type", "object"}, {"properties", {{"a", {{"type", "string"}, {"format", "date"}}}}}},
       "s.properties.a.format"},
      {{{"type", "object"}, {"properties", {{"a", true}}}, {"required", {"a", "b"}}}, "s.required[1]"},
      {{{"type", {"string", 3}}}, "s.type[1]"},
      {{{"anyOf", {{{"type", "object"}, {"properties", {{"a", true}}}},
                    {{"type", "object"}, {"properties", {{"x", true}}}}}}},
       "s.anyOf"},
      {{{"$ref", "#/$defs/Missing"}}, "s.$ref"},
      {{{"$ref", "https://example.com/s.json"}}, "s.$ref"},
      {{{"type", "array"}, {"minItems", 3}, {"maxItems", 1}}, "s.minItems"},
      {{{"type", "string"}, {"maxLength", -1}}, "s.maxLength"},
      {{{"type", "array"}, {"items", {{"type", "number"}, {"minimum", 0}}}}, "s.items.minimum"},
      {{{"enum", json::array()}}, "s.enum"},
      {{{"type", "integer"}, {"enum", {1, "a"}}}, "s.enum[1]"},
      {json(false), "s"},
      {json(3), "s"},
      {{{"$defs", {{"A", {{"$ref", "#/$defs/A"}}}}}, {"$ref", "#/$defs/A"}}, "s.$ref"},
  };
  for (const Case& c : cases) {
    auto g = CompileJsonSchema(c.schema, "s");
    ASSERT_FALSE(g.has_value()) << c.schema.dump();
    EXPECT_EQ(g.error().path, c.path) << c.schema.dump() << ": " << g.error().message;
    EXPECT_FALSE(g.error().message.empty());
  }
}

TEST(JsonSchemaCompile, PydanticStyleSchemas) {
  // What openai's pydantic helper sends for a model with a nested model, an enum and an Optional.
  const json s = json::parse(R"({
    "$defs": {"Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
              "Pet": {"properties": {"kind": {"title": "Kind", "type": "string"}},
                      "required": ["kind"], "title": "Pet", "type": "object",
                      "additionalProperties": false}},
    "properties": {"name": {"title": "Name", "type": "string"},
                   "color": {"$ref": "#/$defs/Color"},
                   "pet": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}]},
                   "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array"}},
    "required": ["name", "color", "pet", "tags"], "title": "Person", "type": "object",
    "additionalProperties": false})");
  auto g = Compile(s);
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(g, R"({"color":"red","name":"Ann","pet":null,"tags":[]})"));
  EXPECT_TRUE(Accepts(g, R"({"color":"green","name":"B","pet":{"kind":"cat"},"tags":["x"]})"));
  EXPECT_FALSE(Accepts(g, R"({"color":"blue","name":"Ann","pet":null,"tags":[]})"));
}

// Chooses random allowed bytes until the value is complete; after `patience` bytes it prefers
// bytes that close what is open, so every walk ends.
std::string RandomWalk(JsonMatcher& m, std::mt19937_64& rng, size_t patience, bool* ok) {
  std::string out;
  *ok = false;
  for (size_t step = 0; step < 20000; ++step) {
    if (m.IsComplete() && (!m.CanContinue() || std::bernoulli_distribution(0.3)(rng))) {
      *ok = true;
      return out;
    }
    std::vector<uint8_t> allowed;
    for (int b = 0; b < 256; ++b) {
      if (m.Allows(static_cast<uint8_t>(b))) allowed.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) return out;  // a dead end: the test fails
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

TEST(JsonMatcher, RandomSchemasRandomWalksAlwaysMatch) {
  std::mt19937_64 rng(20260201);
  int checked = 0;
  for (int i = 0; i < 300; ++i) {
    const json schema = testing::RandomSchema(rng);
    auto g = CompileJsonSchema(schema, "schema");
    ASSERT_TRUE(g.has_value()) << schema.dump() << ": " << g.error().path << ": " << g.error().message;
    for (int walk = 0; walk < 3; ++walk) {
      JsonMatcher m(*g);
      bool ok = false;
      const std::string text = RandomWalk(m, rng, walk == 0 ? 8 : 60, &ok);
      ASSERT_TRUE(ok) << "no way on after " << text << " for " << schema.dump();
      const json value = json::parse(text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << "not JSON: " << text << " for " << schema.dump();
      std::string why;
      ASSERT_TRUE(testing::MatchesSchema(value, schema, schema, &why))
          << text << " does not match " << schema.dump() << ": " << why;
      JsonMatcher again(*g);
      EXPECT_TRUE(again.AdvanceBytes(text) && again.IsComplete()) << text;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 900);
}

}  // namespace
}  // namespace kvgate::engine
