// UTF-8: encoding one code point (the JSON reader, the tokenizer), and making untrusted bytes safe
// to store and serialize (header values, percent-decoded paths, upstream bodies). nlohmann::json
// throws when it serializes a string that is not UTF-8, so text from outside the process goes
// through these before it reaches a stored field or an error message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate {

// Appends `cp` (at most U+10FFFF; surrogates are the caller's business) as UTF-8.
inline void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The length of the well-formed UTF-8 sequence that starts at text[at] (RFC 3629 table 3-7: no
// overlongs, no surrogates, at most U+10FFFF), or 0 when the bytes there are not one.
// REQUIRES: at < text.size().
inline size_t Utf8SequenceLength(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  size_t extra;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    extra = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    extra = 2;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    extra = 3;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (text.size() - at <= extra) return 0;
  if (byte(at + 1) < lo || byte(at + 1) > hi) return 0;
  for (size_t i = 2; i <= extra; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  }
  return extra + 1;
}

inline bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// `text` with every byte that does not start a well-formed sequence replaced by U+FFFD.
inline std::string ToValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

// Makes `text` valid UTF-8 in place; no allocation when it already is (the common case).
inline void MakeValidUtf8(std::string& text) {
  if (!IsValidUtf8(text)) text = ToValidUtf8(text);
}

// At most `max_bytes` of `text` (cut on a character boundary, "..." appended when cut), made
// valid UTF-8: for quoting untrusted bytes in an error message.
inline std::string Utf8Snippet(std::string_view text, size_t max_bytes = 200) {
  std::string out = ToValidUtf8(text.substr(0, max_bytes + 3));  // room for a split character
  bool cut = text.size() > max_bytes;
  if (out.size() > max_bytes) {
    size_t end = max_bytes;
    while (end > 0 && (static_cast<unsigned char>(out[end]) & 0xC0) == 0x80) --end;
    out.resize(end);
    cut = true;
  }
  if (cut) out += "...";
  return out;
}

}  // namespace kvgate
