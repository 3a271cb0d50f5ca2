// The `local` provider type: models served by kvgate's built-in engine, in-process.
// Each configured local provider owns one engine running on its own thread; the gateway's
// coroutines submit requests and receive tokens back on their own executor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "gateway/config.h"
#include "gateway/http/server.h"
#include "gateway/providers/provider.h"

namespace kvgate::gateway {

struct Route;
class RequestLog;

class LocalEngines {
 public:
  // Loads every provider of type local in `config` (model file, tokenizer, KV pool) and starts
  // its engine thread. Errors name the provider and the file.
  static Result<std::unique_ptr<LocalEngines>> Start(const GatewayConfig& config);
  virtual ~LocalEngines() = default;

  // Serves one OpenAI-format request on the engine behind `route`: applies the chat template,
  // streams or buffers the answer, fills usage (prompt tokens reused from the prefix cache are
  // cache_read) into `log`.
  virtual boost::asio::awaitable<void> Serve(const Route& route, const nlohmann::json& body,
                                             const providers::CallOptions& options,
                                             http::ResponseWriter& writer, RequestLog& log,
                                             std::vector<http::Header> headers) = 0;
  // Stops accepting work, finishes or cancels in-flight requests, joins the engine threads.
  virtual void Stop() = 0;
  // How much of this prompt ({"messages"} or {"prompt"}, OpenAI-shaped) the engine behind
  // `route` has cached right now, without touching LRU order or refcounts:
  // {"model", "prompt_tokens", "cached_tokens"}.
  virtual Result<nlohmann::json> Lookup(const Route& route, const nlohmann::json& body) const = 0;
  // Engine state for GET /api/engine (pool size, used blocks, hit counters) per provider.
  virtual nlohmann::json Describe() const = 0;
  // Appends the engines' Prometheus exposition (vLLM's names) to `out`; thread safe.
  virtual void ExposeMetrics(std::string& out) const = 0;
};

}  // namespace kvgate::gateway
