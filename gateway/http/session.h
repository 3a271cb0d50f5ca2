// Private to gateway/http: the per-event-loop state shared by the acceptor (server.cc) and the
// connection sessions (session.cc). Everything here is touched only from its loop's thread, except
// in_flight, which other threads read.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "gateway/http/server.h"

namespace kvgate::http::internal {

struct WorkerState;

// What the loop's housekeeping does to a connection's response writer (server.cc): CloseAll ends
// its open stream with the cut notice before closing the socket (ResponseWriter::SetCutNotice),
// and the 250 ms sweep tells a waiting handler that its client left (ResponseWriter::OnClientGone).
class WriterHooks {
 public:
  virtual void CutStream() = 0;
  virtual void CheckClientGone() = 0;

 protected:
  ~WriterHooks() = default;
};

// A live connection, linked into its loop's list so that Stop() can close it. Lives in the
// session coroutine's frame.
struct SessionLink {
  SessionLink(WorkerState& worker, boost::asio::ip::tcp::socket& socket);
  ~SessionLink();
  SessionLink(const SessionLink&) = delete;
  SessionLink& operator=(const SessionLink&) = delete;

  WorkerState& worker;
  boost::asio::ip::tcp::socket& socket;
  bool busy = false;  // a request is being handled (counted in in_flight)
  WriterHooks* writer = nullptr;  // the connection's response writer
  SessionLink* prev = nullptr;
  SessionLink* next = nullptr;
};

struct WorkerState {
  WorkerState(const ServerOptions& options, const Handler& handler, size_t index)
      : options(options), handler(handler), index(index) {}

  // Marks the loop as draining and closes every connection that is not handling a request.
  void BeginDrain();
  // Closes every connection, busy or not (drain deadline passed), ending open streams first.
  void CloseAll();
  // Lets every handler that asked for it (OnClientGone) hear that its client left.
  void CheckGoneClients();

  const ServerOptions& options;
  const Handler& handler;
  const size_t index;
  // Called on this loop's thread once draining and the last connection has gone.
  std::function<void()> on_drained;

  bool draining = false;
  bool drained_reported = false;
  size_t sessions = 0;
  SessionLink* head = nullptr;
  // Written only on this loop's thread; read by Server::in_flight() from any thread.
  alignas(64) std::atomic<size_t> in_flight{0};

  void MaybeReportDrained();
};

// Serves one accepted connection until it closes. Never throws.
boost::asio::awaitable<void> RunSession(boost::asio::ip::tcp::socket socket, WorkerState& worker);

}  // namespace kvgate::http::internal
