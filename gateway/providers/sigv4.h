// AWS Signature Version 4 (the header form), as botocore's SigV4Auth signs a request: pure, no
// clock and no I/O (the caller passes the time). kvgate signs its Bedrock calls with it; the e2e
// test tests/e2e/test_e2e_bedrock_sigv4.py checks it byte for byte against botocore.
//
// What is signed: the method, the path as sent (already percent-encoded) encoded once more as
// AWS does for every service but S3, the query string's pairs sorted by name (taken as sent),
// every header given plus `host` and `x-amz-date` (and `x-amz-security-token` with a session
// token), and the SHA-256 of the body. botocore's SigV4Auth sets no x-amz-content-sha256 header
// for services other than S3, so neither does this.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvgate::providers {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" when the credentials are long-term ones
  bool empty() const { return access_key_id.empty() || secret_access_key.empty(); }
};

struct SigV4Request {
  std::string method = "POST";
  // The Host header's value: the host, and ":port" when it is not the scheme's default.
  std::string host;
  std::string path = "/";  // as it goes on the request line, percent-encoded, without the query
  std::string query;       // after the '?', as sent; "" when none
  // The other headers that go out and are signed (names in any case; values are trimmed and
  // their inner runs of blanks collapsed, as AWS canonicalizes them).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// The headers to add to the request: host, x-amz-date, x-amz-security-token (with a session
// token) and authorization, lower-case names, in that order. `unix_seconds` is the signing time.
std::vector<std::pair<std::string, std::string>> SignSigV4(const SigV4Request& request,
                                                           const AwsCredentials& credentials,
                                                           std::string_view region,
                                                           std::string_view service,
                                                           int64_t unix_seconds);

// The canonical request and the string to sign that SignSigV4 hashes (for tests and debugging).
struct SigV4Parts {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;
  std::string signature;
};
SigV4Parts SigV4Compute(const SigV4Request& request, const AwsCredentials& credentials,
                        std::string_view region, std::string_view service, int64_t unix_seconds);

// RFC 3986 percent-encoding of every byte but the unreserved ones (A-Z a-z 0-9 - _ . ~), and '/'
// too when `keep_slash`: how AWS encodes a path segment (a Bedrock model id's ':' and an ARN's
// '/') and how it re-encodes a path for signing.
std::string AwsUriEncode(std::string_view text, bool keep_slash);

// "YYYYMMDDTHHMMSSZ" for a Unix time (UTC).
std::string AmzDate(int64_t unix_seconds);

}  // namespace kvgate::providers
