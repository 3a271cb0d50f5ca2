// The AWS event-stream decoder and encoder (event_stream.h).
#include "gateway/providers/event_stream.h"

#include <array>

namespace kvgate::providers {
namespace {

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

uint32_t ReadU32(std::string_view b, size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) |
         (uint32_t(uint8_t(b[at + 2])) << 8) | uint32_t(uint8_t(b[at + 3]));
}

int64_t ReadBigEndian(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | uint8_t(b[at + i]);
  // Sign-extend the narrower integers.
  if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);
  return static_cast<int64_t>(v);
}

void AppendU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

Error Corrupt(std::string message) {
  return Error{ErrorCode::kCorruptData, "event stream: " + std::move(message)};
}

Result<std::vector<EventStreamHeader>> ParseHeaders(std::string_view b) {
  std::vector<EventStreamHeader> out;
  size_t i = 0;
  auto need = [&](size_t n) { return i + n <= b.size(); };
  while (i < b.size()) {
    EventStreamHeader h;
    const size_t name_len = uint8_t(b[i++]);
    if (name_len == 0 || !need(name_len + 1)) return std::unexpected(Corrupt("bad header name"));
    h.name.assign(b.substr(i, name_len));
    i += name_len;
    h.type = uint8_t(b[i++]);
    switch (h.type) {
      case 0:
      case 1:
        h.number = h.type == 0 ? 1 : 0;
        break;
      case 2:
      case 3:
      case 4:
      case 5:
      case 8: {
        const size_t n = h.type == 2 ? 1 : h.type == 3 ? 2 : h.type == 4 ? 4 : 8;
        if (!need(n)) return std::unexpected(Corrupt("header " + h.name + " is cut short"));
        h.number = ReadBigEndian(b, i, n);
        i += n;
        break;
      }
      case 6:
      case 7: {
        if (!need(2)) return std::unexpected(Corrupt("header " + h.name + " is cut short"));
        const size_t n = (size_t(uint8_t(b[i])) << 8) | uint8_t(b[i + 1]);
        i += 2;
        if (!need(n)) return std::unexpected(Corrupt("header " + h.name + " is cut short"));
        h.bytes.assign(b.substr(i, n));
        i += n;
        break;
      }
      case 9:
        if (!need(16)) return std::unexpected(Corrupt("header " + h.name + " is cut short"));
        h.bytes.assign(b.substr(i, 16));
        i += 16;
        break;
      default:
        return std::unexpected(
            Corrupt("header " + h.name + " has unknown type " + std::to_string(h.type)));
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace

uint32_t Crc32(std::string_view bytes, uint32_t crc) {
  crc = ~crc;
  for (char ch : bytes) crc = kCrcTable[(crc ^ uint8_t(ch)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string_view EventStreamMessage::Header(std::string_view name) const {
  for (const EventStreamHeader& h : headers) {
    if (h.name == name && (h.type == 6 || h.type == 7)) return h.bytes;
  }
  return {};
}

Result<std::optional<EventStreamMessage>> EventStreamDecoder::Next() {
  if (failed_) return std::unexpected(*failed_);
  auto fail = [this](Error e) -> Result<std::optional<EventStreamMessage>> {
    failed_ = e;
    return std::unexpected(std::move(e));
  };
  const std::string_view rest = std::string_view(buffer_).substr(offset_);
  if (rest.size() < 12) return std::optional<EventStreamMessage>();
  const uint32_t total = ReadU32(rest, 0);
  const uint32_t headers_len = ReadU32(rest, 4);
  if (Crc32(rest.substr(0, 8)) != ReadU32(rest, 8)) {
    return fail(Corrupt("prelude CRC mismatch"));
  }
  if (total < 16 || total > kMaxEventStreamMessage || headers_len > total - 16) {
    return fail(Corrupt("impossible lengths in prelude (total " + std::to_string(total) +
                        ", headers " + std::to_string(headers_len) + ")"));
  }
  if (rest.size() < total) return std::optional<EventStreamMessage>();
  const std::string_view frame = rest.substr(0, total);
  if (Crc32(frame.substr(0, total - 4)) != ReadU32(frame, total - 4)) {
    return fail(Corrupt("message CRC mismatch"));
  }
  auto headers = ParseHeaders(frame.substr(12, headers_len));
  if (!headers) return fail(headers.error());
  EventStreamMessage message;
  message.headers = std::move(*headers);
  message.payload.assign(frame.substr(12 + headers_len, total - 16 - headers_len));
  offset_ += total;
  if (offset_ > (1u << 16) && offset_ * 2 > buffer_.size()) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return std::optional<EventStreamMessage>(std::move(message));
}

EventStreamHeader StringHeader(std::string name, std::string value) {
  return EventStreamHeader{.name = std::move(name), .type = 7, .bytes = std::move(value)};
}

std::string EncodeEventStreamMessage(const std::vector<EventStreamHeader>& headers,
                                     std::string_view payload) {
  std::string h;
  for (const EventStreamHeader& header : headers) {
    h.push_back(static_cast<char>(header.name.size()));
    h.append(header.name);
    h.push_back(static_cast<char>(header.type));
    switch (header.type) {
      case 0:
      case 1:
        break;
      case 2:
      case 3:
      case 4:
      case 5:
      case 8: {
        const int n = header.type == 2 ? 1 : header.type == 3 ? 2 : header.type == 4 ? 4 : 8;
        for (int shift = 8 * (n - 1); shift >= 0; shift -= 8) {
          h.push_back(static_cast<char>((uint64_t(header.number) >> shift) & 0xff));
        }
        break;
      }
      case 9:
        h.append(header.bytes.substr(0, 16));
        break;
      default:  // 6, 7
        h.push_back(static_cast<char>((header.bytes.size() >> 8) & 0xff));
        h.push_back(static_cast<char>(header.bytes.size() & 0xff));
        h.append(header.bytes);
        break;
    }
  }
  std::string out;
  const uint32_t total = static_cast<uint32_t>(12 + h.size() + payload.size() + 4);
  AppendU32(out, total);
  AppendU32(out, static_cast<uint32_t>(h.size()));
  AppendU32(out, Crc32(out));
  out.append(h);
  out.append(payload);
  AppendU32(out, Crc32(out));
  return out;
}

}  // namespace kvgate::providers
