// Server: event-loop threads, one SO_REUSEPORT acceptor per loop, and graceful shutdown.
//
// Each loop is an io_context run by exactly one thread; a connection lives its whole life on the
// loop that accepted it, so nothing on the request path takes a lock. The kernel spreads incoming
// connections over the loops' listening sockets (SO_REUSEPORT hashing).
#include "gateway/http/server.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_name.h"
#include "gateway/http/session.h"

namespace kvgate::http {
namespace internal {

SessionLink::SessionLink(WorkerState& w, boost::asio::ip::tcp::socket& s) : worker(w), socket(s) {
  next = worker.head;
  if (next != nullptr) next->prev = this;
  worker.head = this;
  ++worker.sessions;
}

SessionLink::~SessionLink() {
  if (prev != nullptr) prev->next = next;
  else worker.head = next;
  if (next != nullptr) next->prev = prev;
  --worker.sessions;
  worker.MaybeReportDrained();
}

void WorkerState::BeginDrain() {
  draining = true;
  for (SessionLink* s = head; s != nullptr; s = s->next) {
    if (!s->busy) {
      boost::system::error_code ignored;
      s->socket.close(ignored);  // the pending read completes with operation_aborted
    }
  }
  MaybeReportDrained();
}

void WorkerState::CloseAll() {
  for (SessionLink* s = head; s != nullptr; s = s->next) {
    if (s->writer != nullptr) s->writer->CutStream();
    boost::system::error_code ignored;
    s->socket.close(ignored);
  }
}

void WorkerState::CheckGoneClients() {
  // A hook may end its handler's wait; none unlinks a session synchronously, so the walk is safe.
  for (SessionLink* s = head; s != nullptr; s = s->next) {
    if (s->busy && s->writer != nullptr) s->writer->CheckClientGone();
  }
}

void WorkerState::MaybeReportDrained() {
  if (draining && sessions == 0 && !drained_reported) {
    drained_reported = true;
    if (on_drained) on_drained();
  }
}

}  // namespace internal

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

struct Worker {
  Worker(const ServerOptions& options, const Handler& handler, size_t index)
      : state(options, handler, index),
        ioc(1),
        acceptor(ioc),
        deadline_sentinel(ioc),
        guard(ioc.get_executor()) {}
  // Declaration order is destruction order in reverse: the io_context (and with it any suspended
  // session coroutine) goes before `state`, which those coroutines reference.
  internal::WorkerState state;
  asio::io_context ioc;
  tcp::acceptor acceptor;
  asio::steady_timer deadline_sentinel;  // see ArmDeadlineSentinel
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::thread thread;
};

Status OpenAcceptor(tcp::acceptor& acceptor, const tcp::endpoint& endpoint) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.set_option(ReusePort(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return MakeError(ErrorCode::kUnavailable, "cannot listen on " + endpoint.address().to_string() +
                                                  ":" + std::to_string(endpoint.port()) + ": " +
                                                  ec.message());
  }
  return {};
}

// SO_REUSEPORT would let this server silently share a port with another process of the same
// user that also set it (say, a second kvgate). A probe bind without it fails if anyone listens.
Status CheckPortFree(const tcp::endpoint& endpoint) {
  if (endpoint.port() == 0) return {};
  asio::io_context probe_ctx(1);
  tcp::acceptor probe(probe_ctx);
  boost::system::error_code ec;
  probe.open(endpoint.protocol(), ec);
  if (!ec) probe.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) probe.bind(endpoint, ec);
  if (ec) {
    return MakeError(ErrorCode::kUnavailable, "cannot listen on " + endpoint.address().to_string() +
                                                  ":" + std::to_string(endpoint.port()) + ": " +
                                                  ec.message());
  }
  return {};
}

asio::awaitable<void> AcceptLoop(Worker& worker) {
  for (;;) {
    auto [ec, socket] = co_await worker.acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !worker.acceptor.is_open()) co_return;
      // Out of descriptors or similar: back off instead of spinning.
      asio::steady_timer timer(worker.ioc, std::chrono::milliseconds(20));
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    if (worker.state.draining) continue;  // the socket closes as it goes out of scope
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    asio::co_spawn(worker.ioc, internal::RunSession(std::move(socket), worker.state), asio::detached);
  }
}

class ServerImpl final : public Server {
 public:
  ServerImpl(ServerOptions options, Handler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}

  ~ServerImpl() override {
    Stop();
    Wait();
  }

