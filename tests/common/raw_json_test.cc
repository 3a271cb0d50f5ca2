// raw_json: acceptance must agree with nlohmann::json::parse (the gateway used it before; clients
// see the same 400s), and navigation must agree with the tree nlohmann builds.
#include "common/raw_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kvgate::raw_json {
namespace {

using nlohmann::json;

bool NlohmannAccepts(std::string_view text) {
  return !json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false).is_discarded();
}

// Rebuilds an nlohmann tree from raw_json navigation only (decoded strings, minified scalars).
json Rebuild(Value v) {
  switch (v.kind) {
    case Kind::kObject: {
      json out = json::object();
      for (const Member& m : Members(v)) {
        std::string quoted = "\"" + std::string(m.key) + "\"";
        out[*DecodeString(Value{Kind::kString, quoted})] = Rebuild(m.value);
      }
      return out;
    }
    case Kind::kArray: {
      json out = json::array();
      for (Value e : Elements(v)) out.push_back(Rebuild(e));
      return out;
    }
    case Kind::kString:
      return *DecodeString(v);
    default:
      return json::parse(v.text);
  }
}

const std::vector<std::string>& Seeds() {
  static const std::vector<std::string> seeds = {
      R"({"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are helpful."},)"
      R"({"role":"user","content":"Say \"hi\"\n\u00e9\ud83d\ude00 caf\u00e9 — ünïcödé"}],)"
      R"("stream":true,"stream_options":{"include_usage":false},"temperature":0.7,"max_tokens":128,)"
      R"("thread_identifier":"t-1","metadata":{"thread_id":42,"x":[1,-2.5e-3,true,false,null]}})",
      " \t\r\n[ 1 , 2.0 , -0 , 1E+2 , \"a\\/b\\\\c\\b\\f\\r\\t\" , { } , [ ] ] \n",
      "\xEF\xBB\xBF{\"bom\": \"\xE4\xB8\xAD\xF0\x9F\x98\x80\"}",
      R"("just a string")",
      "123456789012345678901234567890",
      R"({"a":{"b":{"c":[[[{"d":"e"}]]]}},"a":2})",
  };
  return seeds;
}

TEST(RawJsonTest, AcceptsWhatNlohmannAccepts) {
  for (const std::string& s : Seeds()) {
    auto v = Parse(s);
    ASSERT_TRUE(v.has_value()) << s << ": " << v.error().message;
    EXPECT_EQ(Rebuild(*v), json::parse(s)) << s;
  }
}

TEST(RawJsonTest, RejectsWithPositionAndReason) {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "invalid JSON at byte 0: empty input"},
      {"   ", "invalid JSON at byte 3: empty input"},
      {"{\"a\":1,}", "invalid JSON at byte 7: expected a string key"},
      {"{\"a\" 1}", "invalid JSON at byte 5: expected ':' after an object key"},
      {"[1 2]", "invalid JSON at byte 3: expected ',' or ']' after an array element"},
      {"{\"a\":\"x", "invalid JSON at byte 7: unterminated string"},
      {"\"a\x01\"", "invalid JSON at byte 2: control character in a string (escape it)"},
      {"\"\\x\"", "invalid JSON at byte 2: invalid escape in a string"},
      {"\"\\ud800\"", "invalid JSON at byte 7: UTF-16 high surrogate escape not followed by a low surrogate"},
      {"\"\\udc00\"", "invalid JSON at byte 7: unpaired UTF-16 low surrogate escape"},
      {"\"\xC0\xAF\"", "invalid JSON at byte 1: invalid UTF-8 in a string"},
      {"\"\xED\xA0\x80\"", "invalid JSON at byte 2: invalid UTF-8 in a string"},
      {"01", "invalid JSON at byte 1: unexpected content after the JSON value"},
      {"-", "invalid JSON at byte 1: invalid number: expected a digit"},
      {"1.", "invalid JSON at byte 2: invalid number: expected a digit after '.'"},
      {"1e400", "invalid JSON at byte 0: number overflows a double"},
      {"tru", "invalid JSON at byte 0: invalid literal"},
      {"{} {}", "invalid JSON at byte 3: unexpected content after the JSON value"},
      {std::string("[1]\0junk", 8), "invalid JSON at byte 3: unexpected content after the JSON value"},
      {std::string(kMaxDepth + 1, '['), "invalid JSON at byte 512: nesting deeper than 512"},
  };
  for (const Case& c : cases) {
    auto v = Parse(c.text);
    ASSERT_FALSE(v.has_value()) << c.text;
    EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(v.error().message, c.message) << c.text;
    if (c.text.find('[') != 0 && c.text.find('\0') == std::string::npos) {
      EXPECT_FALSE(NlohmannAccepts(c.text)) << c.text;
    }
  }
  EXPECT_TRUE(Parse(std::string(kMaxDepth, '[') + std::string(kMaxDepth, ']')).has_value());
}

