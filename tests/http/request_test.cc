#include <gtest/gtest.h>

#include "gateway/http/server.h"

namespace kvgate::http {
namespace {

TEST(RequestTest, HeaderLookupIsCaseInsensitiveAndFirstWins) {
  Request r;
  r.headers = {{"Content-Type", "application/json"}, {"X-Thread-Id", "t1"}, {"x-thread-id", "t2"}};
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.header("CONTENT-TYPE"), "application/json");
  EXPECT_EQ(r.header("x-THREAD-id"), "t1");
  EXPECT_EQ(r.header("Authorization"), "");
}

TEST(RequestTest, QueryParamDecodes) {
  Request r;
  r.query = "limit=10&name=hello%20world&plus=a+b&empty=&flag&bad=%zz%4&k%65y=v&limit=99";
  EXPECT_EQ(r.query_param("limit"), "10");
  EXPECT_EQ(r.query_param("name"), "hello world");
  EXPECT_EQ(r.query_param("plus"), "a b");
  EXPECT_EQ(r.query_param("empty"), "");
  EXPECT_EQ(r.query_param("flag"), "");
  EXPECT_EQ(r.query_param("bad"), "%zz%4");
  EXPECT_EQ(r.query_param("key"), "v");
  EXPECT_EQ(r.query_param("missing"), "");
}

TEST(RequestTest, PercentDecodeKeepsPlusAndBadEscapes) {
  EXPECT_EQ(PercentDecode("with%20space"), "with space");
  EXPECT_EQ(PercentDecode("a+b%2Bc"), "a+b+c");  // a path is not a form: '+' stays '+'
  EXPECT_EQ(PercentDecode("%E6%97%A5"), "\xE6\x97\xA5");
  EXPECT_EQ(PercentDecode("a%2Fb"), "a/b");
  EXPECT_EQ(PercentDecode("100%"), "100%");
  EXPECT_EQ(PercentDecode("%zz%4"), "%zz%4");
  EXPECT_EQ(PercentDecode(""), "");
}

TEST(RequestTest, QueryParamDecodesUtf8Bytes) {
  Request r;
  r.query = "q=%E2%9C%93";
  EXPECT_EQ(r.query_param("q"), "\xE2\x9C\x93");
}

}  // namespace
}  // namespace kvgate::http
