// AWS SigV4, written to match botocore's SigV4Auth step by step (canonical request, string to
// sign, the derived key, the Authorization header); see sigv4.h.
#include "gateway/providers/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <ctime>

#include "common/ascii.h"

namespace kvgate::providers {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return Hex(digest, sizeof digest);
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Trimmed, inner runs of blanks as one space (botocore: ' '.join(value.split())).
std::string TrimAll(std::string_view value) {
  std::string out;
  size_t i = 0;
  while (i < value.size()) {
    while (i < value.size() && IsBlank(value[i])) ++i;
    const size_t start = i;
    while (i < value.size() && !IsBlank(value[i])) ++i;
    if (i > start) {
      if (!out.empty()) out.push_back(' ');
      out.append(value.substr(start, i - start));
    }
  }
  return out;
}

// RFC 3986 section 5.2.4 dot-segment removal with empty segments dropped too, as botocore's
// normalize_url_path does (AWS wants consecutive slashes collapsed).
std::string NormalizePath(std::string_view path) {
  if (path.empty()) return "/";
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(i, end - i);
    if (!segment.empty() && segment != ".") {
      if (segment == "..") {
        if (!out.empty()) out.pop_back();
      } else {
        out.push_back(segment);
      }
    }
    i = end + 1;
  }
  std::string result = path.front() == '/' ? "/" : "";
  for (size_t k = 0; k < out.size(); ++k) {
    if (k > 0) result.push_back('/');
    result.append(out[k]);
  }
  if (path.back() == '/' && !out.empty()) result.push_back('/');
  return result;
}

// The query's key=value pairs sorted (by key, then value), each as sent.
std::string CanonicalQuery(std::string_view query) {
  if (query.empty()) return "";
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  size_t i = 0;
  while (i <= query.size()) {
    size_t end = query.find('&', i);
    if (end == std::string_view::npos) end = query.size();
    std::string_view pair = query.substr(i, end - i);
    const size_t eq = pair.find('=');
    pairs.emplace_back(pair.substr(0, eq),
                       eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    i = end + 1;
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  for (const auto& [key, value] : pairs) {
    if (!out.empty()) out.push_back('&');
    out.append(key).append("=").append(value);
  }
  return out;
}

}  // namespace

std::string AwsUriEncode(std::string_view text, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y%m%dT%H%M%SZ", &tm);
  return buffer;
}

SigV4Parts SigV4Compute(const SigV4Request& request, const AwsCredentials& credentials,
                        std::string_view region, std::string_view service, int64_t unix_seconds) {
  const std::string amz_date = AmzDate(unix_seconds);
  const std::string date = amz_date.substr(0, 8);
  // Every signed header, lower-case, values canonicalized; repeated names joined by ','.
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [name, value] : request.headers) {
    std::string lower = AsciiLowered(name);
    if (lower == "host" || lower == "x-amz-date" || lower == "x-amz-security-token" ||
        lower == "authorization") {
      continue;  // set below
    }
    headers.emplace_back(std::move(lower), TrimAll(value));
  }
  headers.emplace_back("host", TrimAll(request.host));
  headers.emplace_back("x-amz-date", amz_date);
  if (!credentials.session_token.empty()) {
    headers.emplace_back("x-amz-security-token", TrimAll(credentials.session_token));
  }
  std::stable_sort(headers.begin(), headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers;
  std::string signed_headers;
  for (size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.pop_back();  // the '\n'
      canonical_headers.append(",").append(headers[i].second).append("\n");
      continue;
    }
    canonical_headers.append(headers[i].first).append(":").append(headers[i].second).append("\n");
    if (!signed_headers.empty()) signed_headers.push_back(';');
    signed_headers.append(headers[i].first);
  }
  SigV4Parts parts;
  parts.signed_headers = signed_headers;
  parts.canonical_request = request.method + "\n" +
                            AwsUriEncode(NormalizePath(request.path), /*keep_slash=*/true) + "\n" +
                            CanonicalQuery(request.query) + "\n" + canonical_headers + "\n" +
                            signed_headers + "\n" + Sha256Hex(request.body);
  const std::string scope =
      date + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  parts.string_to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(parts.canonical_request);
  std::string key = HmacSha256("AWS4" + credentials.secret_access_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  const std::string signature = HmacSha256(key, parts.string_to_sign);
  parts.signature = Hex(reinterpret_cast<const unsigned char*>(signature.data()), signature.size());
  return parts;
}

std::vector<std::pair<std::string, std::string>> SignSigV4(const SigV4Request& request,
                                                           const AwsCredentials& credentials,
                                                           std::string_view region,
                                                           std::string_view service,
                                                           int64_t unix_seconds) {
  const SigV4Parts parts = SigV4Compute(request, credentials, region, service, unix_seconds);
  const std::string amz_date = AmzDate(unix_seconds);
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("host", request.host);
  out.emplace_back("x-amz-date", amz_date);
  if (!credentials.session_token.empty()) {
    out.emplace_back("x-amz-security-token", credentials.session_token);
  }
  out.emplace_back("authorization", "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id +
                                        "/" + amz_date.substr(0, 8) + "/" + std::string(region) +
                                        "/" + std::string(service) +
                                        "/aws4_request, SignedHeaders=" + parts.signed_headers +
                                        ", Signature=" + parts.signature);
  return out;
}

}  // namespace kvgate::providers
