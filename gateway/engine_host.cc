// The engine host (engine_host.h) and LocalEngines::Start: loading each local provider's model,
// tokenizer and chat template, and the thread that steps its engine.
#include "gateway/engine_host.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/ids.h"
#include "common/thread_name.h"
#include "local_engine/device.h"

namespace kvgate::gateway {

using nlohmann::json;

EngineHost::EngineHost(std::string name, std::unique_ptr<engine::Engine> engine,
                       engine::ChatTemplate tmpl, int64_t max_output_tokens_default,
                       bool share_prefix_cache_across_keys)
    : name_(std::move(name)),
      engine_(std::move(engine)),
      template_(std::move(tmpl)),
      max_output_tokens_default_(max_output_tokens_default),
      share_prefix_cache_(share_prefix_cache_across_keys),
      instance_(NewId("kvgate-engine")),
      thread_([this] {
        NameThisThread("engine-" + name_);
        Loop();
      }) {}

void EngineHost::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // The step in flight stops between layers rather than finish a prefill nobody waits for.
  engine_->CancelAll();
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

Result<uint64_t> EngineHost::Add(engine::EngineRequest request) {
  auto id = engine_->AddRequest(std::move(request));
  if (id) {
    requests_total_.fetch_add(1);
    cv_.SignalAll();
  }
  return id;
}

void EngineHost::Cancel(uint64_t id) {
  engine_->Cancel(id);
  cv_.SignalAll();
}

json EngineHost::Describe() const {
  const engine::CacheStats c = engine_->cache_stats();
  return json{{"provider", name_},
              {"instance", instance_},
              {"backend", std::string(engine_->backend_name())},
              {"block_size", engine::kBlockSize},
              {"kv_cache_dtype", std::string(engine::KvDtypeName(engine_->kv_cache_dtype()))},
              {"kv_bytes_per_token", engine_->kv_bytes_per_token()},
              {"prefix_cache_scope", share_prefix_cache_ ? "shared" : "per_key"},
              {"pool_blocks", c.blocks.num_blocks},
              {"used_blocks", c.blocks.used_blocks},
              {"cached_free_blocks", c.blocks.cached_free_blocks},
              {"kv_cache_usage_perc", KvCacheUsagePerc(c)},
              {"running", c.running},
              {"waiting", c.waiting},
              {"prefix_cache_queries_tokens", c.blocks.queries_tokens},
              {"prefix_cache_hits_tokens", c.blocks.hit_tokens},
              {"cache_written_blocks", c.blocks.written_blocks},
              {"evictions", c.blocks.evictions},
              {"preemptions", c.preemptions},
              {"forks", c.blocks.forks},
              {"fork_copies", c.blocks.fork_copies},
              {"aborted_steps", c.aborted_steps},
              {"requests_total", requests_total_.load()},
              {"prompt_tokens_total", prompt_tokens_.load()},
              {"generation_tokens_total", generation_tokens_.load()},
              {"step_errors_total", step_errors_.load()},
              {"offload", OffloadJson(c)}};
}

void EngineHost::Loop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      while (!stopping_ && !engine_->HasWork()) cv_.Wait(&mu_);
      if (stopping_) return;
    }
    if (auto status = engine_->Step(); !status) {
      // A broken invariant in the engine: stop stepping it rather than spin on the error.
      step_errors_.fetch_add(1);
      std::fprintf(stderr, "kvgate: engine %s: %s\n", name_.c_str(),
                   status.error().message.c_str());
      MutexLock lock(&mu_);
      while (!stopping_) cv_.Wait(&mu_);
      return;
    }
  }
}

uint64_t PrefixCacheSalt(std::string_view api_key_id) {
  if (api_key_id.empty()) return 0;
  // A prefix separates this use of the hash from any other of the same id.
  const std::string digest = HashApiKey("kvgate prefix cache salt\n" + std::string(api_key_id));
  uint64_t salt = std::strtoull(digest.substr(0, 16).c_str(), nullptr, 16);
  return salt != 0 ? salt : 1;
}

Result<std::unique_ptr<LocalEngines>> LocalEngines::Start(const GatewayConfig& config) {
  std::map<std::string, std::unique_ptr<EngineHost>> hosts;
  for (const auto& p : config.providers) {
    if (!HostsEngine(p)) continue;
    const auto device = engine::ParseDevice(p.device);
    if (!device) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "provider " + p.name + ": device must be cpu or cuda, got " + p.device);
    }
    // Before the model is read: a missing GPU or a build without CUDA is the whole story.
    if (auto s = engine::CheckDevice(*device); !s) {
      return MakeError(s.error().code,
                       "provider " + p.name + ": " + s.error().message + "; use device: cpu");
    }
    const auto dtype = engine::ParseKvCacheDtype(p.kv_cache_dtype);
    if (!dtype) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "provider " + p.name + ": kv_cache_dtype " + dtype.error().message);
    }
    engine::EngineOptions options;
    options.model_path = p.model_path;
    options.device = *device;
    options.kv_cache_dtype = *dtype;
    options.gpu_memory_fraction = p.gpu_memory_fraction;
    options.cuda_graphs = p.cuda_graphs;
    options.fp8_gemm = p.fp8_gemm;
    options.offload = {
        .disk_path = p.offload_disk, .bytes = p.offload_bytes, .host_bytes = p.offload_host_bytes};
    options.threads = p.threads > 0
                          ? p.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (p.kv_cache_tokens > 0) {
      const int64_t blocks = (p.kv_cache_tokens + engine::kBlockSize - 1) / engine::kBlockSize;
      if (blocks > std::numeric_limits<int32_t>::max()) {
        return MakeError(ErrorCode::kInvalidArgument, "provider " + p.name + ": kv_cache_tokens " +
                                                          std::to_string(p.kv_cache_tokens) +
                                                          " is too large");
      }
      options.num_kv_blocks = static_cast<int32_t>(blocks);
    }
    auto created = engine::Engine::Create(options);
    if (!created) {
      return MakeError(created.error().code, "provider " + p.name + " (" + p.model_path +
                                                 "): " + created.error().message);
    }
    auto tmpl = engine::ChatTemplateFromGguf((*created)->gguf());
    if (!tmpl) {
      return MakeError(tmpl.error().code, "provider " + p.name + " (" + p.model_path +
                                              "): chat template: " + tmpl.error().message);
    }
    hosts.emplace(p.name, std::make_unique<EngineHost>(p.name, std::move(*created), *tmpl,
                                                       p.max_output_tokens_default,
                                                       p.share_prefix_cache_across_keys));
  }
  return NewLocalEngines(std::move(hosts));
}

}  // namespace kvgate::gateway
