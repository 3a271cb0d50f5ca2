// One connection: read a request (deadline per phase), run the handler, write its response through
// a ResponseWriter, repeat while keep-alive holds. Requests of a connection are handled strictly
// one after another, so pipelined responses come back in order without any queue.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/ascii.h"
#include "gateway/http/server.h"
#include "gateway/http/session.h"

namespace kvgate::http::internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::as_tuple;
using asio::use_awaitable;

constexpr size_t kReadSize = 16 * 1024;
constexpr size_t kLingerBytes = 1024 * 1024;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void AppendJsonEscaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      out.append("\\u00");
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    } else {
      out.push_back(c);
    }
  }
}

// {"error":{"message":...,"type":...,"param":null,"code":...}} as the OpenAI API writes errors.
std::string OpenAiError(std::string_view message, std::string_view type, std::string_view code) {
  std::string out = R"({"error":{"message":")";
  AppendJsonEscaped(out, message);
  out += R"(","type":")";
  AppendJsonEscaped(out, type);
  out += R"(","param":null,"code":")";
  AppendJsonEscaped(out, code);
  out += R"("}})";
  return out;
}

// A field name is an RFC 9110 token (5.6.2): anything else ('=', '/', '"', non-ASCII, ...) would
// make the response malformed for the client's parser.
bool ValidHeaderName(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

// A field value holds no control character but HTAB (RFC 9110 5.5): CR or LF would inject
// headers, and parsers reject the others.
bool ValidHeaderValue(std::string_view value) {
  return std::none_of(value.begin(), value.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
  });
}

template <class Int>
void AppendNumber(std::string& out, Int value, int base = 10) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value, base);
  out.append(buf, r.ptr);
}

// The ResponseWriter of one connection, reset for each request. The response head is serialized
// by hand into a buffer the connection keeps, so answering allocates nothing in steady state.
class Writer final : public ResponseWriter, public WriterHooks {
 public:
  Writer(beast::tcp_stream& stream, const beast::flat_buffer& pending_input, WorkerState& worker)
      : stream_(stream), pending_input_(pending_input), worker_(worker) {}

  void Reset(unsigned version, bool keep_alive, bool head_only) {
    version_ = version;
    keep_alive_ = keep_alive;
    head_only_ = head_only;
    started_ = finished_ = streaming_ = chunked_ = false;
    cut_notice_.clear();
    on_gone_ = nullptr;
  }

  // The handler returned: its callback may reference its frame.
  void EndWatch() { on_gone_ = nullptr; }

  bool started() const { return started_; }
  bool finished() const { return finished_; }
  bool streaming() const { return streaming_; }
  bool keep_alive() const { return keep_alive_ && !gone_; }
  void ForbidKeepAlive() { keep_alive_ = false; }

  asio::awaitable<Status> Send(int status, std::string_view content_type, std::string body,
                               std::vector<Header> extra_headers) override {
    if (Status s = StartHead(status, content_type, extra_headers); !s) co_return s;
    if (status == 204 || status == 304 || status < 200) {
      body.clear();  // these never carry a body (RFC 9110 6.4.1)
    } else {
      head_.append("Content-Length: ");
      AppendNumber(head_, body.size());
      head_.append("\r\n");
    }
    head_.append("\r\n");
    finished_ = true;
    const std::array<asio::const_buffer, 2> buffers{
        asio::buffer(head_), head_only_ ? asio::const_buffer{} : asio::buffer(body)};
    co_return co_await Write(buffers);
  }

  asio::awaitable<Status> BeginStream(int status, std::string_view content_type,
                                      std::vector<Header> extra_headers) override {
    // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
    if (version_ < 11 && !started_) keep_alive_ = false;
    if (Status s = StartHead(status, content_type, extra_headers); !s) co_return s;
    streaming_ = true;
    chunked_ = version_ >= 11;
    if (chunked_) head_.append("Transfer-Encoding: chunked\r\n");
    head_.append("\r\n");
    co_return co_await Write(asio::buffer(head_));
  }

