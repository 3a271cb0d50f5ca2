// libFuzzer target: the HTTP/1.1 server's connection session (gateway/http/session.cc) on
// arbitrary client bytes: request parsing (Beast's parser under kvgate's limits), pipelining,
// 100-continue, the server's own 400/413/431 answers, and the ResponseWriter paths a handler can
// take (plain answers, chunked and HTTP/1.0 streams, HEAD, refused headers, a handler that throws
// or answers nothing). The request helpers (header, query_param, PercentDecode) run on every
// request.
//
// Each input is one connection: the bytes are written into one end of a socketpair whose other
// end runs the real session coroutine, then the write side is shut; the answer is read until the
// server closes. Checked, besides no crash / sanitizer report / hang:
//  - the answer is a sequence of complete, well-formed HTTP/1.1 responses (Beast's response parser);
//  - every request the handler saw got exactly one final response, in order, plus at most one
//    answer the server gave by itself (a rejection), and nothing follows "Connection: close".
//
// The query of a request drives the test handler: mode=stream|cut|throw|none, end=no (leave the
// stream for the server to end), status=N, h=NAME&v=VALUE (an extra response header). A request
// with an X-Refuse header that waits for 100-continue is refused on its head
// (ServerOptions::on_expect_continue): an answer the server gives without the handler, counted
// like a rejection.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "gateway/http/server.h"
#include "gateway/http/session.h"

namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using kvgate::http::Header;
using kvgate::http::Request;
using kvgate::http::ResponseWriter;

[[noreturn]] void Fail(const char* what, std::string_view output) {
  std::fprintf(stderr, "http_session_fuzz: %s\nserver output (%zu bytes): %.*s\n", what,
               output.size(), static_cast<int>(output.size() > 4096 ? 4096 : output.size()),
               output.data());
  std::abort();
}

// What the current input's connection did; reset per input. (libFuzzer runs inputs one at a time
// on one thread, and the handler must be a plain std::function, hence a file-level object.)
struct Observed {
  std::vector<std::string> methods;  // of every request the handler saw, in order
  int rejections = 0;                // answers the server gave by itself
};
Observed observed;

int ParseStatus(std::string_view s) {
  int v = 200;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || v < 200 || v > 599) return 200;  // 1xx would not be a final answer
  return v;
}

asio::awaitable<void> Handle(Request& req, ResponseWriter& w) {
  observed.methods.push_back(req.method);
  std::string echo = req.method + " " + kvgate::http::PercentDecode(req.path) + "?" + req.query +
                     "\nhost: " + std::string(req.header("host")) +
                     "\ncontent-type: " + std::string(req.header("Content-Type")) +
                     "\nbody: " + std::to_string(req.body.size()) + "\n";
  const std::string mode = req.query_param("mode");
  if (mode == "throw") throw std::runtime_error("handler failed");
  if (mode == "none") co_return;
  if (mode == "stream" || mode == "cut") {
    if (mode == "cut") w.SetCutNotice("data: {\"error\":\"cut\"}\n\n");
    if (!co_await w.BeginStream(ParseStatus(req.query_param("status")), "text/event-stream")) {
      co_return;
    }
    for (std::string_view piece : {std::string_view("data: 1\n\n"), std::string_view(echo),
                                   std::string_view(req.body)}) {
      if (!co_await w.WriteChunk(piece)) co_return;
    }
    if (req.query_param("end") != "no") (void)co_await w.EndStream();
    co_return;
  }
  std::vector<Header> extra;
  if (std::string name = req.query_param("h"); !name.empty()) {
    extra.push_back(Header{std::move(name), req.query_param("v")});
  }
  // A refused header or status leaves the request unanswered: the server then writes a 500.
  (void)co_await w.Send(ParseStatus(req.query_param("status")), "text/plain", echo + req.body,
                        std::move(extra));
}

