// The upstream client: connect (DNS, TCP, TLS with SNI and host-name verification), write the
// request, read the response head and then the body piece by piece; a per-origin pool of idle
// keep-alive connections. Everything runs on the Client's executor, so the pool needs no lock.
#include <sys/socket.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "gateway/upstream/client.h"

#include "common/ascii.h"

namespace kvgate::upstream {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using asio::as_tuple;
using asio::use_awaitable;
using asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kScratchSize = 16 * 1024;
constexpr uint32_t kResponseHeaderLimit = 64 * 1024;

// One connection to one origin, plain or TLS. Heap-allocated so pooling moves a pointer.
struct Conn {
  explicit Conn(const asio::any_io_executor& ex) { plain.emplace(ex); }
  Conn(const asio::any_io_executor& ex, ssl::context& ctx) { tls.emplace(ex, ctx); }
  beast::tcp_stream& tcp() { return tls ? beast::get_lowest_layer(*tls) : *plain; }

  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;  // bytes read but not yet parsed
  SteadyClock::time_point idle_since;
  std::array<char, kScratchSize> scratch;  // body pieces land here before the sink sees them
};

// True when an idle connection still looks usable: nothing to read and no FIN or error pending.
// Any byte on an idle connection (a TLS close_notify, garbage) disqualifies it as well.
bool LooksAlive(Conn& conn) {
  char c;
  const ssize_t n =
      ::recv(conn.tcp().socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

bool IsHttpParseError(const boost::system::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_version).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

// Maps an I/O failure in one phase to an Error naming the phase.
Error PhaseError(const boost::system::error_code& ec, const std::string& origin,
                 std::string_view phase, std::chrono::milliseconds limit) {
  if (ec == beast::error::timeout) {
    return Error{ErrorCode::kDeadlineExceeded, "upstream " + origin + ": " + std::string(phase) +
                                                   " deadline (" + Ms(limit) + ") exceeded"};
  }
  if (IsHttpParseError(ec)) {
    return Error{ErrorCode::kCorruptData, "upstream " + origin + " sent a malformed response (" +
                                              std::string(phase) + "): " + ec.message()};
  }
  return Error{ErrorCode::kUnavailable,
               "upstream " + origin + ": " + std::string(phase) + " failed: " + ec.message()};
}

Error BodyError(const boost::system::error_code& ec, const std::string& origin, uint64_t received,
                std::chrono::milliseconds idle_limit) {
  const std::string after = " after " + std::to_string(received) + " body bytes";
  if (ec == beast::error::timeout) {
    return Error{ErrorCode::kDeadlineExceeded, "upstream " + origin + ": body idle deadline (" +
                                                   Ms(idle_limit) + ") exceeded" + after};
  }
  if (IsHttpParseError(ec)) {
    return Error{ErrorCode::kCorruptData,
                 "upstream " + origin + " sent a malformed body" + after + ": " + ec.message()};
  }
  return Error{ErrorCode::kUnavailable,
               "upstream " + origin + " reset the connection" + after + " (" + ec.message() + ")"};
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

bool HasCtl(std::string_view s) {
  for (const char c : s) {
    if (c == '\r' || c == '\n' || c == '\0') return true;
  }
  return false;
}


// Serializes the request line and headers. The client owns framing and connection management:
// the caller's Content-Length, Transfer-Encoding and Connection headers are replaced.
Status BuildHead(const Url& url, const OutgoingRequest& req, std::string& out) {
  if (!IsToken(req.method)) {
    return MakeError(ErrorCode::kInvalidArgument, "bad HTTP method '" + req.method + "'");
  }
  if (!req.path.empty() && req.path.front() != '/') {
    return MakeError(ErrorCode::kInvalidArgument, "request path must start with '/'");
  }
  const std::string_view path = req.path;
  if (HasCtl(path) || path.find(' ') != std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument, "bad request path");
  }
  out.reserve(256 + req.headers.size() * 64);
  out.append(req.method).append(" ");
  out.append(url.base_path).append(path);
  if (url.base_path.empty() && path.empty()) out.push_back('/');
  out.append(" HTTP/1.1\r\n");
  bool has_host = false;
  bool has_accept_encoding = false;
  for (const http::Header& h : req.headers) {
    if (!IsToken(h.name) || HasCtl(h.value)) {
      return MakeError(ErrorCode::kInvalidArgument, "bad request header '" + h.name + "'");
    }
    if (EqualsIgnoreCase(h.name, "content-length") || EqualsIgnoreCase(h.name, "transfer-encoding") ||
        EqualsIgnoreCase(h.name, "connection")) {
      continue;
    }
    has_host = has_host || EqualsIgnoreCase(h.name, "host");
    has_accept_encoding = has_accept_encoding || EqualsIgnoreCase(h.name, "accept-encoding");
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  // No header would let the server pick any coding (RFC 9110 12.5.3); this client decodes none.
  if (!has_accept_encoding) out.append("Accept-Encoding: identity\r\n");
  if (!has_host) {
    const bool v6 = url.host.find(':') != std::string::npos;
    out.append("Host: ").append(v6 ? "[" + url.host + "]" : url.host);
    const bool default_port = (url.scheme == "https" && url.port == 443) ||
                              (url.scheme == "http" && url.port == 80);
    if (!default_port) out.append(":").append(std::to_string(url.port));
    out.append("\r\n");
  }
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    out.append("Content-Length: ").append(std::to_string(req.body.size())).append("\r\n");
  }
  out.append("\r\n");
  return {};
}

// What a caller wants done with the response.
struct Handling {
  const std::function<asio::awaitable<bool>(const Response&)>* on_head = nullptr;  // streaming
  const BodySink* sink = nullptr;                                                   // streaming
  bool streaming() const { return on_head != nullptr; }
};

struct Attempt {
  Result<Response> result;
  bool unanswered = false;  // failed (not by a deadline) before any response byte arrived
  bool unsent = false;      // ... and before any byte of the request was written
  bool reusable = false;    // response complete and keep-alive: the connection may be pooled
};

// RFC 9110 9.2.2: methods whose repetition has the effect of one request.
bool Idempotent(std::string_view method) {
  for (std::string_view m : {"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"}) {
    if (method == m) return true;
  }
  return false;
}

// Whether a request that failed on a reused keep-alive connection may go out again on a fresh one
// (the server closed the idle connection as we wrote: a race that the peek before reuse narrows
// but cannot close). A request none of which was written was never seen; an idempotent one may be
// repeated. A POST that was written may have been processed (and billed) even though no answer
// came: sending it again could run it twice, so its failure is the caller's to handle.
bool MayResend(const Attempt& a, std::string_view method) {
  return a.unsent || (a.unanswered && Idempotent(method));
}

template <class Stream>
asio::awaitable<Attempt> Exchange(Stream& stream, Conn& conn, const std::string& origin,
                                  const std::string& head, const std::string& body,
                                  bool head_request, const ClientOptions& options,
                                  const Handling& handling) {
  Attempt out;
  beast::tcp_stream& tcp = conn.tcp();

  tcp.expires_after(options.write_timeout);
  const std::array<asio::const_buffer, 2> request{asio::buffer(head), asio::buffer(body)};
  auto [wec, wn] = co_await asio::async_write(stream, request, as_tuple(use_awaitable));
  if (wec) {
    out.unanswered = wec != beast::error::timeout;
    out.unsent = out.unanswered && wn == 0;
    out.result = std::unexpected(PhaseError(wec, origin, "writing the request", options.write_timeout));
    co_return out;
  }

  // The first response byte is read on its own so that "nothing came back" is known exactly:
  // only then may a request on a pooled connection be resent (MayResend).
  tcp.expires_after(options.header_timeout);
  if (conn.buffer.size() == 0) {
    auto [rec, n] = co_await stream.async_read_some(conn.buffer.prepare(kScratchSize),
                                                    as_tuple(use_awaitable));
    if (rec) {
      out.unanswered = rec != beast::error::timeout;
      const bool closed = rec == asio::error::eof || rec == asio::error::connection_reset ||
                          rec == ssl::error::stream_truncated;
      out.result = std::unexpected(
          closed ? Error{ErrorCode::kUnavailable,
                         "upstream " + origin + " closed the connection before responding (" +
                             rec.message() + ")"}
                 : PhaseError(rec, origin, "waiting for the response", options.header_timeout));
      co_return out;
    }
    conn.buffer.commit(n);
  }

  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  for (;;) {
    parser.emplace();
    parser->header_limit(kResponseHeaderLimit);
    parser->body_limit(boost::none);  // buffered mode enforces max_response_body itself
    if (head_request) parser->skip(true);
    auto [hec, hn] =
        co_await bhttp::async_read_header(stream, conn.buffer, *parser, as_tuple(use_awaitable));
    if (hec) {
      out.result = std::unexpected(
          PhaseError(hec, origin, "reading the response header", options.header_timeout));
      co_return out;
    }
    const unsigned status = parser->get().result_int();
    if (status < 100 || status >= 200 || status == 101) break;  // skip 1xx interim responses
  }

  auto& msg = parser->get();
  Response response;
  response.status = static_cast<int>(msg.result_int());
  response.headers.reserve(static_cast<size_t>(std::distance(msg.begin(), msg.end())));
  for (const auto& field : msg) {
    response.headers.push_back(http::Header{std::string(field.name_string()),
                                            std::string(field.value())});
  }
  if (handling.streaming()) {
    bool go_on = true;
    if (*handling.on_head) go_on = co_await (*handling.on_head)(response);
    if (!go_on) {
      out.result = std::move(response);  // the caller aborted: not pooled
      co_return out;
    }
  } else if (const auto length = parser->content_length();
             length && *length > options.max_response_body) {
    out.result = MakeError(ErrorCode::kResourceExhausted,
                           "upstream " + origin + " response body of " + std::to_string(*length) +
                               " bytes exceeds the limit of " +
                               std::to_string(options.max_response_body));
    co_return out;
  }

  uint64_t received = 0;
  std::string body_text;
  bool finished = false;  // the sink said kFinished: the rest only keeps the connection
  while (!parser->is_done()) {
    msg.body().data = conn.scratch.data();
    msg.body().size = conn.scratch.size();
    tcp.expires_after(finished ? options.finish_grace : options.idle_read_timeout);
    auto [bec, bn] =
        co_await bhttp::async_read_some(stream, conn.buffer, *parser, as_tuple(use_awaitable));
    if (bec == bhttp::error::need_buffer) bec = {};
    if (bec && finished) {
      out.result = std::move(response);  // the caller had all it needed: not pooled
      co_return out;
    }
    const size_t got = conn.scratch.size() - msg.body().size;
    if (got > 0 && !finished) {
      received += got;
      const std::string_view piece(conn.scratch.data(), got);
      if (handling.streaming()) {
        SinkVerdict verdict = SinkVerdict::kContinue;
        if (*handling.sink) verdict = co_await (*handling.sink)(piece);
        if (verdict == SinkVerdict::kAbort) {
          out.result = std::move(response);  // the caller aborted: not pooled
          co_return out;
        }
        finished = verdict == SinkVerdict::kFinished;
      } else {
        if (body_text.size() + got > options.max_response_body) {
          out.result = MakeError(ErrorCode::kResourceExhausted,
                                 "upstream " + origin + " response body exceeds the limit of " +
                                     std::to_string(options.max_response_body) + " bytes");
          co_return out;
        }
        body_text.append(piece);
      }
    }
    if (bec) {
      out.result = std::unexpected(BodyError(bec, origin, received, options.idle_read_timeout));
      co_return out;
    }
  }
  response.body = std::move(body_text);
  out.reusable = msg.keep_alive() && conn.buffer.size() == 0;
  out.result = std::move(response);
  co_return out;
}

// Closes an abandoned exchange's connection with a reset (SO_LINGER 0): the upstream learns at
// once that nobody waits for its answer, even when it had stopped reading the request, and the
// kernel drops what was still queued to send instead of holding it in FIN-WAIT-1.
void CloseAbandoned(Conn& conn) {
  boost::system::error_code ignored;
  conn.tcp().socket().set_option(asio::socket_base::linger(true, 0), ignored);
  conn.tcp().close();
}

std::unexpected<Error> Abandoned(const std::string& origin) {
  return MakeError(ErrorCode::kUnavailable,
                   "the exchange with upstream " + origin + " was abandoned by the caller");
}

class ClientImpl final : public Client {
 public:
  ClientImpl(asio::any_io_executor executor, ClientOptions options)
      : executor_(std::move(executor)),
        options_(std::move(options)),
        tls_(ssl::context::tls_client) {
    boost::system::error_code ec;
    tls_.set_default_verify_paths(ec);  // a host without a CA store still works with ca_file
    if (!options_.ca_file.empty()) {
      tls_.load_verify_file(options_.ca_file, ec);
      if (ec) tls_setup_error_ = "cannot load ca_file '" + options_.ca_file + "': " + ec.message();
    }
    tls_.set_verify_mode(options_.verify_tls ? ssl::verify_peer : ssl::verify_none, ec);
  }

  asio::awaitable<Result<Response>> Send(const Url& url, OutgoingRequest request) override {
    Handling handling;
    co_return co_await Run(url, request, handling);
  }

  asio::awaitable<Result<Response>> SendStreaming(
      const Url& url, OutgoingRequest request,
      std::function<asio::awaitable<bool>(const Response& head)> on_head,
      const BodySink& sink) override {
    Handling handling{&on_head, &sink};
    co_return co_await Run(url, request, handling);
  }

  Stats stats() const override {
    return Stats{opened_.load(std::memory_order_relaxed), sent_.load(std::memory_order_relaxed),
                 reused_.load(std::memory_order_relaxed), retried_.load(std::memory_order_relaxed)};
  }

 private:
  asio::awaitable<Result<Response>> Run(const Url& url, const OutgoingRequest& request,
                                        const Handling& handling) {
    if (url.scheme != "http" && url.scheme != "https") {
      co_return MakeError(ErrorCode::kInvalidArgument, "URL scheme must be http or https");
    }
    if (url.host.empty() || url.port == 0) {
      co_return MakeError(ErrorCode::kInvalidArgument, "URL has no host or port");
    }
    std::string head;
    if (Status s = BuildHead(url, request, head); !s) co_return std::unexpected(s.error());
    const std::string origin = url.Origin();
    const bool head_request = request.method == "HEAD";

    for (int attempt = 0;; ++attempt) {
      std::unique_ptr<Conn> conn = attempt == 0 ? TakeIdle(origin) : nullptr;
      const bool reused = conn != nullptr;
      if (reused) {
        reused_.fetch_add(1, std::memory_order_relaxed);
      } else {
        Result<std::unique_ptr<Conn>> fresh = co_await Connect(url, origin, request.abandon);
        if (request.abandon != nullptr) {
          request.abandon->SetCancel(nullptr);  // (the failed connection is gone with `fresh`)
          if (request.abandon->fired()) co_return Abandoned(origin);
        }
        if (!fresh) co_return std::unexpected(fresh.error());
        conn = std::move(*fresh);
      }
      if (request.abandon != nullptr) {
        if (request.abandon->fired()) co_return Abandoned(origin);
        request.abandon->SetCancel([c = conn.get()] { CloseAbandoned(*c); });
      }
      sent_.fetch_add(1, std::memory_order_relaxed);
      // (No co_await inside ?: or &&: GCC 12 miscompiles temporaries there.)
      Attempt a;
      if (conn->tls) {
        a = co_await Exchange(*conn->tls, *conn, origin, head, request.body, head_request,
                              options_, handling);
      } else {
        a = co_await Exchange(*conn->plain, *conn, origin, head, request.body, head_request,
                              options_, handling);
      }
      if (request.abandon != nullptr) {
        request.abandon->SetCancel(nullptr);
        if (request.abandon->fired()) {  // the connection was closed: never pooled
          if (!a.result) co_return Abandoned(origin);
          co_return std::move(a.result);  // it had all arrived: the caller may still use it
        }
      }
      if (!a.result && reused && attempt == 0 && MayResend(a, request.method)) {
        // The pooled connection had gone stale (the server closed it as we sent): the request is
        // sent once more on a new connection, and the caller hears of the first try.
        retried_.fetch_add(1, std::memory_order_relaxed);
        if (request.on_resend) request.on_resend(a.result.error());
        continue;
      }
      if (a.reusable) PutIdle(origin, std::move(conn));
      co_return std::move(a.result);
    }
  }

  asio::awaitable<Result<std::unique_ptr<Conn>>> Connect(const Url& url, const std::string& origin,
                                                         Abandon* abandon) {
    const auto deadline = SteadyClock::now() + options_.connect_timeout;
    std::vector<tcp::endpoint> endpoints;
    boost::system::error_code aec;
    const asio::ip::address literal = asio::ip::make_address(url.host, aec);
    if (!aec) {
      endpoints.emplace_back(literal, url.port);
    } else {
      // The resolver has no deadline of its own: a timer cancels it. Both hold the resolver.
      auto resolver = std::make_shared<tcp::resolver>(executor_);
      asio::steady_timer timer(executor_, deadline);
      timer.async_wait([resolver](boost::system::error_code ec) {
        if (!ec) resolver->cancel();
      });
      if (abandon != nullptr) abandon->SetCancel([r = resolver.get()] { r->cancel(); });
      auto [rec, results] = co_await resolver->async_resolve(
          url.host, std::to_string(url.port), as_tuple(use_awaitable));
      timer.cancel();
      if (abandon != nullptr) {
        abandon->SetCancel(nullptr);
        if (abandon->fired()) co_return Abandoned(origin);
      }
      if (rec == asio::error::operation_aborted) {
        co_return MakeError(ErrorCode::kDeadlineExceeded,
                            "upstream " + origin + ": resolving the host name deadline (" +
                                Ms(options_.connect_timeout) + ") exceeded");
      }
      if (rec) {
        co_return MakeError(ErrorCode::kUnavailable, "cannot resolve upstream host '" + url.host +
                                                         "': " + rec.message());
      }
      for (const auto& entry : results) endpoints.push_back(entry.endpoint());
    }

    const bool use_tls = url.scheme == "https";
    if (use_tls && !tls_setup_error_.empty()) {
      co_return MakeError(ErrorCode::kInvalidArgument, tls_setup_error_);
    }
    auto conn = use_tls ? std::make_unique<Conn>(executor_, tls_) : std::make_unique<Conn>(executor_);
    // Giving up closes the socket mid-connect or mid-handshake too (Run reports it).
    if (abandon != nullptr) abandon->SetCancel([c = conn.get()] { CloseAbandoned(*c); });
    if (abandon != nullptr && abandon->fired()) co_return Abandoned(origin);
    conn->tcp().expires_at(deadline);
    auto [cec, ep] = co_await conn->tcp().async_connect(endpoints, as_tuple(use_awaitable));
    if (cec) {
      if (cec == beast::error::timeout) {
        co_return std::unexpected(PhaseError(cec, origin, "connect", options_.connect_timeout));
      }
      co_return MakeError(ErrorCode::kUnavailable,
                          "cannot connect to upstream " + origin + ": " + cec.message());
    }
    boost::system::error_code ignored;
    conn->tcp().socket().set_option(tcp::no_delay(true), ignored);
    opened_.fetch_add(1, std::memory_order_relaxed);

    if (use_tls) {
      SSL* ssl_handle = conn->tls->native_handle();
      // SNI carries host names only (RFC 6066), never address literals.
      if (aec && SSL_set_tlsext_host_name(ssl_handle, url.host.c_str()) != 1) {
        co_return MakeError(ErrorCode::kInternal, "cannot set TLS SNI for " + url.host);
      }
      if (options_.verify_tls) conn->tls->set_verify_callback(ssl::host_name_verification(url.host));
      conn->tcp().expires_at(deadline);
      auto [hec] = co_await conn->tls->async_handshake(ssl::stream_base::client,
                                                       as_tuple(use_awaitable));
      if (hec) {
        if (hec == beast::error::timeout) {
          co_return std::unexpected(
              PhaseError(hec, origin, "TLS handshake", options_.connect_timeout));
        }
        std::string message = "TLS handshake with upstream " + origin + " failed: " + hec.message();
        const long verify = SSL_get_verify_result(ssl_handle);
        if (verify != X509_V_OK) {
          message += " (certificate verification: ";
          message += X509_verify_cert_error_string(verify);
          message += ")";
        }
        co_return MakeError(ErrorCode::kUnavailable, std::move(message));
      }
    }
    co_return conn;
  }

  std::unique_ptr<Conn> TakeIdle(const std::string& origin) {
    const auto it = idle_.find(origin);
    if (it == idle_.end()) return nullptr;
    auto& list = it->second;
    const auto now = SteadyClock::now();
    while (!list.empty()) {
      std::unique_ptr<Conn> conn = std::move(list.back());
      list.pop_back();
      if (now - conn->idle_since < options_.pool_idle_timeout && LooksAlive(*conn)) return conn;
    }
    return nullptr;
  }

  void PutIdle(const std::string& origin, std::unique_ptr<Conn> conn) {
    auto& list = idle_[origin];
    if (list.size() >= options_.max_idle_per_host) return;  // closes it
    conn->idle_since = SteadyClock::now();
    list.push_back(std::move(conn));
    if (!sweep_armed_) ArmSweep();
  }

  // Without a sweep, a connection pooled for an origin that sees no further request would stay
  // open for the life of the process (and one the peer closed would sit in CLOSE_WAIT). The timer
  // runs only while the pool holds something.
  void ArmSweep() {
    sweep_armed_ = true;
    sweep_timer_.expires_after(SweepInterval());
    sweep_timer_.async_wait([this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec) {
      if (ec || alive.expired()) return;  // cancelled: the client is being destroyed
      sweep_armed_ = false;
      if (SweepIdle() > 0) ArmSweep();
    });
  }

  std::chrono::milliseconds SweepInterval() const {
    return std::clamp(options_.pool_idle_timeout / 4, std::chrono::milliseconds(10),
                      std::chrono::milliseconds(5'000));
  }

  // Closes pooled connections idle past the timeout or closed by the peer; returns how many stay.
  size_t SweepIdle() {
    const auto now = SteadyClock::now();
    size_t kept = 0;
    for (auto it = idle_.begin(); it != idle_.end();) {
      auto& list = it->second;
      std::erase_if(list, [&](const std::unique_ptr<Conn>& conn) {
        return now - conn->idle_since >= options_.pool_idle_timeout || !LooksAlive(*conn);
      });
      kept += list.size();
      it = list.empty() ? idle_.erase(it) : std::next(it);
    }
    return kept;
  }

  // Constant after construction.
  const asio::any_io_executor executor_;
  const ClientOptions options_;
  ssl::context tls_;
  std::string tls_setup_error_;

  // Touched only on executor_.
  std::unordered_map<std::string, std::vector<std::unique_ptr<Conn>>> idle_;
  asio::steady_timer sweep_timer_{executor_};
  bool sweep_armed_ = false;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // the sweep's handler checks it

  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> reused_{0};
  std::atomic<uint64_t> retried_{0};
};

}  // namespace

std::unique_ptr<Client> Client::Create(asio::any_io_executor executor, ClientOptions options) {
  return std::make_unique<ClientImpl>(std::move(executor), std::move(options));
}

}  // namespace kvgate::upstream
