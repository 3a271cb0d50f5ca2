// The engine host: one built-in engine (a local provider's model, its tokenizer and chat template,
// its KV pool) and the thread that steps it. LocalEngines::Start (engine_host.cc) loads one per
// local provider; the engine upstream (engine_upstream.cc) serves requests on them.
//
// Thread safety: Add, Cancel, the accessors and the counters may be called from any thread (the
// engine is internally locked); Stop is called once, at shutdown, from the thread that owns the
// host.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "common/error.h"
#include "common/mutex.h"
#include "gateway/engine_metrics.h"
#include "gateway/local_provider.h"
#include "local_engine/chat_template.h"
#include "local_engine/engine.h"

namespace kvgate::gateway {

class EngineHost {
 public:
  // Starts the engine thread.
  EngineHost(std::string name, std::unique_ptr<engine::Engine> engine, engine::ChatTemplate tmpl,
             int64_t max_output_tokens_default, bool share_prefix_cache_across_keys);
  ~EngineHost() { Stop(); }

  // Cancels what is in flight and joins the engine thread; idempotent.
  void Stop();
  // Submits a request (its callback runs on the engine thread); the engine's id for Cancel.
  Result<uint64_t> Add(engine::EngineRequest request);
  void Cancel(uint64_t id);

  const std::string& name() const { return name_; }
  // A new id per start: its prefix cache starts empty, and a thread's turns on another instance
  // than the last one explain a lost cache ("engine_restarted").
  const std::string& instance() const { return instance_; }
  engine::Engine& engine() { return *engine_; }
  const engine::Engine& engine() const { return *engine_; }
  const engine::ChatTemplate& chat_template() const { return template_; }
  // A request without max_tokens: at most this many completion tokens (0: no bound but the
  // context).
  int64_t max_output_tokens_default() const { return max_output_tokens_default_; }
  // The cache salt of a request of gateway key `api_key_id` (share_prefix_cache_across_keys: none).
  uint64_t CacheSalt(std::string_view api_key_id) const {
    return share_prefix_cache_ ? 0 : PrefixCacheSalt(api_key_id);
  }

  // GET /api/engine's entry for this engine.
  nlohmann::json Describe() const;
  EngineCounters counters() const {
    return {requests_total_.load(), prompt_tokens_.load(), generation_tokens_.load(),
            step_errors_.load()};
  }
  // Counts a request's tokens once it is over (finished, or cancelled with what it did so far).
  void CountFinished(const engine::Usage& usage) {
    prompt_tokens_.fetch_add(static_cast<uint64_t>(usage.prompt_tokens));
    generation_tokens_.fetch_add(static_cast<uint64_t>(usage.completion_tokens));
  }

 private:
  void Loop();

  // Constant after construction.
  const std::string name_;
  const std::unique_ptr<engine::Engine> engine_;
  const engine::ChatTemplate template_;
  const int64_t max_output_tokens_default_;
  const bool share_prefix_cache_;
  const std::string instance_;

  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> requests_total_{0}, prompt_tokens_{0}, generation_tokens_{0},
      step_errors_{0};
  std::thread thread_;  // last: starts after everything above exists
};

// The engine upstream (engine_upstream.cc) over the started hosts, by provider name.
std::unique_ptr<LocalEngines> NewLocalEngines(
    std::map<std::string, std::unique_ptr<EngineHost>> hosts);

}  // namespace kvgate::gateway
