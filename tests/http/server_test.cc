// The HTTP server on real sockets (127.0.0.1, port 0), driven by a raw blocking client.
#include "gateway/http/server.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "tests/http/test_util.h"

namespace kvgate::http {
namespace {

namespace asio = boost::asio;
using kvgate::testing::Lower;
using kvgate::testing::NowMs;
using kvgate::testing::RawConn;
using kvgate::testing::RawResponse;
using kvgate::testing::ReadResponse;
using namespace std::chrono_literals;

asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

std::unique_ptr<Server> StartOrDie(ServerOptions options, Handler handler) {
  options.port = 0;
  if (options.threads == 0) options.threads = 2;
  auto server = Server::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(server.has_value()) << (server ? "" : server.error().ToString());
  return server ? std::move(*server) : nullptr;
}

// Echoes what it saw, so tests can check parsing end to end.
asio::awaitable<void> Echo(Request& req, ResponseWriter& w) {
  std::string body = req.method + " " + req.path + " q=" + req.query_param("q") +
                     " h=" + std::string(req.header("x-test")) + " body=" + req.body;
  std::vector<Header> extra(1, Header{"X-Echo", "1"});  // (GCC 12: no braced lists in co_await)
  co_await w.Send(200, "text/plain", std::move(body), std::move(extra));
}

std::string Get(std::string_view target, std::string_view extra = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: t\r\n" + std::string(extra) + "\r\n";
}

TEST(ServerTest, GetAndPost) {
  auto server = StartOrDie({}, Echo);
  ASSERT_NE(server, nullptr);
  ASSERT_NE(server->port(), 0);
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/a/b?q=hello%20there+x&z=1", "X-TEST: yes\r\n")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /a/b q=hello there x h=yes body=");
  EXPECT_EQ(r->header("x-echo"), "1");
  EXPECT_EQ(r->header("content-type"), "text/plain");