kvgate::http::ServerOptions MakeOptions() {
  kvgate::http::ServerOptions o;
  o.header_limit = 1024;  // small, so that 431 and 413 are reachable with small inputs
  o.body_limit = 2048;
  o.header_timeout = o.body_timeout = o.write_timeout = o.idle_timeout = std::chrono::seconds(2);
  o.on_rejected = [](const kvgate::http::Rejection& r) {
    ++observed.rejections;
    (void)r.request.header("host");
    return std::vector<Header>{{"x-request-id", "fuzz"}};
  };
  o.on_expect_continue = [](const Request& r) -> std::optional<kvgate::http::EarlyAnswer> {
    if (r.header("x-refuse").empty()) return std::nullopt;
    ++observed.rejections;
    return kvgate::http::EarlyAnswer{.status = 401,
                                     .content_type = "application/json",
                                     .body = "{}",
                                     .headers = {{"x-request-id", "fuzz"}}};
  };
  return o;
}

// Checks that `out` is the answer to the requests the handler saw (see the file comment).
void CheckAnswer(const std::string& out) {
  size_t pos = 0;
  size_t finals = 0;
  bool closed = false;
  while (pos < out.size()) {
    if (closed) Fail("bytes after a response that said Connection: close", out);
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(boost::none);
    parser.eager(true);
    // A HEAD request's answer has a Content-Length but no body.
    if (finals < observed.methods.size() && observed.methods[finals] == "HEAD") parser.skip(true);
    boost::system::error_code ec;
    while (!parser.is_done() && pos < out.size()) {
      pos += parser.put(asio::buffer(out.data() + pos, out.size() - pos), ec);
      if (ec == bhttp::error::need_more) {
        ec = {};
        if (pos == out.size()) break;
        continue;
      }
      if (ec) Fail(("malformed response: " + ec.message()).c_str(), out);
    }
    if (!parser.is_done()) {
      parser.put_eof(ec);  // an HTTP/1.0 stream ends with the connection
      if (ec || !parser.is_done()) Fail("truncated response", out);
    }
    const unsigned status = parser.get().result_int();
    if (status < 200) continue;  // 100 Continue, before the final answer
    ++finals;
    if (!parser.get().keep_alive()) closed = true;
  }
  const size_t expected = observed.methods.size() + static_cast<size_t>(observed.rejections);
  if (finals != expected || observed.rejections > 1) {
    Fail(("expected " + std::to_string(observed.methods.size()) + " answers and " +
          std::to_string(observed.rejections) + " rejections, got " + std::to_string(finals) +
          " final responses")
             .c_str(),
         out);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvgate::http::ServerOptions options = MakeOptions();
  static const kvgate::http::Handler handler = Handle;
  static asio::io_context ioc(1);
  observed = Observed{};
  ioc.restart();

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    std::perror("socketpair");
    std::abort();
  }
  kvgate::http::internal::WorkerState worker(options, handler, 0);
  asio::ip::tcp::socket socket(ioc);
  socket.assign(asio::ip::tcp::v4(), fds[0]);
  bool done = false;
  asio::co_spawn(ioc, kvgate::http::internal::RunSession(std::move(socket), worker),
                 [&done](std::exception_ptr) { done = true; });

  const int client = fds[1];
  size_t written = 0;
  bool write_shut = false;
  bool eof = false;
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(done && eof)) {
    bool progress = false;
    if (written < size) {
      const ssize_t n = ::send(client, data + written, size - written, MSG_NOSIGNAL);
      if (n > 0) {
        written += static_cast<size_t>(n);
        progress = true;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        written = size;  // the server closed its end: the rest is never read
      }
    }
    if (written == size && !write_shut) {
      ::shutdown(client, SHUT_WR);
      write_shut = true;
    }
    char buf[16384];
    const ssize_t r = ::recv(client, buf, sizeof buf, 0);
    if (r > 0) {
      out.append(buf, static_cast<size_t>(r));
      progress = true;
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      eof = true;  // closed (ECONNRESET: closed with our unread bytes in its queue)
    }
    if (ioc.poll() > 0) progress = true;
    if (!progress) {
      pollfd p{client, POLLIN, 0};
      (void)::poll(&p, 1, 1);
    }
    if (std::chrono::steady_clock::now() > deadline) Fail("the session hangs", out);
  }
  ::close(client);
  CheckAnswer(out);
  return 0;
}
