// The `local` provider type: models served by kvgate's built-in engine, in-process.
// Each configured local provider owns one engine running on its own thread (engine_host.h); the
// gateway's coroutines submit requests and receive tokens back on their own executor
// (engine_upstream.cc), the request read by the engine's adapter (engine_request.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "gateway/config.h"
#include "gateway/upstream.h"

namespace kvgate::gateway {

// The prefix-cache salt (engine::EngineRequest::cache_salt) of a gateway key's requests: 0 (no
// salt) for "" (no gateway keys), else 64 bits of a SHA-256 of the key's id, never 0. Stable
// across restarts (the offload file keeps blocks by salt) and the same for every replica.
uint64_t PrefixCacheSalt(std::string_view api_key_id);

// The built-in engines: one per configured local provider, each an Upstream for the targets
// (models) served by it.
class LocalEngines : public Upstream {
 public:
  // Loads every provider of type local in `config` (model file, tokenizer, KV pool) and starts
  // its engine thread. Errors name the provider and the file.
  static Result<std::unique_ptr<LocalEngines>> Start(const GatewayConfig& config);
  ~LocalEngines() override = default;

  // Upstream: serves one OpenAI-format request on the engine of plan.target's provider: applies
  // the chat template, streams or buffers the answer, fills usage (prompt tokens reused from the
  // prefix cache are cache_read, newly cached ones cache_write) and the engine's instance
  // (system_fingerprint) into the record. Requests the engine cannot honour, and prompts that do
  // not fit its context, fail before anything is sent.
  // LookupPrefix: how much of the prompt the engine behind the target has cached right now for
  // requests of the gateway key (the salt its requests would compute under, so a probe says no
  // more than a request would), without touching LRU order or refcounts: cached_tokens is what
  // admission would reuse now, the pool's hits plus the offload tier's continuation of them.
  // CountTokens: the Messages body translated to chat, rendered with the model's chat template
  // and tokenized as a request would be.

  // Stops accepting work, finishes or cancels in-flight requests, joins the engine threads.
  virtual void Stop() = 0;
  // The context length of a local provider's model; nullopt for an unknown provider.
  virtual std::optional<int64_t> ContextLength(const std::string& provider) const = 0;
  // Engine state for GET /api/engine (pool size, used blocks, hit counters, the offload tier)
  // per provider.
  virtual nlohmann::json Describe() const = 0;
  // Appends the engines' Prometheus exposition (vLLM's names) to `out`; thread safe.
  virtual void ExposeMetrics(std::string& out) const = 0;
};

}  // namespace kvgate::gateway
