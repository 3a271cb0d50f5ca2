#include <gtest/gtest.h>

#include "gateway/upstream/client.h"

namespace kvgate::upstream {
namespace {

TEST(UrlTest, ParsesSchemesDefaultPortsAndBasePath) {
  auto u = Url::Parse("https://api.openai.com/v1/");
  ASSERT_TRUE(u) << u.error().ToString();
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "api.openai.com");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->base_path, "/v1");
  EXPECT_EQ(u->Origin(), "https://api.openai.com:443");

  u = Url::Parse("HTTP://LocalHost:8000");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "http");
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->base_path, "");

  u = Url::Parse("http://10.0.0.1/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->base_path, "");

  u = Url::Parse("http://h/a/b//");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->base_path, "/a/b");
}

TEST(UrlTest, ParsesIpv6Literals) {
  auto u = Url::Parse("http://[::1]:8080/v1");
  ASSERT_TRUE(u) << u.error().ToString();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->Origin(), "http://[::1]:8080");
  u = Url::Parse("https://[2001:db8::5]");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "2001:db8::5");
  EXPECT_EQ(u->port, 443);
}

TEST(UrlTest, RejectsBadUrlsWithClearErrors) {
  struct Case {
    const char* url;
    const char* why;
  };
  for (const Case& c : {Case{"api.openai.com/v1", "missing scheme"},
                        Case{"ftp://x", "scheme must be http or https"},
                        Case{"http://", "missing host"}, Case{"http://:80", "missing host"},
                        Case{"http://h:0", "port"}, Case{"http://h:65536", "port"},
                        Case{"http://h:12ab", "port"}, Case{"http://h:", "empty port"},
                        Case{"http://[::1", "unterminated IPv6"},
                        Case{"http://[::1]x", "after IPv6"}, Case{"http://user:pw@h", "credentials"},
                        Case{"http://h/v1?x=1", "query"}, Case{"http://h?x", "query"},
                        Case{"http://ho st", "invalid character"}}) {
    auto u = Url::Parse(c.url);
    ASSERT_FALSE(u) << c.url;
    EXPECT_EQ(u.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(u.error().message.find(c.why), std::string::npos) << c.url << ": " << u.error().message;
  }
}

TEST(UrlTest, AnErrorAboutCredentialsDoesNotRepeatThem) {
  auto u = Url::Parse("https://alice:hunter2@api.example.com/v1");
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().message.find("hunter2"), std::string::npos) << u.error().message;
  EXPECT_EQ(u.error().message.find("alice"), std::string::npos) << u.error().message;
  EXPECT_NE(u.error().message.find("https://***@api.example.com/v1"), std::string::npos)
      << u.error().message;
}

TEST(ResponseTest, HeaderLookupIsCaseInsensitive) {
  Response r;
  r.headers = {{"Content-Type", "text/event-stream"}, {"x-request-id", "abc"}};
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.header("X-Request-ID"), "abc");
  EXPECT_EQ(r.header("missing"), "");
}

}  // namespace
}  // namespace kvgate::upstream
