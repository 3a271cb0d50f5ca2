// The AWS event-stream decoder: whole and split frames, every header type, and each way a frame
// can be bad (prelude CRC, message CRC, lengths, a frame cut short).
#include "gateway/providers/event_stream.h"

#include <gtest/gtest.h>

namespace kvgate::providers {
namespace {

std::string Frame(std::string_view event, std::string_view payload) {
  return EncodeEventStreamMessage(
      {StringHeader(":event-type", std::string(event)),
       StringHeader(":content-type", "application/json"), StringHeader(":message-type", "event")},
      payload);
}

TEST(EventStreamTest, Crc32IsZlibs) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(Crc32(""), 0u);
}

// The AWS documentation's own example: a message with no headers and payload {'foo':'bar'}.
TEST(EventStreamTest, DecodesTheDocumentedExample) {
  const std::string bytes(
      "\x00\x00\x00\x1d\x00\x00\x00\x00\xfd\x52\x8c\x5a{'foo':'bar'}\xc3\x65\x39\x36", 29);
  EventStreamDecoder d;
  d.Feed(bytes);
  auto m = d.Next();
  ASSERT_TRUE(m.has_value()) << m.error().message;
  ASSERT_TRUE(m->has_value());
  EXPECT_TRUE((*m)->headers.empty());
  EXPECT_EQ((*m)->payload, "{'foo':'bar'}");
  EXPECT_EQ(EncodeEventStreamMessage({}, "{'foo':'bar'}"), bytes);
}

TEST(EventStreamTest, SplitAtEveryByte) {
  const std::string stream = Frame("messageStart", R"({"role":"assistant"})") +
                             Frame("contentBlockDelta", R"({"delta":{"text":"hi"}})");
  EventStreamDecoder d;
  std::vector<EventStreamMessage> got;
  for (char c : stream) {
    d.Feed(std::string_view(&c, 1));
    while (true) {
      auto m = d.Next();
      ASSERT_TRUE(m.has_value());
      if (!m->has_value()) break;
      got.push_back(std::move(**m));
    }
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].Header(":event-type"), "messageStart");
  EXPECT_EQ(got[1].Header(":message-type"), "event");
  EXPECT_EQ(got[1].payload, R"({"delta":{"text":"hi"}})");
  EXPECT_EQ(d.pending(), 0u);
}

TEST(EventStreamTest, EveryHeaderType) {
  std::vector<EventStreamHeader> headers = {
      {.name = "t", .type = 0},
      {.name = "f", .type = 1},
      {.name = "b", .type = 2, .number = -3},
      {.name = "s", .type = 3, .number = -300},
      {.name = "i", .type = 4, .number = 70000},
      {.name = "l", .type = 5, .number = -5000000000},
      {.name = "y", .type = 6, .bytes = std::string("\x00\x01", 2)},
      {.name = "str", .type = 7, .bytes = "text"},
      {.name = "ts", .type = 8, .number = 1700000000123},
      {.name = "u", .type = 9, .bytes = "0123456789abcdef"}};
  EventStreamDecoder d;
  d.Feed(EncodeEventStreamMessage(headers, "p"));
  auto m = d.Next();
  ASSERT_TRUE(m.has_value()) << m.error().message;
  ASSERT_TRUE(m->has_value());
  const auto& h = (*m)->headers;
  ASSERT_EQ(h.size(), headers.size());
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(h[i].name, headers[i].name);
    EXPECT_EQ(h[i].type, headers[i].type);
    EXPECT_EQ(h[i].bytes, headers[i].bytes);
  }
  EXPECT_EQ(h[0].number, 1);
  EXPECT_EQ(h[1].number, 0);
  EXPECT_EQ(h[2].number, -3);
  EXPECT_EQ(h[3].number, -300);
  EXPECT_EQ(h[4].number, 70000);
  EXPECT_EQ(h[5].number, -5000000000);
  EXPECT_EQ(h[8].number, 1700000000123);
  EXPECT_EQ((*m)->Header("str"), "text");
  EXPECT_EQ((*m)->Header("absent"), "");
}

TEST(EventStreamTest, CorruptPreludeCrc) {
  std::string f = Frame("messageStart", "{}");
  f[8] ^= 0x01;
  EventStreamDecoder d;
  d.Feed(f);
  auto m = d.Next();
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, ErrorCode::kCorruptData);
  EXPECT_NE(m.error().message.find("prelude CRC"), std::string::npos);
  EXPECT_FALSE(d.Next().has_value());  // stays failed
}

TEST(EventStreamTest, CorruptMessageCrc) {
  std::string f = Frame("messageStart", "{}");
  f[f.size() - 6] ^= 0x20;  // a payload byte
  EventStreamDecoder d;
  d.Feed(f);
  auto m = d.Next();
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message.find("message CRC"), std::string::npos);
}

TEST(EventStreamTest, TruncatedFrameWaitsAndLeavesBytesPending) {
  const std::string f = Frame("metadata", R"({"usage":{}})");
  EventStreamDecoder d;
  d.Feed(std::string_view(f).substr(0, f.size() - 5));
  auto m = d.Next();
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->has_value());
  EXPECT_EQ(d.pending(), f.size() - 5);
}

TEST(EventStreamTest, ImpossibleLengthsAndBadHeaders) {
  // A total shorter than a prelude and a CRC, with a correct prelude CRC.
  std::string f = EncodeEventStreamMessage({}, "");
  f[3] = 8;
  const uint32_t crc = Crc32(std::string_view(f).substr(0, 8));
  for (int i = 0; i < 4; ++i) f[8 + i] = static_cast<char>((crc >> (24 - 8 * i)) & 0xff);
  EventStreamDecoder d;
  d.Feed(f);
  EXPECT_FALSE(d.Next().has_value());

  // A header of an unknown type (10), with correct CRCs.
  EventStreamDecoder d2;
  d2.Feed(EncodeEventStreamMessage({{.name = "x", .type = 10}}, ""));
  auto m = d2.Next();
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message.find("unknown type"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::providers
