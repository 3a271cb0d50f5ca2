// The upstream client against real servers on 127.0.0.1: kvgate's own Server, scripted raw
// servers for failure modes, and a TLS server with a certificate made in the test.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include "gateway/http/server.h"
#include "gateway/upstream/client.h"
#include "tests/http/test_util.h"
#include "tests/http/tls_util.h"

namespace kvgate::upstream {
namespace {

namespace asio = boost::asio;
using kvgate::testing::ArmReset;
using kvgate::testing::NowMs;
using kvgate::testing::ReadHttpRequest;
using kvgate::testing::ScriptedServer;
using kvgate::testing::SendAll;
using namespace std::chrono_literals;

// Runs one client operation to completion on ioc (the test thread is the event loop).
template <class T>
T Await(asio::io_context& ioc, asio::awaitable<T> op) {
  std::optional<T> out;
  asio::co_spawn(
      ioc, [&]() -> asio::awaitable<void> { out.emplace(co_await std::move(op)); },
      asio::detached);
  ioc.restart();
  // Until the operation is done, not until the loop runs dry: the client's pool sweep keeps a
  // timer pending while it holds idle connections.
  while (!out && ioc.run_one() > 0) {
  }
  ioc.poll();
  return std::move(*out);
}

Url MustParse(const std::string& s) {
  auto u = Url::Parse(s);
  EXPECT_TRUE(u) << s;
  return *u;
}

OutgoingRequest Post(std::string path, std::string body) {
  OutgoingRequest r;
  r.path = std::move(path);
  r.body = std::move(body);
  r.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer k"}};
  return r;
}

// kvgate's Server as the upstream: /stream streams two events 200 ms apart, anything else echoes.
std::unique_ptr<http::Server> StartUpstream() {
  http::ServerOptions options;
  options.port = 0;
  options.threads = 1;
  auto server = http::Server::Start(
      options, [](http::Request& req, http::ResponseWriter& w) -> asio::awaitable<void> {
        if (req.path == "/v1/stream") {
          co_await w.BeginStream(200, "text/event-stream");
          co_await w.WriteChunk("data: first\n\n");
          asio::steady_timer t(co_await asio::this_coro::executor, 200ms);
          co_await t.async_wait(asio::use_awaitable);
          co_await w.WriteChunk("data: second\n\n");
          co_await w.EndStream();
          co_return;
        }
        std::string body = req.method + " " + req.target + " auth=" +
                           std::string(req.header("authorization")) + " host=" +
                           std::string(req.header("host")) + " body=" + req.body;
        std::vector<http::Header> extra(1, http::Header{"X-Upstream", "kvgate"});
        co_await w.Send(200, "text/plain", std::move(body), std::move(extra));
      });
  EXPECT_TRUE(server);
  return server ? std::move(*server) : nullptr;
}

TEST(ClientTest, BufferedSend) {
  auto upstream = StartUpstream();
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream->port()) + "/v1/");
  auto r = Await(ioc, client->Send(url, Post("/chat/completions", "{\"x\":1}")));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("x-upstream"), "kvgate");
  EXPECT_EQ(r->body, "POST /v1/chat/completions auth=Bearer k host=127.0.0.1:" +
                         std::to_string(upstream->port()) + " body={\"x\":1}");
}

TEST(ClientTest, PoolReusesOneConnectionForSequentialRequests) {
  auto upstream = StartUpstream();
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream->port()) + "/v1");
  for (int i = 0; i < 10; ++i) {
    auto r = Await(ioc, client->Send(url, Post("/echo", std::to_string(i))));
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_NE(r->body.find("body=" + std::to_string(i)), std::string::npos);
  }
  const auto s = client->stats();
  EXPECT_EQ(s.connections_opened, 1u);
  EXPECT_EQ(s.reused, 9u);
  EXPECT_EQ(s.requests_sent, 10u);
  EXPECT_EQ(s.retried, 0u);
}