// Every single-byte replacement, deletion and insertion of interesting bytes, and every truncation,
// of each seed: raw_json and nlohmann agree on acceptance, and on content where both accept.
TEST(RawJsonTest, MutationsAgreeWithNlohmann) {
  using namespace std::string_literals;
  const std::string bytes = std::string("{}[]\",:\\/ \t\n0123456789-+.eEtrufalsn") +
                            "\x00\x01\x1f\x7f\x80\xbf\xc2\xdf\xe0\xed\xef\xf0\xf4\xf5\xff"s + "u" +
                            "ABCDEF";
  size_t checked = 0;
  auto check = [&](const std::string& text) {
    const bool ours = Parse(text).has_value();
    // nlohmann stops reading at a NUL byte and accepts what came before it ("[1]\0junk"); a NUL
    // is never valid JSON (not even inside a string), so raw_json rejects every such input.
    const bool expected = text.find('\0') == std::string::npos && NlohmannAccepts(text);
    ASSERT_EQ(ours, expected) << "input: " << json(text).dump(-1, ' ', true, json::error_handler_t::replace);
    if (ours) {
      ASSERT_EQ(Rebuild(*Parse(text)), json::parse(text));
    }
    ++checked;
  };
  for (const std::string& seed : Seeds()) {
    for (size_t i = 0; i <= seed.size(); ++i) {
      check(seed.substr(0, i));
      if (i == seed.size()) break;
      std::string deleted = seed;
      deleted.erase(i, 1);
      check(deleted);
      for (char b : bytes) {
        std::string replaced = seed;
        replaced[i] = b;
        check(replaced);
        std::string inserted = seed;
        inserted.insert(inserted.begin() + static_cast<std::ptrdiff_t>(i), b);
        check(inserted);
      }
    }
  }
  EXPECT_GT(checked, 55000u);  // the loops above really ran
}

// Random documents with random whitespace: navigation rebuilds the same tree; AppendMinified equals
// nlohmann's compact dump where strings need no re-escaping.
TEST(RawJsonTest, RandomDocumentsRoundTrip) {
  std::mt19937 rng(7);
  auto ws = [&] {
    static const char* kSpaces[] = {"", " ", "\n", "\t", "\r\n  "};
    return std::string(kSpaces[rng() % 5]);
  };
  std::function<std::string(int)> gen = [&](int depth) -> std::string {
    switch (depth > 4 ? rng() % 4 : rng() % 6) {
      case 0:
        return std::to_string(static_cast<int64_t>(rng()) - (1 << 30));
      case 1:
        return rng() % 2 ? "true" : "null";
      case 2:
        return "\"s" + std::to_string(rng() % 100) + "\"";
      case 3:
        return "-1.5e" + std::to_string(rng() % 20);
      case 4: {
        std::string out = "[" + ws();
        const int n = static_cast<int>(rng() % 4);
        for (int i = 0; i < n; ++i) out += (i ? "," + ws() : "") + gen(depth + 1) + ws();
        return out + "]";
      }
      default: {
        std::string out = "{" + ws();
        const int n = static_cast<int>(rng() % 4);
        for (int i = 0; i < n; ++i) {
          out += (i ? "," + ws() : "") + "\"k" + std::to_string(i) + "\"" + ws() + ":" + ws() +
                 gen(depth + 1) + ws();
        }
        return out + "}";
      }
    }
  };
  for (int i = 0; i < 2000; ++i) {
    const std::string doc = ws() + gen(0) + ws();
    auto v = Parse(doc);
    ASSERT_TRUE(v.has_value()) << doc << ": " << v.error().message;
    const json tree = json::parse(doc);
    ASSERT_EQ(Rebuild(*v), tree) << doc;
    std::string minified;
    AppendMinified(*v, minified);
    ASSERT_EQ(json::parse(minified), tree);
    ASSERT_EQ(minified.find_first_of(" \t\r\n"), std::string::npos) << minified;
  }
}

// Strings longer than the scanners' 16-byte steps, with an escape (quote, backslash, unicode) or a
// non-ASCII or control byte at every offset: validation, navigation and minification agree with
// nlohmann wherever the special byte falls relative to a step.
TEST(RawJsonTest, SpecialBytesAtEveryOffsetOfLongStrings) {
  const std::string specials[] = {"\\\"", "\\\\", "\\u00e9", "\xc3\xa9", "\\n", "]}[{", "\\\"}"};
  for (const std::string& special : specials) {
    for (size_t offset = 0; offset < 40; ++offset) {
      const std::string text =
          std::string(offset, 'a') + special + std::string(37 - offset % 7, 'b');
      const std::string doc = "{\"s\":\"" + text + "\",\"t\":[\"" + text + "\", 1],\"u\":2}";
      auto v = Parse(doc);
      ASSERT_TRUE(v.has_value()) << doc;
      const json tree = json::parse(doc);
      ASSERT_EQ(Rebuild(*v), tree) << doc;
      std::string minified;
      AppendMinified(*v, minified);
      ASSERT_EQ(json::parse(minified), tree) << doc;
      // Unescaped, the same bytes are invalid where they hold a raw quote or control byte.
      const std::string raw_control =
          "[\"" + std::string(offset, 'a') + "\x01" + "bbbbbbbbbbbbbbbbbbbb\"]";
      EXPECT_FALSE(Parse(raw_control).has_value()) << offset;
    }
  }
}

