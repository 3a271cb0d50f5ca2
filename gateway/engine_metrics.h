// How the built-in engines' state reads from outside: the JSON of GET /api/engine and the
// kvgate_engine_* Prometheus families (vLLM's names and meanings under kvgate_engine_, plus the
// offload tier's). Pure formatting: the caller snapshots each engine (Engine::cache_stats) first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "local_engine/engine.h"

namespace kvgate::gateway {

// Per engine host: what the gateway counted itself.
struct EngineCounters {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t step_errors = 0;
};

struct EngineSnapshot {
  std::string provider;
  engine::CacheStats cache;
  EngineCounters counters;
};

// Fraction of the pool's blocks in use (1 = full).
double KvCacheUsagePerc(const engine::CacheStats& c);

// The offload tier in /api/engine: null when the engine has none, else {"kind" ("disk" or
// "host"), "path" (the file, or which host memory), "capacity_bytes", "used_bytes", "capacity_blocks", "used_blocks", "hit_tokens", "restores", "restore_seconds",
// "stored_blocks", "store_seconds", "evictions", "corrupt_blocks", "dropped_blocks",
// "write_errors", "reused_blocks", "bytes_read", "bytes_written"}.
nlohmann::json OffloadJson(const engine::CacheStats& c);

// Appends one HELP/TYPE header and one sample per engine (label provider) for every family.
void AppendEngineMetrics(const std::vector<EngineSnapshot>& engines, std::string& out);

}  // namespace kvgate::gateway
