// `keep_warm:` of a model or a router (docs/keep-warm.md).
#include <cmath>

#include "gateway/config_internal.h"

namespace kvgate::gateway::config_internal {

namespace {

// Far above any real day of pings, so that a typo (an extra digit group) is caught.
constexpr double kMaxUsdPerDay = 1'000'000;
constexpr int64_t kMaxPingsPerThread = 1000;

}  // namespace

Result<KeepWarmConfig> ParseKeepWarm(const json& k, const std::string& path) {
  const std::string where = path + ".keep_warm";
  if (!k.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where +
                         " must be a mapping {enabled, max_usd_per_day, max_pings_per_thread, "
                         "choose_write_ttl}");
  }
  if (Status s = OnlyKeys(
          k, where, {"enabled", "max_usd_per_day", "max_pings_per_thread", "choose_write_ttl"});
      !s) {
    return std::unexpected(s.error());
  }
  Reader r{k, where};
  KeepWarmConfig config;
  auto enabled = r.Bool("enabled", false);
  if (!enabled) return std::unexpected(enabled.error());
  config.enabled = *enabled;
  auto usd = r.Number("max_usd_per_day", config.max_usd_per_day);
  if (!usd) return std::unexpected(usd.error());
  if (!std::isfinite(*usd) || *usd <= 0 || *usd > kMaxUsdPerDay) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".max_usd_per_day must be a number of USD above 0 and at most " +
                         std::to_string(static_cast<int64_t>(kMaxUsdPerDay)));
  }
  config.max_usd_per_day = *usd;
  auto pings = r.Int("max_pings_per_thread", config.max_pings_per_thread);
  if (!pings) return std::unexpected(pings.error());
  if (*pings < 1 || *pings > kMaxPingsPerThread) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ".max_pings_per_thread must be an integer from 1 to " +
                         std::to_string(kMaxPingsPerThread));
  }
  config.max_pings_per_thread = static_cast<int>(*pings);
  auto choose = r.Bool("choose_write_ttl", config.choose_write_ttl);
  if (!choose) return std::unexpected(choose.error());
  config.choose_write_ttl = *choose;
  return config;
}

}  // namespace kvgate::gateway::config_internal