// A pooled connection nobody asks for again is closed after the idle timeout (the server sees
// its EOF), not held for the life of the process.
TEST(ClientTest, IdlePooledConnectionIsClosedAfterTheIdleTimeout) {
  std::atomic<int64_t> closed_after_ms{-1};
  ScriptedServer upstream([&](int fd, int, const std::atomic<bool>&) {
    std::string carry;
    if (ReadHttpRequest(fd, carry).empty()) return;
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    const int64_t answered = NowMs();
    char byte;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5'000) == 1 && read(fd, &byte, 1) == 0) closed_after_ms = NowMs() - answered;
  });
  asio::io_context ioc;
  ClientOptions options;
  options.pool_idle_timeout = 300ms;
  auto client = Client::Create(ioc.get_executor(), options);
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream.port()));
  ASSERT_TRUE(Await(ioc, client->Send(url, Post("/a", ""))));
  const int64_t start = NowMs();
  while (closed_after_ms < 0 && NowMs() - start < 3'000) {
    ioc.restart();
    ioc.run_for(50ms);
  }
  ASSERT_GE(closed_after_ms.load(), 250) << "closed before the idle timeout";
  EXPECT_LT(closed_after_ms.load(), 1'500) << "kept past the idle timeout";
  // Nothing is pooled any more: the next request opens a new connection.
  EXPECT_EQ(client->stats().connections_opened, 1u);
}

TEST(ClientTest, StreamingHandsOverPiecesAsTheyArrive) {
  auto upstream = StartUpstream();
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream->port()) + "/v1");
  int64_t head_ms = 0;
  std::vector<std::pair<int64_t, std::string>> pieces;
  auto on_head = [&](const Response& head) -> asio::awaitable<bool> {
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.header("content-type"), "text/event-stream");
    EXPECT_TRUE(head.body.empty());
    EXPECT_TRUE(pieces.empty());
    head_ms = NowMs();
    co_return true;
  };
  BodySink sink = [&](std::string_view piece) -> asio::awaitable<SinkVerdict> {
    pieces.emplace_back(NowMs(), std::string(piece));
    co_return SinkVerdict::kContinue;
  };
  OutgoingRequest req;
  req.method = "GET";
  req.path = "/stream";
  auto r = Await(ioc, client->SendStreaming(url, req, on_head, sink));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->body.empty());
  ASSERT_GE(pieces.size(), 2u);
  std::string all;
  for (const auto& p : pieces) all += p.second;
  EXPECT_EQ(all, "data: first\n\ndata: second\n\n");  // chunked framing removed
  EXPECT_EQ(pieces.front().second, "data: first\n\n");
  EXPECT_GE(pieces.front().first, head_ms);
  EXPECT_GE(pieces.back().first - pieces.front().first, 150);  // the first came before the second
  // The completed stream left its connection in the pool.
  auto again = Await(ioc, client->Send(url, Post("/echo", "")));
  ASSERT_TRUE(again);
  EXPECT_EQ(client->stats().connections_opened, 1u);
}

