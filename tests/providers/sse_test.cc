#include "gateway/providers/sse.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace kvgate::providers {
namespace {

struct Collected {
  std::string raw;
  std::string event;
  std::string data;
  bool has_data;
  bool operator==(const Collected&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Collected& c) {
  return os << "{raw=" << testing::PrintToString(c.raw) << " event=" << c.event
            << " data=" << testing::PrintToString(c.data) << " has_data=" << c.has_data << "}";
}

// Feeds `pieces` one by one, collecting every event; ends the input when `end` is set.
std::vector<Collected> ParseAll(const std::vector<std::string>& pieces, bool end = true) {
  SseParser parser;
  std::vector<Collected> out;
  auto drain = [&] {
    while (true) {
      auto next = parser.Next();
      EXPECT_TRUE(next.has_value()) << next.error().ToString();
      if (!next.has_value() || !next->has_value()) return;
      const SseEvent& e = **next;
      out.push_back({std::string(e.raw), std::string(e.event), std::string(e.data), e.has_data});
    }
  };
  for (const auto& p : pieces) {
    parser.Append(p);
    drain();
  }
  if (end) {
    parser.EndOfInput();
    drain();
  }
  return out;
}

TEST(SseParserTest, SingleDataEventKeepsRawBytes) {
  auto events = ParseAll({"data: {\"a\":1}\n\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (Collected{"data: {\"a\":1}\n\n", "", "{\"a\":1}", true}));
}

TEST(SseParserTest, EventNameAndCrLf) {
  auto events = ParseAll({"event: ping\r\ndata: {}\r\n\r\nevent: x\r\ndata:y\r\n\r\n"});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], (Collected{"event: ping\r\ndata: {}\r\n\r\n", "ping", "{}", true}));
  EXPECT_EQ(events[1], (Collected{"event: x\r\ndata:y\r\n\r\n", "x", "y", true}));
}

TEST(SseParserTest, LoneCarriageReturnsEndLines) {
  auto events = ParseAll({"data: a\r\rdata: b\r", "\r"});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].data, "a");
  EXPECT_EQ(events[1].data, "b");
  EXPECT_EQ(events[1].raw, "data: b\r\r");
}

TEST(SseParserTest, MultiLineDataJoinedWithNewline) {
  auto events = ParseAll({"data: line1\ndata:line2\ndata:  line3\n\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "line1\nline2\n line3");
}

TEST(SseParserTest, CommentsOnlyEventHasNoData) {
  auto events = ParseAll({": OPENROUTER PROCESSING\n\ndata: x\n: trailing comment\n\n"});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], (Collected{": OPENROUTER PROCESSING\n\n", "", "", false}));
  EXPECT_EQ(events[1], (Collected{"data: x\n: trailing comment\n\n", "", "x", true}));
}

