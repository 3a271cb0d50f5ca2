// The read side both stores share: the paging arguments and the JSON of every query, built
// from the rows of the store's own statement (RowCursor). Shapes: see store.h.
#include <algorithm>
#include <charconv>
#include <exception>
#include <set>
#include <utility>
#include <variant>
#include <vector>

#include "common/json_writer.h"
#include "telemetry/diagnosis.h"
#include "telemetry/pricing.h"
#include "telemetry/store.h"
#include "telemetry/store_rows.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

constexpr int kThreadLimitDefault = 50;
constexpr int kThreadLimitMax = 500;

constexpr std::string_view kTurnColumns =
    "request_id, thread_id, created_at_us, endpoint, model, provider, provider_type, upstream_model, "
    "api_key_id, stream, status, http_status, upstream_status, latency_us, ttft_us, cache_read, "
    "cache_write_5m, cache_write_1h, uncached, output_tokens, reasoning_tokens, reported_input, "
    "usage_clamped, usage_raw, cost_cache_read, cost_cache_write, cost_uncached, cost_output, "
    "cost_total, cost_saved, cost_complete, cost_priced, error, upstream_request_id, finish_reason, "
    "cache_diagnosis, seq, response_id, cache_write_no_ttl, cost_missed, target, key_index, "
    "system_fingerprint, route, attempts, cache_read_offload, cache_helper, "
    "provider_cache_miss_reason, cache_read_offload_tier, usage_estimated, thread_source, "
    "thread_parent, purpose, keep_warm_saved";
enum Col {
  kRequestId, kThreadId, kCreatedAt, kEndpoint, kModel, kProvider, kProviderType, kUpstreamModel,
  kApiKeyId, kStream, kStatus, kHttpStatus, kUpstreamStatus, kLatency, kTtft, kCacheRead,
  kCacheWrite5m, kCacheWrite1h, kUncached, kOutput, kReasoning, kReportedInput, kClamped, kUsageRaw,
  kCostCacheRead, kCostCacheWrite, kCostUncached, kCostOutput, kCostTotal, kCostSaved, kCostComplete,
  kCostPriced, kError, kUpstreamRequestId, kFinishReason, kDiagnosis, kSeq, kResponseId,
  kCacheWriteNoTtl, kCostMissed, kTarget, kKeyIndex, kSystemFingerprint, kRoute, kAttempts,
  kCacheReadOffload, kCacheHelper, kProviderCacheMissReason, kCacheReadOffloadTier, kUsageEstimated,
  kThreadSource, kThreadParent, kPurpose, kKeepWarmSaved, kColumnCount
};
static_assert(kColumnCount == internal::kTurnColumnCount);

enum class Detail { kTurn, kListed, kFull };

json OptInt(std::optional<int64_t> v) { return v.has_value() ? json(*v) : json(nullptr); }
json OptBool(std::optional<bool> v) { return v.has_value() ? json(*v) : json(nullptr); }

// A thread's total of one token kind: the sum of the turns that reported it; unknown (null) when
// none did, since unknown is not zero.
class KnownSum {
 public:
  void Add(std::optional<int64_t> v) {
    if (!v) return;
    sum_ = sum_.value_or(0) + *v;
  }
  json Json() const { return OptInt(sum_); }

 private:
  std::optional<int64_t> sum_;
};
json OptMs(std::optional<int64_t> us) {
  return us.has_value() ? json(static_cast<double>(*us) / 1000.0) : json(nullptr);
}