  ASSERT_TRUE(c.Send("POST /v1/chat HTTP/1.1\r\nHost: t\r\nContent-Length: 7\r\nx-Test: P\r\n\r\n"
                     "{\"a\":1}"));
  r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /v1/chat q= h=P body={\"a\":1}");
}

TEST(ServerTest, FillsRequestMetadata) {
  std::promise<Request> seen;
  auto server = StartOrDie({}, [&](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    seen.set_value(req);
    co_await w.Send(204, "", "");
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  const int64_t before = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  ASSERT_TRUE(c.Send(Get("/x?y=1")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  Request req = seen.get_future().get();
  EXPECT_EQ(req.target, "/x?y=1");
  EXPECT_EQ(req.path, "/x");
  EXPECT_EQ(req.query, "y=1");
  EXPECT_EQ(req.remote_address, "127.0.0.1");
  EXPECT_GE(req.arrival_monotonic_ns, before);
  EXPECT_LT(req.arrival_monotonic_ns, before + 5'000'000'000);
  EXPECT_EQ(req.header("host"), "t");
}

TEST(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  std::atomic<int> count{0};
  auto server = StartOrDie({}, [&](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    ++count;
    co_await w.Send(200, "text/plain", req.query_param("i"));
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(c.Send(Get("/?i=" + std::to_string(i))));
    auto r = ReadResponse(c);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->body, std::to_string(i));
    EXPECT_EQ(r->header("connection"), "");
  }
  EXPECT_EQ(count.load(), 200);
  // Connection: close is honoured.
  ASSERT_TRUE(c.Send(Get("/?i=last", "Connection: close\r\n")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.WaitClosed(2000));
}

// A keep-alive connection reuses one body buffer: each request still sees exactly its own body.
TEST(ServerTest, BodiesOnOneConnectionDoNotLeakIntoEachOther) {
  auto server = StartOrDie({}, [&](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    co_await w.Send(200, "text/plain", "[" + req.body + "]");
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  for (const std::string& body : {std::string(5000, 'x'), std::string("short"), std::string()}) {
    ASSERT_TRUE(c.Send("POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
    auto r = ReadResponse(c);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "[" + body + "]");
  }
}

TEST(ServerTest, Http10KeepAliveOnlyWhenAsked) {
  auto server = StartOrDie({}, Echo);
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(Lower(r->header("connection")), "keep-alive");
  ASSERT_TRUE(c.Send("GET /b HTTP/1.0\r\n\r\n"));
  r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "GET /b q= h= body=");
  EXPECT_TRUE(c.WaitClosed(2000));
}

TEST(ServerTest, HeadSendsNoBody) {
  auto server = StartOrDie({}, Echo);
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send("HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n" + Get("/next")));
  auto r = ReadResponse(c, 5000, /*head_request=*/true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("content-length"),
            std::to_string(std::string("HEAD /h q= h= body=").size()));
  r = ReadResponse(c);  // the next response must follow directly: no stray body bytes
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "GET /next q= h= body=");
}

TEST(ServerTest, PipelinedRequestsAnsweredInOrder) {
  auto server = StartOrDie({}, [](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    // The first request is the slowest: order must still hold.
    if (req.path == "/1") co_await Sleep(100ms);
    if (req.path == "/2") co_await Sleep(20ms);
    co_await w.Send(200, "text/plain", req.path + ":" + req.body);
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/1") + "POST /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc" +
                     Get("/3")));
  for (const char* want : {"/1:", "/2:abc", "/3:"}) {
    auto r = ReadResponse(c);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, want);
  }
}

TEST(ServerTest, OversizedBodyGets413AndServerKeepsServing) {
  ServerOptions options;
  options.body_limit = 1024;
  auto server = StartOrDie(options, Echo);
  {
    RawConn c;
    ASSERT_EQ(c.Connect(server->port()), 0);
    ASSERT_TRUE(c.Send("POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 4096\r\n\r\n" +
                       std::string(4096, 'x')));
    auto r = ReadResponse(c);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_EQ(r->header("content-type"), "application/json");
    EXPECT_NE(r->body.find(R"("type":"invalid_request_error")"), std::string::npos) << r->body;
    EXPECT_NE(r->body.find(R"("param":null)"), std::string::npos);
    EXPECT_NE(r->body.find(R"("code":"request_too_large")"), std::string::npos);
    EXPECT_TRUE(c.WaitClosed(3000));
  }
  {  // Chunked bodies are limited too.
    RawConn c;
    ASSERT_EQ(c.Connect(server->port()), 0);
    std::string req = "POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 4; ++i) req += "200\r\n" + std::string(512, 'y') + "\r\n";
    ASSERT_TRUE(c.Send(req + "0\r\n\r\n"));
    auto r = ReadResponse(c);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send("POST /ok HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n" +
                     std::string(1024, 'z')));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), std::string("POST /ok q= h= body=").size() + 1024);
}

// on_rejected hears of every request the server answers by itself, with the head when it was
// read, and its headers go into that answer.
TEST(ServerTest, RejectionsReachOnRejectedAndCarryItsHeaders) {
  struct Seen {
    int status;
    bool head_read;
    std::string method, path, thread_header;
  };
  Mutex mu;
  std::vector<Seen> seen;
  ServerOptions options;
  options.body_limit = 1024;
  options.header_limit = 2048;
  options.on_rejected = [&](const Rejection& r) {
    MutexLock lock(&mu);
    seen.push_back({r.status, r.head_read, r.request.method, r.request.path,
                    std::string(r.request.header("x-thread-id"))});
    return std::vector<Header>{{"x-request-id", "req_" + std::to_string(seen.size())}};
  };
  auto server = StartOrDie(options, Echo);
  auto send = [&](const std::string& bytes) {
    RawConn c;
    EXPECT_EQ(c.Connect(server->port()), 0);
    EXPECT_TRUE(c.Send(bytes));
    return ReadResponse(c);
  };
  auto big = send("POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: t\r\nX-Thread-Id: th\r\n"
                  "Content-Length: 4096\r\n\r\n" + std::string(4096, 'x'));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(big->header("x-request-id"), "req_1");
  auto huge = send(Get("/", "X-Big: " + std::string(8192, 'h') + "\r\n"));
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 431);
  EXPECT_EQ(huge->header("x-request-id"), "req_2");
  auto bad = send("G(T / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->header("x-request-id"), "req_3");

  MutexLock lock(&mu);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].status, 413);
  EXPECT_TRUE(seen[0].head_read);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].path, "/v1/chat/completions");
  EXPECT_EQ(seen[0].thread_header, "th");
  EXPECT_EQ(seen[1].status, 431);
  EXPECT_FALSE(seen[1].head_read);
  EXPECT_EQ(seen[1].path, "");
  EXPECT_EQ(seen[2].status, 400);
  EXPECT_FALSE(seen[2].head_read);
}