TEST(SseParserTest, IgnoresIdRetryUnknownFieldsAndExtraBlankLines) {
  auto events = ParseAll({"\n\nid: 7\nretry: 100\nfoo: bar\nnocolon\ndata: z\n\n\n\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "z");
  EXPECT_EQ(events[0].event, "");
  EXPECT_EQ(events[0].raw, "id: 7\nretry: 100\nfoo: bar\nnocolon\ndata: z\n\n");
}

TEST(SseParserTest, EmptyDataLineCountsAsData) {
  auto events = ParseAll({"data\n\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].has_data);
  EXPECT_EQ(events[0].data, "");
}

TEST(SseParserTest, BomSkippedEvenWhenSplit) {
  auto events = ParseAll({"\xEF", "\xBB",
                          "\xBF"
                          "data: a\n\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].raw, "data: a\n\n");
}

TEST(SseParserTest, IncompleteEventWaitsForMoreBytes) {
  SseParser parser;
  parser.Append("data: {\"par");
  auto next = parser.Next();
  ASSERT_TRUE(next.has_value());
  EXPECT_FALSE(next->has_value());
  parser.Append("tial\":true}\n");
  next = parser.Next();
  ASSERT_TRUE(next.has_value());
  EXPECT_FALSE(next->has_value());
  parser.Append("\n");
  next = parser.Next();
  ASSERT_TRUE(next.has_value());
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->data, "{\"partial\":true}");
}

TEST(SseParserTest, EndOfInputFlushesTrailingEvent) {
  auto events = ParseAll({"data: a\n\ndata: [DONE]"});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1], (Collected{"data: [DONE]", "", "[DONE]", true}));
  auto without_end = ParseAll({"data: a\n\ndata: [DONE]"}, /*end=*/false);
  EXPECT_EQ(without_end.size(), 1u);
}

TEST(SseParserTest, OversizedEventIsAnErrorAndStaysFailed) {
  SseParser parser(/*max_event_bytes=*/64);
  parser.Append("data: " + std::string(100, 'x'));
  auto next = parser.Next();
  ASSERT_FALSE(next.has_value());
  EXPECT_EQ(next.error().code, ErrorCode::kResourceExhausted);
  parser.Append("\n\n");
  EXPECT_FALSE(parser.Next().has_value());
}

// Found by fuzz/sse_stream_fuzz.cc: an oversized event that arrived whole, blank line included,
// used to pass, while the same bytes in two pieces failed.
TEST(SseParserTest, OversizedEventFailsAlsoWhenItArrivesWhole) {
  const std::string big = "data: " + std::string(100, 'x') + "\n\n";
  SseParser whole(/*max_event_bytes=*/64);
  whole.Append("data: ok\n\n" + big);
  auto first = whole.Next();
  ASSERT_TRUE(first.has_value() && first->has_value());
  EXPECT_EQ((*first)->data, "ok");
  auto next = whole.Next();
  ASSERT_FALSE(next.has_value());
  EXPECT_EQ(next.error().code, ErrorCode::kResourceExhausted);
  // At the limit exactly, whole or byte by byte, with the blank line's "\r" still pending: fine.
  const std::string at_limit = "data: " + std::string(63 - 6, 'y') + "\n";
  ASSERT_EQ(at_limit.size(), 64u);
  for (const size_t piece : {at_limit.size() + 2, size_t{1}}) {
    SseParser parser(/*max_event_bytes=*/64);
    const std::string stream = at_limit + "\r\n";
    std::optional<SseEvent> got;
    for (size_t i = 0; i < stream.size() && !got; i += piece) {
      parser.Append(std::string_view(stream).substr(i, piece));
      auto r = parser.Next();
      ASSERT_TRUE(r.has_value()) << "piece " << piece << ": " << r.error().message;
      if (r->has_value()) got = **r;
    }
    ASSERT_TRUE(got.has_value()) << "piece " << piece;
    EXPECT_EQ(got->data.size(), 57u);
  }
}

TEST(SseParserTest, ManyEventsInOnePieceAndSplitAtEveryByte) {
  const std::string stream =
      "event: a\r\ndata: 1\r\n\r\n: c\n\ndata: x\ndata: y\n\nevent: b\rdata: 2\r\r"
      "data: {\"k\":\"v\"}\n\n";
  const auto whole = ParseAll({stream});
  ASSERT_EQ(whole.size(), 5u);
  for (size_t i = 0; i <= stream.size(); ++i) {
    for (size_t j = i; j <= stream.size(); j += 7) {
      auto split = ParseAll({stream.substr(0, i), stream.substr(i, j - i), stream.substr(j)});
      ASSERT_EQ(split, whole) << "split at " << i << "," << j;
    }
  }
}

// Lines longer than the line scanner's 16-byte steps, ending at every offset with each of the
// three line ends, whole and split at every byte: every event comes out with exactly its data.
TEST(SseParserTest, LongLinesEndingAtEveryOffset) {
  std::string stream;
  std::vector<std::string> expected;
  for (const std::string end : {"\n", "\r", "\r\n"}) {
    for (size_t n = 0; n < 40; ++n) {
      std::string data(n, 'x');
      if (n > 3) data[n / 2] = ':';  // a colon inside the value is data, not a field separator
      stream += "data: " + data + end + end;
      expected.push_back(data);
    }
  }
  auto check = [&](const std::vector<Collected>& events, const std::string& where) {
    ASSERT_EQ(events.size(), expected.size()) << where;
    for (size_t i = 0; i < events.size(); ++i) {
      EXPECT_EQ(events[i].data, expected[i]) << where << ", event " << i;
      EXPECT_TRUE(events[i].has_data);
    }
  };
  check(ParseAll({stream}), "whole");
  for (size_t i = 0; i <= stream.size(); i += 3) {
    check(ParseAll({stream.substr(0, i), stream.substr(i)}), "split at " + std::to_string(i));
  }
}

}  // namespace
}  // namespace kvgate::providers
