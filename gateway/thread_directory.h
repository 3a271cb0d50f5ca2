// Which thread a request belongs to, beyond what it names itself: the owner of each client thread
// id under gateway keys (thread_scope.h), and the thread and conversation of each Responses API
// response (response_threads.h). What is not remembered is read from the store, on the blocking
// pool, never on an event loop.
//
// Thread safety: every method may be called from any event loop concurrently (the maps are
// internally locked; the store reads run on `blocking_pool`).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/response_threads.h"
#include "gateway/thread_scope.h"
#include "telemetry/store.h"

namespace kvgate::gateway {

class ThreadDirectory {
 public:
  // `store` and `blocking_pool` must outlive this object.
  ThreadDirectory(telemetry::TelemetryStore& store, boost::asio::thread_pool& blocking_pool)
      : store_(store), blocking_pool_(blocking_pool) {}

  // The id under which a turn of gateway key `api_key_id` naming thread `thread_id` is stored
  // (thread_scope.h): the id when the key owns it (the first key to use it; an owner not
  // remembered is the key of the thread's newest stored turn), else the key's own scoped thread.
  // While the store cannot be read the id is kept as sent, unclaimed (docs/api.md).
  boost::asio::awaitable<std::string> Scope(const std::string& thread_id,
                                            const std::string& api_key_id);
  // The remembered owner of `thread_id`, nullopt when not remembered (no store read).
  std::optional<std::string> OwnerOf(std::string_view thread_id) const {
    return owners_.Find(thread_id);
  }
  // Makes `api_key_id` the owner of a new id unless another key claimed it first; the stored id
  // of the key's thread (StoredThreadId).
  std::string ClaimNew(const std::string& thread_id, const std::string& api_key_id);

  // What kvgate knows of the response a Responses API request continues.
  struct PreviousResponse {
    std::string thread_id;   // its thread as stored; "" when kvgate does not know the response
    bool other_key = false;  // made by another gateway key than the request's (then no thread)
  };
  // The response `response_id` as gateway key `api_key_id` ("" without keys) may see it:
  // remembered, else read from the store.
  boost::asio::awaitable<PreviousResponse> ThreadOfResponse(const std::string& response_id,
                                                            const std::string& api_key_id);

  // The Responses API's memory of responses and of the conversations translated for chat
  // upstreams.
  ResponseThreads& responses() { return responses_; }

 private:
  telemetry::TelemetryStore& store_;
  boost::asio::thread_pool& blocking_pool_;
  ThreadOwners owners_;        // internally locked
  ResponseThreads responses_;  // internally locked
};

}  // namespace kvgate::gateway