TEST(ServerTest, AbsoluteFormTargetsAreServedByTheirPath) {
  auto server = StartOrDie({}, Echo);
  for (const auto& [target, want] :
       std::vector<std::pair<std::string, std::string>>{
           {"http://127.0.0.1:1/v1/models?q=a", "GET /v1/models q=a h= body="},
           {"HTTP://host/x", "GET /x q= h= body="},
           {"http://host", "GET / q= h= body="},
           {"http://host?q=b", "GET / q=b h= body="}}) {
    RawConn c;
    ASSERT_EQ(c.Connect(server->port()), 0);
    ASSERT_TRUE(c.Send(Get(target)));
    auto r = ReadResponse(c);
    ASSERT_TRUE(r) << target;
    EXPECT_EQ(r->status, 200) << target;
    EXPECT_EQ(r->body, want) << target;
  }
}

TEST(ServerTest, HugeHeadersGet431) {
  ServerOptions options;
  options.header_limit = 2048;
  auto server = StartOrDie(options, Echo);
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/", "X-Big: " + std::string(8192, 'h') + "\r\n")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_NE(r->body.find(R"("type":"invalid_request_error")"), std::string::npos);
  EXPECT_TRUE(c.WaitClosed(3000));
}

TEST(ServerTest, MalformedRequestGets400AndClose) {
  auto server = StartOrDie({}, Echo);
  for (const char* bad : {"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: nope\r\n\r\n",
                          "G(T / HTTP/1.1\r\n\r\n", "GET / HTTP/7.1\r\n\r\n"}) {
    RawConn c;
    ASSERT_EQ(c.Connect(server->port()), 0);
    ASSERT_TRUE(c.Send(bad));
    auto r = ReadResponse(c);
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_NE(r->body.find("\"error\""), std::string::npos);
    EXPECT_TRUE(c.WaitClosed(3000));
  }
}

TEST(ServerTest, SlowClientHitsHeaderDeadline) {
  ServerOptions options;
  options.header_timeout = 200ms;
  auto server = StartOrDie(options, Echo);
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  const int64_t start = NowMs();
  ASSERT_TRUE(c.Send("GET / HTTP/1.1\r\nHost: t\r\n"));  // never finishes its headers
  ASSERT_TRUE(c.WaitClosed(3000));
  const int64_t elapsed = NowMs() - start;
  EXPECT_GE(elapsed, 150);
  EXPECT_LT(elapsed, 2000);

  // An idle keep-alive connection is closed after idle_timeout, not header_timeout.
  ServerOptions idle;
  idle.header_timeout = 5000ms;
  idle.idle_timeout = 150ms;
  auto server2 = StartOrDie(idle, Echo);
  RawConn d;
  ASSERT_EQ(d.Connect(server2->port()), 0);
  ASSERT_TRUE(d.Send(Get("/")));
  ASSERT_TRUE(ReadResponse(d));
  const int64_t idle_start = NowMs();
  ASSERT_TRUE(d.WaitClosed(3000));
  EXPECT_LT(NowMs() - idle_start, 2000);
}

