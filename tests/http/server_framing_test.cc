// The server's strict HTTP/1.1 framing (RFC 9112) and its Expect: 100-continue hook, on real
// sockets: what Beast's parser alone accepts (obs-fold, a missing or repeated Host) or waits on
// (chunk lines ended by a bare LF) is a 400 at once, and a request refused on its head is refused
// before its client is told to send the body.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gateway/http/server.h"
#include "tests/http/test_util.h"

namespace kvgate::http {
namespace {

namespace asio = boost::asio;
using kvgate::testing::NowMs;
using kvgate::testing::RawConn;
using kvgate::testing::ReadResponse;

// Counts the requests that reached the handler, and echoes their body.
struct Counted {
  std::atomic<int> handled{0};
  Handler handler() {
    return [this](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
      ++handled;
      co_await w.Send(200, "text/plain", "body=" + req.body);
    };
  }
};

std::unique_ptr<Server> Start(ServerOptions options, Handler handler) {
  options.port = 0;
  options.threads = 1;
  auto server = Server::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(server.has_value()) << (server ? "" : server.error().ToString());
  return server ? std::move(*server) : nullptr;
}

// Sends `bytes` on a fresh connection; the answer, which must come within `within_ms`, and whether
// the server then closed the connection.
struct Answer {
  int status = 0;
  std::string body;
  bool closed = false;
};
Answer Exchange(uint16_t port, const std::string& bytes, int within_ms = 3000) {
  RawConn c;
  EXPECT_EQ(c.Connect(port), 0);
  EXPECT_TRUE(c.Send(bytes));
  auto r = ReadResponse(c, within_ms);
  if (!r) return {};
  return Answer{r->status, r->body, c.WaitClosed(3000)};
}

TEST(ServerFramingTest, ObsFoldIsRejected) {
  Counted counted;
  std::atomic<int> rejected{0};
  ServerOptions options;
  options.on_rejected = [&](const Rejection& r) {
    if (r.status == 400) ++rejected;
    return std::vector<Header>{};
  };
  auto server = Start(options, counted.handler());
  // A folded Authorization line: a parser that unfolds it sees "Bearer secret".
  for (const char* fold : {" ", "\t"}) {
    const Answer a =
        Exchange(server->port(), "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer\r\n" +
                                     std::string(fold) + "secret\r\n\r\n");
    EXPECT_EQ(a.status, 400);
    EXPECT_NE(a.body.find("obsolete line folding"), std::string::npos) << a.body;
    EXPECT_NE(a.body.find(R"("type":"invalid_request_error")"), std::string::npos) << a.body;
    EXPECT_TRUE(a.closed);
  }
  EXPECT_EQ(counted.handled, 0);
  EXPECT_EQ(rejected, 2);
}

TEST(ServerFramingTest, Http11NeedsExactlyOneHost) {
  Counted counted;
  auto server = Start({}, counted.handler());
  const Answer none = Exchange(server->port(), "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n");
  EXPECT_EQ(none.status, 400);
  EXPECT_NE(none.body.find("Host"), std::string::npos) << none.body;
  EXPECT_TRUE(none.closed);
  const Answer two = Exchange(server->port(), "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  EXPECT_EQ(two.status, 400);
  EXPECT_NE(two.body.find("more than one Host"), std::string::npos) << two.body;
  EXPECT_TRUE(two.closed);
  const Answer two10 = Exchange(server->port(), "GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n");
  EXPECT_EQ(two10.status, 400);
  EXPECT_EQ(counted.handled, 0);
  // HTTP/1.0 has no Host requirement; one Host is what every HTTP/1.1 request carries.
  EXPECT_EQ(Exchange(server->port(), "GET / HTTP/1.0\r\n\r\n").status, 200);
  EXPECT_EQ(
      Exchange(server->port(), "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").status,
      200);
  EXPECT_EQ(counted.handled, 2);
}

TEST(ServerFramingTest, BareLfInChunkFramingIsRejectedAtOnce) {
  Counted counted;
  ServerOptions options;  // the default deadlines: 10 s for the head, 30 s for the body
  auto server = Start(options, counted.handler());
  const std::string head = "POST /e HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const std::string& body : {std::string("5\nhello\n0\n\n"),       // LF-only throughout
                                  std::string("5\r\nhello\n"),          // the end of a chunk's data
                                  std::string("5\r\nhello\r\n0\n")}) {  // the last-chunk line
    const int64_t start = NowMs();
    const Answer a = Exchange(server->port(), head + body, 2000);
    EXPECT_EQ(a.status, 400) << body;
    EXPECT_NE(a.body.find("bare LF"), std::string::npos) << a.body;
    EXPECT_LT(NowMs() - start, 1500) << body;  // not the body deadline
    EXPECT_TRUE(a.closed);
  }
  EXPECT_EQ(counted.handled, 0);
  // The same body framed with CRLF, sent a byte at a time, is read whole.
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(head));
  for (const char ch : std::string("5\r\nhello\r\n0\r\n\r\n"))
    ASSERT_TRUE(c.Send(std::string(1, ch)));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "body=hello");
}

// The hook answers for a request whose "x-key" header is not "good".
ServerOptions WithKeyCheck(std::atomic<int>& asked) {
  ServerOptions options;
  options.on_expect_continue = [&asked](const Request& req) -> std::optional<EarlyAnswer> {
    ++asked;
    EXPECT_TRUE(req.body.empty());
    EXPECT_EQ(req.path, "/upload");
    if (req.header("x-key") == "good") return std::nullopt;
    return EarlyAnswer{.status = 401,
                       .content_type = "application/json",
                       .body = R"({"error":{"message":"bad key"}})",
                       .headers = {{"x-request-id", "req_early"}}};
  };
  return options;
}

TEST(ServerFramingTest, ExpectContinueWithABadKeyIsRefusedBeforeTheBody) {
  Counted counted;
  std::atomic<int> asked{0};
  auto server = Start(WithKeyCheck(asked), counted.handler());
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(
      c.Send("POST /upload HTTP/1.1\r\nHost: t\r\nx-key: bad\r\nExpect: 100-continue\r\n"
             "Content-Length: 5\r\n\r\n"));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);  // the first response: no 100 Continue came before it
  EXPECT_EQ(r->body, R"({"error":{"message":"bad key"}})");
  EXPECT_EQ(r->header("x-request-id"), "req_early");
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.WaitClosed(3000));
  EXPECT_EQ(c.pending().find("100 Continue"), std::string::npos) << c.pending();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(counted.handled, 0);
}

TEST(ServerFramingTest, ExpectContinueWithAGoodKeyGets100ThenTheAnswer) {
  Counted counted;
  std::atomic<int> asked{0};
  auto server = Start(WithKeyCheck(asked), counted.handler());
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(
      c.Send("POST /upload HTTP/1.1\r\nHost: t\r\nx-key: good\r\nExpect: 100-continue\r\n"
             "Content-Length: 5\r\n\r\n"));
  auto interim = ReadResponse(c);  // the client sends its body only after this
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.Send("hello"));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "body=hello");
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(counted.handled, 1);
}

}  // namespace
}  // namespace kvgate::http