// kFinished: the sink is not called again; the rest of the body keeps the connection when it
// comes within finish_grace, and closes it (still a success) when it does not.
TEST(ClientTest, FinishedFromSinkDrainsWithinTheGraceOnly) {
  auto upstream = StartUpstream();
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream->port()) + "/v1");
  for (const auto grace : {std::chrono::milliseconds(2'000), std::chrono::milliseconds(20)}) {
    asio::io_context ioc;
    ClientOptions options;
    options.finish_grace = grace;
    auto client = Client::Create(ioc.get_executor(), options);
    int calls = 0;
    BodySink sink = [&](std::string_view) -> asio::awaitable<SinkVerdict> {
      ++calls;
      co_return SinkVerdict::kFinished;
    };
    auto yes = [](const Response&) -> asio::awaitable<bool> { co_return true; };
    OutgoingRequest req;
    req.method = "GET";
    req.path = "/stream";  // "data: first", then "data: second" about 200 ms later
    const int64_t start = NowMs();
    auto r = Await(ioc, client->SendStreaming(url, req, yes, sink));
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(calls, 1);
    auto again = Await(ioc, client->Send(url, Post("/echo", "")));
    ASSERT_TRUE(again);
    if (grace.count() > 1000) {
      EXPECT_EQ(client->stats().connections_opened, 1u);  // the rest came in time: pooled
    } else {
      EXPECT_LT(NowMs() - start, 150);                     // did not wait for the rest
      EXPECT_EQ(client->stats().connections_opened, 2u);  // not pooled
    }
  }
}

TEST(ClientTest, AbortFromSinkClosesInsteadOfPooling) {
  auto upstream = StartUpstream();
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream->port()) + "/v1");
  int calls = 0;
  BodySink sink = [&](std::string_view) -> asio::awaitable<SinkVerdict> {
    ++calls;
    co_return SinkVerdict::kAbort;
  };
  auto yes = [](const Response&) -> asio::awaitable<bool> { co_return true; };
  OutgoingRequest req;
  req.method = "GET";
  req.path = "/stream";
  auto r = Await(ioc, client->SendStreaming(url, req, yes, sink));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(Await(ioc, client->Send(url, Post("/echo", ""))));
  EXPECT_EQ(client->stats().connections_opened, 2u);
  EXPECT_EQ(client->stats().reused, 0u);
}

// Sends a request to `url` and fires its Abandon 100 ms later: the exchange must end at once
// with the abandonment error, well before any deadline.
void ExpectAbandonedAfter100ms(asio::io_context& ioc, Client& client, const std::string& url) {
  Abandon abandon;
  asio::steady_timer later(ioc, std::chrono::milliseconds(100));
  later.async_wait([&](const boost::system::error_code&) { abandon.Fire(); });
  OutgoingRequest req = Post("/slow", "x");
  req.abandon = &abandon;
  const int64_t start = NowMs();
  auto r = Await(ioc, client.Send(MustParse(url), req));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("abandoned by the caller"), std::string::npos)
      << r.error().message;
  EXPECT_LT(NowMs() - start, 2000);
}

// The caller gives up while the upstream has not answered: the exchange ends at once with an
// error naming the abandonment, the upstream sees its connection close, and nothing is retried.
TEST(ClientTest, AbandonClosesTheConnectionAndEndsTheExchange) {
  std::atomic<bool> upstream_saw_close{false};
  ScriptedServer upstream([&](int fd, int, const std::atomic<bool>& stop) {
    std::string carry;
    if (ReadHttpRequest(fd, carry).empty()) return;
    char c;
    for (int i = 0; i < 500 && !stop; ++i) {  // never answers; waits for the close
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10) == 1 && ::recv(fd, &c, 1, 0) <= 0) {
        upstream_saw_close = true;
        return;
      }
    }
  });
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  ExpectAbandonedAfter100ms(ioc, *client, "http://127.0.0.1:" + std::to_string(upstream.port()));
  for (int i = 0; i < 200 && !upstream_saw_close; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(upstream_saw_close.load());
  EXPECT_EQ(upstream.connections(), 1);  // not retried
  EXPECT_EQ(client->stats().requests_sent, 1u);
}

// Giving up during the TLS handshake (an upstream that accepts but never answers the hello)
// ends the exchange then, not at the connect deadline.
TEST(ClientTest, AbandonDuringTheTlsHandshakeEndsItAtOnce) {
  ScriptedServer upstream([](int fd, int, const std::atomic<bool>& stop) {
    char buf[4096];
    for (int i = 0; i < 500 && !stop; ++i) {  // swallows the ClientHello, answers nothing
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10) == 1 && ::recv(fd, buf, sizeof buf, 0) <= 0) return;
    }
  });
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  // (The connect deadline is 10 s.)
  ExpectAbandonedAfter100ms(ioc, *client, "https://127.0.0.1:" + std::to_string(upstream.port()));
  EXPECT_EQ(client->stats().requests_sent, 0u);
}

