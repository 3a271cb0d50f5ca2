#include "common/redact.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "common/ascii.h"

namespace kvgate {
namespace {

constexpr char kHexUpper[] = "0123456789ABCDEF";
constexpr char kHexLower[] = "0123456789abcdef";

void AppendUnicodeEscape(unsigned char c, const char* hex, std::string& out) {
  out += "\\u00";
  out += hex[c >> 4];
  out += hex[c & 0xF];
}

// How JSON encoders write `key` inside a string: the escapes every encoder makes ('"', '\\',
// control characters), plus `escape_slash` ('/' as "\/", PHP and some Java encoders) and
// `html_safe` ("<>&" as \u00XX, Go; also "'+" with upper-case hex, .NET).
enum class JsonFlavor { kMinimal, kSlash, kGo, kDotNet };

std::string JsonEscaped(std::string_view key, JsonFlavor flavor) {
  std::string out;
  for (char ch : key) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == '"' && flavor == JsonFlavor::kDotNet) {
      AppendUnicodeEscape(c, kHexUpper, out);
    } else if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      AppendUnicodeEscape(c, kHexLower, out);
    } else if (ch == '/' && flavor == JsonFlavor::kSlash) {
      out += "\\/";
    } else if ((ch == '<' || ch == '>' || ch == '&') && flavor == JsonFlavor::kGo) {
      AppendUnicodeEscape(c, kHexLower, out);
    } else if ((ch == '<' || ch == '>' || ch == '&' || ch == '\'' || ch == '+') &&
               flavor == JsonFlavor::kDotNet) {
      AppendUnicodeEscape(c, kHexUpper, out);
    } else {
      out += ch;
    }
  }
  return out;
}

// RFC 3986 percent-encoding: every byte but the unreserved characters.
std::string PercentEncoded(std::string_view key, const char* hex) {
  std::string out;
  for (char ch : key) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xF];
    }
  }
  return out;
}

// Base64 of `bytes`, whose size is a multiple of 3 (no padding).
std::string Base64Groups(std::string_view bytes, bool url_safe) {
  constexpr char kStandard[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  constexpr char kUrlSafe[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const char* alphabet = url_safe ? kUrlSafe : kStandard;
  std::string out;
  for (size_t i = 0; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) |
                       uint32_t{static_cast<unsigned char>(bytes[i + 2])};
    for (int shift = 18; shift >= 0; shift -= 6) out += alphabet[(v >> shift) & 0x3F];
  }
  return out;
}

// The base64 characters that `key` alone decides when it starts `offset` (0..2) bytes into a
// 3-byte group of whatever is encoded: the same whatever precedes or follows it ("user:" of a
// basic-auth credential, padding).
std::string Base64Core(std::string_view key, size_t offset, bool url_safe) {
  std::string padded(offset, '\0');
  padded += key;
  padded.append(2, '\0');
  padded.resize(padded.size() / 3 * 3);
  const std::string encoded = Base64Groups(padded, url_safe);
  // Character j holds bits [6j, 6j + 6); the key holds bits [8 offset, 8 (offset + size)).
  const size_t first = (8 * offset + 5) / 6;
  const size_t end = 8 * (offset + key.size()) / 6;
  return end > first ? encoded.substr(first, end - first) : std::string();
}

// A character that may be part of a key (so one that may not follow a whole bearer token).
bool IsKeyChar(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '~' ||
         ch == '+' || ch == '/' || ch == '=';
}

// The length of the mask character at text[i] ('*', '.', "•", "…"), 0 when there is none.
size_t MaskCharAt(std::string_view text, size_t i) {
  if (text[i] == '*' || text[i] == '.') return 1;
  if (text.substr(i, 3) == "\xE2\x80\xA2" || text.substr(i, 3) == "\xE2\x80\xA6") return 3;
  return 0;
}


}  // namespace