  asio::awaitable<Status> WriteChunk(std::string_view data) override {
    if (!streaming_ || finished_) {
      co_return MakeError(ErrorCode::kInternal, "WriteChunk outside BeginStream..EndStream");
    }
    if (gone_) co_return MakeError(ErrorCode::kUnavailable, "client is gone");
    if (data.empty() || head_only_) co_return Status{};  // an empty chunk would end the body
    if (!chunked_) co_return co_await Write(asio::buffer(data));
    chunk_head_.clear();
    AppendNumber(chunk_head_, data.size(), 16);
    chunk_head_.append("\r\n");
    const std::array<asio::const_buffer, 3> buffers{asio::buffer(chunk_head_), asio::buffer(data),
                                                    asio::buffer("\r\n", 2)};
    co_return co_await Write(buffers);
  }

  asio::awaitable<Status> EndStream() override {
    if (!streaming_ || finished_) {
      co_return MakeError(ErrorCode::kInternal, "EndStream without an open stream");
    }
    finished_ = true;
    if (gone_) co_return MakeError(ErrorCode::kUnavailable, "client is gone");
    if (!chunked_ || head_only_) co_return Status{};
    co_return co_await Write(asio::buffer("0\r\n\r\n", 5));
  }

  void SetCutNotice(std::string_view chunk) override { cut_notice_.assign(chunk); }

