// The SigV4 signer: AWS's published test vector, the encoding rules, and what it signs. Its byte
// equality with botocore over a table of Bedrock requests is tests/e2e/test_e2e_bedrock_sigv4.py.
#include "gateway/providers/sigv4.h"

#include <gtest/gtest.h>

namespace kvgate::providers {
namespace {

constexpr int64_t k20150830T123600Z = 1440938160;
const AwsCredentials kExample{.access_key_id = "AKIDEXAMPLE",
                              .secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};

// "get-vanilla" of AWS's SigV4 test suite.
TEST(SigV4Test, AwsTestSuiteGetVanilla) {
  SigV4Request r;
  r.method = "GET";
  r.host = "example.amazonaws.com";
  r.path = "/";
  const SigV4Parts parts = SigV4Compute(r, kExample, "us-east-1", "service", k20150830T123600Z);
  EXPECT_EQ(parts.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(parts.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  const auto headers = SignSigV4(r, kExample, "us-east-1", "service", k20150830T123600Z);
  ASSERT_EQ(headers.size(), 3u);
  EXPECT_EQ(headers[0], (std::pair<std::string, std::string>{"host", "example.amazonaws.com"}));
  EXPECT_EQ(headers[1].second, "20150830T123600Z");
  EXPECT_EQ(headers[2].second,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4Test, SessionTokenIsSentAndSigned) {
  SigV4Request r;
  r.host = "bedrock-runtime.us-east-1.amazonaws.com";
  r.path = "/model/m/converse";
  AwsCredentials c = kExample;
  c.session_token = "token123";
  const auto headers = SignSigV4(r, c, "us-east-1", "bedrock", k20150830T123600Z);
  ASSERT_EQ(headers.size(), 4u);
  EXPECT_EQ(headers[2], (std::pair<std::string, std::string>{"x-amz-security-token", "token123"}));
  EXPECT_NE(headers[3].second.find("SignedHeaders=host;x-amz-date;x-amz-security-token,"),
            std::string::npos);
}

TEST(SigV4Test, PathIsEncodedAgainAndQuerySorted) {
  SigV4Request r;
  r.host = "h";
  r.path = "/model/anthropic.claude-v1%3A0/./x//converse";
  r.query = "b=2&a=1";
  r.headers = {{"Content-Type", "  application/json   x "}};
  const SigV4Parts parts = SigV4Compute(r, kExample, "us-east-1", "bedrock", k20150830T123600Z);
  EXPECT_EQ(parts.canonical_request.substr(0, parts.canonical_request.find("\nhost")),
            "POST\n/model/anthropic.claude-v1%253A0/x/converse\na=1&b=2\n"
            "content-type:application/json x");
  EXPECT_EQ(parts.signed_headers, "content-type;host;x-amz-date");
}

TEST(SigV4Test, UriEncode) {
  EXPECT_EQ(AwsUriEncode("anthropic.claude-sonnet-4-5-20250929-v1:0", false),
            "anthropic.claude-sonnet-4-5-20250929-v1%3A0");
  EXPECT_EQ(AwsUriEncode("arn:aws:bedrock:us-east-1:1:x/y z~", false),
            "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ax%2Fy%20z~");
  EXPECT_EQ(AwsUriEncode("a/b", true), "a/b");
  EXPECT_EQ(AmzDate(0), "19700101T000000Z");
}

}  // namespace
}  // namespace kvgate::providers