SecretRedactor::SecretRedactor(const std::vector<std::string>& secrets) {
  auto add = [this](std::string form) {
    if (form.size() < kMinKeyLength) return;
    if (std::find(patterns_.begin(), patterns_.end(), form) == patterns_.end()) {
      patterns_.push_back(std::move(form));
    }
  };
  for (const std::string& key : secrets) {
    if (key.empty()) continue;
    if (key.size() < kMinKeyLength) {
      if (std::find(short_keys_.begin(), short_keys_.end(), key) == short_keys_.end()) {
        short_keys_.push_back(key);
      }
      continue;
    }
    if (std::find(long_keys_.begin(), long_keys_.end(), key) != long_keys_.end()) continue;
    long_keys_.push_back(key);
    add(key);
    for (JsonFlavor flavor :
         {JsonFlavor::kMinimal, JsonFlavor::kSlash, JsonFlavor::kGo, JsonFlavor::kDotNet}) {
      add(JsonEscaped(key, flavor));
    }
    add(PercentEncoded(key, kHexUpper));
    add(PercentEncoded(key, kHexLower));
    for (size_t offset = 0; offset < 3; ++offset) {
      add(Base64Core(key, offset, false));
      add(Base64Core(key, offset, true));
    }
  }
}

std::vector<SecretRedactor::Span> SecretRedactor::Find(std::string_view text) const {
  std::vector<Span> spans;
  for (const std::string& pattern : patterns_) {
    for (size_t at = text.find(pattern); at != std::string_view::npos;
         at = text.find(pattern, at + 1)) {
      spans.push_back({at, at + pattern.size()});
    }
  }
  constexpr std::string_view kBearer = "bearer ";
  for (const std::string& key : short_keys_) {
    for (size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
      const size_t end = at + key.size();
      if (at < kBearer.size() ||
          !EqualsIgnoreCase(text.substr(at - kBearer.size(), kBearer.size()), kBearer)) {
        continue;
      }
      if (end < text.size() && IsKeyChar(text[end])) continue;
      spans.push_back({at, end});
    }
  }
  if (!long_keys_.empty()) FindMasked(text, spans);
  return spans;
}

void SecretRedactor::FindMasked(std::string_view text, std::vector<Span>& out) const {
  size_t i = 0;
  while (i < text.size()) {
    if (MaskCharAt(text, i) == 0) {
      ++i;
      continue;
    }
    const size_t run_begin = i;
    size_t count = 0;
    bool ellipsis = false;
    for (size_t len; i < text.size() && (len = MaskCharAt(text, i)) != 0; i += len) {
      ++count;
      ellipsis = ellipsis || text.substr(i, len) == "\xE2\x80\xA6";
    }
    const size_t run_end = i;
    if (count < 3 && !ellipsis) continue;
    for (const std::string& key : long_keys_) {
      const std::string_view k = key;
      // The longest proper prefix of the key that ends where the mask begins, and the longest
      // proper suffix that starts where it ends.
      size_t prefix = std::min(run_begin, k.size() - 1);
      while (prefix > 0 && text.substr(run_begin - prefix, prefix) != k.substr(0, prefix)) --prefix;
      size_t suffix = std::min(text.size() - run_end, k.size() - 1);
      while (suffix > 0 && text.substr(run_end, suffix) != k.substr(k.size() - suffix)) --suffix;
      if (prefix + suffix >= 4) out.push_back({run_begin - prefix, run_end + suffix});
    }
  }
}

std::string SecretRedactor::Redact(std::string_view text) const {
  std::string out(text);
  RedactInPlace(out);
  return out;
}

bool SecretRedactor::RedactInPlace(std::string& text) const {
  if (empty() || text.empty()) return false;
  std::vector<Span> spans = Find(text);
  if (spans.empty()) return false;
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::string out;
  out.reserve(text.size());
  size_t copied = 0;  // text[0, copied) is accounted for
  for (size_t s = 0; s < spans.size();) {
    size_t begin = spans[s].begin, end = spans[s].end;
    // Overlapping or touching spans become one marker.
    for (++s; s < spans.size() && spans[s].begin <= end; ++s) end = std::max(end, spans[s].end);
    out.append(text, copied, begin - copied);
    out += kMarker;
    copied = end;
  }
  out.append(text, copied, std::string::npos);
  text = std::move(out);
  return true;
}

}  // namespace kvgate