  // Called on the loop's thread just before the server closes the socket. One non-blocking send:
  // the loop must not wait on a client at shutdown, and what does not fit is lost with the close.
  void CutStream() override {
    if (!streaming_ || finished_ || gone_ || writing_ || head_only_ || cut_notice_.empty()) return;
    finished_ = true;
    gone_ = true;  // the socket closes next: later writes fail as a client that left
    std::string bytes;
    if (chunked_) {
      AppendNumber(bytes, cut_notice_.size(), 16);
      bytes.append("\r\n").append(cut_notice_).append("\r\n0\r\n\r\n");
    } else {
      bytes = cut_notice_;
    }
    (void)::send(stream_.socket().native_handle(), bytes.data(), bytes.size(),
                 MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  void OnClientGone(std::function<void()> on_gone) override { on_gone_ = std::move(on_gone); }

  void CheckClientGone() override {
    if (!on_gone_ || !client_gone()) return;
    std::function<void()> on_gone = std::move(on_gone_);
    on_gone_ = nullptr;
    on_gone();
  }

  bool client_gone() const override {
    if (gone_) return true;
    // A peek that does not block: 0 means the peer sent FIN; a hard error means it is gone.
    // Pending bytes (a pipelined request) or EAGAIN mean it is still there. A FIN behind
    // pipelined requests already read is a client that sent everything and still reads the
    // answers (like nginx, kvgate otherwise takes a FIN for a client that left).
    char c;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if ((n == 0 && pending_input_.size() == 0) ||
        (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      gone_ = true;
    }
    return gone_;
  }

 private:
  Status StartHead(int status, std::string_view content_type,
                   const std::vector<Header>& extra_headers) {
    if (started_) return MakeError(ErrorCode::kInternal, "response already started");
    if (status < 100 || status > 999) {
      return MakeError(ErrorCode::kInvalidArgument, "bad status " + std::to_string(status));
    }
    if (!ValidHeaderValue(content_type)) {
      return MakeError(ErrorCode::kInvalidArgument, "bad content type");
    }
    for (const Header& h : extra_headers) {
      if (!ValidHeaderName(h.name) || !ValidHeaderValue(h.value)) {
        return MakeError(ErrorCode::kInvalidArgument, "bad response header '" + h.name + "'");
      }
    }
    started_ = true;
    if (worker_.draining) keep_alive_ = false;
    head_.assign("HTTP/1.1 ");
    AppendNumber(head_, status);
    head_.push_back(' ');
    head_.append(bhttp::obsolete_reason(static_cast<bhttp::status>(status)));
    head_.append("\r\n");
    if (!content_type.empty()) {
      head_.append("Content-Type: ");
      head_.append(content_type);
      head_.append("\r\n");
    }
    if (!keep_alive_) head_.append("Connection: close\r\n");
    else if (version_ < 11) head_.append("Connection: keep-alive\r\n");
    for (const Header& h : extra_headers) {
      head_.append(h.name);
      head_.append(": ");
      head_.append(h.value);
      head_.append("\r\n");
    }
    return {};
  }

  template <class Buffers>
  asio::awaitable<Status> Write(const Buffers& buffers) {
    if (gone_) co_return MakeError(ErrorCode::kUnavailable, "client is gone");
    stream_.expires_after(worker_.options.write_timeout);
    writing_ = true;
    auto [ec, n] = co_await asio::async_write(stream_, buffers, as_tuple(use_awaitable));
    writing_ = false;
    if (ec) {
      gone_ = true;
      co_return MakeError(ErrorCode::kUnavailable, "write to client failed: " + ec.message());
    }
    co_return Status{};
  }

  beast::tcp_stream& stream_;
  const beast::flat_buffer& pending_input_;  // bytes read but not yet parsed (pipelining)
  WorkerState& worker_;
  std::string head_;        // reused across requests
  std::string chunk_head_;  // reused across chunks
  std::string cut_notice_;  // see SetCutNotice; reused across requests
  std::function<void()> on_gone_;  // see OnClientGone
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_only_ = false;
  bool started_ = false;
  bool finished_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool writing_ = false;  // an async_write is in progress: CutStream must not interleave bytes
  mutable bool gone_ = false;
};

// Keeps in_flight and the busy flag exact even if the session frame is destroyed mid-handler.
class InFlightGuard {
 public:
  explicit InFlightGuard(SessionLink& link) : link_(link) {
    link_.busy = true;
    link_.worker.in_flight.fetch_add(1, std::memory_order_relaxed);
  }
  ~InFlightGuard() {
    link_.worker.in_flight.fetch_sub(1, std::memory_order_relaxed);
    link_.busy = false;
  }
  InFlightGuard(const InFlightGuard&) = delete;
  InFlightGuard& operator=(const InFlightGuard&) = delete;

 private:
  SessionLink& link_;
};

// After an error response the client may still be sending (an oversized body): stop writing, then
// read and drop what it sends for a short while, so that closing does not reset the connection
// before the client has read the error.
asio::awaitable<void> LingeringClose(beast::tcp_stream& stream) {
  boost::system::error_code ec;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  stream.expires_after(std::chrono::seconds(2));
  std::array<char, 8192> sink;
  size_t total = 0;
  while (total < kLingerBytes) {
    auto [rec, n] = co_await stream.async_read_some(asio::buffer(sink), as_tuple(use_awaitable));
    if (rec) break;
    total += n;
  }
}

// An absolute-form target (RFC 9112 3.2.2: "http://host:port/path?query", which a server must
// accept) is reduced to its origin form; the Host header still names the host.
std::string_view OriginForm(std::string_view target) {
  if (target.empty() || target.front() == '/') return target;
  const size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) return target;  // "*" or authority-form: as received
  const size_t path_start = target.find_first_of("/?", scheme_end + 3);
  if (path_start == std::string_view::npos) return "/";
  return target.substr(path_start);  // may start with '?': SplitTarget makes the path "/"
}

void SplitTarget(std::string_view target, Request& req) {
  target = OriginForm(target);
  if (!target.empty() && target.front() == '?') {  // "http://host?q": the path is "/"
    req.path.assign("/");
    req.query.assign(target.substr(1));
    return;
  }
  const size_t q = target.find('?');
  if (q == std::string_view::npos) {
    req.path.assign(target);
    req.query.clear();
  } else {
    req.path.assign(target.substr(0, q));
    req.query.assign(target.substr(q + 1));
  }
}

// Everything but the body.
void FillHead(const bhttp::request<bhttp::string_body>& msg, int64_t arrival, Request& req) {
  req.method.assign(msg.method_string());
  req.target.assign(msg.target());
  SplitTarget(req.target, req);
  size_t i = 0;
  for (const auto& field : msg) {
    if (i == req.headers.size()) req.headers.emplace_back();
    req.headers[i].name.assign(field.name_string());
    req.headers[i].value.assign(field.value());
    ++i;
  }
  req.headers.resize(i);
  req.arrival_monotonic_ns = arrival;
}

void FillRequest(bhttp::request<bhttp::string_body>& msg, int64_t arrival, Request& req) {
  FillHead(msg, arrival, req);
  req.body = std::move(msg.body());
}

// What on_rejected sees of a request that could not be read: its head when that was complete.
const Request& RejectedHead(const bhttp::request_parser<bhttp::string_body>& parser,
                            bool head_read, int64_t arrival, Request& req) {
  req.body.clear();
  if (head_read) {
    FillHead(parser.get(), arrival, req);
  } else {
    req.method.clear();
    req.target.clear();
    req.path.clear();
    req.query.clear();
    req.headers.clear();
    req.arrival_monotonic_ns = arrival;
  }
  return req;
}

// RFC 9110 10.1.1: an HTTP/1.0 client's 100-continue is ignored.
bool WantsContinue(const bhttp::request<bhttp::string_body>& msg) {
  const auto it = msg.find(bhttp::field::expect);
  return msg.version() >= 11 && it != msg.end() && EqualsIgnoreCase(it->value(), "100-continue");
}

// What RFC 9112 forbids in a request head and Beast's parser accepts: obs-fold (a line that
// starts with SP or HTAB continues the previous field: 5.2, the smuggling vector of parsers that
// disagree on it) and a line ended by a bare LF (2.2). Scans the bytes before the parser sees
// them, each byte once, and stops at the empty line that ends the head.
class HeadFraming {
 public:
  // `buffered`: the connection's unparsed bytes, of which the first scanned_ were checked already.
  // "" while the head is acceptable so far.
  std::string_view Check(std::string_view buffered) {
    for (size_t i = scanned_; i < buffered.size() && !ended_; ++i) {
      const char c = buffered[i];
      if (c == '\n') {
        if (!prev_cr_) return "a line of the request head ends with a bare LF, not CRLF";
        ended_ = line_len_ == 1 && !first_line_;  // just "\r": the empty line
        first_line_ = false;
        line_len_ = 0;
        prev_cr_ = false;
        continue;
      }
      if (line_len_ == 0 && !first_line_ && (c == ' ' || c == '\t')) {
        return "obsolete line folding (a header line that starts with whitespace)";
      }
      prev_cr_ = c == '\r';
      ++line_len_;
    }
    scanned_ = buffered.size();
    return {};
  }
  // The parser took `n` bytes off the front of the buffer.
  void Consumed(size_t n) { scanned_ -= std::min(n, scanned_); }

 private:
  size_t scanned_ = 0;
  size_t line_len_ = 0;
  bool first_line_ = true;
  bool prev_cr_ = false;
  bool ended_ = false;
};

// RFC 9112 7.1: chunk-size lines, the line after each chunk's data and trailer lines end with
// CRLF. Beast rejects a wrong ending only once a CRLF turns up later, and waits for one until the
// body deadline otherwise. `rest` is what it left unparsed in a chunked body: at most the end of
// a chunk's data line and the next size line (or the trailer section), never chunk data, so any
// LF in it must follow a CR. Scans from `from` (what an earlier call saw of the same bytes).
bool HasBareLf(std::string_view rest, size_t from) {
  for (size_t i = from; i < rest.size(); ++i) {
    if (rest[i] == '\n' && (i == 0 || rest[i - 1] != '\r')) return true;
  }
  return false;
}

// RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host header; none carries two.
std::string_view HostError(const bhttp::request<bhttp::string_body>& msg) {
  const size_t hosts = msg.count(bhttp::field::host);
  if (hosts > 1) return "more than one Host header";
  if (hosts == 0 && msg.version() >= 11) return "an HTTP/1.1 request must carry a Host header";
  return {};
}

std::string_view BufferedView(const beast::flat_buffer& buffer) {
  return {static_cast<const char*>(buffer.data().data()), buffer.size()};
}

// What to answer when reading a request failed; nullopt means just close (timeout, EOF, reset).
struct ReadFailure {
  int status;
  std::string_view code;
  std::string message;
};
std::optional<ReadFailure> ClassifyReadError(const boost::system::error_code& ec,
                                             const ServerOptions& options) {
  if (ec == bhttp::error::header_limit) {
    return ReadFailure{431, "request_header_fields_too_large",
                       "Request header fields too large (limit " +
                           std::to_string(options.header_limit) + " bytes)"};
  }
  if (ec == bhttp::error::body_limit) {
    return ReadFailure{413, "request_too_large",
                       "Request body too large (limit " + std::to_string(options.body_limit) +
                           " bytes)"};
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return ReadFailure{400, "invalid_request", "Malformed HTTP request: " + ec.message()};
  }
  return std::nullopt;
}

ReadFailure Malformed(std::string_view why) {
  return ReadFailure{400, "invalid_request", "Malformed HTTP request: " + std::string(why)};
}

// Feeds buffered bytes to the parser, up to the end of the head only when `head_only`. need_more
// is not an error here: the caller reads on.
boost::system::error_code ParseBuffered(bhttp::request_parser<bhttp::string_body>& parser,
                                        beast::flat_buffer& buffer, bool head_only) {
  boost::system::error_code ec;
  while (buffer.size() > 0 && !parser.is_done() && !(head_only && parser.is_header_done())) {
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == bhttp::error::need_more) return {};
    if (ec) return ec;
    if (used == 0) break;
  }
  return {};
}

asio::awaitable<void> Serve(asio::ip::tcp::socket socket, WorkerState& worker) {
  beast::tcp_stream stream(std::move(socket));
  SessionLink link(worker, stream.socket());
  const ServerOptions& options = worker.options;
  beast::flat_buffer buffer;
  Writer writer(stream, buffer, worker);
  link.writer = &writer;
  Request req;
  req.worker_index = worker.index;
  {
    boost::system::error_code ec;
    const auto peer = stream.socket().remote_endpoint(ec);
    if (!ec) req.remote_address = peer.address().to_string();
  }
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  const auto header_limit =
      static_cast<std::uint32_t>(std::min<size_t>(options.header_limit, UINT32_MAX));
  bool first = true;
  bool linger = false;

  while (!worker.draining) {
    // Idle phase: wait for the first byte of the next request (unless it is already buffered).
    if (buffer.size() == 0) {
      stream.expires_after(first ? options.header_timeout : options.idle_timeout);
      auto [ec, n] =
          co_await stream.async_read_some(buffer.prepare(kReadSize), as_tuple(use_awaitable));
      if (ec) break;
      buffer.commit(n);
    }
    const int64_t arrival = NowNs();
    first = false;

    parser.emplace();
    // The body is read into the previous request's buffer (emptied): a keep-alive connection
    // allocates its body buffer once, not once per request.
    req.body.clear();
    parser->get().body().swap(req.body);
    parser->header_limit(header_limit);
    parser->body_limit(options.body_limit);
    // The head first, alone (eager off): its framing is checked before the parser sees its bytes,
    // and the application may answer an `Expect: 100-continue` request before any of the body is
    // read. A request that arrived whole is parsed right here, without a pass through the loop.
    parser->eager(false);
    HeadFraming head_framing;
    std::optional<ReadFailure> failure;
    boost::system::error_code read_ec;
    bool deadline_set = false;
    for (;;) {
      if (std::string_view why = head_framing.Check(BufferedView(buffer)); !why.empty()) {
        failure = Malformed(why);
        break;
      }
      const size_t before = buffer.size();
      read_ec = ParseBuffered(*parser, buffer, /*head_only=*/true);
      head_framing.Consumed(before - buffer.size());
      if (read_ec || parser->is_header_done()) break;
      if (!deadline_set) stream.expires_after(options.header_timeout);
      deadline_set = true;
      auto [hec, hn] =
          co_await stream.async_read_some(buffer.prepare(kReadSize), as_tuple(use_awaitable));
      if (hec) {
        read_ec = hec;
        break;
      }
      buffer.commit(hn);
    }
    if (!failure && !read_ec) {
      if (std::string_view why = HostError(parser->get()); !why.empty()) failure = Malformed(why);
    }
    bool close = false;  // without an answer (the 100 could not be written) or after an early one
    if (!failure && !read_ec && !parser->is_done()) {
      parser->eager(true);
      stream.expires_after(options.body_timeout);
      bool continue_decided = false;
      size_t rest_checked = 0;  // of the bytes the parser left, those HasBareLf saw
      for (;;) {
        const size_t before = buffer.size();
        read_ec = ParseBuffered(*parser, buffer, /*head_only=*/false);
        if (read_ec || parser->is_done()) break;
        if (buffer.size() != before) rest_checked = 0;
        if (parser->chunked() && HasBareLf(BufferedView(buffer), rest_checked)) {
          failure = Malformed("a chunk line ends with a bare LF, not CRLF");
          break;
        }
        rest_checked = buffer.size();
        // RFC 9110 10.1.1: a client that asked waits for a go-ahead before sending the rest of
        // its body (none is needed once the body came whole with the head); a request the
        // application refuses on its head alone (no valid key) gets its final answer instead,
        // and the body is never read.
        if (!continue_decided && WantsContinue(parser->get())) {
          std::optional<EarlyAnswer> early;
          if (options.on_expect_continue) {
            FillHead(parser->get(), arrival, req);
            early = options.on_expect_continue(req);
          }
          if (early) {
            writer.Reset(11, false, false);
            (void)co_await writer.Send(early->status, early->content_type, std::move(early->body),
                                       std::move(early->headers));
            linger = close = true;
            break;
          }
          writer.Reset(11, true, false);
          stream.expires_after(options.write_timeout);
          auto [wec, wn] = co_await asio::async_write(
              stream, asio::buffer("HTTP/1.1 100 Continue\r\n\r\n", 25), as_tuple(use_awaitable));
          if (wec) {
            close = true;
            break;
          }
          stream.expires_after(options.body_timeout);
        }
        continue_decided = true;
        auto [bec, bn] =
            co_await stream.async_read_some(buffer.prepare(kReadSize), as_tuple(use_awaitable));
        if (bec) {
          read_ec = bec;
          break;
        }
        buffer.commit(bn);
      }
    }
    if (close) break;
    if (read_ec && !failure) failure = ClassifyReadError(read_ec, options);
    if (failure) {
      std::vector<Header> headers;
      if (options.on_rejected) {
        // A Content-Length over the limit fails as the head completes: the head is whole.
        const bool head_read = parser->is_header_done() || read_ec == bhttp::error::body_limit;
        const Request& head = RejectedHead(*parser, head_read, arrival, req);
        headers = options.on_rejected(Rejection{.status = failure->status,
                                                .message = failure->message,
                                                .request = head,
                                                .head_read = head_read});
      }
      writer.Reset(11, false, false);
      (void)co_await writer.Send(
          failure->status, "application/json",
          OpenAiError(failure->message, "invalid_request_error", failure->code),
          std::move(headers));
      linger = true;
      break;
    }
    if (read_ec) break;

    auto& msg = parser->get();
    FillRequest(msg, arrival, req);
    InFlightGuard in_flight(link);
    writer.Reset(msg.version(), msg.keep_alive(), msg.method() == bhttp::verb::head);
    bool threw = false;
    try {
      co_await worker.handler(req, writer);
    } catch (...) {
      threw = true;
    }
    writer.EndWatch();
    if (threw || !writer.started()) {
      if (writer.started()) break;  // a partial response cannot be repaired: close
      writer.ForbidKeepAlive();
      (void)co_await writer.Send(
          500, "application/json",
          OpenAiError(threw ? "The server had an error while processing your request."
                            : "The server produced no response.",
                      "server_error", "internal_error"),
          {});
      break;
    }
    if (writer.streaming() && !writer.finished()) (void)co_await writer.EndStream();
    if (!writer.keep_alive()) break;
  }

  if (linger) co_await LingeringClose(stream);
  boost::system::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  stream.socket().close(ignored);
}

}  // namespace

asio::awaitable<void> RunSession(asio::ip::tcp::socket socket, WorkerState& worker) {
  try {
    co_await Serve(std::move(socket), worker);
  } catch (...) {
    // Only allocation failure can get here; the connection is dropped, the loop lives on.
  }
}

}  // namespace kvgate::http::internal