TEST(ClientTest, AnExchangeAbandonedBeforeItStartsOpensNoConnection) {
  auto upstream = StartUpstream();
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream->port()) + "/v1");
  Abandon abandon;
  abandon.Fire();
  OutgoingRequest req = Post("/echo", "x");
  req.abandon = &abandon;
  auto r = Await(ioc, client->Send(url, req));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("abandoned by the caller"), std::string::npos);
  EXPECT_EQ(client->stats().requests_sent, 0u);
}

// Connection 0 answers once with keep-alive, then reads the next request and closes without
// answering, as a server closing an idle connection at the wrong moment does (or one that
// crashed on the request). Connection 1 answers.
void AnswerOnceThenDropTheNext(int fd, int index, const std::atomic<bool>&) {
  std::string carry;
  std::string req = ReadHttpRequest(fd, carry);
  if (req.empty()) return;
  const std::string body = "answer from connection " + std::to_string(index);
  SendAll(fd,
          "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  if (index == 0) ReadHttpRequest(fd, carry);  // then close without answering
}

TEST(ClientTest, StalePooledConnectionIsRetriedOnceOnAFreshOne) {
  ScriptedServer upstream(AnswerOnceThenDropTheNext);
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream.port()));
  OutgoingRequest get;
  get.method = "GET";  // idempotent: sending it twice is sending it once
  get.path = "/a";
  auto first = Await(ioc, client->Send(url, get));
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(first->body, "answer from connection 0");
  std::vector<std::string> resent;
  get.on_resend = [&resent](const Error& e) { resent.push_back(e.message); };
  auto second = Await(ioc, client->Send(url, get));
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_EQ(second->body, "answer from connection 1");
  const auto s = client->stats();
  EXPECT_EQ(s.connections_opened, 2u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.retried, 1u);
  EXPECT_EQ(s.requests_sent, 3u);
  ASSERT_EQ(resent.size(), 1u);  // the caller hears of the first try, to record it
  EXPECT_NE(resent[0].find("closed the connection before responding"), std::string::npos)
      << resent[0];
}

// The same upstream, but a POST: the upstream read it before closing, so it may have processed
// it (and billed it). Sending it again could run it twice: the failure is the caller's.
TEST(ClientTest, PostTheUpstreamReadIsNotResentAfterItClosesWithoutAnswering) {
  ScriptedServer upstream(AnswerOnceThenDropTheNext);
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream.port()));
  auto first = Await(ioc, client->Send(url, Post("/a", "1")));
  ASSERT_TRUE(first) << first.error().ToString();
  OutgoingRequest post = Post("/a", "2");
  int resends = 0;
  post.on_resend = [&resends](const Error&) { ++resends; };
  auto second = Await(ioc, client->Send(url, std::move(post)));
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(second.error().message.find("before responding"), std::string::npos)
      << second.error().message;
  EXPECT_EQ(resends, 0);
  EXPECT_EQ(upstream.connections(), 1);  // no second connection, no second copy of the POST
  const auto s = client->stats();
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.retried, 0u);
  EXPECT_EQ(s.requests_sent, 2u);
}

TEST(ClientTest, FreshConnectionFailureIsNotRetried) {
  ScriptedServer upstream([](int fd, int, const std::atomic<bool>&) {
    std::string carry;
    ReadHttpRequest(fd, carry);  // read it, answer nothing, close
  });
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream.port()));
  auto r = Await(ioc, client->Send(url, Post("/a", "1")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("before responding"), std::string::npos) << r.error().message;
  EXPECT_EQ(upstream.connections(), 1);
  EXPECT_EQ(client->stats().retried, 0u);
}

