#include "gateway/thread_directory.h"

#include <nlohmann/json.hpp>

#include "gateway/run_blocking.h"

namespace kvgate::gateway {

namespace asio = boost::asio;
using nlohmann::json;

asio::awaitable<std::string> ThreadDirectory::Scope(const std::string& thread_id,
                                                    const std::string& api_key_id) {
  if (api_key_id.empty() || thread_id.empty() || IsScopedThreadId(thread_id)) {
    co_return StoredThreadId(thread_id, api_key_id, "");
  }
  std::optional<std::string> owner = owners_.Find(thread_id);
  if (!owner) {
    // The key of the thread's newest successful stored turn (all of them are its owner's; a
    // rejected request may be filed under an id it does not own, OnRejected); none, or a turn
    // from before gateway keys: the id is free.
    telemetry::TelemetryStore& store = store_;
    Result<std::string> stored = co_await RunOnPool<Result<std::string>>(
        blocking_pool_, [&store, &thread_id]() -> Result<std::string> {
          telemetry::RequestQuery query{.thread_id = thread_id, .status = "ok", .limit = 1};
          Result<json> listed = store.ListRequests(query);
          if (!listed) return std::unexpected(listed.error());
          const json& requests = (*listed)["requests"];
          if (!requests.is_array() || requests.empty()) return std::string();
          Result<json> turn = store.GetRequest(requests[0].value("request_id", std::string()));
          if (!turn) return std::unexpected(turn.error());
          return turn->value("api_key_id", std::string());
        });
    // The store cannot say (an outage): the turn keeps the id as sent, unclaimed, so that a
    // conversation is not split in two by a database restart; the owner is settled on the next
    // turn that can read the store. The cost: a thread id another key used before this process
    // started may take this turn while the database is away (docs/api.md).
    if (!stored) co_return std::string(thread_id);
    owner = owners_.Claim(thread_id, stored->empty() ? api_key_id : *stored);
  }
  co_return StoredThreadId(thread_id, api_key_id, *owner);
}

std::string ThreadDirectory::ClaimNew(const std::string& thread_id, const std::string& api_key_id) {
  if (api_key_id.empty()) return thread_id;
  return StoredThreadId(thread_id, api_key_id, owners_.Claim(thread_id, api_key_id));
}

asio::awaitable<ThreadDirectory::PreviousResponse> ThreadDirectory::ThreadOfResponse(
    const std::string& response_id, const std::string& api_key_id) {
  std::optional<std::string> key = responses_.KeyOf(response_id);
  std::optional<std::string> known = responses_.Find(response_id);
  if (key && known) {
    // (A response made before the gateway had keys is no key's.)
    if (!key->empty() && *key != api_key_id) co_return PreviousResponse{.other_key = true};
    co_return PreviousResponse{.thread_id = *known};
  }
  // Not remembered (kvgate restarted since, or it was forgotten): the stored request that
  // answered with this id, if any.
  telemetry::TelemetryStore& store = store_;
  Result<json> stored = co_await RunBlocking(
      blocking_pool_, [&store, &response_id] { return store.GetRequest(response_id); });
  if (!stored || !stored->is_object()) co_return PreviousResponse{};
  const std::string thread_id = stored->value("thread_id", std::string());
  const std::string stored_key = stored->value("api_key_id", std::string());
  if (!stored_key.empty() && stored_key != api_key_id) {
    co_return PreviousResponse{.other_key = true};
  }
  if (!thread_id.empty()) responses_.Remember(response_id, thread_id, stored_key);
  co_return PreviousResponse{.thread_id = thread_id};
}

}  // namespace kvgate::gateway
