// The upstream HTTP(S) client: one connection pool per event-loop thread (no locks on the request
// path), keep-alive, TLS with certificate and host-name verification against the system CA store,
// a deadline on every phase, and response bodies handed over as they arrive.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "common/error.h"
#include "gateway/http/server.h"  // http::Header

namespace kvgate::upstream {

struct Url {
  std::string scheme;  // "http" | "https"
  std::string host;
  uint16_t port = 0;
  std::string base_path;  // "" or "/v1" (no trailing slash)

  static Result<Url> Parse(std::string_view url);
  std::string Origin() const;  // "https://api.openai.com:443"
};

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{10'000};   // DNS + TCP + TLS handshake
  std::chrono::milliseconds write_timeout{30'000};
  std::chrono::milliseconds header_timeout{600'000};   // request sent -> response headers
  std::chrono::milliseconds idle_read_timeout{300'000};  // max gap between body bytes
  // After a sink says kFinished: how long the rest of the body may take to arrive (to keep the
  // connection); past it the connection is closed and the exchange still succeeds.
  std::chrono::milliseconds finish_grace{1'000};
  size_t max_idle_per_host = 64;
  // How long a keep-alive connection may sit unused in the pool before it is closed (a sweep
  // also closes pooled connections the peer has closed, so none lingers in CLOSE_WAIT).
  std::chrono::milliseconds pool_idle_timeout{60'000};
  size_t max_response_body = 64 * 1024 * 1024;  // buffered (non-streaming) bodies only
  bool verify_tls = true;  // false only for tests against self-signed servers
  std::string ca_file;     // extra CA bundle (tests); system store is always used
};

// Lets the caller of an exchange give it up from outside it (its own client left, so the answer
// has no reader and an upstream that stops generating when its connection closes stops costing):
// Fire() closes the exchange's connection, and the exchange returns kUnavailable ("abandoned by
// the caller") at once, without a retry (or the response, if it had all arrived). Single-threaded like the Client; outlives the exchange.
class Abandon {
 public:
  void Fire() {
    fired_ = true;
    if (cancel_) cancel_();
  }
  bool fired() const { return fired_; }

  // For the Client: what Fire() does while a connection is in use (nullptr between phases).
  void SetCancel(std::function<void()> cancel) { cancel_ = std::move(cancel); }

 private:
  bool fired_ = false;
  std::function<void()> cancel_;
};

struct OutgoingRequest {
  std::string method = "POST";
  std::string path;  // appended to the Url's base_path, e.g. "/chat/completions"
  std::vector<http::Header> headers;
  std::string body;
  Abandon* abandon = nullptr;  // optional
  // Optional. Called when the request is about to go out a second time, on a fresh connection,
  // with why the first try on a reused keep-alive connection failed (see Client::Send): an
  // upstream request the caller may want to record as an attempt of its own.
  std::function<void(const Error& first_try)> on_resend;
};

struct Response {
  int status = 0;
  std::vector<http::Header> headers;
  std::string body;  // empty when streamed to a sink
  std::string_view header(std::string_view name) const;
};

// What a BodySink wants after a piece.
enum class SinkVerdict {
  kContinue,  // more, please
  kAbort,     // stop now (the client went away): the connection is closed, not pooled
  // The caller has what it needs (the stream's final event came): the rest of the body is read
  // and dropped, for at most ClientOptions::finish_grace, only to pool the connection.
  kFinished,
};

// Receives body bytes as they arrive (chunked encoding already removed).
using BodySink = std::function<boost::asio::awaitable<SinkVerdict>(std::string_view)>;

// Pooling: idle keep-alive connections are kept per origin (scheme://host:port), most recently
// used first, at most max_idle_per_host, closed after ClientOptions::pool_idle_timeout idle or once the peer has closed them
// (checked with a non-blocking peek before reuse). A connection goes back to the pool only after a
// response that was read completely with keep-alive; aborted or failed exchanges close it.
//
// Thread safety: none. One Client per event-loop executor; use it only from coroutines running on
// that executor (any number of them at once: each exchange takes its own connection). Destroy it
// on that executor's thread, or after its loop has stopped, and before the executor's io_context.
// `url` and `sink` are taken by reference and must outlive the co_await.
class Client {
 public:
  static std::unique_ptr<Client> Create(boost::asio::any_io_executor executor, ClientOptions options);
  virtual ~Client() = default;

  // Sends a request and buffers the whole response (up to max_response_body).
  // A request that fails on a reused pooled connection before any response byte (not by a
  // deadline) is sent once more on a fresh connection only when none of it had been written, or
  // when its method is idempotent (GET, HEAD, PUT, DELETE, OPTIONS, TRACE): a POST the upstream
  // received and closed on without answering is not resent (it may have been processed), it
  // fails with kUnavailable. A failure on a fresh connection is never retried. A resend is
  // counted (Stats::retried) and told to the caller (OutgoingRequest::on_resend).
  // The client sets Host (unless given), Content-Length (when there is a body, or for
  // POST/PUT/PATCH) and drops the caller's Content-Length/Transfer-Encoding/Connection.
  // Errors (messages name the origin and the phase):
  //   kInvalidArgument   bad URL/method/path/header (CR/LF), unreadable ca_file
  //   kUnavailable       DNS, connect, TLS handshake ("... certificate verification: <reason>"),
  //                      closed before responding, "upstream <origin> reset the connection
  //                      after N body bytes (...)"
  //   kDeadlineExceeded  "upstream <origin>: <phase> deadline (N ms) exceeded", phases: connect,
  //                      TLS handshake, writing the request, waiting for the response, reading
  //                      the response header, body idle (with the bytes received so far)
  //   kCorruptData       the upstream did not speak HTTP/1.1
  //   kResourceExhausted body over max_response_body
  virtual boost::asio::awaitable<Result<Response>> Send(const Url& url, OutgoingRequest request) = 0;

  // Streams the response: `on_head` is called once with the status and headers (body empty)
  // before any body byte, so the caller can answer its own client first; then the body goes to
  // `sink` piece by piece as it arrives. on_head returning false or the sink kAbort aborts (the
  // connection is closed, not pooled) and the result is the head with no error; after kFinished,
  // nothing that happens to the rest of the body is an error. A failure after the head (reset
  // mid-stream, idle deadline) is returned as an error after the sink saw the bytes before it.
  // An empty on_head or sink means "go on" / "discard". Streaming bodies have no size limit.
  // A HEAD request's response is read without a body. 1xx interim responses are skipped.
  virtual boost::asio::awaitable<Result<Response>> SendStreaming(
      const Url& url, OutgoingRequest request,
      std::function<boost::asio::awaitable<bool>(const Response& head)> on_head,
      const BodySink& sink) = 0;

  struct Stats {
    uint64_t connections_opened = 0;  // TCP (+TLS) connections established
    uint64_t requests_sent = 0;       // requests written to a connection (a retry counts again)
    uint64_t reused = 0;              // requests that went out on a pooled connection
    uint64_t retried = 0;             // requests resent after a pooled connection failed
  };
  // Safe to call from any thread (relaxed counters).
  virtual Stats stats() const = 0;
};

}  // namespace kvgate::upstream