TEST(ServerTest, StreamingDeliversChunksAsTheyAreWritten) {
  std::atomic<int64_t> handler_done_ms{0};
  auto server = StartOrDie({}, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    std::vector<Header> extra(1, Header{"Cache-Control", "no-cache"});
    EXPECT_TRUE(co_await w.BeginStream(200, "text/event-stream", std::move(extra)));
    EXPECT_TRUE(co_await w.WriteChunk("data: one\n\n"));
    co_await Sleep(300ms);
    EXPECT_TRUE(co_await w.WriteChunk("data: two\n\n"));
    EXPECT_TRUE(co_await w.EndStream());
    handler_done_ms = NowMs();
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  const int64_t start = NowMs();
  ASSERT_TRUE(c.Send(Get("/stream")));
  // Read until the first chunk's payload is visible.
  while (c.pending().find("data: one") == std::string::npos) {
    ASSERT_GT(c.ReadSome(2000), 0);
  }
  const int64_t first_chunk_ms = NowMs();
  EXPECT_LT(first_chunk_ms - start, 250);
  EXPECT_EQ(c.pending().find("data: two"), std::string::npos);
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  EXPECT_EQ(r->header("cache-control"), "no-cache");
  EXPECT_EQ(r->body, "data: one\n\ndata: two\n\n");
  // The handler finishes only after the client saw the terminating chunk; wait for it to record.
  for (int i = 0; i < 200 && handler_done_ms.load() == 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_GE(handler_done_ms.load(), first_chunk_ms + 250);  // the first chunk beat the handler's end
  // Keep-alive holds after a stream.
  ASSERT_TRUE(c.Send(Get("/again")));
  r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "data: one\n\ndata: two\n\n");
}

TEST(ServerTest, ClientDisconnectMidStreamFailsWriteChunk) {
  std::promise<std::pair<int, bool>> outcome;  // chunks written ok, client_gone()
  auto server = StartOrDie({}, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    co_await w.BeginStream(200, "text/event-stream");
    int ok = 0;
    for (; ok < 2000; ++ok) {
      if (!co_await w.WriteChunk(std::string(1024, 'x'))) break;
      co_await Sleep(5ms);
    }
    outcome.set_value({ok, w.client_gone()});
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/stream")));
  ASSERT_GT(c.ReadSome(2000), 0);
  c.Close();
  auto fut = outcome.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  auto [ok, gone] = fut.get();
  EXPECT_LT(ok, 2000);
  EXPECT_TRUE(gone);
}

TEST(ServerTest, ClientGoneDetectsPeerCloseWithoutWriting) {
  std::promise<bool> gone;
  auto server = StartOrDie({}, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    const bool before = w.client_gone();
    for (int i = 0; i < 200 && !w.client_gone(); ++i) co_await Sleep(10ms);
    gone.set_value(!before && w.client_gone());
    co_await w.Send(200, "text/plain", "late");
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/")));
  std::this_thread::sleep_for(50ms);
  c.Close();
  auto fut = gone.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(fut.get());
}

TEST(ServerTest, HandlerExceptionBecomes500) {
  auto server = StartOrDie({}, [](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    if (req.path == "/throw") throw std::runtime_error("secret detail");
    if (req.path == "/silent") co_return;
    co_await w.Send(200, "text/plain", "fine");
  });
  for (const char* path : {"/throw", "/silent"}) {
    RawConn c;
    ASSERT_EQ(c.Connect(server->port()), 0);
    ASSERT_TRUE(c.Send(Get(path)));
    auto r = ReadResponse(c);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 500);
    EXPECT_NE(r->body.find(R"("type":"server_error")"), std::string::npos);
    EXPECT_EQ(r->body.find("secret"), std::string::npos);
    EXPECT_TRUE(c.WaitClosed(2000));
  }
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/ok")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "fine");
}

TEST(ServerTest, RejectsHeaderInjection) {
  std::promise<bool> rejected;
  auto server = StartOrDie({}, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    std::vector<Header> extra(1, Header{"X-Bad", "a\r\nSet-Cookie: evil"});
    Status s = co_await w.Send(200, "text/plain", "x", std::move(extra));
    rejected.set_value(!s && s.error().code == ErrorCode::kInvalidArgument);
    co_await w.Send(200, "text/plain", "clean");
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_TRUE(rejected.get_future().get());
  EXPECT_EQ(r->body, "clean");
  EXPECT_EQ(r->header("set-cookie"), "");
}

// Found by fuzz/http_session_fuzz.cc: a name with '=' (not an RFC 9110 token) was written as is,
// and the client's parser rejected the whole response.
TEST(ServerTest, RefusesHeaderNamesThatAreNotTokensAndControlCharactersInValues) {
  std::promise<int> refused;
  auto server = StartOrDie({}, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    int n = 0;
    std::vector<Header> bad;
    bad.push_back(Header{"bad=name", "v"});
    bad.push_back(Header{"caf\xc3\xa9", "v"});
    bad.push_back(Header{"X-Ctl", "a\x01b"});
    bad.push_back(Header{"X-Del", "a\x7f"});
    for (size_t i = 0; i < bad.size(); ++i) {
      std::vector<Header> one(1, bad[i]);
      Status s = co_await w.Send(200, "text/plain", "x", std::move(one));
      if (!s && s.error().code == ErrorCode::kInvalidArgument) ++n;
    }
    refused.set_value(n);
    std::vector<Header> good(1, Header{"X-Ok!#$%&'*+-.^_`|~", "tab\tok \xff"});
    co_await w.Send(200, "text/plain", "clean", std::move(good));
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(refused.get_future().get(), 4);
  EXPECT_EQ(r->body, "clean");
}

TEST(ServerTest, AllLoopsShareOnePortAndThreadStartHookRuns) {
  Mutex mu;
  std::set<size_t> started;
  std::set<std::string> thread_names;  // what `top -H` shows for each loop
  std::set<size_t> served;
  ServerOptions options;
  options.threads = 2;
  options.on_thread_start = [&](size_t index, asio::any_io_executor) {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    MutexLock lock(&mu);
    started.insert(index);
    thread_names.insert(name);
  };
  auto server = StartOrDie(options, [&](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    {
      MutexLock lock(&mu);
      served.insert(req.worker_index);
    }
    co_await w.Send(200, "text/plain", "ok");
  });
  for (int i = 0; i < 64; ++i) {
    RawConn c;
    ASSERT_EQ(c.Connect(server->port()), 0);
    ASSERT_TRUE(c.Send(Get("/")));
    ASSERT_TRUE(ReadResponse(c));
  }
  MutexLock lock(&mu);
  EXPECT_EQ(started, (std::set<size_t>{0, 1}));
  EXPECT_EQ(thread_names, (std::set<std::string>{"http-0", "http-1"}));
  EXPECT_EQ(served, (std::set<size_t>{0, 1}));  // 64 connections all on one loop: ~2^-63
}

TEST(ServerTest, StartFailsOnBadHostAndBusyPort) {
  ServerOptions bad;
  bad.host = "not an address";
  auto r = Server::Start(bad, Echo);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);

  // A port held by a socket without SO_REUSEPORT cannot be shared.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ServerOptions busy;
  busy.port = ntohs(addr.sin_port);
  auto r2 = Server::Start(busy, Echo);
  ::close(fd);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code, ErrorCode::kUnavailable);

  // Nor can a port held by another kvgate server (whose sockets do set SO_REUSEPORT).
  auto first = StartOrDie({}, Echo);
  ServerOptions same;
  same.port = first->port();
  auto r3 = Server::Start(same, Echo);
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r3.error().message.find(std::to_string(first->port())), std::string::npos);
}

TEST(ServerTest, NoContentResponsesCarryNoBody) {
  auto server = StartOrDie({}, [](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    co_await w.Send(204, "", "ignored");
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/a") + Get("/b")));
  for (int i = 0; i < 2; ++i) {
    auto r = ReadResponse(c);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 204);
    EXPECT_EQ(r->header("content-length"), "");
  }
  EXPECT_EQ(c.pending(), "");  // no stray body bytes
}

TEST(ServerTest, Http10StreamEndsByClosing) {
  auto server = StartOrDie({}, [](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    co_await w.BeginStream(200, "text/plain");
    co_await w.WriteChunk("one,");
    co_await w.WriteChunk("two");
    co_await w.EndStream();
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  ASSERT_TRUE(c.WaitClosed(3000));
  const std::string& all = c.pending();
  EXPECT_NE(all.find("Connection: close\r\n"), std::string::npos) << all;
  EXPECT_EQ(all.find("chunked"), std::string::npos);
  EXPECT_EQ(all.substr(all.size() - 7), "one,two");
}

TEST(ServerTest, StopDrainsInFlightRequestAndRefusesNewConnections) {
  std::atomic<bool> slow_started{false};
  auto server = StartOrDie({}, [&](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    if (req.path == "/slow") {
      slow_started = true;
      co_await w.BeginStream(200, "text/plain");
      for (int i = 0; i < 5; ++i) {
        co_await Sleep(100ms);
        co_await w.WriteChunk("tick;");
      }
      co_await w.EndStream();
      co_return;
    }
    co_await w.Send(200, "text/plain", "quick");
  });
  const uint16_t port = server->port();
  RawConn idle;  // a keep-alive connection with no request in flight
  ASSERT_EQ(idle.Connect(port), 0);
  ASSERT_TRUE(idle.Send(Get("/")));
  ASSERT_TRUE(ReadResponse(idle));

  RawConn slow;
  ASSERT_EQ(slow.Connect(port), 0);
  ASSERT_TRUE(slow.Send(Get("/slow")));
  // (in_flight() alone could still count the first request, whose response the client has
  // already read while the server is finishing its bookkeeping.)
  for (int i = 0; i < 400 && !(slow_started && server->in_flight() == 1); ++i) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(slow_started.load());
  ASSERT_EQ(server->in_flight(), 1u);

  const int64_t stop_start = NowMs();
  std::thread stopper([&] { server->Stop(); });
  EXPECT_TRUE(idle.WaitClosed(1000));  // idle connections go at once
  EXPECT_LT(NowMs() - stop_start, 400);
  RawConn late;
  EXPECT_EQ(late.Connect(port), ECONNREFUSED);

  auto r = ReadResponse(slow, 5000);
  stopper.join();
  ASSERT_TRUE(r) << "after " << NowMs() - stop_start << " ms, unparsed: " << slow.pending();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "tick;tick;tick;tick;tick;");
  EXPECT_TRUE(slow.WaitClosed(2000));  // no keep-alive while draining
  server->Wait();
  EXPECT_EQ(server->in_flight(), 0u);
}

TEST(ServerTest, StopCancelsStreamsPastDrainTimeout) {
  ServerOptions options;
  options.drain_timeout = 200ms;
  std::atomic<bool> write_failed{false};
  auto server = StartOrDie(options, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    co_await w.BeginStream(200, "text/plain");
    for (;;) {
      if (!co_await w.WriteChunk("x")) {
        write_failed = true;
        co_return;
      }
      co_await Sleep(20ms);
    }
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/forever")));
  ASSERT_GT(c.ReadSome(2000), 0);
  const int64_t start = NowMs();
  server->Stop();
  const int64_t took = NowMs() - start;
  EXPECT_GE(took, 150);
  EXPECT_LT(took, 2000);
  EXPECT_TRUE(write_failed.load());
  EXPECT_TRUE(c.WaitClosed(1000));
  server->Wait();
  server->Stop();  // idempotent
}

// A stream still open at the drain deadline ends with the handler's cut notice and a proper end
// of body, so its reader sees why it ended instead of a truncated body; without a notice the body
// stays truncated (a half answer must not look whole).
TEST(ServerTest, StopEndsAStreamPastDrainTimeoutWithItsCutNotice) {
  for (const bool with_notice : {true, false}) {
    SCOPED_TRACE(with_notice ? "with a notice" : "without a notice");
    ServerOptions options;
    options.drain_timeout = 200ms;
    auto server = StartOrDie(options, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
      co_await w.BeginStream(200, "text/event-stream");
      if (with_notice) w.SetCutNotice("data: {\"error\":\"cut\"}\n\n");
      co_await w.WriteChunk("data: 1\n\n");
      co_await Sleep(30s);  // waiting on something other than the client (an upstream)
    });
    RawConn c;
    ASSERT_EQ(c.Connect(server->port()), 0);
    ASSERT_TRUE(c.Send(Get("/stream")));
    ASSERT_GT(c.ReadSome(2000), 0);
    server->Stop();
    auto r = ReadResponse(c, 3000);
    if (with_notice) {
      ASSERT_TRUE(r) << "unparsed: " << c.pending();
      EXPECT_EQ(r->body, "data: 1\n\ndata: {\"error\":\"cut\"}\n\n");
    } else {
      EXPECT_FALSE(r);
      EXPECT_EQ(c.pending().find("0\r\n\r\n"), std::string::npos) << c.pending();
    }
    EXPECT_TRUE(c.WaitClosed(1000));
    server->Wait();
  }
}

// A handler waiting on something other than its client hears within a sweep or two that the
// client left; one whose client stays is not told.
TEST(ServerTest, OnClientGoneTellsAWaitingHandlerThatItsClientLeft) {
  std::atomic<int> gone_calls{0};
  std::atomic<bool> waiting{false};
  std::atomic<int64_t> gone_after_ms{-1};
  auto server = StartOrDie({}, [&](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer wait(executor, std::chrono::seconds(3));
    const int64_t start = NowMs();
    w.OnClientGone([&] {
      ++gone_calls;
      gone_after_ms = NowMs() - start;
      wait.cancel();
    });
    waiting = true;
    co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
    co_await w.Send(200, "text/plain", req.path);
  });
  {
    RawConn leaver;
    ASSERT_EQ(leaver.Connect(server->port()), 0);
    ASSERT_TRUE(leaver.Send(Get("/leave")));
    for (int i = 0; i < 200 && !waiting; ++i) std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(waiting.load());
  }  // closes the connection
  for (int i = 0; i < 300 && gone_calls == 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(gone_calls.load(), 1);
  EXPECT_GE(gone_after_ms.load(), 0);
  EXPECT_LT(gone_after_ms.load(), 1000);  // the sweep runs every 250 ms

  RawConn stayer;
  ASSERT_EQ(stayer.Connect(server->port()), 0);
  const int64_t start = NowMs();
  ASSERT_TRUE(stayer.Send(Get("/stay")));
  auto r = ReadResponse(stayer, 6000);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "/stay");
  EXPECT_GE(NowMs() - start, 2500);  // waited its 3 s: nobody called it gone
  EXPECT_EQ(gone_calls.load(), 1);
}

// A client that pipelines its requests and then half-closes still wants the answers: its FIN
// behind requests kvgate has read is not a client that left.
TEST(ServerTest, HalfCloseAfterPipelinedRequestsIsNotAClientThatLeft) {
  std::atomic<int> gone_calls{0};
  auto server = StartOrDie({}, [&](Request& req, ResponseWriter& w) -> asio::awaitable<void> {
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer wait(executor, std::chrono::milliseconds(req.path == "/a" ? 700 : 0));
    w.OnClientGone([&] {
      ++gone_calls;
      wait.cancel();
    });
    co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
    co_await w.Send(200, "text/plain", req.path);
  });
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/a") + Get("/b")));
  c.ShutdownWrite();
  auto a = ReadResponse(c, 5000);
  auto b = ReadResponse(c, 5000);
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->body, "/a");
  EXPECT_EQ(b->body, "/b");
  EXPECT_EQ(gone_calls.load(), 0);
}

TEST(ServerTest, StopFromInsideAHandlerDoesNotDeadlock) {
  Server* self = nullptr;
  auto server = StartOrDie({}, [&](Request&, ResponseWriter& w) -> asio::awaitable<void> {
    self->Stop();
    co_await w.Send(200, "text/plain", "bye");
  });
  self = server.get();
  RawConn c;
  ASSERT_EQ(c.Connect(server->port()), 0);
  ASSERT_TRUE(c.Send(Get("/")));
  auto r = ReadResponse(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "bye");
  EXPECT_TRUE(c.WaitClosed(2000));
  server->Wait();
}

}  // namespace
}  // namespace kvgate::http
