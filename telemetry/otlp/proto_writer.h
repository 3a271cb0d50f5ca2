// A minimal protocol-buffers writer, enough for OTLP's export requests: varints, fixed64,
// doubles, and length-delimited fields (strings, bytes, nested messages). Fields are appended in
// the order written; proto3 readers accept any order. No protoc, no schema: the encoder
// (encode.cc) names each field number next to the .proto field it writes.
#pragma once

#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

namespace kvgate::telemetry::otlp {

class ProtoWriter {
 public:
  enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

  void Varint(uint32_t field, uint64_t value) {
    Tag(field, kVarint);
    RawVarint(value);
  }
  // int64 fields are plain varints of the two's complement (10 bytes when negative).
  void Int64(uint32_t field, int64_t value) { Varint(field, static_cast<uint64_t>(value)); }
  void Bool(uint32_t field, bool value) { Varint(field, value ? 1 : 0); }
  void Fixed64(uint32_t field, uint64_t value) {
    Tag(field, kFixed64);
    RawFixed64(value);
  }
  void Double(uint32_t field, double value) {
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    Fixed64(field, bits);
  }
  // A string, bytes or an already encoded message.
  void Bytes(uint32_t field, std::string_view bytes) {
    Tag(field, kLengthDelimited);
    RawVarint(bytes.size());
    out_.append(bytes);
  }
  // A nested message, written by `write` into its own writer.
  template <class F>
  void Message(uint32_t field, F&& write) {
    ProtoWriter nested;
    write(nested);
    Bytes(field, nested.out_);
  }

  // Packed repeated fixed64 / double.
  template <class Range>
  void PackedFixed64(uint32_t field, const Range& values) {
    Tag(field, kLengthDelimited);
    RawVarint(8 * std::size(values));
    for (uint64_t v : values) RawFixed64(v);
  }
  template <class Range>
  void PackedDouble(uint32_t field, const Range& values) {
    Tag(field, kLengthDelimited);
    RawVarint(8 * std::size(values));
    for (double v : values) {
      uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      RawFixed64(bits);
    }
  }

  const std::string& bytes() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Tag(uint32_t field, WireType type) { RawVarint(uint64_t{field} << 3 | type); }
  void RawVarint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }
  void RawFixed64(uint64_t value) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(value >> (8 * i)));
  }

  std::string out_;
};

}  // namespace kvgate::telemetry::otlp
