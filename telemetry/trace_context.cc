#include "telemetry/trace_context.h"

#include <algorithm>
#include <random>

namespace kvgate::telemetry {
namespace {

std::mt19937_64& Engine() {
  // One engine per thread: no lock on the request path.
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is invalid in a traceparent
}

// Reads exactly out.size() bytes of lowercase hex.
bool ReadHex(std::string_view text, std::span<uint8_t> out) {
  if (text.size() != out.size() * 2) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

template <size_t N>
std::array<uint8_t, N> RandomBytes() {
  std::array<uint8_t, N> bytes{};
  do {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t r = Engine()();
      for (size_t j = 0; j < 8 && i + j < N; ++j) bytes[i + j] = static_cast<uint8_t>(r >> (8 * j));
    }
  } while (AllZero(bytes));
  return bytes;
}

}  // namespace

std::optional<TraceParent> ParseTraceparent(std::string_view header) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters;
  // a later version may append fields after another '-'.
  while (!header.empty() && (header.front() == ' ' || header.front() == '\t'))
    header.remove_prefix(1);
  while (!header.empty() && (header.back() == ' ' || header.back() == '\t'))
    header.remove_suffix(1);
  if (header.size() < 55 || header[2] != '-' || header[35] != '-' || header[52] != '-') {
    return std::nullopt;
  }
  uint8_t version = 0;
  if (!ReadHex(header.substr(0, 2), std::span(&version, 1)) || version == 0xff) return std::nullopt;
  if (version == 0 && header.size() != 55) return std::nullopt;
  if (version != 0 && header.size() > 55 && header[55] != '-') return std::nullopt;
  TraceParent parent;
  uint8_t flags = 0;
  if (!ReadHex(header.substr(3, 32), parent.trace_id) ||
      !ReadHex(header.substr(36, 16), parent.parent_id) ||
      !ReadHex(header.substr(53, 2), std::span(&flags, 1))) {
    return std::nullopt;
  }
  if (AllZero(parent.trace_id) || AllZero(parent.parent_id)) return std::nullopt;
  parent.sampled = (flags & 0x01) != 0;
  return parent;
}

std::string HexOf(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

std::string FormatTraceparent(const TraceId& trace_id, const SpanId& span_id, bool sampled) {
  std::string out = "00-";
  out.reserve(55);
  out += HexOf(trace_id);
  out.push_back('-');
  out += HexOf(span_id);
  out += sampled ? "-01" : "-00";
  return out;
}

TraceId NewTraceId() { return RandomBytes<16>(); }
SpanId NewSpanId() { return RandomBytes<8>(); }

bool SampledByRatio(const TraceId& trace_id, double ratio) {
  if (!(ratio > 0)) return false;
  if (ratio >= 1) return true;
  uint64_t low = 0;
  for (size_t i = 8; i < 16; ++i) low = low << 8 | trace_id[i];
  // 2^64 * ratio, computed in long double so that ratios near 1 do not overflow.
  const long double bound = static_cast<long double>(ratio) * 18446744073709551616.0L;
  return static_cast<long double>(low) < bound;
}

RequestTrace StartRequestTrace(std::string_view traceparent, double sample_ratio) {
  RequestTrace trace;
  trace.active = true;
  trace.span_id = NewSpanId();
  if (std::optional<TraceParent> parent =
          traceparent.empty() ? std::nullopt : ParseTraceparent(traceparent)) {
    trace.trace_id = parent->trace_id;
    trace.parent_id = parent->parent_id;
    trace.sampled = parent->sampled;  // parent-based: the caller decided
  } else {
    trace.trace_id = NewTraceId();
    trace.sampled = SampledByRatio(trace.trace_id, sample_ratio);
  }
  return trace;
}

}  // namespace kvgate::telemetry
