// Keeping secrets out of messages: URLs with credentials in them show up in config errors and in
// the admin API; provider keys show up in what upstreams say back (an OpenAI 401 quotes the key it
// was given, some servers echo it whole).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvgate {

// `url` with its userinfo ("user:password@", or a bare token before '@') replaced by "***":
// "https://u:p@host/v1" -> "https://***@host/v1". Anything else is returned unchanged.
inline std::string RedactUrlCredentials(std::string_view url) {
  const size_t scheme_end = url.find("://");
  const size_t authority_begin = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const size_t authority_end = url.find_first_of("/?#", authority_begin);
  const std::string_view authority = url.substr(authority_begin, authority_end - authority_begin);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  std::string out(url.substr(0, authority_begin));
  out += "***";
  out += url.substr(authority_begin + at);
  return out;
}

// Takes a fixed set of secrets (the provider keys kvgate sends upstream) out of text, replacing
// each form of one it recognizes with kMarker. What counts as a form of a key K:
//   - K itself, anywhere (so "Bearer K" and "x-api-key: K" too);
//   - K as JSON encoders escape it: `\/` for '/', `\"`, `\\`, and the \u00XX escapes of
//     Go (<, >, &) and .NET (also ', +; upper-case hex);
//   - K percent-encoded (upper- or lower-case hex);
//   - K in base64 (standard and URL-safe alphabets) at any of the three byte alignments, so also
//     inside basic-auth credentials "user:K" / "K:": the characters that depend on K alone;
//   - a masked echo that shows part of K: a prefix of K, then a run of mask characters ('*', '.',
//     '•', '…'; at least three, or one '…'), then a suffix of K, the prefix and suffix together at
//     least 4 characters: "sk-abc****wxyz", "sk-ab...wxyz", "sk-proj-abcd..." (a cut snippet). The
//     visible parts and the mask are replaced together.
// Keys shorter than kMinKeyLength bytes ("EMPTY", "none", "test": placeholders for local servers)
// would match ordinary words, so they are taken out only as a bearer token: "Bearer K" followed by
// the end of the text or a character that cannot be part of a key.
// Overlapping matches (of one key or of several) are merged into one marker.
//
// Immutable after construction: Redact may be called from any thread.
class SecretRedactor {
 public:
  static constexpr std::string_view kMarker = "[redacted]";
  static constexpr size_t kMinKeyLength = 8;

  SecretRedactor() = default;  // knows no secret: Redact returns its input
  explicit SecretRedactor(const std::vector<std::string>& secrets);

  // `text` with every recognized form of every secret replaced by kMarker.
  std::string Redact(std::string_view text) const;
  // The same in place; returns whether `text` changed.
  bool RedactInPlace(std::string& text) const;

  bool empty() const { return long_keys_.empty() && short_keys_.empty(); }

 private:
  struct Span {
    size_t begin, end;
  };
  // Every match in `text`, unsorted, possibly overlapping.
  std::vector<Span> Find(std::string_view text) const;
  void FindMasked(std::string_view text, std::vector<Span>& out) const;

  std::vector<std::string> long_keys_;   // length >= kMinKeyLength, for the masked echoes
  std::vector<std::string> patterns_;    // every literal form of every long key
  std::vector<std::string> short_keys_;  // length < kMinKeyLength: bearer tokens only
};

}  // namespace kvgate