// Containers skipped whole (navigation past a member's value) with every bracket and quote at every
// offset of the string scanner's 16-byte steps, in whitespace-padded and compact forms.
TEST(RawJsonTest, ContainersAtEveryOffsetOfTheScannersSteps) {
  const std::string docs[] = {
      R"([[1,{"a":[]}],{},[[[]]],"]",{"b}":"{["}])",
      R"({"x":{"y":{"z":[1,2,{"w":"\"]"}]}},"v":[{}],"u":"}"})",
      R"([{"k":[true,null,-1.5e3,"s"]},[],{"q":{"r":[]}}])",
  };
  size_t checked = 0;
  for (const std::string& inner : docs) {
    for (size_t pad = 0; pad < 40; ++pad) {
      for (const std::string& gap : {std::string(), std::string(pad % 5, ' ')}) {
        std::string spread;  // `gap` after every structural byte
        for (char c : inner) {
          spread += c;
          if (c == ',' || c == ':' || c == '[' || c == '{') spread += gap;
        }
        const std::string doc = "{" + std::string(pad, ' ') + "\"a\":" + spread + ",\"z\":" +
                                spread + "}";
        auto v = Parse(doc);
        ASSERT_TRUE(v.has_value()) << doc << ": " << v.error().message;
        ASSERT_EQ(Rebuild(*v), json::parse(doc)) << doc;
        auto z = Find(*v, "z");
        ASSERT_TRUE(z.has_value()) << doc;
        ASSERT_EQ(json::parse(z->text), json::parse(spread)) << doc;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3u * 40u * 2u);
}

TEST(RawJsonTest, FindKeepsTheLastDuplicateAndDecodesKeys) {
  const std::string doc = R"({"model":"a","m\u006fdel":"b","x":{"model":"c"}})";
  auto v = Parse(doc);
  ASSERT_TRUE(v.has_value());
  auto model = Find(*v, "model");
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->text, "\"b\"");
  EXPECT_FALSE(Find(*v, "missing").has_value());
  EXPECT_FALSE(Find(*model, "model").has_value());  // not an object
  EXPECT_EQ(Members(*v).size(), 3u);
  EXPECT_EQ(DecodeString(*model), "b");
  EXPECT_FALSE(DecodeString(Value{Kind::kNumber, "1"}).has_value());
}

TEST(RawJsonTest, ObjectReadsMembersOnceAndFindsTheLast) {
  const std::string doc = R"({"a":1,"b":{"c":2},"a":3})";
  const Object o(Parse(doc).value());
  ASSERT_TRUE(o.is_object());
  EXPECT_EQ(o.members().size(), 3u);
  EXPECT_EQ(o.Find("a")->text, "3");
  EXPECT_EQ(o.Find("b")->text, R"({"c":2})");
  EXPECT_FALSE(o.Find("c").has_value());
  const Object not_object(Parse("[1]").value());
  EXPECT_FALSE(not_object.is_object());
  EXPECT_TRUE(not_object.members().empty());
  EXPECT_FALSE(not_object.Find("a").has_value());
}

TEST(RawJsonTest, AppendQuotedRoundTripsThroughAParser) {
  std::string all;
  for (int c = 1; c < 128; ++c) all += static_cast<char>(c);
  all += "\xC3\xA9\xF0\x9F\x98\x80";
  std::string quoted;
  AppendQuoted(all, quoted);
  auto v = Parse(quoted);
  ASSERT_TRUE(v.has_value()) << v.error().message;
  EXPECT_EQ(DecodeString(*v), all);
  EXPECT_EQ(json::parse(quoted).get<std::string>(), all);
}

}  // namespace
}  // namespace kvgate::raw_json

namespace kvgate::raw_json {
namespace {

TEST(RawJsonKeyTest, KeyIsMatchesEscapedKeysAndRejectsOthers) {
  auto key_of = [](std::string_view doc) {
    Result<Value> v = Parse(doc);
    EXPECT_TRUE(v.has_value()) << doc;
    std::vector<Member> members = Members(*v);
    EXPECT_EQ(members.size(), 1u) << doc;
    return members.at(0);
  };
  for (std::string_view doc : {R"({"model":1})", R"({"\u006dodel":1})", R"({"m\u006fdel":1})",
                               R"({"mode\u006c":1})", R"({"\u006d\u006f\u0064\u0065\u006c":1})"}) {
    EXPECT_TRUE(key_of(doc).KeyIs("model")) << doc;
  }
  for (std::string_view doc : {R"({"models":1})", R"({"mode":1})", R"({"\u0078odel":1})",
                               R"({"xmodel\n":1})", R"({"mo\"del":1})", R"({"":1})"}) {
    EXPECT_FALSE(key_of(doc).KeyIs("model")) << doc;
  }
  EXPECT_TRUE(key_of(R"({"":1})").KeyIs(""));
  EXPECT_FALSE(key_of(R"({"\u0061":1})").KeyIs(""));
}

}  // namespace
}  // namespace kvgate::raw_json