  Status Init() {
    boost::system::error_code ec;
    std::string host = options_.host == "localhost" ? "127.0.0.1" : options_.host;
    const asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "server host must be an IP address, got '" + options_.host + "'");
    }
    size_t threads = options_.threads > 0 ? static_cast<size_t>(options_.threads)
                                          : std::max(1u, std::thread::hardware_concurrency());
    tcp::endpoint endpoint(address, options_.port);
    if (Status s = CheckPortFree(endpoint); !s) return s;
    for (size_t i = 0; i < threads; ++i) {
      auto worker = std::make_unique<Worker>(options_, handler_, i);
      if (Status s = OpenAcceptor(worker->acceptor, endpoint); !s) return s;
      // With port 0 the first bind picks the port; every other loop joins that same port.
      endpoint.port(worker->acceptor.local_endpoint().port());
      worker->state.on_drained = [this] {
        MutexLock lock(&mu_);
        ++drained_workers_;
        cv_.SignalAll();
      };
      workers_.push_back(std::move(worker));
    }
    port_ = endpoint.port();
    for (auto& w : workers_) {
      Worker* worker = w.get();
      if (options_.on_thread_start) {
        asio::post(worker->ioc, [this, worker] {
          options_.on_thread_start(worker->state.index, worker->ioc.get_executor());
        });
      }
      asio::co_spawn(worker->ioc, AcceptLoop(*worker), asio::detached);
      ArmDeadlineSentinel(*worker);
      worker->thread = std::thread([worker] {
        NameThisThread("http-" + std::to_string(worker->state.index));
        RunLoop(worker->ioc);
      });
    }
    started_ = true;
    return {};
  }

  uint16_t port() const override { return port_; }

  size_t in_flight() const override {
    size_t total = 0;
    for (const auto& w : workers_) total += w->state.in_flight.load(std::memory_order_relaxed);
    return total;
  }

  void Stop() override {
    {
      MutexLock lock(&mu_);
      if (stop_started_) return;
      stop_started_ = true;
    }
    // Joining a loop from its own thread would deadlock: from inside a loop, shut down on a
    // helper thread and return at once.
    const auto self = std::this_thread::get_id();
    const bool on_loop = std::any_of(workers_.begin(), workers_.end(),
                                     [&](const auto& w) { return w->thread.get_id() == self; });
    if (on_loop) {
      MutexLock lock(&mu_);
      stopper_ = std::thread([this] { Shutdown(); });
    } else {
      Shutdown();
    }
  }

  void Wait() override {
    std::thread stopper;
    {
      MutexLock lock(&mu_);
      while (!stopped_) cv_.Wait(&mu_);
      if (stopper_.joinable() && stopper_.get_id() != std::this_thread::get_id()) {
        stopper = std::move(stopper_);
      }
    }
    if (stopper.joinable()) stopper.join();
  }

 private:
  // Every phase of a request (reading it, each upstream exchange, writing the answer) has a
  // deadline, i.e. an asio timer. asio re-programs its timerfd (a syscall) whenever a new timer is
  // the earliest one, which at low concurrency is every phase: four syscalls per proxied request.
  // This timer, re-armed every 250 ms, is always the earliest, so a deadline (seconds away) never
  // is. (Loops are stopped, not drained, at shutdown, so it holds nothing up.) Each tick also
  // checks the clients of handlers waiting on something else (OnClientGone): one peek per waiting
  // connection every 250 ms, instead of a watch armed and cancelled on every request.
  static void ArmDeadlineSentinel(Worker& worker) {
    worker.deadline_sentinel.expires_after(std::chrono::milliseconds(250));
    worker.deadline_sentinel.async_wait([&worker](const boost::system::error_code& ec) {
      if (ec) return;
      try {
        worker.state.CheckGoneClients();
      } catch (...) {
        // A handler's callback threw: the tick must go on for the other connections.
      }
      ArmDeadlineSentinel(worker);
    });
  }

  static void RunLoop(asio::io_context& ioc) {
    for (;;) {
      try {
        ioc.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kvgate http: event loop caught: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "kvgate http: event loop caught an unknown exception\n");
      }
    }
  }

  bool WaitDrained(std::chrono::steady_clock::duration timeout) {
    MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (drained_workers_ != workers_.size() && cv_.WaitUntil(&mu_, deadline)) {
    }
    return drained_workers_ == workers_.size();
  }

  void Shutdown() {
    if (!started_) {  // Init() failed before any loop ran
      MutexLock lock(&mu_);
      stopped_ = true;
      cv_.SignalAll();
      return;
    }
    // First every loop stops accepting, then idle connections are closed: once a client sees
    // its idle connection close, no new connection can get in.
    size_t closed_acceptors = 0;
    for (auto& w : workers_) {
      Worker* worker = w.get();
      asio::post(worker->ioc, [this, worker, &closed_acceptors] {
        boost::system::error_code ignored;
        worker->acceptor.close(ignored);
        MutexLock lock(&mu_);
        ++closed_acceptors;
        cv_.SignalAll();
      });
    }
    {
      MutexLock lock(&mu_);
      while (closed_acceptors != workers_.size()) cv_.Wait(&mu_);
    }
    for (auto& w : workers_) {
      Worker* worker = w.get();
      asio::post(worker->ioc, [worker] { worker->state.BeginDrain(); });
    }
    if (!WaitDrained(options_.drain_timeout)) {
      if (options_.on_drain_timeout) options_.on_drain_timeout();
      for (auto& w : workers_) {
        Worker* worker = w.get();
        asio::post(worker->ioc, [worker] { worker->state.CloseAll(); });
      }
      // Closed sockets unwind sessions blocked on I/O; a handler suspended on something else
      // (an upstream, a timer) is destroyed with its loop below.
      WaitDrained(std::chrono::milliseconds(500));
    }
    for (auto& w : workers_) {
      w->guard.reset();
      w->ioc.stop();
    }
    for (auto& w : workers_) {
      if (w->thread.joinable()) w->thread.join();
    }
    MutexLock lock(&mu_);
    stopped_ = true;
    cv_.SignalAll();
  }

  // Constant after Start().
  const ServerOptions options_;
  const Handler handler_;
  uint16_t port_ = 0;
  bool started_ = false;
  std::vector<std::unique_ptr<Worker>> workers_;

  Mutex mu_;
  CondVar cv_;
  bool stop_started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  size_t drained_workers_ GUARDED_BY(mu_) = 0;
  std::thread stopper_ GUARDED_BY(mu_);
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options, Handler handler) {
  if (!handler) return MakeError(ErrorCode::kInvalidArgument, "server needs a handler");
  auto server = std::make_unique<ServerImpl>(std::move(options), std::move(handler));
  if (Status s = server->Init(); !s) {
    return std::unexpected(s.error());
  }
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace kvgate::http