TEST(ClientTest, IdleConnectionClosedByPeerIsNotReused) {
  ScriptedServer upstream([](int fd, int, const std::atomic<bool>&) {
    std::string carry;
    if (ReadHttpRequest(fd, carry).empty()) return;
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    // keep-alive was promised, but the connection is closed right away
  });
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream.port()));
  ASSERT_TRUE(Await(ioc, client->Send(url, Post("/a", ""))));
  std::this_thread::sleep_for(100ms);  // the FIN arrives while the connection is idle
  ASSERT_TRUE(Await(ioc, client->Send(url, Post("/a", ""))));
  const auto s = client->stats();
  EXPECT_EQ(s.connections_opened, 2u);
  EXPECT_EQ(s.reused, 0u);  // the peek saw the FIN: no doomed attempt, no retry
  EXPECT_EQ(s.retried, 0u);
}

TEST(ClientTest, ResetMidStreamIsAnErrorAfterThePartialBody) {
  ScriptedServer upstream([](int fd, int, const std::atomic<bool>&) {
    std::string carry;
    if (ReadHttpRequest(fd, carry).empty()) return;
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
    std::this_thread::sleep_for(100ms);
    ArmReset(fd);
  });
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  const Url url = MustParse("http://127.0.0.1:" + std::to_string(upstream.port()));
  std::string seen;
  bool head_seen = false;
  auto on_head = [&](const Response&) -> asio::awaitable<bool> {
    head_seen = true;
    co_return true;
  };
  BodySink sink = [&](std::string_view piece) -> asio::awaitable<SinkVerdict> {
    seen += piece;
    co_return SinkVerdict::kContinue;
  };
  auto r = Await(ioc, client->SendStreaming(url, Post("/s", ""), on_head, sink));
  ASSERT_FALSE(r);
  EXPECT_TRUE(head_seen);
  EXPECT_EQ(seen, "abc");
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("reset the connection after 3 body bytes"), std::string::npos)
      << r.error().message;

  auto buffered = Await(ioc, client->Send(url, Post("/s", "")));
  ASSERT_FALSE(buffered);
  EXPECT_EQ(buffered.error().code, ErrorCode::kUnavailable);
}

