// The AWS event-stream binary framing (application/vnd.amazon.eventstream), in which Bedrock's
// ConverseStream and InvokeModelWithResponseStream answer: pure, no I/O.
//
// A message: a 12-byte prelude (total length, headers length, both big-endian uint32, then the
// CRC32 of those 8 bytes), the headers (each: 1-byte name length, name, 1-byte type, value), the
// payload, and the CRC32 of everything before it. Header value types: 0 true, 1 false, 2 byte,
// 3 int16, 4 int32, 5 int64, 6 bytes (2-byte length), 7 string (2-byte length), 8 timestamp
// (int64 ms), 9 uuid (16 bytes). The CRC is CRC-32 (IEEE 802.3, as zlib's crc32).
//
// Thread safety: a decoder is single-threaded; the free functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace kvgate::providers {

struct EventStreamHeader {
  std::string name;
  uint8_t type = 7;
  std::string bytes;   // bytes and string values (type 6, 7) and the uuid's 16 bytes
  int64_t number = 0;  // byte, int16, int32, int64, timestamp; 1 / 0 for the booleans
};

struct EventStreamMessage {
  std::vector<EventStreamHeader> headers;
  std::string payload;
  // The value of a string (or bytes) header, "" when absent.
  std::string_view Header(std::string_view name) const;
};

// The largest message accepted: AWS's limit is 16 MiB of payload and 128 KiB of headers.
inline constexpr uint32_t kMaxEventStreamMessage = (16u << 20) + (128u << 10) + 16;

class EventStreamDecoder {
 public:
  // Appends bytes; a message may be split at any byte.
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next whole message: nullopt when more bytes are needed; an error (kCorruptData, saying
  // what was wrong) for a bad prelude CRC, a bad message CRC, impossible lengths or malformed
  // headers. After an error the decoder stays failed.
  Result<std::optional<EventStreamMessage>> Next();
  // Bytes received that do not yet make a whole message (at the end of a stream: a truncated
  // frame).
  size_t pending() const { return buffer_.size() - offset_; }

 private:
  std::string buffer_;
  size_t offset_ = 0;
  std::optional<Error> failed_;
};

// One message's bytes, with correct CRCs (the simulator's twin, and the tests' and fuzz seeds').
std::string EncodeEventStreamMessage(const std::vector<EventStreamHeader>& headers,
                                     std::string_view payload);
// A string header (type 7).
EventStreamHeader StringHeader(std::string name, std::string value);

uint32_t Crc32(std::string_view bytes, uint32_t crc = 0);

}  // namespace kvgate::providers
