// kvgate's HTTP/1.1 server: Boost.Beast over Asio coroutines, one io_context per core.
// Request handling is a coroutine from a parsed request to bytes written through a ResponseWriter;
// the server owns sockets, limits, deadlines, keep-alive and shutdown. It knows nothing of LLMs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "common/error.h"

namespace kvgate::http {

struct Header {
  std::string name;   // as received; lookups are case-insensitive
  std::string value;
};

struct Request;

// A request the server answered by itself (see Server), as on_rejected sees it.
struct Rejection {
  int status;                // 400, 413 or 431
  std::string_view message;  // the error message of the answer
  // method, target, path, query, headers and arrival are filled only when the request's head was
  // read in full (a 413, a missing or repeated Host, a chunked body framed wrongly); the body
  // never is.
  const Request& request;
  bool head_read;
};

// The final answer to a request that the application gives on its head alone, before the body is
// read (ServerOptions::on_expect_continue).
struct EarlyAnswer {
  int status = 0;
  std::string content_type;
  std::string body;
  std::vector<Header> headers;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0 picks a free port; see Server::port()
  int threads = 0;       // 0 = one per core
  size_t header_limit = 16 * 1024;        // bytes of request line + headers -> 431
  size_t body_limit = 8 * 1024 * 1024;    // bytes of request body -> 413
  std::chrono::milliseconds header_timeout{10'000};   // first byte -> end of headers
  std::chrono::milliseconds body_timeout{30'000};     // end of headers -> end of body
  std::chrono::milliseconds write_timeout{30'000};    // each write to the client
  std::chrono::milliseconds idle_timeout{75'000};     // keep-alive wait for the next request
  // Requests read ahead of their responses on one connection. This server answers the requests
  // of a connection one at a time, in order, and parses the next one only after the previous
  // response was written; pipelined bytes wait unparsed in the connection's bounded read buffer
  // and TCP back-pressure holds the rest, so any value >= 1 behaves the same.
  size_t max_pipelined = 16;
  std::chrono::milliseconds drain_timeout{30'000};   // Stop(): wait for in-flight requests
  // Optional. Called once on each event-loop thread, before that loop accepts its first
  // connection, with the loop's index (0..threads-1) and executor: the place to create per-loop
  // state such as that loop's upstream::Client. Request::worker_index names the loop later.
  std::function<void(size_t worker_index, boost::asio::any_io_executor executor)> on_thread_start;
  // Optional. Called on the loop just before the server answers a request it could not read
  // (400, 413, 431): the place to record such requests. What it returns is added to the answer's
  // headers (kvgate's x-request-id).
  std::function<std::vector<Header>(const Rejection&)> on_rejected;
  // Optional. Called on the loop for an HTTP/1.1 request that says `Expect: 100-continue`, once
  // its head is read and before any of its body is: the request as the handler would see it, less
  // the body. nullopt lets the server send `100 Continue` and read the body as usual; an
  // EarlyAnswer is sent instead (RFC 9110 10.1.1), the body is never read, the handler does not
  // run, on_rejected does not hear of it, and the connection closes. The place to refuse a
  // request without a valid key before its client uploads the body. Without it, every such
  // request gets its 100 Continue. Not called for a request whose body arrived with its head.
  std::function<std::optional<EarlyAnswer>(const Request&)> on_expect_continue;
  // Optional. Called on Stop()'s thread when drain_timeout passed with requests still in flight,
  // just before the server closes their connections: what ends after it was cut by the server,
  // not by its clients.
  std::function<void()> on_drain_timeout;
};

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path + query as received, e.g. "/api/requests?limit=10"
  // target without the query, still percent-encoded (see PercentDecode); an absolute-form target
  // ("http://host/v1/models", RFC 9112 3.2.2) gives its path
  std::string path;
  std::string query;   // after '?', without it; "" when none
  std::vector<Header> headers;
  std::string body;
  std::string remote_address;
  // Steady-clock ns (same epoch as kvgate::SystemClock::MonotonicNanos) when the read that
  // delivered this request's first byte completed. For a request that was already buffered
  // behind the previous one (pipelining), when its processing began.
  int64_t arrival_monotonic_ns = 0;
  size_t worker_index = 0;  // which event loop (see ServerOptions::on_thread_start) runs it

  // First header with this name (case-insensitive), or "" when absent.
  std::string_view header(std::string_view name) const;
  // Decoded value of a query parameter, or "" when absent. Names and values are percent-decoded
  // and '+' means a space; an invalid escape is kept literally. First match wins.
  std::string query_param(std::string_view name) const;
};

// A path segment percent-decoded (RFC 3986: "%20" -> ' '; '+' stays '+'); an invalid escape is
// kept literally.
std::string PercentDecode(std::string_view segment);

// How a handler answers. Exactly one of Send() or BeginStream()..EndStream() per request; a second
// start returns kInternal. Header names that are not RFC 9110 tokens, and values (the content type
// included) with a control character other than HTAB, are refused (kInvalidArgument,
// nothing written). A handler that returns without answering gets a 500 written for it; one that
// returns mid-stream gets its stream ended. Not thread-safe: use only from the handler's coroutine,
// and only until the handler returns.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response with Content-Length (none, and no body, for 1xx/204/304; body omitted
  // for HEAD). Keep-alive follows the request, except while the server is draining.
  virtual boost::asio::awaitable<Status> Send(int status, std::string_view content_type,
                                              std::string body,
                                              std::vector<Header> extra_headers = {}) = 0;
  // Starts a chunked response (e.g. text/event-stream). Headers are flushed immediately.
  // To an HTTP/1.0 client the body is sent raw and the connection closes after it.
  virtual boost::asio::awaitable<Status> BeginStream(int status, std::string_view content_type,
                                                     std::vector<Header> extra_headers = {}) = 0;
  // Writes one chunk and flushes it (empty data writes nothing). An error (kUnavailable) means
  // the client is gone or the write deadline passed; stop writing. No allocation per chunk.
  virtual boost::asio::awaitable<Status> WriteChunk(std::string_view data) = 0;
  virtual boost::asio::awaitable<Status> EndStream() = 0;
  // What the stream's reader should see if the server has to cut it (the drain deadline passed
  // with the stream still open): the server writes `chunk` as the last piece of the body and ends
  // the body properly before closing, instead of leaving a truncated body. For an event stream,
  // an error event. Only while no write is in progress (a slow client gets the plain close), and
  // only when set: without one, a cut stays a truncated body, so that a half answer never looks
  // whole. Copied; may be called again to replace it.
  virtual void SetCutNotice(std::string_view chunk) = 0;
  // Asks to hear of the client leaving while the handler waits on something other than it (an
  // upstream, the engine), so the handler can give that work up. The server checks the
  // connections of such handlers every 250 ms and, once it sees the peer closed (or reset) its
  // connection, calls `on_gone` once on the handler's executor (the handler is suspended then).
  // Replaces any earlier callback; nullptr stops the watch; it ends when the handler returns.
  // Costs nothing per request beyond storing the callback.
  virtual void OnClientGone(std::function<void()> on_gone) = 0;
  // True once a write failed or the peer closed the connection. Cheap (one non-blocking peek
  // syscall), so a handler waiting on an upstream can poll it between pieces.
  virtual bool client_gone() const = 0;
};

// Called once per request on the connection's executor (`co_await this_coro::executor`; it is the
// executor on_thread_start saw for Request::worker_index). Requests of one connection are handled
// one at a time, in order. Exceptions escaping a handler become a 500 with an OpenAI-format error
// body (if nothing was sent yet; the exception text is not disclosed) and close the connection.
using Handler = std::function<boost::asio::awaitable<void>(Request&, ResponseWriter&)>;

// Errors the server answers by itself, as OpenAI-format JSON bodies, then closing the connection:
// 400 malformed HTTP, 413 body over body_limit, 431 headers over header_limit (type
// "invalid_request_error"; ServerOptions::on_rejected hears of the first three); 500 handler
// failure (type "server_error"). A deadline passing while reading a request closes the connection
// without an answer.
//
// Framing is strict (RFC 9112), each of these a 400: a header line that starts with whitespace
// (obs-fold), a line of the head or of a chunked body's framing (chunk-size line, the end of a
// chunk's data, trailers) ended by a bare LF instead of CRLF (answered at once, without waiting
// for more bytes), an HTTP/1.1 request without a Host header, any request with two.
//
// Thread safety: all methods may be called from any thread. Stop() may be called from a handler
// (it then returns at once and shuts down on a helper thread); Wait() and the destructor must not
// be called from a handler. Lifetime of per-loop state created in on_thread_start (e.g. upstream
// Clients): destroy it after Stop()/Wait() returned (the loops are stopped and joined then, but
// their io_contexts live until the Server is destroyed) and before destroying the Server.
class Server {
 public:
  // Binds, starts `threads` event-loop threads and accepts. Errors: kUnavailable (bind failed,
  // including a port some other socket listens on), kInvalidArgument (host not an IP literal or
  // "localhost", or no handler). Each loop has its own SO_REUSEPORT listening socket on the same
  // port (with port 0, the port the first bind got); the kernel spreads connections over them.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options, Handler handler);
  virtual ~Server() = default;

  virtual uint16_t port() const = 0;
  // Stops accepting (on every loop, before anything else), closes idle keep-alive connections
  // (and those still reading a request), waits up to drain_timeout for in-flight requests to
  // finish (streams included; their connections close afterwards), then closes the remaining
  // connections, stops the loops and joins the threads. Returns when done. Idempotent.
  virtual void Stop() = 0;
  // Blocks until Stop() has completed.
  virtual void Wait() = 0;
  // Number of requests being handled right now, from the end of reading a request to the end of
  // writing its response (for drain checks and tests).
  virtual size_t in_flight() const = 0;
};

}  // namespace kvgate::http
