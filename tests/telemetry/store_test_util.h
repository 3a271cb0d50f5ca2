// Helpers shared by the store tests: a temp directory and record builders.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "telemetry/pricing.h"
#include "telemetry/record.h"
#include "telemetry/usage.h"

namespace kvgate::telemetry::testing {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvgate_store_XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A record as the gateway would build it: usage normalized from `usage_json`, cost from the
// built-in catalog.
inline RequestRecord MakeRecord(const std::string& request_id, const std::string& thread_id,
                                int64_t created_at_us, const std::string& model, UsageFlavor flavor,
                                const char* usage_json,
                                const PriceCatalog& catalog = PriceCatalog::BuiltIn()) {
  RequestRecord r;
  r.request_id = request_id;
  r.thread_id = thread_id;
  r.created_at_us = created_at_us;
  r.endpoint = "chat.completions";
  r.model = model;
  r.provider = "prov-" + std::string(UsageFlavorName(flavor));
  r.provider_type = std::string(UsageFlavorName(flavor));
  r.upstream_model = model + "-upstream";
  r.status = "ok";
  r.http_status = 200;
  r.upstream_status = 200;
  r.usage = NormalizeUsage(flavor, nlohmann::json::parse(usage_json));
  r.cost = ComputeCost(r.usage, catalog, model);
  return r;
}

}  // namespace kvgate::telemetry::testing
