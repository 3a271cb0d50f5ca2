// JsonWriter, the hand-rolled writer behind the crash journal, the router's decision and the
// stored attempts lists: what it writes must read back as the value nlohmann itself would have
// written, for every kind of value, including text that is not UTF-8.
#include "common/json_writer.h"

#include <gtest/gtest.h>

#include <random>

#include "common/json_text.h"

namespace kvgate {
namespace {

using nlohmann::json;

// A random value: nested objects and arrays, strings with quotes, control bytes, multi-byte
// UTF-8 and (sometimes) bytes that are not UTF-8, every number kind.
json RandomValue(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 3 ? 5 : 7);
  auto text = [&] {
    static const std::string kPieces[] = {"a", "\"", "\\", "\n", "\x01", "\x1f", "\xc3\xa9",
                                          "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xff", "\xc3", " "};
    std::string s;
    const int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i) s += kPieces[std::uniform_int_distribution<int>(0, 11)(rng)];
    return s;
  };
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    case 2: return std::uniform_int_distribution<int64_t>(INT64_MIN, INT64_MAX)(rng);
    case 3: return std::uniform_int_distribution<uint64_t>(0, UINT64_MAX)(rng);
    case 4: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 5: return text();
    case 6: {
      json a = json::array();
      const int n = std::uniform_int_distribution<int>(0, 4)(rng);
      for (int i = 0; i < n; ++i) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      const int n = std::uniform_int_distribution<int>(0, 4)(rng);
      for (int i = 0; i < n; ++i) o[text()] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

TEST(JsonWriterTest, AWalkedValueReadsBackAsNlohmannsOwnText) {
  std::mt19937 rng(20261202);
  for (int i = 0; i < 2000; ++i) {
    const json value = RandomValue(rng, 0);
    const std::string written = WriteJson(value);
    const json back = json::parse(written);  // throws, failing the test, if it is not JSON
    EXPECT_EQ(back, json::parse(JsonText(value))) << written;
  }
}

TEST(JsonWriterTest, NumbersKeepTheirKind) {
  const json value = {{"f", 2.0}, {"i", -3}, {"u", uint64_t{18446744073709551615u}}, {"x", 0.1}};
  const json back = json::parse(WriteJson(value));
  EXPECT_TRUE(back["f"].is_number_float());
  EXPECT_TRUE(back["i"].is_number_integer());
  EXPECT_EQ(back["u"].get<uint64_t>(), 18446744073709551615u);
  EXPECT_EQ(back["x"].get<double>(), 0.1);
  EXPECT_EQ(WriteJson(json(std::nan(""))), "null");
}

}  // namespace
}  // namespace kvgate