// Stored JSON text back to JSON; text that is not JSON comes back as a string, NULL as null.
json StoredJson(const internal::RowCursor& s, int column) {
  if (s.IsNull(column)) return nullptr;
  json parsed = json::parse(s.Text(column), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return s.Text(column);
  return parsed;
}

struct CostParts {
  int64_t total = 0, cache_read = 0, cache_write = 0, uncached = 0, output = 0, saved = 0;
  int64_t missed = 0;
};

void CostJson(const CostParts& c, json* usd, json* pico) {
  *pico = {{"total", c.total},       {"cache_read", c.cache_read}, {"cache_write", c.cache_write},
           {"uncached", c.uncached}, {"output", c.output},         {"saved", c.saved},
           {"missed", c.missed}};
  *usd = json::object();
  for (const auto& [key, value] : pico->items()) (*usd)[key] = PicoUsdToUsd(value.get<int64_t>());
}

json TurnJson(const internal::RowCursor& s, Detail detail) {
  json turn;
  turn["request_id"] = s.Text(kRequestId);
  turn["created_at"] = FormatRfc3339Micros(s.Int(kCreatedAt));
  turn["model"] = s.Text(kModel);
  turn["provider"] = s.Text(kProvider);
  turn["status"] = s.Text(kStatus);
  turn["stream"] = s.Int(kStream) != 0;
  turn["latency_ms"] = OptMs(s.OptInt(kLatency));
  turn["ttft_ms"] = OptMs(s.OptInt(kTtft));
  turn["response_id"] = s.Text(kResponseId);
  // Where the thread came from (docs/api.md): body, header, response_chain or auto; null without
  // a thread. An automatic thread that forked names the thread it forked from.
  const std::string source = s.Text(kThreadSource);
  turn["thread_source"] = source.empty() ? json(nullptr) : json(source);
  const std::string parent = s.Text(kThreadParent);
  turn["thread_parent"] = parent.empty() ? json(nullptr) : json(parent);
  // "client", or "keep_warm" for a ping kvgate sent to renew the thread's cache (not a turn).
  turn["purpose"] = s.Text(kPurpose).empty() ? "client" : s.Text(kPurpose);
  turn["keep_warm_saved_usd"] = PicoUsdToUsd(s.Int(kKeepWarmSaved));
  turn["usage"] = {{"cache_read", OptInt(s.OptInt(kCacheRead))},
                   {"cache_write_5m", OptInt(s.OptInt(kCacheWrite5m))},
                   {"cache_write_1h", OptInt(s.OptInt(kCacheWrite1h))},
                   {"cache_write_no_ttl", OptInt(s.OptInt(kCacheWriteNoTtl))},
                   {"uncached", OptInt(s.OptInt(kUncached))},
                   {"output", OptInt(s.OptInt(kOutput))},
                   {"reasoning", OptInt(s.OptInt(kReasoning))}};
  // Where the cache reads came from, for a provider with cache tiers (the built-in engine's KV
  // pool and its offload tier, "disk" or "host"; a row that does not name the kind is from before
  // host tiers existed: disk); null when it reported none. Beside "usage", whose shape is every
  // provider's.
  const std::optional<int64_t> read = s.OptInt(kCacheRead), offload = s.OptInt(kCacheReadOffload);
  const std::string tier = s.Text(kCacheReadOffloadTier) == "host" ? "host" : "disk";
  turn["cache_read_by_tier"] =
      read && offload ? json{{"pool", *read - *offload}, {tier, *offload}} : json(nullptr);
  CostParts cost{s.Int(kCostTotal),  s.Int(kCostCacheRead), s.Int(kCostCacheWrite),
                 s.Int(kCostUncached), s.Int(kCostOutput), s.Int(kCostSaved),
                 s.Int(kCostMissed)};
  CostJson(cost, &turn["cost_usd"], &turn["cost_pico_usd"]);
  turn["cost_complete"] = s.Int(kCostComplete) != 0;
  const std::string error = s.Text(kError);
  turn["error"] = error.empty() ? json(nullptr) : json(error);
  turn["http_status"] = s.Int(kHttpStatus);
  turn["cache_diagnosis"] = StoredJson(s, kDiagnosis);
  turn["usage_clamped"] = s.Int(kClamped) != 0;
  // Some counts are kvgate's estimate (a stream the client left whose usage never came).
  turn["usage_estimated"] = s.Int(kUsageEstimated) != 0;
  // The configured model that served it (a router's choice), the router's decision, the attempts.
  const std::string target = s.Text(kTarget);
  turn["target"] = target.empty() ? turn["model"] : json(target);
  turn["route"] = StoredJson(s, kRoute);
  turn["attempts"] = s.IsNull(kAttempts) ? json::array() : StoredJson(s, kAttempts);
  // The cache helper that changed the request (docs/configuration.md), null when none did.
  const std::string helper = s.Text(kCacheHelper);
  turn["cache_helper"] = helper.empty() ? json(nullptr) : json(helper);
  // The provider's own account of its cache (Anthropic's cache diagnostics) beside kvgate's,
  // and whether the two agree (null where they cannot be compared); null when it gave none.
  const std::string provider_reason = s.Text(kProviderCacheMissReason);
  turn["provider_cache_diagnosis"] =
      provider_reason.empty()
          ? json(nullptr)
          : json{{"cache_miss_reason", provider_reason == "none" ? json(nullptr)
                                                                 : json(provider_reason)},
                 {"agrees_with_kvgate", OptBool(ProviderDiagnosisAgrees(turn["cache_diagnosis"],
                                                                        provider_reason))}};
  if (detail == Detail::kListed || detail == Detail::kFull) {
    turn["thread_id"] = s.Text(kThreadId);
    turn["endpoint"] = s.Text(kEndpoint);
    turn["upstream_status"] = s.Int(kUpstreamStatus);
    turn["upstream_model"] = s.Text(kUpstreamModel);
  }
  if (detail == Detail::kFull) {
    turn["provider_type"] = s.Text(kProviderType);
    turn["api_key_id"] = s.Text(kApiKeyId);
    turn["upstream_request_id"] = s.Text(kUpstreamRequestId);
    turn["finish_reason"] = s.Text(kFinishReason);
    turn["usage_raw"] = StoredJson(s, kUsageRaw);
    turn["reported_input"] = OptInt(s.OptInt(kReportedInput));
    turn["cost_priced"] = s.Int(kCostPriced) != 0;
    turn["key_index"] = s.Int(kKeyIndex);
    turn["system_fingerprint"] = s.Text(kSystemFingerprint);
  }
  return turn;
}

json HitRatio(int64_t read, int64_t total_input) {
  if (total_input <= 0) return nullptr;
  return static_cast<double>(read) / static_cast<double>(total_input);
}

bool ParseInt(std::string_view text, int64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

// Cursors are opaque to clients: "t<offset>" for threads, "r<created_at_us>_<seq>" for requests.
// Where a page of threads ended: the sort value of its last row (null in the NULLS LAST tail) and
// that row's thread id. As a cursor: "k" + the hex of the JSON [value, thread_id].
struct ThreadKey {
  json value;
  std::string thread_id;
};

std::string ThreadCursor(const ThreadKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string text = json::array({key.value, key.thread_id}).dump();
  std::string out = "k";
  for (const unsigned char c : text) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

std::optional<ThreadKey> ParseThreadCursor(std::string_view cursor) {
  if (cursor.size() < 3 || cursor[0] != 'k' || cursor.size() % 2 != 1) return std::nullopt;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  std::string text;
  for (size_t i = 1; i < cursor.size(); i += 2) {
    const int hi = nibble(cursor[i]), lo = nibble(cursor[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    text.push_back(static_cast<char>(hi * 16 + lo));
  }
  json parsed = json::parse(text, nullptr, false);
  if (!parsed.is_array() || parsed.size() != 2 || !parsed[1].is_string() ||
      !(parsed[0].is_null() || parsed[0].is_number())) {
    return std::nullopt;
  }
  return ThreadKey{std::move(parsed[0]), parsed[1].get<std::string>()};
}
std::string RequestCursor(int64_t created_at_us, int64_t seq) {
  return "r" + std::to_string(created_at_us) + "_" + std::to_string(seq);
}

}  // namespace

namespace internal {

std::string_view TurnColumns() { return kTurnColumns; }

Result<ThreadPage> ParseThreadPage(const ThreadQuery& query) {
  // Keyset paging: the cursor is the last row's sort value and thread id, so threads that start
  // or move while a client pages neither repeat nor push others off a page (an offset would).
  ThreadPage page;
  if (!query.cursor.empty()) {
    std::optional<ThreadKey> after = ParseThreadCursor(query.cursor);
    if (!after || !after->value.is_number()) {
      return MakeError(ErrorCode::kInvalidArgument, "bad thread cursor");
    }
    page.has_cursor = true;
    page.after_value = std::move(after->value);
    page.after_thread_id = std::move(after->thread_id);
  }
  page.offset = page.has_cursor ? 0 : std::max<int64_t>(0, query.offset);
  page.limit = query.limit <= 0 ? kThreadLimitDefault : std::min(query.limit, kThreadLimitMax);
  return page;
}

Result<json> ThreadListJson(RowCursor& s, const ThreadQuery& query, int limit) {
  return Guarded([&]() -> Result<json> {
    json threads = json::array();
    bool more = false;
    ThreadKey last;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      if (static_cast<int>(threads.size()) == limit) {
        more = true;
        break;
      }
      json t;
      t["thread_id"] = s.Text(0);
      t["turns"] = s.Int(1);
      t["first_seen"] = FormatRfc3339Micros(s.Int(2));
      t["last_seen"] = FormatRfc3339Micros(s.Int(3));
      json models = json::parse(s.Text(11), nullptr, false);
      t["models"] = models.is_array() ? models : json::array();
      // The token names of the thread view's summary (store.h), plus the writes' total.
      t["tokens"] = {{"cache_read", s.Int(4)},          {"cache_write", s.Int(5)},
                     {"cache_write_5m", s.Int(13)},     {"cache_write_1h", s.Int(14)},
                     {"cache_write_no_ttl", s.Int(15)}, {"uncached", s.Int(6)},
                     {"output", s.Int(7)},              {"reasoning", s.Int(16)}};
      t["cost_usd"] = PicoUsdToUsd(s.Int(8));
      t["cost_pico_usd"] = s.Int(8);
      t["saved_usd"] = PicoUsdToUsd(s.Int(17));
      t["saved_pico_usd"] = s.Int(17);
      t["missed_usd"] = PicoUsdToUsd(s.Int(18));
      t["missed_pico_usd"] = s.Int(18);
      t["hit_ratio"] = HitRatio(s.Int(9), s.Int(10));
      last.thread_id = s.Text(0);
      last.value = query.sort == ThreadQuery::Sort::kHitRatio ? json(s.Real(12)) : json(s.Int(12));
      threads.push_back(std::move(t));
    }
    json out;
    out["threads"] = std::move(threads);
    out["next_cursor"] = more ? json(ThreadCursor(last)) : json(nullptr);
    return out;
  });
}

Result<json> ThreadJson(RowCursor& s, std::string_view thread_id) {
  return Guarded([&]() -> Result<json> {
    json turns = json::array();
    CostParts cost;
    KnownSum read, w5m, w1h, no_ttl, uncached, output, reasoning;
    int64_t known_read = 0, known_total = 0;
    bool complete = true;
    json models = json::array();
    std::set<std::string> seen_models;
    int64_t first = 0, last = 0;
    std::string source, parent;  // the first turn's
    // Keep-warm pings are listed among the turns (purpose "keep_warm") and their cost is the
    // thread's, but they are not turns of the conversation.
    int64_t pings = 0, ping_cost = 0, saved_by_pings = 0;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      turns.push_back(TurnJson(s, Detail::kTurn));
      if (turns.size() == 1) {
        source = s.Text(kThreadSource);
        parent = s.Text(kThreadParent);
      }
      if (s.Text(kPurpose) == kPurposeKeepWarm) {
        ++pings;
        ping_cost += s.Int(kCostTotal);
      }
      saved_by_pings += s.Int(kKeepWarmSaved);
      const int64_t created = s.Int(kCreatedAt);
      if (turns.size() == 1 || created < first) first = created;
      if (turns.size() == 1 || created > last) last = created;
      if (seen_models.insert(s.Text(kModel)).second) models.push_back(s.Text(kModel));
      cost.total += s.Int(kCostTotal);
      cost.cache_read += s.Int(kCostCacheRead);
      cost.cache_write += s.Int(kCostCacheWrite);
      cost.uncached += s.Int(kCostUncached);
      cost.output += s.Int(kCostOutput);
      cost.saved += s.Int(kCostSaved);
      cost.missed += s.Int(kCostMissed);
      complete = complete && s.Int(kCostComplete) != 0;
      const auto r = s.OptInt(kCacheRead), a = s.OptInt(kCacheWrite5m), b = s.OptInt(kCacheWrite1h),
                 n = s.OptInt(kCacheWriteNoTtl), u = s.OptInt(kUncached);
      read.Add(r);
      w5m.Add(a);
      w1h.Add(b);
      no_ttl.Add(n);
      uncached.Add(u);
      output.Add(s.OptInt(kOutput));
      reasoning.Add(s.OptInt(kReasoning));
      if (r && a && b && n && u) {
        known_read += *r;
        known_total += *r + *a + *b + *n + *u;
      }
    }
    if (turns.empty()) {
      return MakeError(ErrorCode::kNotFound, "no thread \"" + std::string(thread_id) + "\"");
    }
    json summary;
    summary["turns"] = static_cast<int64_t>(turns.size()) - pings;
    summary["first_seen"] = FormatRfc3339Micros(first);
    summary["last_seen"] = FormatRfc3339Micros(last);
    summary["models"] = std::move(models);
    summary["thread_source"] = source.empty() ? json(nullptr) : json(source);
    summary["thread_parent"] = parent.empty() ? json(nullptr) : json(parent);
    KnownSum writes;
    for (const KnownSum* w : {&w5m, &w1h, &no_ttl}) {
      const json v = w->Json();
      writes.Add(v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>()));
    }
    summary["tokens"] = {{"cache_read", read.Json()},         {"cache_write", writes.Json()},
                         {"cache_write_5m", w5m.Json()},       {"cache_write_1h", w1h.Json()},
                         {"cache_write_no_ttl", no_ttl.Json()}, {"uncached", uncached.Json()},
                         {"output", output.Json()},            {"reasoning", reasoning.Json()}};
    CostJson(cost, &summary["cost_usd"], &summary["cost_pico_usd"]);
    summary["cost_complete"] = complete;
    summary["hit_ratio"] = HitRatio(known_read, known_total);
    json out;
    out["thread_id"] = std::string(thread_id);
    out["turns"] = std::move(turns);
    out["summary"] = std::move(summary);
    // What keep-warm pings cost this thread and what they saved its turns; net may be negative.
    out["keep_warm"] = {{"pings", pings},
                        {"cost_usd", PicoUsdToUsd(ping_cost)},
                        {"saved_usd", PicoUsdToUsd(saved_by_pings)},
                        {"net_usd", PicoUsdToUsd(saved_by_pings - ping_cost)}};
    return out;
  });
}

Result<RequestPage> ParseRequestPage(const RequestQuery& query) {
  RequestPage page;
  if (!query.cursor.empty()) {
    const std::string_view c = query.cursor;
    const size_t sep = c.find('_');
    int64_t created = 0, seq = 0;
    if (c[0] != 'r' || sep == std::string_view::npos || !ParseInt(c.substr(1, sep - 1), &created) ||
        !ParseInt(c.substr(sep + 1), &seq)) {
      return MakeError(ErrorCode::kInvalidArgument, "bad request cursor");
    }
    page.after = std::pair{created, seq};
  }
  page.limit = query.limit <= 0 ? 100 : std::min(query.limit, kRequestLimitMax);
  return page;
}

Result<json> RequestListJson(RowCursor& s, int limit) {
  return Guarded([&]() -> Result<json> {
    json requests = json::array();
    std::optional<std::pair<int64_t, int64_t>> last;
    bool more = false;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      if (static_cast<int>(requests.size()) == limit) {
        more = true;
        break;
      }
      requests.push_back(TurnJson(s, Detail::kListed));
      last = std::pair{s.Int(kCreatedAt), s.Int(kSeq)};
    }
    json out;
    out["requests"] = std::move(requests);
    out["next_cursor"] = more && last ? json(RequestCursor(last->first, last->second)) : json(nullptr);
    return out;
  });
}

Result<json> RequestJson(RowCursor& s, std::string_view id) {
  return Guarded([&]() -> Result<json> {
    Result<bool> row = s.Step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return MakeError(ErrorCode::kNotFound, "no request \"" + std::string(id) + "\"");
    return TurnJson(s, Detail::kFull);
  });
}

namespace {

// A record not yet committed as the row its insert will store (the columns of TurnColumns, the
// values both stores' inserts bind: NULL where they bind NULL, JSON as its text), so that
// TurnJson reads it exactly as it will read the committed row. One row; `seq` is not known yet
// (0: TurnJson does not read it).
class PendingRow : public RowCursor {
 public:
  explicit PendingRow(const RequestRecord& r) : values_(kColumnCount) {
    const Usage& u = r.usage;
    const Cost& c = r.cost;
    auto text = [&](Col col, const std::string& v) { values_[col] = v; };
    auto text_or_null = [&](Col col, const std::string& v) {
      if (!v.empty()) values_[col] = v;
    };
    auto integer = [&](Col col, int64_t v) { values_[col] = v; };
    auto opt = [&](Col col, std::optional<int64_t> v) {
      if (v) values_[col] = *v;
    };
    text(kRequestId, r.request_id);
    text(kThreadId, r.thread_id);
    integer(kCreatedAt, r.created_at_us);
    text(kEndpoint, r.endpoint);
    text(kModel, r.model);
    text(kProvider, r.provider);
    text(kProviderType, r.provider_type);
    text(kUpstreamModel, r.upstream_model);
    text(kApiKeyId, r.api_key_id);
    integer(kStream, r.stream ? 1 : 0);
    text(kStatus, r.status);
    integer(kHttpStatus, r.http_status);
    integer(kUpstreamStatus, r.upstream_status);
    opt(kLatency, r.latency_us);
    opt(kTtft, r.ttft_us);
    opt(kCacheRead, u.cache_read);
    opt(kCacheWrite5m, u.cache_write_5m);
    opt(kCacheWrite1h, u.cache_write_1h);
    opt(kUncached, u.uncached);
    opt(kOutput, u.output);
    opt(kReasoning, u.reasoning);
    opt(kReportedInput, u.reported_input);
    integer(kClamped, u.clamped ? 1 : 0);
    text_or_null(kUsageRaw, u.raw);
    integer(kCostCacheRead, c.cache_read);
    integer(kCostCacheWrite, c.cache_write);
    integer(kCostUncached, c.uncached);
    integer(kCostOutput, c.output);
    integer(kCostTotal, c.total);
    integer(kCostSaved, c.saved);
    integer(kCostComplete, c.complete ? 1 : 0);
    integer(kCostPriced, c.priced ? 1 : 0);
    text(kError, r.error);
    text(kUpstreamRequestId, r.upstream_request_id);
    text(kFinishReason, r.finish_reason);
    if (!r.cache_diagnosis.is_null()) text(kDiagnosis, WriteJson(r.cache_diagnosis));
    text(kResponseId, r.response_id);
    opt(kCacheWriteNoTtl, u.cache_write_no_ttl);
    integer(kCostMissed, c.missed);
    text(kTarget, r.target);
    integer(kKeyIndex, r.key_index);
    text(kSystemFingerprint, r.system_fingerprint);
    text_or_null(kRoute, r.route);
    if (r.attempts.is_array() && !r.attempts.empty()) text(kAttempts, WriteJson(r.attempts));
    opt(kCacheReadOffload, u.cache_read_offload);
    text(kCacheHelper, r.cache_helper);
    text(kProviderCacheMissReason, r.provider_cache_miss_reason);
    text(kCacheReadOffloadTier, u.cache_read_offload_tier);
    integer(kUsageEstimated, u.estimated ? 1 : 0);
    text(kThreadSource, r.thread_source);
    text(kThreadParent, r.thread_parent);
    text(kPurpose, r.purpose);
    integer(kKeepWarmSaved, r.keep_warm_saved);
  }

  Result<bool> Step() override { return !std::exchange(stepped_, true); }
  bool IsNull(int column) const override {
    return std::holds_alternative<std::monostate>(values_[column]);
  }
  int64_t Int(int column) const override { return OptInt(column).value_or(0); }
  std::optional<int64_t> OptInt(int column) const override {
    const int64_t* v = std::get_if<int64_t>(&values_[column]);
    return v ? std::optional<int64_t>(*v) : std::nullopt;
  }
  std::string Text(int column) const override {
    const std::string* v = std::get_if<std::string>(&values_[column]);
    return v ? *v : std::string();
  }
  double Real(int column) const override { return static_cast<double>(Int(column)); }

 private:
  std::vector<std::variant<std::monostate, int64_t, std::string>> values_;
  bool stepped_ = false;
};

}  // namespace

Result<json> PendingRequestJson(const RequestRecord& record) {
  return Guarded([&]() -> Result<json> {
    PendingRow row(record);
    return RequestJson(row, record.request_id);
  });
}

Result<std::vector<RequestRecord>> LatestTurnsFromRows(RowCursor& s, int* skipped_corrupt) {
  if (skipped_corrupt) *skipped_corrupt = 0;
  constexpr int kFingerprintColumn = kTurnColumnCount;
  return Guarded([&]() -> Result<std::vector<RequestRecord>> {
    std::vector<RequestRecord> turns;
    for (;;) {
      Result<bool> row = s.Step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      auto fingerprint =
          FromJson(json::parse(s.Text(kFingerprintColumn), nullptr, /*allow_exceptions=*/false));
      if (!fingerprint) {
        if (skipped_corrupt) ++*skipped_corrupt;
        continue;
      }
      RequestRecord r;
      r.thread_id = s.Text(kThreadId);
      r.request_id = s.Text(kRequestId);
      r.created_at_us = s.Int(kCreatedAt);
      r.model = s.Text(kModel);
      r.provider = s.Text(kProvider);
      r.provider_type = s.Text(kProviderType);
      r.upstream_model = s.Text(kUpstreamModel);
      r.target = s.Text(kTarget);
      r.key_index = static_cast<int>(s.Int(kKeyIndex));
      r.system_fingerprint = s.Text(kSystemFingerprint);
      r.status = s.Text(kStatus);
      r.usage.cache_read = s.OptInt(kCacheRead);
      r.usage.cache_write_5m = s.OptInt(kCacheWrite5m);
      r.usage.cache_write_1h = s.OptInt(kCacheWrite1h);
      r.usage.cache_write_no_ttl = s.OptInt(kCacheWriteNoTtl);
      r.usage.uncached = s.OptInt(kUncached);
      r.usage.output = s.OptInt(kOutput);
      r.usage.reasoning = s.OptInt(kReasoning);
      r.usage.reported_input = s.OptInt(kReportedInput);
      r.usage.cache_read_offload = s.OptInt(kCacheReadOffload);
      r.usage.cache_read_offload_tier = s.Text(kCacheReadOffloadTier);
      r.usage.estimated = s.Int(kUsageEstimated) != 0;
      r.purpose = s.Text(kPurpose);
      r.response_id = s.Text(kResponseId);
      r.prompt_fingerprint = std::make_shared<const PromptFingerprint>(std::move(*fingerprint));
      turns.push_back(std::move(r));
    }
    return turns;
  });
}
}  // namespace internal
}  // namespace kvgate::telemetry
