// Blocking work (a database read) handed from an event loop to a thread pool and awaited, shared
// by the admin API (admin/: the read, alerts and key APIs) and the request path's read of a
// shared thread (the admin API, the hall in inference.cc).
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kvgate::gateway {

// Runs `fn` (blocking: a database query) on `pool` and resumes the awaiting coroutine on its own
// executor with fn's result, an R. Callers pass lambdas that capture only references to locals of
// the suspended coroutine: GCC 12 destroys non-trivially-destructible temporaries of a co_await
// expression twice (strings captured by value crashed here).
template <class R, class Fn>
auto RunOnPool(boost::asio::thread_pool& pool, Fn fn) {
  namespace asio = boost::asio;
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(R)>(
      [&pool](auto handler, Fn work) {
        asio::post(pool, [handler = std::move(handler), work = std::move(work)]() mutable {
          R result = work();
          auto executor = asio::get_associated_executor(handler);
          asio::dispatch(executor, [handler = std::move(handler),
                                    result = std::move(result)]() mutable {
            std::move(handler)(std::move(result));
          });
        });
      },
      asio::use_awaitable, std::move(fn));
}

// The read API's form: fn returns the JSON answer or an error.
template <class Fn>
auto RunBlocking(boost::asio::thread_pool& pool, Fn fn) {
  return RunOnPool<Result<nlohmann::json>>(pool, std::move(fn));
}

}  // namespace kvgate::gateway