TEST(ClientTest, DeadlinesNameTheirPhase) {
  // Headers never come.
  ScriptedServer silent([](int fd, int, const std::atomic<bool>& stop) {
    std::string carry;
    ReadHttpRequest(fd, carry);
    while (!stop) std::this_thread::sleep_for(10ms);
  });
  // Headers and 5 bytes come, then nothing.
  ScriptedServer stall([](int fd, int, const std::atomic<bool>& stop) {
    std::string carry;
    ReadHttpRequest(fd, carry);
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nhello");
    while (!stop) std::this_thread::sleep_for(10ms);
  });
  asio::io_context ioc;
  ClientOptions options;
  options.header_timeout = 200ms;
  options.idle_read_timeout = 200ms;
  auto client = Client::Create(ioc.get_executor(), options);

  int64_t start = NowMs();
  auto r = Await(ioc, client->Send(MustParse("http://127.0.0.1:" + std::to_string(silent.port())),
                                   Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_NE(r.error().message.find("waiting for the response deadline (200 ms)"),
            std::string::npos)
      << r.error().message;
  EXPECT_GE(NowMs() - start, 180);
  EXPECT_LT(NowMs() - start, 3000);

  start = NowMs();
  r = Await(ioc, client->Send(MustParse("http://127.0.0.1:" + std::to_string(stall.port())),
                              Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_NE(r.error().message.find("body idle deadline (200 ms) exceeded after 5 body bytes"),
            std::string::npos)
      << r.error().message;
  EXPECT_LT(NowMs() - start, 3000);
  EXPECT_EQ(silent.connections(), 1);  // a deadline is not a stale connection: no retry
}

TEST(ClientTest, ConnectFailureAndBadResponses) {
  // A port that was just free: nothing listens.
  uint16_t dead_port;
  {
    ScriptedServer s([](int, int, const std::atomic<bool>&) {});
    dead_port = s.port();
  }
  ScriptedServer garbage([](int fd, int, const std::atomic<bool>&) {
    std::string carry;
    ReadHttpRequest(fd, carry);
    SendAll(fd, "SMTP ready\r\n\r\n");
  });
  ScriptedServer big([](int fd, int, const std::atomic<bool>&) {
    std::string carry;
    ReadHttpRequest(fd, carry);
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'b'));
  });
  asio::io_context ioc;
  ClientOptions options;
  options.max_response_body = 10;
  auto client = Client::Create(ioc.get_executor(), options);
  auto r = Await(ioc, client->Send(MustParse("http://127.0.0.1:" + std::to_string(dead_port)),
                                   Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("cannot connect"), std::string::npos);

  r = Await(ioc, client->Send(MustParse("http://127.0.0.1:" + std::to_string(garbage.port())),
                              Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCorruptData) << r.error().message;

  r = Await(ioc,
            client->Send(MustParse("http://127.0.0.1:" + std::to_string(big.port())), Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted) << r.error().message;

  OutgoingRequest bad = Post("/a", "");
  bad.headers.push_back({"X-Evil", "a\r\nInjected: 1"});
  r = Await(ioc, client->Send(MustParse("http://127.0.0.1:" + std::to_string(big.port())), bad));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
}

class TlsTest : public ::testing::Test {
 protected:
  static std::string TempPath(const char* name) {
    return ::testing::TempDir() + name + std::to_string(::getpid()) + ".pem";
  }
};

TEST_F(TlsTest, SelfSignedWithoutVerification) {
  testing::SelfSignedCert cert("DNS:localhost,IP:127.0.0.1", TempPath("kvgate_tls_a"));
  testing::TlsServer server(cert);
  asio::io_context ioc;
  ClientOptions options;
  options.verify_tls = false;
  auto client = Client::Create(ioc.get_executor(), options);
  const Url url = MustParse("https://127.0.0.1:" + std::to_string(server.port()));
  for (int i = 1; i <= 3; ++i) {
    auto r = Await(ioc, client->Send(url, Post("/a", "")));
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->body, "tls ok " + std::to_string(i));  // same TLS connection, reused
  }
  EXPECT_EQ(client->stats().connections_opened, 1u);
}

TEST_F(TlsTest, VerificationFailsWithoutTheCa) {
  testing::SelfSignedCert cert("DNS:localhost,IP:127.0.0.1", TempPath("kvgate_tls_b"));
  testing::TlsServer server(cert);
  asio::io_context ioc;
  auto client = Client::Create(ioc.get_executor(), {});
  auto r = Await(ioc, client->Send(MustParse("https://localhost:" + std::to_string(server.port())),
                                   Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("certificate"), std::string::npos) << r.error().message;
  EXPECT_EQ(server.handshakes_ok(), 0);
}

TEST_F(TlsTest, VerificationSucceedsWithCaFileAndMatchingName) {
  testing::SelfSignedCert cert("DNS:localhost,IP:127.0.0.1", TempPath("kvgate_tls_c"));
  testing::TlsServer server(cert);
  asio::io_context ioc;
  ClientOptions options;
  options.ca_file = cert.path();
  auto client = Client::Create(ioc.get_executor(), options);
  auto r = Await(ioc, client->Send(MustParse("https://localhost:" + std::to_string(server.port())),
                                   Post("/a", "")));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->body, "tls ok 1");
}

TEST_F(TlsTest, VerificationFailsOnHostNameMismatch) {
  testing::SelfSignedCert cert("DNS:api.example.test", TempPath("kvgate_tls_d"));
  testing::TlsServer server(cert);
  asio::io_context ioc;
  ClientOptions options;
  options.ca_file = cert.path();  // trusted, but issued for another name
  auto client = Client::Create(ioc.get_executor(), options);
  auto r = Await(ioc, client->Send(MustParse("https://localhost:" + std::to_string(server.port())),
                                   Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("certificate"), std::string::npos) << r.error().message;
}

TEST_F(TlsTest, MissingCaFileIsReported) {
  asio::io_context ioc;
  ClientOptions options;
  options.ca_file = "/nonexistent/ca.pem";
  auto client = Client::Create(ioc.get_executor(), options);
  auto r = Await(ioc, client->Send(MustParse("https://127.0.0.1:1"), Post("/a", "")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("ca_file"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::upstream
